#!/usr/bin/env python3
"""Paired TBM comparison of two builds from interleaved runs (tops35, #31).

Reads per-schema mask times of several runs per build: ``maskbench_cpu.py --json`` reports
(``rows[i].engines.formcast.mask_us``) or ``tbm_parts.py --json`` files (``{schema: [us]}``).
Prints, over the schemas every run of both builds has: per run pair (base run i, mine run i)
the TBM mean and p99 of each and their ratio, the median of those ratios, and the median of
the per-schema ratios of the TBM mean and p99 (each schema's minimum over a build's runs)::

    python benchmarks/tbm_pairs.py --base b1.json b2.json b3.json --mine m1.json ...
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np


def _load(path: str) -> dict[str, list[float]]:
    raw: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(raw, dict) and "rows" in raw:
        out: dict[str, list[float]] = {}
        for row in raw["rows"]:
            r = row["engines"].get("formcast")
            if r is not None and r.get("status") == "ok" and r.get("mask_us"):
                out[row["file"]] = list(r["mask_us"])
        return out
    return {k: list(v) for k, v in raw.items() if v}


def _stats(runs: list[dict[str, list[float]]], names: list[str]) -> list[tuple[float, float]]:
    res = []
    for run in runs:
        allm = np.concatenate([np.asarray(run[n]) for n in names])
        res.append((float(allm.mean()), float(np.percentile(allm, 99))))
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", nargs="+", required=True)
    ap.add_argument("--mine", nargs="+", required=True)
    args = ap.parse_args()
    base = [_load(p) for p in args.base]
    mine = [_load(p) for p in args.mine]
    names = sorted(set.intersection(*(set(r) for r in base + mine)))
    # (the same masks in every run: a schema whose walks differ in length is left out)
    names = [n for n in names if len({len(r[n]) for r in base + mine}) == 1]
    print(f"schemas {len(names)}, masks {sum(len(base[0][n]) for n in names)}")
    sb, sm = _stats(base, names), _stats(mine, names)
    mean_r, p99_r = [], []
    for i, (b, m) in enumerate(zip(sb, sm, strict=False)):
        mean_r.append(m[0] / b[0])
        p99_r.append(m[1] / b[1])
        print(
            f"pair {i + 1}: TBM mean {b[0]:.1f} -> {m[0]:.1f} us ({mean_r[-1]:.3f}), "
            f"p99 {b[1]:.0f} -> {m[1]:.0f} us ({p99_r[-1]:.3f})"
        )
    print(
        f"median pair ratio: mean {statistics.median(mean_r):.3f}, "
        f"p99 {statistics.median(p99_r):.3f}"
    )
    per_mean, per_p99 = [], []
    for n in names:
        bm = min(float(np.mean(r[n])) for r in base)
        mm = min(float(np.mean(r[n])) for r in mine)
        bp = min(float(np.percentile(r[n], 99)) for r in base)
        mp = min(float(np.percentile(r[n], 99)) for r in mine)
        per_mean.append(mm / bm)
        per_p99.append(mp / bp)
    print(
        f"per-schema median ratio (min over runs): TBM mean {statistics.median(per_mean):.3f}, "
        f"p99 {statistics.median(per_p99):.3f}"
    )
    # the per-mask minimum over runs (each mask is the same work in every run)
    bmin = np.concatenate([np.min([r[n] for r in base], axis=0) for n in names])
    mmin = np.concatenate([np.min([r[n] for r in mine], axis=0) for n in names])
    print(
        f"per-mask minimum over runs: TBM mean {bmin.mean():.1f} -> {mmin.mean():.1f} us "
        f"({mmin.mean() / bmin.mean():.3f}), p99 {np.percentile(bmin, 99):.0f} -> "
        f"{np.percentile(mmin, 99):.0f} us, max {bmin.max():.0f} -> {mmin.max():.0f} us"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
