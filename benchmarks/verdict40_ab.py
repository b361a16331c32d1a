#!/usr/bin/env python3
"""In-process A/B of one first-visit candidate check (verdict40, #31 TBM max): on fresh compiles
of a MaskBench schema walked to ``--step`` (instance 0, masks computed as MaskBench does), the
check of that step's mask (``cfg_program._verify_by_levels``, cold: the parser's memo as the
mask finds it) with ``table=True`` and ``table=False``, alternated (A B B A ...); thread CPU per
pair, with the load average.  Also ``--relax``: the check from the capped state against the
check from its relaxed twin (``_checked_state``), both with the table.  Usage::

    PYTHONPATH=/tmp/fc-verdict40 python benchmarks/verdict40_ab.py --step 24 --pairs 8
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench
from verdict40_parts import _at


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", default="Github_medium---o82853.json")
    ap.add_argument("--step", type=int, default=24)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--relax", action="store_true")
    args = ap.parse_args()
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    from formcast.bitmask import bitmask_has_many
    from formcast.index import cfg_program as cp

    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    ad: Any = maskbench.ADAPTERS["formcast"]()
    ad.setup()
    ad.warmup()
    task = maskbench.prepare(Path(maskbench.DATA_DIR) / args.file, tok)

    def once(variant: bool) -> tuple[float, int]:
        gc.collect()
        prog, state = _at(ad, task, args.step)
        rules = prog._counted.rules
        if rules:
            state = prog.pda.capped(state, prog._cap)
        words = None
        parts = []
        for f in state.frames:
            pos = (f.rule, f.state, f.need, f.left) if f.rule in rules else (f.rule, f.state)
            w, c = prog._counted.classify(*pos) if len(pos) == 4 else prog._positions.classify(*pos)
            words = w.copy() if words is None else np.bitwise_or(words, w)
            if c.size:
                parts.append(c)
        trie = prog.vocab.trie
        cands = cp._sorted_union(parts) if len(parts) > 1 else parts[0]
        cands = cands[bitmask_has_many(words, trie.first_token[cands]) == 0]
        pda = prog.pda
        step = pda.step_capped if rules else pda.step
        table = True
        if args.relax:
            start = cp._checked_state(pda, state, rules, prog._cap) if variant else state
        else:
            start, table = cp._checked_state(pda, state, rules, prog._cap), variant
        c0 = time.thread_time_ns()
        if cands.size >= cp._LEVEL_VERIFY_MIN:
            cp._verify_by_levels(
                step, start, trie, cands, trie.strings_end_to_end(), pda.step_memo, table=table
            )
        else:
            cp._verify_in_order(step, start, trie, cands, pda.step_memo, None)
        return (time.thread_time_ns() - c0) / 1e6, int(cands.size)

    label = "relaxed" if args.relax else "table"
    sums = [0.0, 0.0]
    for p in range(args.pairs):
        order = (True, False) if p % 2 == 0 else (False, True)
        got = {v: once(v) for v in order}
        sums[0] += got[True][0]
        sums[1] += got[False][0]
        load = Path("/proc/loadavg").read_text().split()[0]
        print(
            f"pair {p}: {label} {got[True][0]:6.3f} ms, not {got[False][0]:6.3f} ms "
            f"({got[True][1]} cands, load {load})",
            flush=True,
        )
    print(f"mean: {label} {sums[0] / args.pairs:.3f} ms, not {sums[1] / args.pairs:.3f} ms")


if __name__ == "__main__":
    main()
