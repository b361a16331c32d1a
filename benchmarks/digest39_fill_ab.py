#!/usr/bin/env python3
"""In-process A/B of how a region's first digest makes its class rows' successor lists
distinct (digest39, issue #31 grammar warm p99): numpy (``_distinct_successors``, from
``_DISTINCT_MIN_CELLS`` cells) vs Python (``dict.fromkeys`` per row: the bound set huge).

Per round, the two settings alternating (A B, B A, ...): a fresh compile, the cold document
walked, then the warm one with a fresh matcher, every mask timed in thread CPU (gc off), as
grammar_bench's warm run.  Prints per setting the warm per-step-minimum p99, sum and top
steps (masks are the same work in every round).  Usage::

    PYTHONPATH=/tmp/fc-digest39 python benchmarks/digest39_fill_ab.py json_gbnf 6
"""

from __future__ import annotations

import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar_bench as gb


def main() -> None:
    from tokenizers import Tokenizer

    import formcast.index.cfg_program as cp

    name, rounds = sys.argv[1], int(sys.argv[2])
    tok = Tokenizer.from_file(gb.tokenizer_path())
    ad = gb.FormcastAdapter(gb.tokenizer_path())
    ad.setup()
    ad.warmup()
    wl = gb.make_workloads()[name]
    docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
    low = cp._DISTINCT_MIN_CELLS
    runs: dict[bool, list[list[float]]] = {False: [], True: []}
    for r in range(rounds):
        for on in (False, True) if r % 2 == 0 else (True, False):
            cp._DISTINCT_MIN_CELLS = low if on else 1 << 62
            comp = ad.compile(wl)
            times: list[float] = []
            for ids in docs[:2]:
                m = ad.matcher(comp)
                mask = ad.alloc()
                times = []
                gc.collect()
                gc.disable()
                try:
                    for step in range(len(ids) + 1):
                        c0 = time.thread_time_ns()
                        ad.fill(m, mask)
                        times.append((time.thread_time_ns() - c0) / 1e3)
                        if step == len(ids):
                            break
                        ad.accept(m, ids[step])
                finally:
                    gc.enable()
            runs[on].append(times)  # (the warm document's)
    cp._DISTINCT_MIN_CELLS = low
    for on in (False, True):
        best = np.min(np.asarray(runs[on]), axis=0)
        top = np.argsort(best)[::-1][:5].tolist()
        print(
            f"{name} {'numpy ' if on else 'python'}: warm per-step min p99 "
            f"{np.percentile(best, 99):.0f} us, sum {best.sum():.0f}, top "
            f"{[(i, round(float(best[i]))) for i in top]}"
        )


if __name__ == "__main__":
    main()
