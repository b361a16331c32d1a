"""TTFM of given MaskBench schemas split by phase (thread CPU): front-end, rule phase, set-up.

Per schema, in one process after a warm-up compile (process-wide caches warm from the
schemas before, as in MaskBench's workers): a fresh ``GrammarCompiler(vocab, cache_size=0)``,
``compile_json_schema`` and the first mask (``ttfm``); inside it the JSON Schema lowering
(``schema_to_grammar``: ``front``), ``compile_grammar_automaton`` (``rules``) and
``CfgProgram.__init__`` (``setup``); the rest is the first mask.  ``--repeat R`` compiles each
schema R times and keeps the fastest (R > 1 reuses what the first compile cached).  Used to
classify the TTFM tail of issue #31 (docs/notes/tail33.md)::

    PYTHONPATH=DIR python benchmarks/tail33_phases.py Github_hard---o82766.json kb_269...
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent.parent / "shared/data/JSONSchemaBench/maskbench/data"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    import formcast.index.compiler as compiler_mod
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
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
    init = cfg_program.CfgProgram.__init__
    cfg_program.CfgProgram.__init__ = timed("setup", init)  # type: ignore[method-assign]
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, vocab.vocab_size)

    def ttfm(schema: Any) -> dict[str, int]:
        acc.clear()
        t0 = clock()
        compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        GrammarMatcher(compiled).fill_next_token_bitmask(mask)
        acc["ttfm"] = clock() - t0
        return dict(acc)

    ttfm({"type": "object", "properties": {"a": {"type": "string"}}})
    for name in args.files:
        schema = json.loads((DATA / name).read_text(encoding="utf-8"))["schema"]
        best = min((ttfm(schema) for _ in range(args.repeat)), key=lambda r: r["ttfm"])
        keys = ("ttfm", "front", "rules", "setup")
        cols = " ".join(f"{k} {best.get(k, 0) / 1e6:7.1f}" for k in keys)
        print(f"{name:50s} {cols}")


if __name__ == "__main__":
    main()
