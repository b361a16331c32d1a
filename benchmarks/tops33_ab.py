#!/usr/bin/env python3
"""In-process A/B of the delta walks (tops33, issue #31): grammar_bench's cold and warm runs
with ``cfg_program._DELTA_WALKS`` off and on, interleaved in one process (off, on, off, on,
...), each on a fresh compile with the vocabulary's shared walks cleared (as grammar_bench's
fresh worker), per-mask thread CPU time.  Prints per workload and mode the median over the
repeats of the cold p99, warm p99, cold sum and warm sum (us).  One process removes the
process-to-process drift of a loaded machine; the repeats its noise (a first pair, the
process's warm-up, is dropped).

Usage::

    PYTHONPATH=DIR python benchmarks/tops33_ab.py --reps 5 json json_gbnf c_lang
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar_bench as gb


def _run(ad: Any, compiled: Any, ids: list[int]) -> list[float]:
    m = ad.matcher(compiled)
    mask = ad.alloc()
    out = []
    gc.collect()
    gc.disable()
    try:
        for step in range(len(ids) + 1):
            t0 = time.thread_time_ns()
            ad.fill(m, mask)
            out.append((time.thread_time_ns() - t0) / 1e3)
            if step == len(ids):
                break
            ad.accept(m, ids[step])
    finally:
        gc.enable()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("workloads", nargs="*", default=["json", "json_gbnf", "c_lang"])
    args = ap.parse_args()
    from tokenizers import Tokenizer

    import formcast.index.cfg_program as cp
    from formcast.index.context import context_for

    tok = Tokenizer.from_file(gb.tokenizer_path())
    ad = gb.FormcastAdapter(gb.tokenizer_path())
    ad.setup()
    ad.warmup()
    workloads = gb.make_workloads()
    for name in args.workloads:
        wl = workloads[name]
        docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
        got: dict[bool, list[tuple[float, float, float, float]]] = {False: [], True: []}
        for rep in range(args.reps + 1):  # (the first pair: process warm-up, dropped)
            for on in (False, True):
                cp._DELTA_WALKS = on
                context_for(ad.vocab).cache(cp.SHARED_WALKS).clear()
                compiled = ad.compile(wl)
                cold = _run(ad, compiled, docs[0])
                warm = _run(ad, compiled, docs[1])
                if rep == 0:
                    continue
                got[on].append(
                    (
                        float(np.percentile(cold, 99)),
                        float(np.percentile(warm, 99)),
                        sum(cold),
                        sum(warm),
                    )
                )
        for on in (False, True):
            med = [statistics.median(x[i] for x in got[on]) for i in range(4)]
            print(
                f"{name:10s} delta {'on ' if on else 'off'}: cold p99 {med[0]:7.0f}  warm p99 "
                f"{med[1]:6.0f}  cold sum {med[2]:8.0f}  warm sum {med[3]:7.0f}  (median of "
                f"{args.reps}; cold p99s {[round(x[0]) for x in got[on]]})"
            )


if __name__ == "__main__":
    main()
