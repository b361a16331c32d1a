#!/usr/bin/env python3
"""What run-time ``uniqueItems`` costs: mask time on an array of N unique strings.

Schema ``{"type": "array", "items": {"type": "string"}, "uniqueItems": true}`` (checked at run
time) against the same schema without ``uniqueItems`` (the grammar alone), on the bundled
SmolLM2 tokenizer (49,152 ids).  The document is an array of N distinct strings (``"w<i>-<word>"``,
deterministic), tokenized by the model's own tokenizer; each step times
``fill_next_token_bitmask`` (wall and thread CPU time: on a shared machine the wall p99
measures preemption) and ``accept_token``, and checks that the document's next token is
allowed.  A first pass warms the grammar's caches (cold masks are the grammar's cost, not the
check's); the timed pass is a fresh matcher over the same document.  Also reported: the
suspect tokens simulated byte by byte, and a check that re-writing an earlier item is refused.

Usage::

    python benchmarks/unique_items_bench.py            # N = 1000
    python benchmarks/unique_items_bench.py --items 200 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta", "zeta", "rho")


def document(n: int) -> str:
    items = [f"w{i}-{WORDS[i % len(WORDS)]}" for i in range(n)]
    return json.dumps(items, separators=(",", ":"))


def run(compiled: Any, ids: list[int]) -> dict[str, float]:
    from formcast.bitmask import allocate_token_bitmask, bitmask_has
    from formcast.runtime.matcher import GrammarMatcher

    wall: list[int] = []
    cpu: list[int] = []
    accept: list[int] = []
    for timed in (False, True):
        m = GrammarMatcher(compiled)
        mask = allocate_token_bitmask(1, compiled.vocab_size)
        for t in ids:
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            m.fill_next_token_bitmask(mask)
            w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            assert bitmask_has(mask[0], t), "the document's next token was masked"
            a0 = time.thread_time_ns()
            assert m.accept_token(t)
            a1 = time.thread_time_ns()
            if timed:
                wall.append(w1 - w0)
                cpu.append(c1 - c0)
                accept.append(a1 - a0)
        assert m.is_accepting()
    out: dict[str, float] = {"steps": len(wall)}
    for name, xs in (("mask_wall", wall), ("mask_cpu", cpu), ("accept_cpu", accept)):
        us = np.asarray(xs) / 1e3
        out[f"{name}_p50_us"] = round(float(np.percentile(us, 50)), 1)
        out[f"{name}_p99_us"] = round(float(np.percentile(us, 99)), 1)
        out[f"{name}_max_us"] = round(float(us.max()), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()

    import formcast
    from formcast.index.compiler import GrammarCompiler

    model = formcast.load_model("smollm2")
    vocab = model.vocab
    doc = document(args.items)
    ids = model.encode_bytes(doc.encode())
    assert ids is not None
    compiler = GrammarCompiler(vocab)
    unique = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    plain = {"type": "array", "items": {"type": "string"}}
    out: dict[str, Any] = {"items": args.items, "tokens": len(ids)}
    for name, schema in (("plain", plain), ("unique", unique)):
        t0 = time.perf_counter()
        compiled = compiler.compile_json_schema(schema)
        compile_s = time.perf_counter() - t0
        res = run(compiled, ids)
        res["compile_s"] = round(compile_s, 3)
        if name == "unique":
            from formcast.runtime.matcher import GrammarMatcher

            info = GrammarMatcher(compiled)._program.cache_info()
            res["suspect_tokens_simulated"] = info.get("unique_items_simulated", 0)
            # an earlier item again is refused (byte by byte and as tokens)
            m = GrammarMatcher(compiled)
            assert m.accept_bytes(doc[:-1] + ",")
            assert not m.fork().accept_bytes('"w0-alpha"')
            again = model.encode_bytes(b'"w0-alpha"') or []
            assert m.validate_tokens(again) < len(again)
        out[name] = res
    key = "mask_cpu_p99_us"
    out["mask_cpu_p99_ratio"] = round(out["unique"][key] / max(out["plain"][key], 1e-9), 2)
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
