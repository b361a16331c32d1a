"""The sampling chain: grammar mask -> temperature -> top-k -> top-p -> softmax -> sample."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import formcast.sampling
from formcast.errors import ConfigurationError, FormcastError
from formcast.sampling import (
    SamplingParams,
    apply_mask,
    processed_logits,
    sample_token,
    token_probabilities,
)

try:
    from toy import allowed_ids, bitmask_from_ids
except ImportError:  # tests/ imported as a package
    from tests.toy import allowed_ids, bitmask_from_ids  # type: ignore[import-not-found,no-redef]

NEG_INF = -np.inf
Bits = npt.NDArray[np.int32]


def bm(ids: Iterable[int], width: int) -> Bits:
    return bitmask_from_ids(ids, width)


def support(p: npt.NDArray[np.float64]) -> set[int]:
    return {int(i) for i in np.flatnonzero(p)}


# =============================================================================================
# SamplingParams
# =============================================================================================
@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"temperature": "1"},
        {"temperature": True},
        {"temperature": None},
        {"top_k": -1},
        {"top_k": 1.5},
        {"top_k": 2.0},
        {"top_k": True},
        {"top_p": 0.0},
        {"top_p": -0.5},
        {"top_p": 1.0001},
        {"top_p": float("nan")},
        {"min_tokens_to_keep": 0},
        {"min_tokens_to_keep": 1.0},
    ],
)
def test_params_reject_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_params_defaults_and_normalisation() -> None:
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_tokens_to_keep) == (1.0, 0, 1.0, 1)
    q = SamplingParams(
        temperature=np.float32(0.5),  # type: ignore[arg-type]
        top_k=np.int64(3),  # type: ignore[arg-type]
        top_p=1,
        min_tokens_to_keep=2,
    )
    assert type(q.temperature) is float
    assert type(q.top_k) is int
    assert type(q.top_p) is float
    assert q == SamplingParams(temperature=0.5, top_k=3, top_p=1.0, min_tokens_to_keep=2)
    assert SamplingParams.greedy().is_greedy
    assert not p.is_greedy
    with pytest.raises(AttributeError):
        p.temperature = 2.0  # type: ignore[misc]
    assert issubclass(ConfigurationError, ValueError)


# =============================================================================================
# apply_mask: -inf, never 0; the bitmask layout
# =============================================================================================
def test_mask_writes_minus_inf_not_zero() -> None:
    logits = np.array([-3.0, 5.0, 0.5, -7.0], dtype=np.float32)
    out = apply_mask(logits, bm([1, 3], 4))
    assert out.dtype == np.float64
    assert out[0] == NEG_INF
    assert out[2] == NEG_INF
    assert out[1] == 5.0
    assert out[3] == -7.0
    assert logits[0] == -3.0  # input untouched (a copy is returned)
    assert np.array_equal(apply_mask(logits, None), logits.astype(np.float64))


def test_bitmask_layout_words_bits_and_sign_bit() -> None:
    ids = {0, 5, 31, 32, 63, 64, 70}
    width = 71  # narrower than 3 words * 32 = 96; the extra bits are ignored
    words = bm(ids, width)
    assert words.dtype == np.int32
    assert words.shape == (3,)
    out = apply_mask(np.zeros(width), words)
    assert set(np.flatnonzero(np.isfinite(out))) == ids
    assert allowed_ids(words, width) == ids
    # Bit 31 is the int32 sign bit: word -2**31 allows exactly token 31.
    only31 = np.array([-(2**31)], dtype=np.int32)
    assert set(np.flatnonzero(np.isfinite(apply_mask(np.zeros(32), only31)))) == {31}
    # All ones (-1): the "allocate_token_bitmask" initial state masks nothing.
    assert np.all(np.isfinite(apply_mask(np.zeros(40), np.full(2, -1, dtype=np.int32))))
    # Same words as uint32 or big-endian int32: same meaning.
    assert np.array_equal(apply_mask(np.zeros(width), words.view(np.uint32)), out)
    assert np.array_equal(apply_mask(np.zeros(width), words.astype(">i4")), out)


def test_bits_past_the_logits_width_are_ignored() -> None:
    out = apply_mask(np.zeros(3), bm([0, 2, 10, 31], 32))
    assert list(np.isfinite(out)) == [True, False, True]


def test_logits_past_the_bitmask_capacity_are_disallowed() -> None:
    # Padded model logits (wider than the tokenizer's bitmask): the extra ids never pass.
    out = apply_mask(np.zeros(40), np.full(1, -1, dtype=np.int32))
    assert np.all(np.isfinite(out[:32]))
    assert np.all(out[32:] == NEG_INF)
    p = token_probabilities(
        np.full(40, 3.0), np.full((2, 1), -1, dtype=np.int32)[0], SamplingParams()
    )
    assert support(p) == set(range(32))


def test_layout_agrees_with_formcast_index_bitmask() -> None:
    from formcast.bitmask import (
        allocate_token_bitmask,
        apply_token_bitmask_inplace,
        bool_to_bitmask,
    )

    rng = np.random.default_rng(4)
    for v in (1, 31, 32, 33, 64, 100, 1000):
        allowed = rng.random(v) < 0.3
        allowed[int(rng.integers(v))] = True
        words = bool_to_bitmask(allowed, v)
        logits = rng.normal(size=v)
        ours = apply_mask(logits, words)
        theirs = logits.copy()
        apply_token_bitmask_inplace(theirs, words)
        assert np.array_equal(ours, theirs)
        assert set(np.flatnonzero(np.isfinite(ours))) == set(np.flatnonzero(allowed))
        fresh = allocate_token_bitmask(2, v)
        assert np.all(np.isfinite(apply_mask(np.zeros((2, v)), fresh)))


def test_mask_shape_errors() -> None:
    with pytest.raises(ConfigurationError):
        apply_mask(np.zeros(4), np.full(1, -1, dtype=np.int64))  # not 32-bit words
    with pytest.raises(ConfigurationError):
        apply_mask(np.zeros(4), np.ones(1, dtype=np.float32))
    with pytest.raises(ConfigurationError):
        apply_mask(np.zeros((2, 4)), np.full((3, 1), -1, dtype=np.int32))  # batch mismatch
    with pytest.raises(ConfigurationError):
        apply_mask(np.zeros(4), np.full((2, 1), -1, dtype=np.int32))  # 2-D mask, 1-D logits
    with pytest.raises(ConfigurationError):
        apply_mask(np.zeros((1, 2, 4)), None)
    with pytest.raises(ConfigurationError):
        apply_mask(np.zeros(0), None)
    with pytest.raises(ConfigurationError):
        apply_mask(np.array(["a", "b"]), None)


def test_nan_logits_are_treated_as_minus_inf() -> None:
    logits = np.array([np.nan, 1.0, np.nan, 0.0])
    p = token_probabilities(logits, None, SamplingParams())
    assert p[0] == 0.0
    assert p[2] == 0.0
    assert p[1] == pytest.approx(np.e / (np.e + 1.0), abs=1e-12)
    assert sample_token(logits, None, SamplingParams.greedy(), np.random.default_rng(0)) == 1


def test_plus_inf_logits_share_the_mass() -> None:
    logits = np.array([np.inf, 3.0, np.inf, np.inf])
    p = token_probabilities(logits, bm([0, 1, 2], 4), SamplingParams())
    assert list(p) == [0.5, 0.0, 0.5, 0.0]


# =============================================================================================
# token_probabilities: exact zeros, sums to 1, dtypes, batches
# =============================================================================================
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_probabilities_exact_zero_and_sum_to_one(dtype: type) -> None:
    rng = np.random.default_rng(1)
    logits: np.ndarray = rng.normal(0, 3, 1000).astype(dtype)
    ids = set(rng.choice(1000, size=37, replace=False).tolist())
    p = token_probabilities(logits, bm(ids, 1000), SamplingParams())
    assert p.dtype == np.float64
    assert support(p) == ids
    assert np.all(p[[i for i in range(1000) if i not in ids]] == 0.0)
    assert abs(p.sum() - 1.0) <= 1e-12
    # Renormalisation is the seed's formula: p(t) / sum over allowed of p(u).
    raw = np.exp(logits.astype(np.float64) - logits.max())
    idx = sorted(ids)
    assert np.allclose(p[idx], raw[idx] / raw[idx].sum(), rtol=1e-12, atol=0)


def test_batch_rows_match_single_rows() -> None:
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(3, 70)).astype(np.float32)
    masks = np.stack([bm({1, 2, 69}, 70), bm(range(0, 70, 3), 70), bm({5}, 70)])
    params = SamplingParams(temperature=0.7, top_k=5, top_p=0.9)
    batch = token_probabilities(logits, masks, params)
    assert batch.shape == (3, 70)
    for b in range(3):
        assert np.array_equal(batch[b], token_probabilities(logits[b], masks[b], params))
        assert abs(batch[b].sum() - 1.0) <= 1e-12
    # A 1-D bitmask row broadcasts over the batch.
    shared = token_probabilities(logits, masks[0], params)
    assert all(support(shared[b]) <= {1, 2, 69} for b in range(3))
    # The whole batch is reported with the offending row.
    masks[1] = 0
    with pytest.raises(FormcastError, match="batch row 1"):
        token_probabilities(logits, masks, params)


# =============================================================================================
# Order of the chain: transforms compose, truncation after the mask
# =============================================================================================
def test_temperature_does_not_drop_top_k() -> None:
    logits = np.array([4.0, 3.0, 2.0, 1.0, 0.0, -1.0])
    p = token_probabilities(logits, None, SamplingParams(temperature=5.0, top_k=2))
    assert support(p) == {0, 1}
    assert p[0] == pytest.approx(1 / (1 + np.exp(-1 / 5)), abs=1e-12)  # tempered, then cut
    cold = token_probabilities(logits, None, SamplingParams(temperature=0.2, top_k=2))
    assert support(cold) == {0, 1}
    assert cold[0] > p[0]


def test_temperature_applies_before_top_p() -> None:
    logits = np.array([2.0, 1.0, 0.0, -1.0, -2.0])
    # At T=1 the top two tokens hold 0.87 of the mass; at T=5 they hold only 0.53.
    hot = token_probabilities(logits, None, SamplingParams(temperature=5.0, top_p=0.8))
    cold = token_probabilities(logits, None, SamplingParams(temperature=1.0, top_p=0.8))
    assert support(cold) == {0, 1}
    assert support(hot) == {0, 1, 2, 3}


def test_top_k_then_top_p_on_the_masked_distribution() -> None:
    probs = [0.50, 0.30, 0.15, 0.05]  # seed 001's numbers
    logits = np.log(probs)
    allowed = bm([1, 2, 3], 4)  # delete (0) is masked: .30 .15 .05 renormalise to .6 .3 .1
    assert support(token_probabilities(logits, allowed, SamplingParams(top_p=0.55))) == {1}
    assert support(token_probabilities(logits, allowed, SamplingParams(top_p=0.85))) == {1, 2}
    assert support(token_probabilities(logits, allowed, SamplingParams(top_p=0.95))) == {1, 2, 3}
    assert support(token_probabilities(logits, allowed, SamplingParams(top_k=2))) == {1, 2}
    p = token_probabilities(logits, allowed, SamplingParams(top_k=2, top_p=0.5))
    assert support(p) == {1}  # top-k keeps .6/.3 -> renormalised .667/.333 -> top-p keeps one


def test_processed_logits_is_the_chain_before_softmax() -> None:
    logits = np.array([1.0, 4.0, 2.0, 3.0, 0.0])
    out = processed_logits(logits, bm([0, 2, 3, 4], 5), SamplingParams(temperature=2.0, top_k=2))
    assert list(out) == [NEG_INF, NEG_INF, 1.0, 1.5, NEG_INF]


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(top_k=1),
        SamplingParams(top_p=1e-9),
        SamplingParams(top_k=1, top_p=1e-9, temperature=0.01),
        SamplingParams(temperature=0.0),
    ],
)
def test_truncation_never_removes_every_legal_token(params: SamplingParams) -> None:
    # The model's ten favourite tokens are all illegal here.
    logits = np.concatenate([np.linspace(20, 10, 10), np.linspace(-1, -5, 40)])
    legal = {17, 33, 48}
    # Truncating first (the wrong order) would leave nothing legal:
    top1 = int(np.argmax(logits))
    assert top1 not in legal
    p = token_probabilities(logits, bm(legal, 50), params)
    assert support(p) == {17}  # the best *legal* token survives with all the mass
    assert p[17] == 1.0
    assert sample_token(logits, bm(legal, 50), params, np.random.default_rng(0)) == 17


def test_top_k_keeps_ties_and_respects_min_tokens_to_keep() -> None:
    logits = np.array([1.0, 3.0, 3.0, 2.0, 3.0])
    assert support(token_probabilities(logits, None, SamplingParams(top_k=2))) == {1, 2, 4}
    x = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    p = token_probabilities(x, None, SamplingParams(top_k=1, min_tokens_to_keep=3))
    assert support(p) == {0, 1, 2}
    p = token_probabilities(x, None, SamplingParams(top_p=1e-6, min_tokens_to_keep=2))
    assert support(p) == {0, 1}
    # min_tokens_to_keep never relaxes the grammar mask.
    p = token_probabilities(x, bm([3], 5), SamplingParams(top_k=1, min_tokens_to_keep=4))
    assert support(p) == {3}
    assert support(token_probabilities(x, None, SamplingParams(top_k=50))) == set(range(5))


def test_large_vocabulary_top_k() -> None:
    rng = np.random.default_rng(3)
    v = 200_000
    logits = rng.normal(size=v).astype(np.float32)
    allowed = set(rng.choice(v, size=5000, replace=False).tolist())
    p = token_probabilities(logits, bm(allowed, v), SamplingParams(top_k=40, top_p=0.9))
    best = sorted(allowed, key=lambda i: -float(logits[i]))[:40]
    assert support(p) <= set(best)
    assert support(p)
    assert abs(p.sum() - 1.0) <= 1e-12


# =============================================================================================
# Property tests
# =============================================================================================
logit_values = st.one_of(
    st.floats(-60, 60, allow_nan=False, width=32),
    st.sampled_from([NEG_INF, float("nan")]),
)


@st.composite
def chain_case(draw: st.DrawFn) -> tuple[np.ndarray, set[int], int, SamplingParams]:
    v = draw(st.integers(1, 80))
    logits = np.array(draw(st.lists(logit_values, min_size=v, max_size=v)), dtype=np.float64)
    allowed = set(draw(st.lists(st.integers(0, v - 1), min_size=1, max_size=v)))
    temperature = draw(st.one_of(st.just(0.0), st.just(1.0), st.floats(0.05, 20)))
    params = SamplingParams(
        temperature=temperature,
        top_k=draw(st.integers(0, v + 2)),
        top_p=draw(st.one_of(st.just(1.0), st.floats(1e-6, 1.0))),
        min_tokens_to_keep=draw(st.integers(1, 5)),
    )
    return logits, allowed, v, params


@example(
    (
        np.array([0.0] * 20 + [47.0]),
        {0, 20},
        21,
        SamplingParams(temperature=0.0625, top_k=0, top_p=1.0, min_tokens_to_keep=2),
    )
)
@settings(max_examples=300, deadline=None, database=None)
@given(chain_case())
def test_property_masked_zero_rest_sums_to_one(case: tuple) -> None:
    logits, allowed, v, params = case
    usable = {i for i in allowed if logits[i] > NEG_INF}  # NaN compares False: excluded too
    if not usable:
        with pytest.raises(FormcastError):
            token_probabilities(logits, bm(allowed, v), params)
        return
    p = token_probabilities(logits, bm(allowed, v), params)
    assert np.all(p[[i for i in range(v) if i not in allowed]] == 0.0)
    assert abs(p.sum() - 1.0) <= 1e-12
    assert np.all(p >= 0.0)
    s = support(p)
    assert s
    assert s <= usable
    if params.temperature == 0.0:
        best = max(usable, key=lambda i: (logits[i], -i))
        assert s == {best}
    else:
        # kept tokens are the finite processed logits: a kept token's probability may still
        # underflow to 0.0 at a low temperature (logits 0 and 47 at T=1/16 found by hypothesis)
        kept = np.isfinite(processed_logits(logits, bm(allowed, v), params))
        assert int(kept.sum()) >= min(params.min_tokens_to_keep, len(usable))
        # What survives is an upper set of the allowed logits (truncation keeps the best).
        worst_kept = min(logits[i] for i in s)
        assert all(i in s for i in usable if logits[i] > worst_kept)


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.integers(2, 60).flatmap(
        lambda v: st.tuples(
            st.permutations(list(range(v))),
            st.sets(st.integers(0, v - 1), min_size=1),
            st.integers(1, v + 1),
            st.floats(0.1, 5.0),
            st.integers(1, 3),
        )
    )
)
def test_property_top_k_keeps_exactly_k_best_allowed(case: tuple) -> None:
    perm, allowed, k, temperature, keep = case
    v = len(perm)
    logits = np.array(perm, dtype=np.float64) * 0.37  # distinct, no ties
    p = token_probabilities(
        logits, bm(allowed, v), SamplingParams(temperature=temperature, top_k=k,
                                               min_tokens_to_keep=keep)
    )  # fmt: skip
    best = sorted(allowed, key=lambda i: -logits[i])[: max(k, keep)]
    assert support(p) == set(best)


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.lists(st.floats(-8, 8, allow_nan=False), min_size=1, max_size=40, unique=True),
    st.floats(0.01, 0.999),
    st.floats(0.2, 4.0),
)
def test_property_top_p_is_the_smallest_nucleus(values: list, top_p: float, t: float) -> None:
    logits = np.array(values)
    assume(len(set(logits / t)) == len(values))
    p = token_probabilities(logits, None, SamplingParams(temperature=t, top_p=top_p))
    full = token_probabilities(logits, None, SamplingParams(temperature=t))
    kept = sorted(support(p), key=lambda i: -logits[i])
    mass = full[kept].sum()
    assert mass >= top_p - 1e-12  # the nucleus reaches top_p...
    assert full[kept[:-1]].sum() < top_p + 1e-12  # ...and is the smallest that does
    assert np.allclose(p[kept], full[kept] / mass, rtol=1e-9, atol=0)


# =============================================================================================
# sample_token: greedy, seeds, frequencies
# =============================================================================================
def test_greedy_is_argmax_over_allowed_and_draws_nothing() -> None:
    logits = np.array([9.0, 1.0, 7.0, 7.0, 8.0], dtype=np.float16)
    rng = np.random.default_rng(5)
    before = rng.bit_generator.state
    assert sample_token(logits, bm([1, 2, 3], 5), SamplingParams.greedy(), rng) == 2  # tie: low id
    assert sample_token(logits, None, SamplingParams.greedy(), rng) == 0
    assert rng.bit_generator.state == before
    p = token_probabilities(logits, bm([1, 2, 3], 5), SamplingParams.greedy())
    assert list(p) == [0.0, 0.0, 1.0, 0.0, 0.0]


def test_seeded_reproducibility_and_parity_with_generator_choice() -> None:
    rng_logits = np.random.default_rng(9)
    steps = [(rng_logits.normal(0, 2, 64), bm(rng_logits.choice(64, 9, replace=False), 64))
             for _ in range(200)]  # fmt: skip
    params = SamplingParams(temperature=0.8, top_k=6, top_p=0.95)

    def run(seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        return [sample_token(x, m, params, rng) for x, m in steps]

    assert run(42) == run(42)
    assert run(42) != run(43)
    # One rng.random() per draw, the same draw Generator.choice(p=...) makes.
    rng = np.random.default_rng(42)
    expected = [int(rng.choice(64, p=token_probabilities(x, m, params))) for x, m in steps]
    assert run(42) == expected


def test_empirical_frequencies_match_probabilities() -> None:
    logits = np.array([0.3, 2.0, -1.0, 1.2, 0.0, 5.0, 0.7, -0.4, 1.9, 0.1])
    allowed = [0, 1, 2, 3, 6, 8]  # the model's favourite (5) is masked
    params = SamplingParams(temperature=1.3)
    p = token_probabilities(logits, bm(allowed, 10), params)
    rng = np.random.default_rng(1234)
    n = 20_000
    counts = np.bincount(
        [sample_token(logits, bm(allowed, 10), params, rng) for _ in range(n)], minlength=10
    )
    assert counts[[4, 5, 7, 9]].sum() == 0  # masked: never sampled
    expected = n * p[allowed]
    chi2 = float(((counts[allowed] - expected) ** 2 / expected).sum())
    assert chi2 < 20.515  # chi-square 0.999 quantile, 5 degrees of freedom


def test_empty_mask_is_a_clear_error() -> None:
    logits = np.zeros(40)
    rng = np.random.default_rng(0)
    for params in (SamplingParams(), SamplingParams.greedy(), SamplingParams(top_k=3)):
        with pytest.raises(FormcastError, match=r"no token is allowed by the mask.*diagnose\(\)"):
            sample_token(logits, np.zeros(2, dtype=np.int32), params, rng)
    # Bits set only past the logits' width allow nothing either.
    with pytest.raises(FormcastError, match="no token is allowed"):
        token_probabilities(np.zeros(3), bm([5], 32), SamplingParams())
    # Allowed tokens exist, but the model (or an earlier processor) gave them all -inf/NaN.
    bad = np.array([0.0, NEG_INF, np.nan, 1.0])
    with pytest.raises(FormcastError, match="-inf or NaN"):
        sample_token(bad, bm([1, 2], 4), SamplingParams(), rng)


def test_sample_token_argument_errors() -> None:
    with pytest.raises(ConfigurationError):
        sample_token(np.zeros((2, 4)), None, SamplingParams(), np.random.default_rng(0))
    with pytest.raises(ConfigurationError):
        sample_token(np.zeros(4), None, SamplingParams(), np.random.RandomState(0))  # type: ignore[arg-type]


def test_sampled_token_is_always_allowed() -> None:
    rng = np.random.default_rng(77)
    for _ in range(500):
        v = int(rng.integers(1, 100))
        ids = set(rng.choice(v, size=int(rng.integers(1, v + 1)), replace=False).tolist())
        logits = rng.normal(0, 5, v).astype(np.float32)
        logits[rng.random(v) < 0.1] = np.nan
        params = SamplingParams(
            temperature=float(rng.uniform(0.1, 3)), top_k=int(rng.integers(0, 5))
        )
        usable = {i for i in ids if np.isfinite(logits[i])}
        if not usable:
            continue
        assert sample_token(logits, bm(ids, v), params, rng) in usable


def test_numpy_only_torch_not_imported() -> None:
    src = str(Path(formcast.sampling.__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code = (
        "import sys, formcast.sampling\n"
        "assert 'torch' not in sys.modules, 'formcast.sampling imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_dead_end_from_a_real_matcher_is_reported_not_retried() -> None:
    from formcast.bitmask import allocate_token_bitmask
    from formcast.index.compiler import GrammarCompiler
    from formcast.runtime.matcher import GrammarMatcher
    from formcast.vocab.vocabulary import Vocabulary

    # The grammar wants "b"; the tokenizer cannot spell it: an incompatibility, not bad luck.
    vocab = Vocabulary.from_tokens([b"a", b"<eos>"], stop_token_ids=[1])
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex("b"))
    mask = allocate_token_bitmask(1, vocab.vocab_size)
    assert m.fill_next_token_bitmask(mask, 0) is False
    with pytest.raises(FormcastError, match=r"diagnose\(\)"):
        sample_token(np.zeros(2), mask[0], SamplingParams(), np.random.default_rng(0))
    diagnostic = m.diagnose()
    assert diagnostic is not None
    assert not diagnostic.accepting
