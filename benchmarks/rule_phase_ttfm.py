"""TTFM of MaskBench schemas and the share of it spent building the rule automata (thread CPU).

Per schema (the files of ``benchmarks/maskbench.py``): TTFM as ``benchmarks/lowering_ttfm.py``
measures it (a fresh ``GrammarCompiler(vocab, cache_size=0)``: ``compile_json_schema`` and a
matcher's first mask; the process-wide rule and sub-automaton caches stay warm from the
schemas before, as in MaskBench's workers) and, inside it, the time of
``compile_grammar_automaton`` (IR passes, rule NFAs and DFAs).  ``--cold`` also times
``compile_grammar_automaton`` alone on the lowered grammar with those caches emptied first
(what a process's first compile of such a schema pays).  Schemas that fail to compile are
skipped.  Compare two builds interleaved (``--json`` per run)::

    PYTHONPATH=DIR python benchmarks/rule_phase_ttfm.py --sample 100 --seed 3 --json a.json
    PYTHONPATH=DIR python benchmarks/rule_phase_ttfm.py --files Github_hard---o82503.json
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lowering_ttfm import DATA, _pct


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--files", default="", help="comma-separated file names (instead of a sample)")
    ap.add_argument("--cold", action="store_true", help="also time the rule phase, caches empty")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import formcast.index.compiler as compiler_mod
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast._native import native_summary
    from formcast.automata import regular, rules
    from formcast.errors import FormcastError
    from formcast.frontends.jsonschema.api import schema_to_grammar
    from formcast.ir.nodes import JSON_HINTS
    from formcast.vocab.loaders import load_vocabulary

    if args.files:
        files = [DATA / name for name in args.files.split(",")]
    else:
        files = sorted(DATA.glob("*.json"))
        files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    vocab = load_vocabulary("llama3")
    clock = time.thread_time_ns
    spent = [0]
    build = rules.compile_grammar_automaton

    def timed(*a: Any, **k: Any) -> Any:
        t0 = clock()
        try:
            return build(*a, **k)
        finally:
            spent[0] += clock() - t0

    compiler_mod.compile_grammar_automaton = timed  # type: ignore[assignment]

    def ttfm(schema: Any) -> tuple[float, float]:
        spent[0] = 0
        t0 = clock()
        compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        m = GrammarMatcher(compiled)
        mask = allocate_token_bitmask(1, vocab.vocab_size)
        m.fill_next_token_bitmask(mask, 0)
        return (clock() - t0) / 1e6, spent[0] / 1e6

    def cold(schema: Any) -> float:
        grammar = schema_to_grammar(schema, marks=[])[0]
        rules.RULE_DFA_CACHE.clear()
        regular.SUB_DFA_CACHE.clear()
        gc.disable()
        try:
            t0 = clock()
            build(grammar, expand_calls=JSON_HINTS.expand_calls, minimize=JSON_HINTS.minimize)
            return (clock() - t0) / 1e6
        finally:
            gc.enable()

    ttfm({"type": "object", "properties": {"a": {"type": "integer"}}})  # warm-up
    rows: dict[str, list[float]] = {}
    for f in files:
        schema = json.loads(f.read_text(encoding="utf-8")).get("schema")
        try:
            row = list(ttfm(schema))
            if args.cold:
                row.append(cold(schema))
        except (FormcastError, RecursionError, ValueError):
            continue
        rows[f.name] = row
    print(native_summary())
    names = ["TTFM", "rule phase in it"] + (["rule phase, cold caches"] if args.cold else [])
    for i, name in enumerate(names):
        xs = [r[i] for r in rows.values()]
        print(
            f"{name:24s} n={len(xs)} p50={_pct(xs, 0.5):.3f} p99={_pct(xs, 0.99):.3f} "
            f"max={max(xs):.3f} sum={sum(xs):.1f} ms"
        )
    if args.files:
        for name, r in rows.items():
            print(name, " ".join(f"{x:.2f}" for x in r))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
