#!/usr/bin/env python3
"""Interleaved A/B of grammar_bench's formcast masks, per step (session 20, wide34).

For one grammar_bench workload, runs N fresh worker processes per build, alternating builds
(``/tmp/fc-<build>`` on ``PYTHONPATH``), each timing every ``fill_next_token_bitmask`` of the
cold document then the warm one in thread CPU (as grammar_bench's ``_walk``, formcast only).
Prints per build and document: the p99 of each run, the p99 and the top masks of the per-step
minimum over the runs (a step's mask is the same work in every run, so its minimum drops the
load of a shared machine), and the sum of the minima.

    python benchmarks/cold_steps_ab.py json_gbnf 5 main,wide34
"""

from __future__ import annotations

import json
import subprocess
import sys

_WORKER = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[2])
import grammar_bench as gb
from tokenizers import Tokenizer
wl = gb.make_workloads()[sys.argv[1]]
tp = gb.tokenizer_path()
tok = Tokenizer.from_file(tp)
docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
ad = gb.FormcastAdapter(tp)
ad.setup()
ad.warmup()
gc.collect()
comp = ad.compile(wl)
out = []
for doc in docs:
    m = ad.matcher(comp)
    mask = ad.alloc()
    res = []
    gc.collect()
    gc.disable()
    for step in range(len(doc) + 1):
        c0 = time.thread_time_ns()
        ad.fill(m, mask)
        res.append((time.thread_time_ns() - c0) / 1e3)
        if step == len(doc):
            break
        ad.accept(m, doc[step])
    gc.enable()
    out.append(res)
print(json.dumps(out))
"""


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[int(0.99 * (len(s) - 1))]


def main() -> None:
    from pathlib import Path

    workload, n, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    here = str(Path(__file__).resolve().parent)
    runs: dict[str, list[list[list[float]]]] = {b: [] for b in builds}
    for _ in range(n):
        for b in builds:
            r = subprocess.run(
                [sys.executable, "-c", _WORKER, workload, here],
                env={"PYTHONPATH": f"/tmp/fc-{b}", "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                check=True,
            )
            runs[b].append(json.loads(r.stdout.strip().splitlines()[-1]))
    for b in builds:
        for d, name in ((0, "cold"), (1, "warm")):
            per = [round(_p99(r[d])) for r in runs[b]]
            mins = [min(r[d][k] for r in runs[b]) for k in range(len(runs[b][0][d]))]
            top = sorted(range(len(mins)), key=lambda k: -mins[k])[:5]
            print(
                f"{workload} {b} {name}: p99 per run {per}; per-step min: p99 "
                f"{_p99(mins):.0f}, top {[(k, round(mins[k])) for k in top]}, sum {sum(mins):.0f}"
            )


if __name__ == "__main__":
    main()
