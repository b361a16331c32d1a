"""``ConditionedSampler`` and ``generate(sampling=...)``: budget, cost accounting, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import formcast
from formcast.errors import ConfigurationError, LimitExceededError, SamplingBudgetError
from formcast.generation.conditioned import ConditionedSampler
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

VOCAB = Vocabulary.from_tokens(
    [b"<bos>", b"ye", b"s", b"no", b"maybe", b"<eos>"], stop_token_ids=[5], name="yesno"
)


def log(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        out: np.ndarray = np.log(p)
    return out


def yes_no(seq: list[int]) -> np.ndarray:
    """Seed 000's toy: ye 0.30, no 0.10, maybe 0.60; after ye: s 0.02, maybe 0.98."""
    out, p = seq[1:], np.zeros(6)
    if not out:
        p[[1, 3, 4]] = [0.3, 0.1, 0.6]
    elif out == [1]:
        p[[2, 4]] = [0.02, 0.98]
    else:
        p[5] = 1.0
    return log(p)


BYTES = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256], name="bytes"
)


class Recording:
    """A logits function over bytes that records every sequence it is asked about."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, ...]] = []

    def __call__(self, seq: list[int]) -> np.ndarray:
        self.seen.append(tuple(seq))
        g = np.random.default_rng(len(seq) * 7919 + sum(seq))
        logits = np.full(257, -3.0)
        logits[[ord(c) for c in "abcdxyz"]] = g.normal(0.0, 1.0, 7)
        logits[256] = 0.5
        return logits


def test_model_calls_are_distinct_prefixes() -> None:
    fn = Recording()
    model = CallableModel(fn, BYTES)
    sampler = ConditionedSampler(model, [ord("q")], regex="[abc]{1,4}(x|y)?")
    results = sampler.sample(300, seed=0)
    assert len(results) == 300
    assert all(r.finish_reason == "completed" for r in results)
    stats = sampler.stats
    assert stats.model_calls == model.calls == len(fn.seen)
    assert len(set(fn.seen)) == len(fn.seen)  # no prefix is evaluated twice
    assert stats.trie_nodes == stats.model_calls
    assert stats.accepted == 300
    assert stats.attempts >= 300
    assert 0 < stats.acceptance_rate <= 1
    lo, hi = stats.z_ci
    assert 0 < stats.z_lower <= lo <= stats.z_estimate <= hi <= stats.z_upper <= 1
    assert stats.seconds > 0
    assert stats.model_calls_per_sample < 1


def test_the_trie_is_kept_across_sample_calls() -> None:
    model = CallableModel(yes_no, VOCAB)
    sampler = ConditionedSampler(model, [0], regex="yes|no")
    sampler.sample(50, seed=0)
    calls = sampler.stats.model_calls
    assert calls == 2
    again = sampler.sample(50, seed=1)
    assert sampler.stats.model_calls == calls  # everything is known: no model call
    assert sampler.stats.accepted == 100
    assert {r.text for r in again} <= {"yes", "no"}
    assert sampler.stats.z_estimate == pytest.approx(0.106)


def test_same_seed_same_samples() -> None:
    def draw() -> list[str]:
        s = ConditionedSampler(CallableModel(yes_no, VOCAB), [0], regex="yes|no")
        return [r.text for r in s.sample(200, seed=11)]

    assert draw() == draw()


def test_budget_exhaustion_raises_a_typed_error() -> None:
    fn = Recording()
    sampler = ConditionedSampler(
        CallableModel(fn, BYTES), [ord("q")], regex="[abc]{3}x", max_model_calls=3
    )
    with pytest.raises(SamplingBudgetError) as info:
        sampler.sample(100, seed=0)
    err = info.value
    assert isinstance(err, LimitExceededError)
    assert err.limit == "max_model_calls"
    assert err.value == 3
    assert 0 <= err.samples < 100
    assert "max_model_calls" in str(err)
    assert "aligned" in str(err)
    assert "Z=" in str(err)
    assert sampler.stats.model_calls == 3  # never more than the budget


def test_no_valid_mass_is_a_configuration_error() -> None:
    """A constraint the model can never complete (its mass is 0): the trie proves Z = 0."""

    def never_s(seq: list[int]) -> np.ndarray:
        p = np.zeros(6)
        p[[1, 4]] = [0.5, 0.5] if len(seq) == 1 else [0.0, 1.0]
        return log(p)

    sampler = ConditionedSampler(CallableModel(never_s, VOCAB), [0], regex="yes")
    with pytest.raises(ConfigurationError, match="Z = 0"):
        sampler.sample(1, seed=0)


def test_mask_method_counts_its_model_calls() -> None:
    model = CallableModel(yes_no, VOCAB)
    sampler = ConditionedSampler(model, [0], regex="yes|no", method="mask")
    results = sampler.sample(20, seed=0)
    assert {r.text for r in results} <= {"yes", "no"}
    assert sampler.stats.model_calls == model.calls
    assert sampler.stats.accepted == sampler.stats.attempts == 20
    assert math.isnan(sampler.stats.z_estimate)


def test_max_tokens_bounds_the_target() -> None:
    model = CallableModel(Recording(), BYTES)
    sampler = ConditionedSampler(model, [ord("q")], regex="[abc]+", max_tokens=2)
    results = sampler.sample(200, seed=0)
    assert all(1 <= len(r.token_ids) <= 2 for r in results)
    assert all(r.stop_token_id == 256 for r in results)


def test_generate_sampling_option() -> None:
    model = CallableModel(yes_no, VOCAB)
    texts = [
        formcast.generate(
            model, [0], regex="yes|no", sampling="exact", temperature=1.0, seed=s
        ).text
        for s in range(40)
    ]
    assert set(texts) <= {"yes", "no"}
    assert texts.count("no") > 30
    masked = formcast.generate(model, [0], regex="yes|no", temperature=1.0, seed=0)
    assert masked.text in {"yes", "no"}  # the default is still the masked path
    with pytest.raises(ConfigurationError, match="temperature"):
        formcast.generate(model, [0], regex="yes|no", sampling="exact")
    with pytest.raises(ConfigurationError, match="stop"):
        formcast.generate(model, [0], regex="yes|no", sampling="exact", temperature=1.0, stop="s")
    with pytest.raises(ConfigurationError, match="sampling must be one of"):
        formcast.generate(model, [0], regex="yes|no", sampling="best")
    with pytest.raises(ConfigurationError, match="mask only"):
        formcast.stream(model, [0], regex="yes|no", sampling="exact", temperature=1.0)


def test_bad_arguments() -> None:
    model = CallableModel(yes_no, VOCAB)
    with pytest.raises(ConfigurationError, match="method must be one of"):
        ConditionedSampler(model, [0], regex="yes|no", method="greedy")
    with pytest.raises(ConfigurationError, match="needs a constraint"):
        ConditionedSampler(model, [0])
    with pytest.raises(ConfigurationError, match="max_model_calls"):
        ConditionedSampler(model, [0], regex="yes|no", max_model_calls=0)
    with pytest.raises(ConfigurationError, match=r"more than one|at most one"):
        ConditionedSampler(model, [0], regex="yes|no", grammar="json")
    sampler = ConditionedSampler(model, [0], regex="yes|no")
    with pytest.raises(ConfigurationError, match="n must be"):
        sampler.sample(-1)
    assert sampler.sample(0) == []


def test_exported() -> None:
    assert formcast.ConditionedSampler is ConditionedSampler
    assert formcast.SamplingBudgetError is SamplingBudgetError
    assert formcast.generation.ConditionedSampler is ConditionedSampler
