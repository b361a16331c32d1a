#!/usr/bin/env python3
"""Interleaved A/B of a grammar_bench workload's first mask (step 0 of the cold document) and
of the region work inside it (region36, issue #31).

For each build (``/tmp/fc-<build>`` on ``PYTHONPATH``), N fresh worker processes, alternating
builds: grammar_bench's formcast setup and warmup, optionally one more grammar compiled and
masked first (``--prewarm``: e.g. one with a wide start, so that the per-process first uses of
the region search and refinement code, which grammar_bench's warmup grammar never reaches,
are paid before the workload), then the workload's compile and first mask, timed in thread
CPU, with the thread CPU spent inside ``_LazyExitSplitClassifier._new_region`` and
``_region_digest``.  Prints per build the mean and every run's ``step0/region/digest`` (us).

    python benchmarks/step0_regions_ab.py c1_arith 6 main,region36
    python benchmarks/step0_regions_ab.py c1_arith 6 main,region36 --prewarm 'root ::= [a-z]+'
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

_WORKER = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[2])
import patch_guard
patch_guard.require_patchable("step0_regions_ab.py", "timing _new_region/_region_digest")
import grammar_bench as gb
import formcast.index.cfg_program as cp
spent = [0.0, 0.0]
cls = cp._LazyExitSplitClassifier
for i, name in enumerate(("_new_region", "_region_digest")):
    real = getattr(cls, name)
    def timed(*a, _real=real, _i=i):
        t0 = time.thread_time_ns()
        try:
            return _real(*a)
        finally:
            spent[_i] += (time.thread_time_ns() - t0) / 1e3
    setattr(cls, name, timed)
wl = gb.make_workloads()[sys.argv[1]]
ad = gb.FormcastAdapter(gb.tokenizer_path())
ad.setup()
ad.warmup()
if sys.argv[3]:
    pre = ad.GC(ad.vocab, cache_size=0).compile_grammar(sys.argv[3])
    ad.fill(ad.matcher(pre), ad.alloc())
gc.collect()
comp = ad.compile(wl)
m = ad.matcher(comp)
mask = ad.alloc()
spent[0] = spent[1] = 0.0
gc.disable()
c0 = time.thread_time_ns()
ad.fill(m, mask)
print(json.dumps([(time.thread_time_ns() - c0) / 1e3, spent[0], spent[1]]))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload")
    ap.add_argument("runs", type=int)
    ap.add_argument("builds")
    ap.add_argument("--prewarm", default="", help="a grammar compiled and masked first")
    a = ap.parse_args()
    here = str(Path(__file__).resolve().parent)
    builds = a.builds.split(",")
    got: dict[str, list[list[float]]] = {b: [] for b in builds}
    for _ in range(a.runs):
        for b in builds:
            r = subprocess.run(
                [sys.executable, "-c", _WORKER, a.workload, here, a.prewarm],
                env={"PYTHONPATH": f"/tmp/fc-{b}", "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                check=False,
            )
            if r.returncode != 0:  # (patch_guard's refusal, or a failure: its stderr)
                raise SystemExit(f"{b}: {r.stderr.strip()[-2000:]}")
            got[b].append(json.loads(r.stdout.strip().splitlines()[-1]))
    for b in builds:
        runs = got[b]
        mean = [sum(r[i] for r in runs) / len(runs) for i in range(3)]
        each = " ".join("/".join(f"{x:.0f}" for x in r) for r in runs)
        print(
            f"{a.workload} {b}: step0 {mean[0]:.0f} region {mean[1]:.0f} digest {mean[2]:.0f} "
            f"(mean of {len(runs)}; step0/region/digest: {each})"
        )


if __name__ == "__main__":
    main()
