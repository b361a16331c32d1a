"""Where the lazy call-expanded lexer spends its time, first mask vs later masks (issue #31).

Compiles MaskBench schemas (maskbench.py's sample and instances), walks their instances one
process, and reports per schema: TTFM, the summed time of the masks after the first (thread
CPU) and the thread-CPU time spent in :class:`formcast.automata.lexer.LazyExpandedLexer`'s
row building (``ensure`` and the construction) in each phase.  Run it on the pure-Python tree
(``PYTHONPATH=src``) to see the lexer's share; the wrappers are Python either way::

    PYTHONPATH=src python benchmarks/lexer_rows_profile.py --sample 100 --seed 3 --top 15
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import maskbench as mb
from maskbench_cpu import _walk as _walk_cpu  # each mask timed in thread CPU


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--files", default="")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    args.data = str(mb.DATA_DIR)
    args.full = False
    mb._single_thread_env()
    from tokenizers import Tokenizer

    from formcast.automata import lexer as lx

    tok = Tokenizer.from_file(mb.tokenizer_path())
    ad = mb.FormcastAdapter()
    ad.setup()
    ad.warmup()
    clock = time.thread_time_ns
    acc = {"ensure": 0, "init": 0, "ensure_calls": 0, "n_global": 0}
    if os.environ.get("FORMCAST_LAZY_ROWS_FROM"):  # the A/B of the threshold
        lx._LAZY_ROWS_FROM = int(os.environ["FORMCAST_LAZY_ROWS_FROM"])

    orig_ensure = lx.LazyExpandedLexer.ensure
    orig_init = lx.LazyExpandedLexer.__init__

    def ensure(self: Any, states: Any) -> bool:
        t0 = clock()
        try:
            return orig_ensure(self, states)
        finally:
            acc["ensure"] += clock() - t0
            acc["ensure_calls"] += 1

    def init(self: Any, *a: Any, **k: Any) -> None:
        t0 = clock()
        try:
            orig_init(self, *a, **k)
            acc["n_global"] = max(acc["n_global"], int(self.offsets[-1]))
        finally:
            acc["init"] += clock() - t0

    import patch_guard
    from formcast.index import cfg_program as cp

    patch_guard.require_patchable("lexer_rows_profile.py", "timing _new_region")

    # the classifier's refinements: one per region since refine34 (no whole-lexer pass)
    orig_region = cp._LazyExitSplitClassifier._new_region

    def new_region(self: Any, start: int) -> tuple[int, int] | None:
        t0 = clock()
        try:
            return orig_region(self, start)
        finally:
            acc["refine"] += clock() - t0

    cp._LazyExitSplitClassifier._new_region = new_region  # type: ignore[method-assign]
    acc["refine"] = 0
    lx.LazyExpandedLexer.ensure = ensure  # type: ignore[method-assign]
    lx.LazyExpandedLexer.__init__ = init  # type: ignore[method-assign]
    rows = []
    tot_first = tot_later = tot_lex_first = tot_lex_later = 0
    n_masks = 0
    for path in mb.select_files(args):
        task = mb.prepare(Path(path), tok)
        gc.collect()
        for k in acc:
            acc[k] = 0
        t0 = clock()
        try:
            compiled = ad.compile(task["schema"])
            m = ad.matcher(compiled)
            mask = ad.alloc()
            ad.fill(m, mask)
        except Exception:
            continue
        ttfm = clock() - t0
        lex_first = acc["ensure"] + acc["init"]
        refine_first = acc["refine"]
        acc["ensure"] = acc["init"] = acc["refine"] = 0
        times: list[float] = []
        gc.disable()
        try:
            for inst in task["instances"]:
                with contextlib.suppress(Exception):
                    _walk_cpu(ad, compiled, inst["ids"], times)
        finally:
            gc.enable()
        later = int(sum(times) * 1e3)
        lex_later = acc["ensure"]
        rows.append(
            (
                Path(path).name,
                ttfm,
                lex_first,
                later,
                lex_later,
                len(times),
                acc["ensure_calls"],
                acc["n_global"],
                refine_first,
                acc["refine"],
            )
        )
        tot_first += ttfm
        tot_later += later
        tot_lex_first += lex_first
        tot_lex_later += lex_later
        n_masks += len(times)
    print(f"schemas {len(rows)} masks {n_masks}")
    print(
        f"first masks: {tot_first / 1e6:.1f} ms (lexer {tot_lex_first / 1e6:.1f} ms); "
        f"later masks: {tot_later / 1e6:.1f} ms (lexer ensure {tot_lex_later / 1e6:.1f} ms), "
        f"mean {tot_later / 1e3 / max(n_masks, 1):.1f} us"
    )
    big = [r for r in rows if r[7] >= lx._LAZY_ROWS_FROM]
    print(
        f"lazy-row lexers: {len(big)} schemas, first masks {sum(r[1] for r in big) / 1e6:.1f} ms "
        f"(lexer {sum(r[2] for r in big) / 1e6:.1f}), later {sum(r[3] for r in big) / 1e6:.1f} ms "
        f"(lexer {sum(r[4] for r in big) / 1e6:.1f}), masks {sum(r[5] for r in big)}"
    )
    print("by lexer time in later masks:")
    for r in sorted(rows, key=lambda r: -r[4])[: args.top]:
        print(
            f"  {r[0]:40s} ttfm {r[1] / 1e6:7.1f} ms lex {r[2] / 1e6:6.1f} | "
            f"later {r[3] / 1e6:7.1f} ms "
            f"lex {r[4] / 1e6:6.1f} ms masks {r[5]} ensures {r[6]} states {r[7]} "
            f"refine {r[8] / 1e6:.1f}/{r[9] / 1e6:.1f} ms"
        )


if __name__ == "__main__":
    main()
