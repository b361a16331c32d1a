"""Program set-up (``CfgProgram.__init__``) per MaskBench schema, by phase, and TTFM (issue #31).

A fresh ``GrammarCompiler(vocab, cache_size=0)`` per schema, as ``ttfm_fixed.py``, after a
warm-up pass over the sample (process-wide caches as a server's).  Thread CPU per schema of:
``setup`` (``CfgProgram.__init__``), inside it ``analysis`` (the grammar automaton's memoized
:class:`~formcast.automata.analysis.GrammarAnalysis`, forced first), ``pda``, ``lexer``
(``LazyExpandedLexer``), ``classifier`` (``_LazyExitSplitClassifier``), ``counted``; the first
mask; and ``ttfm`` (compile + first mask).  Prints p50/p99/max in microseconds (ttfm in ms).
Compare builds interleaved (run A, B, A, B)::

    PYTHONPATH=DIR python benchmarks/setup_bench.py --sample 150 --seed 5 [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent.parent / "shared/data/JSONSchemaBench/maskbench/data"


def _pct(ts: list[float]) -> str:
    ts = sorted(ts)
    n = len(ts)
    return (
        f"p50={ts[n // 2]:8.1f} p90={ts[int(n * 0.9)]:8.1f} "
        f"p99={ts[min(n - 1, int(n * 0.99))]:8.1f} max={ts[-1]:8.1f} mean={sum(ts) / n:8.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--lazy-rows-from", type=int, default=None, help="experiment: lexer._LAZY_ROWS_FROM"
    )
    args = ap.parse_args()
    import formcast
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.automata import lexer as lexmod
    from formcast.index import cfg_program as cp
    from formcast.vocab.loaders import load_vocabulary

    if args.lazy_rows_from is not None:
        lexmod._LAZY_ROWS_FROM = args.lazy_rows_from  # type: ignore[misc]
    vocab = load_vocabulary("llama3")
    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    schemas = []
    for f in files:
        doc = json.loads(f.read_text(encoding="utf-8"))
        schemas.append(doc.get("schema", doc))
    mask = allocate_token_bitmask(1, vocab.vocab_size)
    clock = time.thread_time_ns
    cur: dict[str, float] = {}

    def timed(name: str, real: Any) -> Any:
        def spy(*a: Any, **k: Any) -> Any:
            t0 = clock()
            out = real(*a, **k)
            cur[name] = cur.get(name, 0.0) + (clock() - t0) / 1e3
            return out

        return spy

    real_pda = cp.PushdownAutomaton

    def pda_spy(auto: Any, *a: Any, **k: Any) -> Any:
        t0 = clock()
        _ = auto.analysis
        cur["analysis"] = (clock() - t0) / 1e3
        return timed("pda", real_pda)(auto, *a, **k)

    cp.PushdownAutomaton = pda_spy
    cp.LazyExpandedLexer = timed("lexer", cp.LazyExpandedLexer)
    cp._LazyExitSplitClassifier = timed("classifier", cp._LazyExitSplitClassifier)
    cp._CountedClassifier = timed("counted", cp._CountedClassifier)
    cp.CfgProgram.__init__ = timed("setup", cp.CfgProgram.__init__)  # type: ignore[method-assign]

    def one(schema: object) -> None:
        t0 = clock()
        c = GrammarCompiler(vocab, cache_size=0, cache_dir=False).compile_json_schema(schema)
        t1 = clock()
        GrammarMatcher(c).fill_next_token_bitmask(mask, 0)
        t2 = clock()
        cur["first mask"] = (t2 - t1) / 1e3
        cur["ttfm"] = (t2 - t0) / 1e6

    ok = []
    for s in schemas:  # warm-up pass: which compile, and the shared caches as a server's
        try:
            one(s)
            ok.append(s)
        except formcast.errors.FormcastError:
            pass
    got: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.repeat):
        for s in ok:
            cur.clear()
            one(s)
            for k, v in cur.items():
                got[k].append(v)
    order = ["setup", "analysis", "pda", "lexer", "classifier", "counted", "first mask", "ttfm"]
    for k in order:
        if got[k]:
            unit = "ms" if k == "ttfm" else "us"
            print(f"{k:>11} n={len(got[k]):4d} {_pct(got[k])} {unit}")


if __name__ == "__main__":
    main()
