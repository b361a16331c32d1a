"""Calibration of the compile fuel and the cache memory (not a test: it measures time).

    python benchmarks/compile_limits.py            # fuel: time to stop the pathological schemas
    python benchmarks/compile_limits.py --memory   # bytes per token of a long counted string

Fuel: each pathological schema of ``tests/index/test_compile_fuel_is_deterministic.py`` is
compiled in a fresh compiler with the wall clock off; it must stop with
``CompileBudgetError(max_compile_work)``
after about 2 s (the calibration target of ``CompileLimits.max_compile_work``), and a few
MaskBench-like schemas that compile report their fuel and time (us per unit).
Memory: a ``maxLength: 1000000`` string generated token by token; reports the bytes per token
that the grammar's shared caches keep (formcast's accounting and tracemalloc), while the matcher
is alive and after it is released.
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.errors import CompileBudgetError
from formcast.frontends.jsonschema.api import JsonSchemaOptions
from formcast.limits import CompileLimits


def byte_vocab() -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"abcd", b"<eos>"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[len(tokens) - 1])


def fuel() -> None:
    from test_compile_limits import PATHOLOGICAL, nested_if, overlapping_pattern_properties

    limits = CompileLimits(max_compile_seconds=None)
    opts = JsonSchemaOptions(max_compile_seconds=None)
    cases: dict[str, Any] = dict(PATHOLOGICAL)
    cases.update(
        {
            "6 overlapping patternProperties": overlapping_pattern_properties(6),
            "4 nested if": nested_if(4),
            "letters {1,40}": {"type": "string", "pattern": "^\\p{L}{1,40}$"},
        }
    )
    for name, schema in cases.items():
        compiler = GrammarCompiler(byte_vocab(), limits=limits, cache_size=0)
        t0 = time.perf_counter()
        try:
            work = compiler.compile_json_schema(schema, opts).compile_work
            outcome = "compiled"
        except CompileBudgetError:
            work, outcome = limits.max_compile_work, "stopped (max_compile_work)"
        dt = time.perf_counter() - t0
        rate = dt * 1e6 / work
        print(f"{name:34s} {outcome:27s} {work:>10,d} units {dt:6.2f} s {rate:5.2f} us/u")


def memory(n_tokens: int = 20_000) -> None:
    vocab = byte_vocab()
    compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
        {"type": "string", "maxLength": 1_000_000}
    )
    program: Any = compiled.program
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache_before = program.cache_bytes()
    m = GrammarMatcher(compiled)
    m.accept_token(ord('"'))
    for _ in range(n_tokens):
        m.accept_token(256)
    gc.collect()
    alive = tracemalloc.get_traced_memory()[0] - before
    grown = program.cache_bytes() - cache_before
    del m
    gc.collect()
    GrammarMatcher(compiled).accept_token(ord('"'))  # a next request compacts the weak tables
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(f"{n_tokens} tokens: shared caches grew {grown / n_tokens:.1f} B/token (accounting)")
    print(f"  alive (matcher history included): {alive / n_tokens:.0f} B/token (tracemalloc)")
    print(f"  kept after the matcher is released: {kept / n_tokens:.1f} B/token (tracemalloc)")


if __name__ == "__main__":
    memory() if "--memory" in sys.argv else fuel()
