#!/usr/bin/env python3
"""Interleaved A/B of grammar_bench's cold document per step (grow40, issue #31): ``N`` rounds,
each one fresh process per build (``/tmp/fc-<build>`` on ``PYTHONPATH``), the builds' order
alternating (A B, B A, ...), each process one compile and the cold document's masks in thread
CPU (``benchmarks/grow40_steps.py --runs 1 --json``).  Prints per round the load average and
each build's p99 / sum, then per build the per-step minimum over the rounds (p99, sum) and its
slowest steps with what they did to the regions::

    python benchmarks/grow40_ab.py json_gbnf 4 base40,grow40
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    workload, n, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    here = Path(__file__).resolve().parent
    runs: dict[str, list[np.ndarray]] = {b: [] for b in builds}
    events: dict[str, list[str]] = {}
    for r in range(n):
        order = builds if r % 2 == 0 else builds[::-1]
        line = [f"round {r} load {Path('/proc/loadavg').read_text().split()[0]}"]
        for b in order:
            env = {**os.environ, "PYTHONPATH": f"/tmp/fc-{b}"}
            out = subprocess.run(
                [sys.executable, str(here / "grow40_steps.py"), workload, "--runs", "1", "--json"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            got = json.loads(out.strip().splitlines()[-1])
            us = np.asarray(got["us"])
            runs[b].append(us)
            events[b] = got["events"]
            line.append(f"{b} p99 {np.percentile(us, 99):.0f} sum {us.sum():.0f}")
        print(" | ".join(line), flush=True)
    for b in builds:
        best = np.min(np.stack(runs[b]), axis=0)
        p99s = [float(np.percentile(u, 99)) for u in runs[b]]
        print(
            f"{b}: per-step min p99 {np.percentile(best, 99):.0f} sum {best.sum():.0f}; "
            f"p99 per run median {np.median(p99s):.0f}"
        )
        for s in np.argsort(-best)[:7].tolist():
            print(f"   step {s:4d} {best[s]:7.0f} us  {events[b][s]}")


if __name__ == "__main__":
    main()
