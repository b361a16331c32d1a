#!/usr/bin/env python3
"""Interleaved A/B of grammar_bench's formcast warm masks per step (digest40, #31 warm p99).

As ``cold_steps_ab.py`` (fresh worker processes, builds alternating A B B A ..., thread CPU,
``/tmp/fc-<build>`` on ``PYTHONPATH``), warm document only: per build, the p99 of each run,
the p99 / sum of the per-step minimum over the runs, and the per-step minima of the slowest
steps of any build (so a step that got faster is listed too).  Usage::

    python benchmarks/digest40_ab.py json_gbnf 6 base40,digest40
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_steps_ab import _WORKER


def main() -> None:
    workload, n, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    here = str(Path(__file__).resolve().parent)
    runs: dict[str, list[list[float]]] = {b: [] for b in builds}
    for i in range(n):
        for b in builds if i % 2 == 0 else builds[::-1]:
            r = subprocess.run(
                [sys.executable, "-c", _WORKER, workload, here],
                env={"PYTHONPATH": f"/tmp/fc-{b}", "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                check=True,
            )
            runs[b].append(json.loads(r.stdout.strip().splitlines()[-1])[1])
    mins = {b: np.min(np.asarray(runs[b]), axis=0) for b in builds}
    top: set[int] = set()
    for b in builds:
        top.update(np.argsort(mins[b])[::-1][:6].tolist())
    steps = sorted(top)
    for b in builds:
        per = [round(float(np.percentile(r, 99))) for r in runs[b]]
        m = mins[b]
        print(
            f"{workload} {b} warm: p99 per run {per} (median {np.median(per):.0f}); per-step "
            f"min p99 {np.percentile(m, 99):.0f}, sum {m.sum():.0f}; steps "
            + " ".join(f"{k}:{m[k]:.0f}" for k in steps)
        )


if __name__ == "__main__":
    main()
