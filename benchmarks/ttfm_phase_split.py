"""TTFM of a MaskBench sample split by phase, per-phase medians over the p50 band (thread CPU).

As ``benchmarks/ttfm_perf_profile.py`` runs it (one process, caches warm from the schemas before):
per schema TTFM and inside it the JSON Schema lowering (``front``: ``schema_to_grammar``), the
rule phase (``rules``: ``compile_grammar_automaton``), the FIRST/FOLLOW analysis
(``analysis``: ``GrammarAnalysis.of``) and the program set-up (``setup``:
``CfgProgram.__init__``, which includes the analysis).  Prints, over the schemas whose TTFM
lies between the ``--lo`` and ``--hi`` quantiles, the median and the sum of each::

    PYTHONPATH=DIR python benchmarks/ttfm_phase_split.py --sample 300 --seed 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lowering_ttfm import DATA


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--lo", type=float, default=0.3)
    ap.add_argument("--hi", type=float, default=0.7)
    args = ap.parse_args()
    import formcast.index.compiler as compiler_mod
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.automata import analysis
    from formcast.errors import FormcastError
    from formcast.frontends.jsonschema import api
    from formcast.index import cfg_program
    from formcast.vocab.loaders import load_vocabulary

    clock = time.thread_time_ns
    acc: dict[str, int] = {}

    def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                acc[key] = acc.get(key, 0) + clock() - t0

        return run

    compiler_mod.compile_grammar_automaton = timed(  # type: ignore[assignment]
        "rules", compiler_mod.compile_grammar_automaton
    )
    api.schema_to_grammar = timed("front", api.schema_to_grammar)  # type: ignore[assignment]
    of = analysis.GrammarAnalysis.of
    analysis.GrammarAnalysis.of = timed("analysis", of)  # type: ignore[method-assign]
    init = cfg_program.CfgProgram.__init__
    cfg_program.CfgProgram.__init__ = timed("setup", init)  # type: ignore[method-assign]
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, vocab.vocab_size)
    files = sorted(DATA.glob("*.json"))
    names = [f.name for f in sorted(random.Random(args.seed).sample(files, args.sample))]

    def ttfm(schema: Any) -> dict[str, int]:
        acc.clear()
        t0 = clock()
        compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        GrammarMatcher(compiled).fill_next_token_bitmask(mask)
        acc["ttfm"] = clock() - t0
        return dict(acc)

    ttfm({"type": "object", "properties": {"a": {"type": "string"}}})
    rows = []
    for name in names:
        schema = json.loads((DATA / name).read_text(encoding="utf-8"))["schema"]
        try:
            rows.append(ttfm(schema))
        except (FormcastError, RecursionError, ValueError):
            continue
    rows.sort(key=lambda r: r["ttfm"])
    band = rows[int(args.lo * len(rows)) : int(args.hi * len(rows))]
    keys = ("ttfm", "front", "rules", "setup", "analysis")
    print(f"{len(rows)} compiled, band {len(band)} ({args.lo}-{args.hi} of TTFM)")
    for k in keys:
        vals = [r.get(k, 0) / 1e6 for r in band]
        print(f"{k:9s} median {statistics.median(vals):6.3f} ms  sum {sum(vals):8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
