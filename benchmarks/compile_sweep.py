#!/usr/bin/env python3
"""Compile + first mask of N MaskBench schemas in one process, as a server would: formcast only.

A quick A/B harness for compile-side changes (pure Python vs the mypyc copy of docs/native.md,
or old vs new source trees via ``PYTHONPATH``): a fresh ``GrammarCompiler(cache_size=0)`` per
schema (process-wide caches warm from schema to schema), the time is the thread's CPU time of
the compile and the first ``fill_next_token_bitmask`` (so a busy machine inflates it less than
wall time), schemas that fail to compile are left out.  For the side-by-side comparison with the
peers use ``benchmarks/maskbench.py``.

Usage::

    python benchmarks/compile_sweep.py --sample 100 --seed 5
    python benchmarks/compile_sweep.py --sample 60 --seed 5 --both  # eager vs lazy index
    PYTHONPATH=/tmp/formcast-native python benchmarks/compile_sweep.py --sample 100 --seed 5
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

DATA_DIR = (
    Path(__file__).resolve().parents[1].parent / "shared" / "data" / "JSONSchemaBench"
    / "maskbench" / "data"
)


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--data", default=str(DATA_DIR))
    ap.add_argument(
        "--eager", action="store_true", help="the eager token index (cfg_program.LAZY_INDEX off)"
    )
    ap.add_argument(
        "--both",
        action="store_true",
        help="eager and lazy token index, interleaved, two rounds (the second is warm)",
    )
    args = ap.parse_args()

    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast._native import native_summary
    from formcast.vocab.loaders import load_vocabulary

    files = sorted(Path(args.data).glob("*.json"))
    if not files:
        raise SystemExit(f"no *.json files under {args.data}")
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, len(vocab))

    def one(schema: object) -> None:
        c = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        GrammarMatcher(c).fill_next_token_bitmask(mask, 0)

    import formcast.index.cfg_program as cfg_program

    docs = [json.loads(f.read_text()) for f in files]
    print(f"formcast native modules: {native_summary()}", file=sys.stderr)
    rounds = [False, True, False, True] if args.both else [not args.eager]
    for lazy in rounds:
        cfg_program.LAZY_INDEX = lazy
        one({"type": "object", "properties": {"a": {"type": "integer"}}})  # warm-up
        times: list[float] = []
        for doc in docs:
            t = time.thread_time()
            try:
                one(doc.get("schema", doc))
            except Exception:  # a schema that does not compile is left out
                continue
            times.append(time.thread_time() - t)
        times.sort()
        print(
            f"{'lazy ' if lazy else 'eager'} index: schemas {len(times)}/{len(files)}  "
            f"p50 {_pct(times, 0.5) * 1e3:.1f} ms  "
            f"p90 {_pct(times, 0.9) * 1e3:.1f} ms  p99 {_pct(times, 0.99) * 1e3:.1f} ms  "
            f"max {times[-1] * 1e3:.1f} ms  total {sum(times):.2f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
