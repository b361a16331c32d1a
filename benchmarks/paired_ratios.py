"""Paired per-schema comparison of two builds from interleaved runs (emit33, #31).

Reads the ``--json`` files of ``lowering_first.py`` (``{schema: {stage: ms}}``) or of
``ttfm_fixed.py`` (``{schema: [ms, ...]}``), several runs per build, takes each schema's
minimum over a build's runs, and prints per stage: each build's p50/p90/p99/max/sum over the
schemas both have, and the median of the per-schema ratios (mine / base); also the median of
the per-run-pair ratios (run i of base against run i of mine)::

    python benchmarks/paired_ratios.py --base b1.json b2.json --mine m1.json m2.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def _load(path: str) -> dict[str, dict[str, float]]:
    raw: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    out: dict[str, dict[str, float]] = {}
    for k, v in raw.items():
        out[k] = {"ttfm": min(v)} if isinstance(v, list) else dict(v)
    return out


def _mins(runs: list[dict[str, dict[str, float]]], names: set[str], st: str) -> dict[str, float]:
    return {n: min(r[n][st] for r in runs) for n in names}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", nargs="+", required=True)
    ap.add_argument("--mine", nargs="+", required=True)
    args = ap.parse_args()
    base = [_load(p) for p in args.base]
    mine = [_load(p) for p in args.mine]
    names = set.intersection(*(set(r) for r in base + mine))
    stages = list(next(iter(base[0].values())))
    print(f"{len(names)} schemas, {len(base)} base runs, {len(mine)} mine runs")
    for st in stages:
        b = _mins(base, names, st)
        m = _mins(mine, names, st)
        ratios = [m[n] / b[n] for n in names if b[n] > 0]
        pair_meds = [
            statistics.median(mr[n][st] / br[n][st] for n in names if br[n][st] > 0)
            for br, mr in zip(base, mine)
        ]
        row = []
        for label, d in (("base", b), ("mine", m)):
            xs = list(d.values())
            row.append(
                f"{label} p50 {_pct(xs, 0.5):7.3f} p90 {_pct(xs, 0.9):7.3f} "
                f"p99 {_pct(xs, 0.99):7.3f} max {max(xs):7.2f} sum {sum(xs):7.1f}"
            )
        print(f"{st:9s} {row[0]} | {row[1]}")
        print(
            f"{'':9s} paired median (per-schema min) {statistics.median(ratios):.3f}; per run "
            "pair: " + " ".join(f"{x:.3f}" for x in pair_meds)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
