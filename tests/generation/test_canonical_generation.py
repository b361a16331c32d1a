"""``canonical=True`` in ``generate`` and ``ConditionedSampler``, on a tiny BPE built with
``tokenizers`` (byte-level, no pre-tokenization: the pair test is exact there).

* ``exact`` with ``canonical=True`` samples p(y | y in L, y canonical): a chi-square against
  a brute-force target computed independently of the sampler (each valid string has exactly
  one canonical spelling, ``encode(string)``, whose probability is multiplied out by hand).
* ``mask`` / ``aligned`` with ``canonical=True`` never emit a non-canonical sequence; without
  it they do (so the checks can fail).
* A canonical dead end under ``mask`` is diagnosed; ``exact`` removes that mass instead.
* A model without ``encode_bytes`` gets a ``ConfigurationError`` naming the fix.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections import Counter

import numpy as np
import pytest

from formcast.errors import ConfigurationError
from formcast.generation import generate
from formcast.generation.conditioned import ConditionedSampler
from formcast.model.callable import CallableModel
from formcast.vocab.canonical import is_canonical
from formcast.vocab.vocabulary import Vocabulary

pytest.importorskip("tokenizers")
scipy_stats = pytest.importorskip("scipy.stats")

CORPUS = ["abcabcab", "aabbcc", "abab", "cabca", "bcbcbca", "aaab", "ccab"] * 3
REGEX = "[abc]{1,4}"
PROMPT = [0]  # the model's context: <eos> as a BOS


def tiny_bpe() -> tuple[Vocabulary, object]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS, trainers.BpeTrainer(vocab_size=14, special_tokens=["<eos>"], show_progress=False)
    )
    return Vocabulary.from_huggingface(tok, stop_token_ids=[0], name="tiny-bpe"), tok


VOCAB, TOK = tiny_bpe()


def encode(data: bytes) -> list[int]:
    return list(TOK.encode(data.decode("utf-8"), add_special_tokens=False).ids)  # type: ignore[attr-defined]


def logits_fn(ids: list[int]) -> np.ndarray:
    """A fixed pseudo-random model: the logits are a function of the context's bytes and of
    its last token (so different spellings of a text get different continuations)."""
    key = VOCAB.decode(ids[1:]) + b"|" + str(ids[-1]).encode()
    return np.random.default_rng(zlib.crc32(key)).standard_normal(VOCAB.vocab_size) * 2.0


def model(with_encoder: bool = True) -> CallableModel:
    return CallableModel(logits_fn, VOCAB, encode_bytes=encode if with_encoder else None)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    out: np.ndarray = e / e.sum()
    return out


def canonical_target() -> dict[tuple[int, ...], float]:
    """p(y | y in L, y canonical) by hand: one spelling per string, ``encode(s)``; a stop the
    grammar forces (length 4) counts 1, any other the model's p(<eos>)."""
    out: dict[tuple[int, ...], float] = {}
    for n in range(1, 5):
        for chars in itertools.product("abc", repeat=n):
            ids = encode("".join(chars).encode())
            p, seq = 1.0, list(PROMPT)
            for t in ids:
                p *= float(softmax(logits_fn(seq))[t])
                seq.append(t)
            if n < 4:
                p *= float(softmax(logits_fn(seq))[0])
            out[tuple(ids)] = p
    z = math.fsum(out.values())
    return {k: v / z for k, v in out.items()}


