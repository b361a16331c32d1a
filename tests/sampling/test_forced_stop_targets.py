"""The two targets at a stop the grammar forces: ``forced_stop="certain"`` (the default: the
output ends there with probability 1, as in ``generate``) and ``forced_stop="model"`` (the
model's stop probability is multiplied in: p(y + stop | valid)).

Checked against the fidelity benchmark's independent enumeration (``p_cond_truncated`` and
``p_cond``) on the nested toy, where the two differ (KL 0.029 nats): the samplers' own
enumeration must reproduce each exactly, and the exact sampler must fit each (chi-square) and
reject the other.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from formcast.errors import ConfigurationError
from formcast.generation.aligned import exact_conditioned_distribution
from formcast.generation.conditioned import ConditionedSampler
from formcast.generation.inputs import compile_constraint

scipy_stats = pytest.importorskip("scipy.stats")
ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fidelity_bench_targets", ROOT / "benchmarks" / "fidelity.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fidelity_bench_targets"] = module
    spec.loader.exec_module(module)
    return module


fid = _load()


def reference() -> tuple[object, object]:
    toy = fid.nested_toy()
    enum = fid.enumerate_distributions(
        toy.model, toy.prompt_ids, toy.constraint, max_tokens=toy.max_tokens
    )
    return toy, enum


@pytest.mark.parametrize(("rule", "target"), [("certain", "truncated"), ("model", "full")])
def test_enumeration_reproduces_each_target(rule: str, target: str) -> None:
    toy, enum = reference()
    compiled, _ = compile_constraint(toy.model.vocab, **toy.constraint)  # type: ignore[attr-defined]
    dist = exact_conditioned_distribution(
        toy.model,
        toy.prompt_ids,
        compiled,
        max_tokens=toy.max_tokens,
        forced_stop=rule,  # type: ignore[attr-defined]
    )
    want = enum.target(target)  # type: ignore[attr-defined]
    assert set(dist.texts) == set(want)
    for text, p in want.items():
        assert dist.texts[text] == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize(("rule", "target"), [("certain", "truncated"), ("model", "full")])
def test_exact_sampler_fits_its_target_and_not_the_other(rule: str, target: str) -> None:
    toy, enum = reference()
    sampler = ConditionedSampler(
        toy.model,  # type: ignore[attr-defined]
        toy.prompt_ids,  # type: ignore[attr-defined]
        method="exact",
        max_tokens=toy.max_tokens,  # type: ignore[attr-defined]
        forced_stop=rule,
        **toy.constraint,  # type: ignore[attr-defined]
    )
    counts = Counter(r.text for r in sampler.sample(4000, seed=3))
    keys = sorted(enum.target(target))  # type: ignore[attr-defined]
    obs = [counts[k] for k in keys]
    own = scipy_stats.chisquare(obs, [4000 * enum.target(target)[k] for k in keys]).pvalue  # type: ignore[attr-defined]
    other = "full" if target == "truncated" else "truncated"
    wrong = scipy_stats.chisquare(obs, [4000 * enum.target(other)[k] for k in keys]).pvalue  # type: ignore[attr-defined]
    assert own > 1e-3
    assert wrong < 1e-6


def test_forced_stop_is_checked() -> None:
    toy = fid.nested_toy()
    with pytest.raises(ConfigurationError, match="forced_stop"):
        ConditionedSampler(toy.model, toy.prompt_ids, regex="a", forced_stop="full")
