#!/usr/bin/env python3
"""Interleaved A/B of grammar_bench's cold document, per step, with the thread CPU spent in the
region search (``_LazyExitSplitClassifier._search_region``, outermost call) and the digests
(``_region_digest``) of each step (region38, issue #31).

For one workload, N fresh worker processes per build, alternating builds (``/tmp/fc-<build>``
on ``PYTHONPATH``): grammar_bench's formcast setup and warmup, then every mask of the cold
document, timed in thread CPU.  Prints per build the per-step minimum over the runs (the p99
as grammar_bench takes it, the sum, the search and digest sums) and the top steps as
``(step, mask us, search us)``.

    python benchmarks/region38_search_ab.py json_gbnf 8 main,region38
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_WORKER = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[2])
import patch_guard
patch_guard.require_patchable("region38_search_ab.py", "timing _search_region/_region_digest")
import grammar_bench as gb
import formcast.index.cfg_program as cp
from tokenizers import Tokenizer
T = time.thread_time_ns
acc = {}
depth = [0]
def wrap(name, key, outer):
    real = getattr(cp._LazyExitSplitClassifier, name)
    def timed(*a):
        if outer and depth[0]:
            return real(*a)
        depth[0] += outer
        t0 = T()
        try:
            return real(*a)
        finally:
            acc[key] = acc.get(key, 0) + (T() - t0) / 1e3
            depth[0] -= outer
    setattr(cp._LazyExitSplitClassifier, name, timed)
wrap("_search_region", "search", 1)
wrap("_region_digest", "digest", 0)
wl = gb.make_workloads()[sys.argv[1]]
tp = gb.tokenizer_path()
doc = Tokenizer.from_file(tp).encode(wl.docs[0], add_special_tokens=False).ids
ad = gb.FormcastAdapter(tp)
ad.setup()
ad.warmup()
gc.collect()
comp = ad.compile(wl)
m = ad.matcher(comp)
mask = ad.alloc()
out = []
gc.collect()
gc.disable()
for step in range(len(doc) + 1):
    acc.clear()
    c0 = T()
    ad.fill(m, mask)
    out.append([(T() - c0) / 1e3, acc.get("search", 0.0), acc.get("digest", 0.0)])
    if step == len(doc):
        break
    ad.accept(m, doc[step])
print(json.dumps(out))
"""


def main() -> None:
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
                check=False,
            )
            if r.returncode != 0:  # (patch_guard's refusal, or a failure: its stderr)
                raise SystemExit(f"{b}: {r.stderr.strip()[-2000:]}")
            runs[b].append(json.loads(r.stdout.strip().splitlines()[-1]))
    for b in builds:
        got = runs[b]
        steps = len(got[0])
        mins = [[min(r[k][i] for r in got) for i in range(3)] for k in range(steps)]
        total = sorted(m[0] for m in mins)
        top = sorted(range(steps), key=lambda k: -mins[k][0])[:5]
        tops = [(k, round(mins[k][0]), round(mins[k][1])) for k in top]
        print(
            f"{workload} {b}: per-step min p99 {total[int(0.99 * (steps - 1))]:.0f}, sum "
            f"{sum(total):.0f}, search {sum(m[1] for m in mins):.0f}, digest "
            f"{sum(m[2] for m in mins):.0f}; top {tops}"
        )


if __name__ == "__main__":
    main()
