#!/usr/bin/env python3
"""Where one first-visit mask's time goes, on a compiled build (verdict40, #31 TBM max).

Compiles a MaskBench schema ``--reps`` times; per compile, the matcher accepts instance 0's
tokens (masks computed as MaskBench computes them) up to ``--step``; then on that state it
times, on fresh compiles alternately: (a) the whole ``token_mask`` and (b) its parts called
one by one as ``CfgProgram._compute_mask`` calls them (the stack tops' classifications, then
the candidate check).  Thread CPU, minimum over the reps.  Usage::

    PYTHONPATH=/tmp/fc-base40 python benchmarks/verdict40_parts.py \\
        --file Github_medium---o82853.json --step 24
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


def _at(ad: Any, task: dict[str, Any], step: int) -> tuple[Any, Any]:
    compiled = ad.compile(task["schema"])
    m = ad.matcher(compiled)
    mask = ad.alloc()
    ids = task["instances"][0]["ids"]
    for s in range(step):
        ad.fill(m, mask)
        ad.accept(m, ids[s])
    return compiled.program, m._history[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", default="Github_medium---o82853.json")
    ap.add_argument("--step", type=int, default=24)
    ap.add_argument("--reps", type=int, default=5)
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
    best: dict[str, float] = {}

    def note(k: str, ns: int) -> None:
        best[k] = min(best.get(k, 1e18), ns / 1e6)

    t = time.thread_time_ns
    for _ in range(args.reps):
        gc.collect()
        prog, state = _at(ad, task, args.step)
        c0 = t()
        prog.token_mask(state)
        note("token_mask", t() - c0)
        prog, state = _at(ad, task, args.step)
        if prog._counted.rules:
            state = prog.pda.capped(state, prog._cap)
        rules = prog._counted.rules
        positions = {
            (f.rule, f.state, f.need, f.left) if f.rule in rules else (f.rule, f.state)
            for f in state.frames
        }
        c0 = t()
        words = None
        parts = []
        for pos in positions:
            w, c = prog._counted.classify(*pos) if len(pos) == 4 else prog._positions.classify(*pos)
            words = w.copy() if words is None else np.bitwise_or(words, w)
            if c.size:
                parts.append(c)
        note("classify", t() - c0)
        trie = prog.vocab.trie
        cands = cp._sorted_union(parts) if len(parts) > 1 else parts[0]
        cands = cands[bitmask_has_many(words, trie.first_token[cands]) == 0]
        pda = prog.pda
        step = pda.step_capped if rules else pda.step
        c0 = t()
        if cands.size >= cp._LEVEL_VERIFY_MIN:
            ok, _ = cp._verify_by_levels(
                step, state, trie, cands, trie.strings_end_to_end(), pda.step_memo
            )
            kind = "levels"
        else:
            ok, _ = cp._verify_in_order(step, state, trie, cands, pda.step_memo, None)
            kind = "in_order"
        note(f"verify ({kind}, {cands.size} cands, {ok.size} ok)", t() - c0)
    for k, v in best.items():
        print(f"{k:50s} {v:7.3f} ms", flush=True)


if __name__ == "__main__":
    main()
