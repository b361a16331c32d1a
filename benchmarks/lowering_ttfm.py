"""Lowering time and in-process TTFM of JSON schemas, in thread CPU time (docs/native.md).

For N MaskBench schemas (the files of ``benchmarks/maskbench.py``): the JSON-schema front-end's
lowering (``schema_to_grammar``, schema to IR grammar) and TTFM (a fresh
``GrammarCompiler(vocab, cache_size=0)``: ``compile_json_schema`` + a matcher's first mask),
each timed with ``time.thread_time_ns`` (so other processes on a shared machine do not count).
Schemas that fail to compile are skipped.  Prints p50/p99/max/mean in ms, and ``--json`` writes
the per-schema times (to compare two builds run interleaved)::

    PYTHONPATH=DIR python benchmarks/lowering_ttfm.py --sample 80 --seed 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "JSONSchemaBench"
DATA = DATA / "maskbench" / "data"


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=80)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="runs per schema (the minimum counts)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "RAYON_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast._native import native_summary
    from formcast.errors import FormcastError
    from formcast.frontends.jsonschema.api import schema_to_grammar
    from formcast.vocab.loaders import load_vocabulary

    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    vocab = load_vocabulary("llama3")
    clock = time.thread_time_ns

    def ttfm(schema: Any) -> float:
        t0 = clock()
        compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        m = GrammarMatcher(compiled)
        mask = allocate_token_bitmask(1, vocab.vocab_size)
        m.fill_next_token_bitmask(mask, 0)
        return (clock() - t0) / 1e6

    def lower(schema: Any) -> float:
        t0 = clock()
        schema_to_grammar(schema, marks=[])
        return (clock() - t0) / 1e6

    ttfm({"type": "object", "properties": {"a": {"type": "integer"}}})  # warm-up
    rows: dict[str, tuple[float, float]] = {}
    for f in files:
        schema = json.loads(f.read_text(encoding="utf-8")).get("schema")
        try:
            lw = min(lower(schema) for _ in range(args.repeat))
            tt = min(ttfm(schema) for _ in range(args.repeat))
        except (FormcastError, RecursionError, ValueError):
            continue
        rows[f.name] = (lw, tt)
    print(native_summary())
    for i, name in enumerate(("lowering", "TTFM")):
        xs = [r[i] for r in rows.values()]
        print(
            f"{name:9s} n={len(xs)} p50={_pct(xs, 0.5):.3f} p99={_pct(xs, 0.99):.3f} "
            f"max={max(xs):.3f} mean={statistics.fmean(xs):.3f} ms"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
