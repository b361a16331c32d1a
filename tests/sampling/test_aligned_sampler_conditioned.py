"""``ConditionedSampler(method="aligned")``: the ASAp sampler through the public entry point.

Deterministic (fixed seeds); the toy models are those of test_aligned_sampler_convergence.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from formcast import ConfigurationError
from formcast.errors import SamplingBudgetError
from formcast.generation.aligned import AlignedMethod, exact_conditioned_distribution
from formcast.generation.conditioned import ConditionedSampler
from formcast.model.callable import CallableModel
from formcast.sampling import SamplingParams
from formcast.vocab.vocabulary import Vocabulary

TINY = 1e-30


def yes_no_model() -> CallableModel:
    """Seed 000: ye 0.30, no 0.10, maybe 0.60; after "ye": s 0.02, maybe 0.98."""
    tokens = [b"ye", b"s", b"no", b"maybe", b"<eos>", b"<p>"]
    vocab = Vocabulary.from_tokens(tokens, stop_token_ids=[4], name="yes-no")

    def fn(seq: list[int]) -> np.ndarray:
        out = seq[1:]
        p = np.full(len(tokens), TINY)
        if not out:
            p[0], p[2], p[3] = 0.30, 0.10, 0.60
        elif out == [0]:
            p[1], p[3] = 0.02, 0.98
        else:
            p[4] = 1.0
        logits: np.ndarray = np.log(p)
        return logits

    return CallableModel(fn, vocab)


def test_aligned_method_through_conditioned_sampler() -> None:
    model = yes_no_model()
    sampler = ConditionedSampler(model, [5], regex="yes|no", method="aligned", max_tokens=8)
    assert isinstance(sampler._method, AlignedMethod)
    results = sampler.sample(2500, seed=0)
    assert all(r.completed and r.text in ("yes", "no") for r in results)
    late = sum(r.text == "yes" for r in results[500:]) / 2000
    # p_cond = 0.006 / 0.106 = 0.0566 (binomial sd 0.005 over 2,000); masking gives 0.75
    assert abs(late - 0.006 / 0.106) < 0.025
    stats = sampler.stats
    assert stats.accepted == stats.attempts == 2500
    assert stats.model_calls == stats.trie_nodes == model.calls == 2
    assert stats.z_upper == pytest.approx(0.106, abs=1e-9)


def test_aligned_method_charges_the_model_call_budget() -> None:
    vocab = Vocabulary.from_tokens([b"a", b"b", b"c", b"<eos>", b"<p>"], stop_token_ids=[3])

    def fn(seq: list[int]) -> np.ndarray:
        logits: np.ndarray = np.log(np.array([0.3, 0.3, 0.4, TINY, TINY]))
        return logits

    model = CallableModel(fn, vocab)
    sampler = ConditionedSampler(
        model, [4], regex="[ab]{6}", method="aligned", max_tokens=8, max_model_calls=3
    )
    with pytest.raises(SamplingBudgetError):
        sampler.sample(10, seed=0)
    assert sampler.stats.model_calls == 3


def test_aligned_method_rejects_greedy() -> None:
    with pytest.raises(ConfigurationError, match="temperature > 0"):
        ConditionedSampler(yes_no_model(), [5], regex="yes|no", method="aligned", temperature=0.0)


def test_enumeration_agrees_with_the_exact_method() -> None:
    # S3's reference (exact_conditioned_distribution) and method="exact" target the same law.
    model = yes_no_model()
    compiled = ConditionedSampler(model, [5], regex="yes|no", method="exact").context.compiled
    assert compiled is not None
    dist = exact_conditioned_distribution(model, [5], compiled, SamplingParams(), 8)
    exact = ConditionedSampler(model, [5], regex="yes|no", method="exact", max_tokens=8)
    texts = [r.text for r in exact.sample(4000, seed=1)]
    freq = texts.count("yes") / 4000
    # sd 0.0037 at 0.0566 over 4,000
    assert abs(freq - dist.texts["yes"]) < 0.02


def test_stop_tokens_beside_text_tokens_and_the_budget_boundary() -> None:
    # a(ab|b)*: the stop token competes with text tokens (its model probability counts) and,
    # after max_tokens text tokens, only an allowed stop may follow (same target as "exact").
    vocab = Vocabulary.from_tokens([b"a", b"b", b"<eos>", b"<p>"], stop_token_ids=[2])

    def fn(seq: list[int]) -> np.ndarray:
        q = np.random.default_rng([3, *seq]).dirichlet([1.0, 1.0, 1.0])
        logits: np.ndarray = np.log(np.r_[q, TINY])
        return logits

    model = CallableModel(fn, vocab)
    aligned = ConditionedSampler(
        model, [3], regex="a(ab|b)*", method="aligned", max_tokens=4, temperature=1.0
    )
    compiled = aligned.context.compiled
    assert compiled is not None
    dist = exact_conditioned_distribution(model, [3], compiled, SamplingParams(), 4)
    assert set(dist.texts) == {"a", "ab", "aab", "abb", "aabb", "abab", "abbb"}
    results = aligned.sample(6000, seed=0)
    late = [r.text for r in results[2000:]]
    tv = 0.5 * sum(abs(p - late.count(t) / len(late)) for t, p in dist.texts.items())
    assert tv < 0.02  # measured 0.0086; method="mask" measures 0.074 here (same seed)
    assert aligned.stats.z_upper == pytest.approx(dist.valid_mass, rel=1e-9)
