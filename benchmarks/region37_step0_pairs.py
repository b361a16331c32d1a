#!/usr/bin/env python3
"""Paired A/B of a grammar_bench workload's first mask (step 0 of the cold document), region37.

Runs ``step0_regions_ab.py``'s worker (grammar_bench's formcast setup and warmup, then the
workload's compile and first mask in a fresh process, thread CPU; the thread CPU inside
``_new_region`` and ``_region_digest``) for builds A and B (``/tmp/fc-<build>``) in pairs,
the order within a pair alternating (AB, BA, ...), and prints per build the median and
mean of step 0 and of region + digest, and the median and geometric mean of the per-pair
ratios B / A (a pair shares the machine's load: its ratio drops most of the drift).

    python benchmarks/region37_step0_pairs.py c1_arith 20 main,region37
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

from step0_regions_ab import _WORKER


def _run(workload: str, build: str, here: str) -> list[float]:
    r = subprocess.run(
        [sys.executable, "-c", _WORKER, workload, here, ""],
        env={"PYTHONPATH": f"/tmp/fc-{build}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    out: list[float] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload")
    ap.add_argument("pairs", type=int)
    ap.add_argument("builds", help="A,B")
    a = ap.parse_args()
    here = str(Path(__file__).resolve().parent)
    base, mine = a.builds.split(",")
    got: dict[str, list[list[float]]] = {base: [], mine: []}
    for i in range(a.pairs):
        for b in (base, mine) if i % 2 == 0 else (mine, base):
            got[b].append(_run(a.workload, b, here))
    for b in (base, mine):
        step = [r[0] for r in got[b]]
        reg = [r[1] + r[2] for r in got[b]]
        print(
            f"{a.workload} {b}: step0 median {statistics.median(step):.0f} mean "
            f"{statistics.mean(step):.0f}; region+digest median {statistics.median(reg):.0f} "
            f"mean {statistics.mean(reg):.0f} (us, {len(step)} runs)"
        )
    for i, name in ((0, "step0"), (None, "region+digest")):
        ratios = [
            (m[0] / s[0]) if i == 0 else (m[1] + m[2]) / (s[1] + s[2])
            for s, m in zip(got[base], got[mine], strict=True)
        ]
        gm = math.exp(statistics.mean(math.log(x) for x in ratios))
        print(
            f"  {name} {mine}/{base} per pair: median {statistics.median(ratios):.3f}, "
            f"geomean {gm:.3f} ({len(ratios)} pairs)"
        )


if __name__ == "__main__":
    main()
