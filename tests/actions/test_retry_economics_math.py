"""benchmarks/retry_economics.py reproduces seed 002's geometric retry table exactly.

The expected cells are quoted from ../shared/seeds/002 ("Why the retry loop is worse than it
looks")::

         p  E[attempts]  p95 attempts   p99.9  tokens/1k reqs  worst case
      0.70         1.43             3       6         571,428   unbounded
      0.90         1.11             2       3         444,444   unbounded
      0.95         1.05             1       3         421,052   unbounded
      0.99         1.01             1       2         404,040   unbounded

    simulated 20,000 requests at p=0.95: mean attempts 1.053, max 4

Closed form only (no model): milliseconds.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from fractions import Fraction
from pathlib import Path
from types import ModuleType

import pytest

from formcast.errors import ConfigurationError

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "retry_economics.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_formcast_retry_economics", _PATH)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up while the class is built
    spec.loader.exec_module(mod)
    return mod


re_ = _load()

#: (p, E[attempts] as printed, p95, p99.9, tokens per 1k requests), from the seed's table
SEED_ROWS = [
    (0.70, "1.43", 3, 6, 571_428),
    (0.90, "1.11", 2, 3, 444_444),
    (0.95, "1.05", 1, 3, 421_052),
    (0.99, "1.01", 1, 2, 404_040),
]


@pytest.mark.parametrize(("p", "mean", "p95", "p999", "tokens"), SEED_ROWS)
def test_each_cell_matches_the_seed(p: float, mean: str, p95: int, p999: int, tokens: int) -> None:
    assert f"{re_.mean_attempts(p):.2f}" == mean
    assert re_.quantile_attempts(p, 0.95) == p95
    assert re_.quantile_attempts(p, 0.999) == p999
    assert re_.tokens_per_1k(p, 400) == tokens


def test_exact_boundaries_are_not_rounded_up() -> None:
    # p = q = 0.95: one attempt covers exactly 95 % (the float formula can give 2);
    # p = 0.9, q = 0.999: (0.1)**3 == 0.001 exactly, so 3 (float log ratio is 2.9999999999999996
    # on this platform and 3.0000000000000004 on others)
    assert re_.quantile_attempts(0.95, 0.95) == 1
    assert re_.quantile_attempts(0.9, 0.999) == 3
    assert re_.quantile_attempts(Fraction(1, 2), Fraction(3, 4)) == 2
    assert re_.quantile_attempts(Fraction(1, 2), Fraction(3, 4) + Fraction(1, 10**9)) == 3


def test_markdown_table_has_the_seed_rows() -> None:
    md = re_.seed_table_markdown()
    assert "| 0.70 | 1.43 | 3 | 6 | 571,428 | unbounded |" in md
    assert "| 0.95 | 1.05 | 1 | 3 | 421,052 | unbounded |" in md
    assert "| 0.99 | 1.01 | 1 | 2 | 404,040 | unbounded |" in md
    # constrained decoding: 1.00 attempts
    assert "| 1.00 (constrained) | 1.00 | 1 | 1 | 400,000 | 1 attempt |" in md


def test_the_cap_bounds_attempts_and_buys_a_failure_rate() -> None:
    # E[min(G,K)] = (1 - (1-p)^K) / p, failure (1-p)^K
    assert re_.capped_mean_attempts(0.5, 1) == 1.0
    assert re_.capped_mean_attempts(0.5, 3) == pytest.approx(1.75)
    assert re_.capped_mean_attempts(0.9, 50) == pytest.approx(1 / 0.9)
    assert re_.capped_failure_rate(0.7, 5) == pytest.approx(0.3**5)
    assert re_.capped_quantile_attempts(0.7, 0.999, 5) == 5
    assert re_.mean_attempts(1) == 1.0
    assert re_.quantile_attempts(1, 0.999) == 1


def test_simulation_agrees_with_the_closed_form() -> None:
    mean, worst = re_.simulate(0.95, 20_000, seed=0)
    # the seed's run: mean 1.053, max 4 (another generator; the mean is 1/0.95 = 1.0526...)
    assert abs(mean - 1 / 0.95) < 0.01
    assert 3 <= worst <= 8


def test_bad_inputs_are_refused() -> None:
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ConfigurationError, match=r"must be in \(0, 1\]"):
            re_.mean_attempts(bad)
    with pytest.raises(ConfigurationError, match="unbounded"):
        re_.quantile_attempts(0.5, 1.0)
    with pytest.raises(ConfigurationError, match="K must be >= 1"):
        re_.capped_mean_attempts(0.5, 0)
    assert math.isfinite(re_.mean_attempts(0.01))