def chi2_pvalue(counts: Counter[tuple[int, ...]], p: dict[tuple[int, ...], float]) -> float:
    n = sum(counts.values())
    assert set(counts) <= set(p), "a sample outside the canonical valid set"
    keys = sorted(p, key=lambda k: -p[k])
    big = [k for k in keys if n * p[k] >= 5]
    rest = [k for k in keys if n * p[k] < 5]
    obs = [counts.get(k, 0) for k in big] + [sum(counts.get(k, 0) for k in rest)]
    exp = [n * p[k] for k in big] + [n * sum(p[k] for k in rest)]
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(scipy_stats.chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_canonical_fits_the_canonical_target(seed: int) -> None:
    target = canonical_target()
    sampler = ConditionedSampler(
        model(), PROMPT, regex=REGEX, method="exact", canonical=True, max_tokens=8
    )
    results = sampler.sample(3000, seed=seed)
    assert all(is_canonical(VOCAB, encode, r.token_ids) for r in results)
    counts = Counter(r.token_ids for r in results)
    assert chi2_pvalue(counts, target) > 1e-3


def test_without_canonical_the_samplers_spell_non_canonically() -> None:
    """The control: the same model emits non-canonical spellings when not told otherwise."""
    for method in ("exact", "mask"):
        sampler = ConditionedSampler(model(), PROMPT, regex=REGEX, method=method, max_tokens=8)
        results = sampler.sample(300, seed=0)
        bad = sum(not is_canonical(VOCAB, encode, r.token_ids) for r in results)
        assert bad > 10, method


@pytest.mark.parametrize("method", ["mask", "aligned"])
def test_mask_and_aligned_with_canonical_emit_only_canonical_sequences(method: str) -> None:
    sampler = ConditionedSampler(
        model(), PROMPT, regex=REGEX, method=method, canonical=True, max_tokens=8
    )
    results = sampler.sample(300, seed=0)
    completed = [r for r in results if r.finish_reason == "completed"]
    assert len(completed) > 200
    assert all(is_canonical(VOCAB, encode, r.token_ids) for r in completed)


def test_generate_canonical_option() -> None:
    for seed in range(40):
        r = generate(model(), PROMPT, regex=REGEX, temperature=1.0, seed=seed, canonical=True)
        assert r.finish_reason in ("completed", "dead_end")
        if r.finish_reason == "completed":
            assert is_canonical(VOCAB, encode, r.token_ids)


# -- a canonical dead end -------------------------------------------------------------------------
DEAD_VOCAB = Vocabulary.from_tokens([b"<eos>", b"a", b"b", b"ab"], stop_token_ids=[0])


def dead_encode(data: bytes) -> list[int]:
    """A tokenizer that merges ``ab``: the pair (a, b) is never produced."""
    out, i = [], 0
    while i < len(data):
        if data[i : i + 2] == b"ab":
            out.append(3)
            i += 2
        else:
            out.append(1 if data[i : i + 1] == b"a" else 2)
            i += 1
    return out


def dead_model() -> CallableModel:
    def fn(ids: list[int]) -> np.ndarray:  # "a" 0.99, "ab" 0.01 first; then "b"
        p = np.full(4, 1e-9)
        if len(ids) == 1:
            p[[1, 3]] = [0.99, 0.01]
        elif ids[-1] == 1:
            p[2] = 1.0
        else:
            p[0] = 1.0
        return np.log(p)

    return CallableModel(fn, DEAD_VOCAB, encode_bytes=dead_encode)


def test_canonical_dead_end_is_diagnosed_under_mask_and_removed_by_exact() -> None:
    r = generate(dead_model(), [0], regex="ab", temperature=1.0, seed=0, canonical=True)
    assert r.finish_reason == "dead_end"
    assert r.token_ids == (1,)
    assert r.diagnostic is not None
    assert "canonical=True" in r.diagnostic.reason
    plain = generate(dead_model(), [0], regex="ab", temperature=1.0, seed=0)
    assert plain.finish_reason == "completed"
    assert plain.token_ids == (1, 2)
    exact = ConditionedSampler(dead_model(), [0], regex="ab", method="exact", canonical=True)
    assert {r.token_ids for r in exact.sample(50, seed=0)} == {(3,)}


def test_canonical_needs_an_encoder_and_a_constraint() -> None:
    with pytest.raises(ConfigurationError, match="encode_bytes"):
        generate(model(with_encoder=False), PROMPT, regex=REGEX, canonical=True)
    with pytest.raises(ConfigurationError, match="encode_bytes"):
        ConditionedSampler(model(with_encoder=False), PROMPT, regex=REGEX, canonical=True)
    with pytest.raises(ConfigurationError, match="needs a constraint"):
        generate(model(), PROMPT, canonical=True)
    with pytest.raises(ConfigurationError, match="bool"):
        generate(model(), PROMPT, regex=REGEX, canonical="yes")
