#!/usr/bin/env python3
"""Per cold step of grammar_bench's c1_arith / c2_arith (walk40, session 26): the mask's thread
CPU, and the share of it in the kernel's classify walks (``trie.ClassifyWalker.walk``: each
call one C walk or resume, split into walks of the vocabulary trie and of the exit-byte trie)
vs the rest (the compiled cfg_program glue, regions, candidate checks, the parser).

Fresh worker processes, ``N`` pairs per build, builds alternated (A B B A ...); each pair is
one plain run (the step's time) and one wrapped run (``ClassifyWalker.walk`` is in
``vocab.trie``, never compiled, so its wrapper is seen by the compiled caller), each in its
own process (one cold compile a process: a second would find the first's shared walks).
Prints per build and workload the per-step minimum over the runs of the mask, the walks
(count, vocab / exit), the rest, the p99 (``np.percentile``'s, as grammar_bench: on 40 steps
0.61 x the slowest step + 0.39 x the second) and the sums.

    python benchmarks/walk40_steps.py c1_arith,c2_arith 3 base40,walk40
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_WORKER = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[2])
import grammar_bench as gb
from tokenizers import Tokenizer
import formcast.vocab.trie as trie_mod
wl = gb.make_workloads()[sys.argv[1]]
tp = gb.tokenizer_path()
tok = Tokenizer.from_file(tp)
doc = tok.encode(wl.docs[0], add_special_tokens=False).ids
ad = gb.FormcastAdapter(tp)
ad.setup()
ad.warmup()
acc = [0.0, 0, 0.0, 0]  # vocab-trie walk us, calls, exit-trie walk us, calls
real = trie_mod.ClassifyWalker.walk
vocab_trie = None

def walk(self, *a):
    t0 = time.thread_time_ns()
    got = real(self, *a)
    dt = (time.thread_time_ns() - t0) / 1e3
    k = 0 if self.own_strings else 2
    acc[k] += dt
    acc[k + 1] += 1
    return got

def run(wrapped):
    trie_mod.ClassifyWalker.walk = walk if wrapped else real
    gc.collect()
    comp = ad.compile(wl)
    m = ad.matcher(comp)
    mask = ad.alloc()
    res = []
    gc.collect()
    gc.disable()
    for step in range(len(doc) + 1):
        acc[:] = [0.0, 0, 0.0, 0]
        c0 = time.thread_time_ns()
        ad.fill(m, mask)
        res.append([(time.thread_time_ns() - c0) / 1e3, *acc])
        if step == len(doc):
            break
        ad.accept(m, doc[step])
    gc.enable()
    trie_mod.ClassifyWalker.walk = real
    return res

# one cold run per process (a second compile in it would find the first one's walks in the
# vocabulary's shared walks): mode "plain" or "wrapped"
print(json.dumps(run(sys.argv[3] == "wrapped")))
"""


def _p99(xs: list[float]) -> float:
    """``np.percentile(xs, 99)`` (linear interpolation: grammar_bench's p99)."""
    s = sorted(xs)
    at = 0.99 * (len(s) - 1)
    lo = int(at)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (at - lo) * (s[hi] - s[lo])


def main() -> None:
    workloads, n, builds = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3].split(",")
    here = str(Path(__file__).resolve().parent)
    for wl in workloads:
        runs: dict[str, list[list[list[list[float]]]]] = {b: [] for b in builds}
        for i in range(n):
            order = builds if i % 2 == 0 else builds[::-1]
            for b in order:
                pair = []
                for mode in ("plain", "wrapped"):
                    r = subprocess.run(
                        [sys.executable, "-c", _WORKER, wl, here, mode],
                        env={"PYTHONPATH": f"/tmp/fc-{b}", "PATH": "/usr/bin:/bin"},
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    pair.append(json.loads(r.stdout.strip().splitlines()[-1]))
                runs[b].append(pair)
        for b in builds:
            plain = [r[0] for r in runs[b]]
            wrapped = [r[1] for r in runs[b]]
            steps = len(plain[0])
            mask = [min(r[k][0] for r in plain) for k in range(steps)]
            wmask = [min(r[k][0] for r in wrapped) for k in range(steps)]
            vw = [min(r[k][1] for r in wrapped) for k in range(steps)]
            xw = [min(r[k][3] for r in wrapped) for k in range(steps)]
            calls = [(int(wrapped[0][k][2]), int(wrapped[0][k][4])) for k in range(steps)]
            per = [round(_p99([s[0] for s in r])) for r in plain]
            print(
                f"{wl} {b}: p99 per run {per}; per-step min p99 {_p99(mask):.0f}; sums: mask "
                f"{sum(mask):.0f} (wrapped {sum(wmask):.0f}), vocab walks {sum(vw):.0f}, exit "
                f"walks {sum(xw):.0f}"
            )
            top = sorted(range(steps), key=lambda k: -mask[k])[:6]
            for k in top:
                rest = wmask[k] - vw[k] - xw[k]
                print(
                    f"  step {k:3d}: mask {mask[k]:7.0f}  wrapped {wmask[k]:7.0f}  vocab walks "
                    f"{vw[k]:6.0f} ({calls[k][0]} calls)  exit walks {xw[k]:5.0f} "
                    f"({calls[k][1]})  rest {rest:6.0f}"
                )


if __name__ == "__main__":
    main()
