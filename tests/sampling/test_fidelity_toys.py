"""The fidelity benchmark's analytic part (benchmarks/fidelity.py), without sampling.

Seed 000's yes/no example must come out exactly: masked sampling says "yes" with probability
0.30 / 0.40 = 0.75, the model conditioned on validity 0.006 / 0.106 ~ 0.0566.  Also the
enumeration of the nested toy, against a hand computation, and the divergence helpers.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fidelity_bench", ROOT / "benchmarks" / "fidelity.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fidelity_bench"] = module
    spec.loader.exec_module(module)
    return module


fid = _load()


def test_seed000_masked_and_conditioned_probabilities_are_exact() -> None:
    toy = fid.yes_no_toy()
    enum = fid.enumerate_distributions(
        toy.model, toy.prompt_ids, toy.constraint, max_tokens=toy.max_tokens
    )
    assert enum.p_mask["yes"] == pytest.approx(0.75, abs=1e-12)
    assert enum.p_mask["no"] == pytest.approx(0.25, abs=1e-12)
    assert enum.z == pytest.approx(0.106, abs=1e-12)
    assert enum.p_raw["yes"] == pytest.approx(0.006, abs=1e-12)
    assert enum.p_cond["yes"] == pytest.approx(0.006 / 0.106, abs=1e-12)
    assert round(enum.p_cond["yes"], 3) == 0.057
    assert fid.UNFINISHED not in enum.p_mask


def test_nested_toy_matches_hand_computation() -> None:
    toy = fid.nested_toy()
    enum = fid.enumerate_distributions(
        toy.model, toy.prompt_ids, toy.constraint, max_tokens=toy.max_tokens
    )
    raw = {
        "abc": 0.9 * 0.8 * 0.05 * 0.2,
        "abcd": 0.9 * 0.8 * 0.05 * 0.6 * 0.5,
        "ac": 0.9 * 0.1 * 0.5,
        "acd": 0.9 * 0.1 * 0.3 * 0.9,
    }
    assert set(enum.p_raw) == set(raw)
    for y, p in raw.items():
        assert enum.p_raw[y] == pytest.approx(p, rel=1e-12)
    # masked: a -> {b .8, c .1} renormalized; ab -> c forced; abc -> {d .6, eos .2}; ...
    mask = {
        "abc": (8 / 9) * 1.0 * (0.2 / 0.8),
        "abcd": (8 / 9) * 1.0 * (0.6 / 0.8) * 1.0,
        "ac": (1 / 9) * (0.5 / 0.8),
        "acd": (1 / 9) * (0.3 / 0.8) * 1.0,
    }
    for y, p in mask.items():
        assert enum.p_mask[y] == pytest.approx(p, rel=1e-12)
    assert sum(enum.p_mask.values()) == pytest.approx(1.0, abs=1e-12)


def test_schema_toy_enumerates_all_documents() -> None:
    toy = fid.schema_toy()
    enum = fid.enumerate_distributions(
        toy.model, toy.prompt_ids, toy.constraint, max_tokens=toy.max_tokens
    )
    assert len(enum.p_raw) == 26  # 2 colours x 13 integers
    assert sum(enum.p_cond.values()) == pytest.approx(1.0, abs=1e-12)
    assert sum(enum.p_mask.values()) == pytest.approx(1.0, abs=1e-12)
    assert 0 < enum.z < 1


def test_divergences() -> None:
    p = {"a": 0.5, "b": 0.5}
    assert fid.kl_divergence(p, p) == 0.0
    assert fid.total_variation(p, {"a": 1.0}) == pytest.approx(0.5)
    assert fid.kl_divergence(p, {"a": 1.0}) == math.inf
    q = fid.smoothed_empirical(["a", "a", "a"], ["a", "b"])
    assert q == {"a": 3.5 / 4.0, "b": 0.5 / 4.0}
    assert fid.kl_divergence(p, q) == pytest.approx(
        0.5 * math.log(0.5 / 0.875) + 0.5 * math.log(0.5 / 0.125)
    )
    # seed 000: the exact masked KL, by hand
    cond = {"yes": 0.006 / 0.106, "no": 0.1 / 0.106}
    mask = {"yes": 0.75, "no": 0.25}
    expected = cond["yes"] * math.log(cond["yes"] / 0.75) + cond["no"] * math.log(cond["no"] / 0.25)
    assert fid.kl_divergence(cond, mask) == pytest.approx(expected)


def test_script_runs_end_to_end_on_the_toys(capsys: pytest.CaptureFixture[str]) -> None:
    assert fid.main(["--no-model", "--no-plots", "--sizes", "20", "--methods", "mask"]) == 0
    out = capsys.readouterr().out
    assert '- p_mask (exact): "yes": 0.7500, "no": 0.2500' in out
    assert "| yes/no (seed 000) | mask | 20 |" in out
    assert r"| nested (ab\|a)(c\|cd) | mask | 20 |" in out
