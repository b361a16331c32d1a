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


def test_truncated_valid_mass_agrees_with_the_samplers_with_two_stop_tokens() -> None:
    """A forced stop ends the output once, whatever the number of stop ids the grammar
    allows there.  The benchmark counted it once per stop id (SmolLM2 has two: its Z' was
    2x the sampler's, 0.111 vs 0.052, while the distributions agreed); the reference, the
    enumeration of the samplers' module and the exact sampler's bounds must agree."""
    import numpy as np

    from formcast.generation.aligned import exact_conditioned_distribution
    from formcast.generation.conditioned import ConditionedSampler
    from formcast.generation.inputs import compile_constraint
    from formcast.model.callable import CallableModel
    from formcast.vocab.vocabulary import Vocabulary

    tokens = [b"<bos>", b"ye", b"s", b"no", b"yes", b"maybe", b"<eos>", b"<end>"]
    vocab = Vocabulary.from_tokens(tokens, stop_token_ids=[6, 7])
    table = {(): [0, 0.2, 0, 0.1, 0.1, 0.6, 0, 0], (1,): [0, 0, 0.3, 0, 0, 0.7, 0, 0]}

    def fn(ids: list[int]) -> np.ndarray:
        p = np.array(table.get(tuple(ids[1:]), [0, 0, 0, 0, 0, 0.5, 0.25, 0.25])) + 1e-300
        return np.log(p)

    model = CallableModel(fn, vocab)
    enum = fid.enumerate_distributions(model, [0], {"regex": "yes|no"}, max_tokens=4)
    z_truncated = sum(enum.p_raw_forced_free.values())
    assert z_truncated == pytest.approx(0.2 * 0.3 + 0.1 + 0.1)  # "ye s", "no", "yes": 0.26
    compiled, _ = compile_constraint(vocab, regex="yes|no")
    assert compiled is not None
    ecd = exact_conditioned_distribution(model, [0], compiled, max_tokens=4)
    assert ecd.valid_mass == pytest.approx(z_truncated)
    sampler = ConditionedSampler(model, [0], regex="yes|no", method="exact", max_tokens=4)
    sampler.sample(200, seed=0)
    stats = sampler.stats
    assert stats.z_lower <= z_truncated + 1e-12 <= stats.z_upper + 2e-12
    assert stats.z_estimate == pytest.approx(z_truncated, rel=1e-9)  # the trie is complete


def test_aligned_next_sample_distribution_starts_as_masking_and_ends_exact() -> None:
    """The benchmark's exact view of grammar-aligned sampling: with an empty trie its next
    sample is distributed as masking's (exactly), and once the trie covers the language as
    the conditioned distribution (exactly)."""
    for toy, n_full in ((fid.wide_toy(), None), (fid.nested_toy(), 300)):
        enum = fid.enumerate_distributions(
            toy.model, toy.prompt_ids, toy.constraint, max_tokens=toy.max_tokens
        )
        sampler = fid.conditioned_sampler_class()(
            toy.model, toy.prompt_ids, method="aligned", max_tokens=toy.max_tokens,
            **toy.constraint,
        )  # fmt: skip
        q0 = fid.aligned_next_distribution(
            sampler, toy.model, toy.prompt_ids, toy.constraint, max_tokens=toy.max_tokens
        )
        mask = {k: v for k, v in enum.p_mask.items() if k != fid.UNFINISHED}
        total = sum(mask.values())
        assert fid.total_variation(q0, {k: v / total for k, v in mask.items()}) < 1e-12
        if n_full is not None:
            sampler.sample(n_full, seed=0)
            q = fid.aligned_next_distribution(
                sampler, toy.model, toy.prompt_ids, toy.constraint, max_tokens=toy.max_tokens
            )
            assert fid.total_variation(q, enum.p_cond_truncated) < 1e-9
