#!/usr/bin/env python3
"""What run-time ``uniqueItems`` costs: mask time on arrays of N unique items.

Three item kinds, each schema ``{"type": "array", "items": ..., "uniqueItems": true}`` (checked
at run time) against the same schema without ``uniqueItems`` (the grammar alone), on the bundled
SmolLM2 tokenizer (49,152 ids): ``strings`` (``{"type": "string"}``: the string program),
``integers`` (``{"type": "integer"}``) and ``objects`` (``{"id": integer, "name": string}``,
both required, no other key): the general program on JSON values; ``rules`` (objects of
optional string members, other keys allowed, as MaskBench's micro-syntax schema): the general
program where every item equals the previous one for most of its length (issue #17: there
each cold mask once stepped most of the vocabulary one token at a time).  Each document is an
array of N distinct items (deterministic), tokenized by the model's own tokenizer; each step
times ``fill_next_token_bitmask`` (wall and thread CPU time: on a shared machine the wall p99
measures preemption) and ``accept_token``, and checks that the document's next token is
allowed.  A first pass warms the grammar's caches (its mask times are reported as ``cold_*``:
mostly the grammar's cost, but the check's own per-state work too); the timed pass is a fresh
matcher over the same document.  Also reported: the suspect tokens simulated byte by byte, and
a check that re-writing an earlier item is refused.

Usage::

    python benchmarks/unique_items_bench.py            # N = 1000, every kind (rules too)
    python benchmarks/unique_items_bench.py --items 200 --kinds integers,objects --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta", "zeta", "rho")


def document(n: int, kind: str = "strings") -> str:
    items: list[Any]
    if kind == "strings":
        items = [f"w{i}-{WORDS[i % len(WORDS)]}" for i in range(n)]
    elif kind == "integers":
        items = [(i * 7919) % 1_000_003 for i in range(n)]  # distinct: 7919 is prime
    elif kind == "rules":
        items = [dict(RULE, include=f"{WORDS[i % len(WORDS)]}-{i}") for i in range(n)]
    else:
        items = [{"id": i % 97, "name": f"{WORDS[i % len(WORDS)]}-{i // 97}"} for i in range(n)]
    return json.dumps(items, separators=(",", ":"))


#: the long common part of the ``rules`` items (their ``include`` tells them apart)
RULE = {
    "comment": "//",
    "identifier": "\\b[a-zA-Z_][a-zA-Z0-9_]*\\b",
    "constant.number": "\\b([0-9]+(\\.[0-9]+)?([eE][+-]?[0-9]+)?)\\b",
}
ITEMS: dict[str, Any] = {
    "strings": {"type": "string"},
    "integers": {"type": "integer"},
    "objects": {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["id", "name"],
        "additionalProperties": False,
    },
    "rules": {
        "type": "object",
        "properties": {k: {"type": "string", "minLength": 1} for k in (*RULE, "include")},
    },
}
#: an earlier item written again (refused), per kind
AGAIN = {
    "strings": '"w0-alpha"',
    "integers": "0,",
    "objects": '{"id":0,"name":"alpha-0"}',
    "rules": json.dumps(dict(RULE, include="alpha-0"), separators=(",", ":")),
}


def run(compiled: Any, ids: list[int]) -> dict[str, float]:
    from formcast.bitmask import allocate_token_bitmask, bitmask_has
    from formcast.runtime.matcher import GrammarMatcher

    wall: list[int] = []
    cpu: list[int] = []
    accept: list[int] = []
    cold_wall: list[int] = []
    cold_cpu: list[int] = []
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
            else:
                cold_wall.append(w1 - w0)
                cold_cpu.append(c1 - c0)
        assert m.is_accepting()
    out: dict[str, float] = {"steps": len(wall)}
    for name, xs in (
        ("mask_wall", wall),
        ("mask_cpu", cpu),
        ("accept_cpu", accept),
        ("cold_mask_wall", cold_wall),
        ("cold_mask_cpu", cold_cpu),
    ):
        us = np.asarray(xs) / 1e3
        out[f"{name}_p50_us"] = round(float(np.percentile(us, 50)), 1)
        out[f"{name}_p99_us"] = round(float(np.percentile(us, 99)), 1)
        out[f"{name}_max_us"] = round(float(us.max()), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--kinds", default="strings,integers,objects,rules")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()

    import formcast
    from formcast.index.compiler import GrammarCompiler
    from formcast.runtime.matcher import GrammarMatcher

    model = formcast.load_model("smollm2")
    vocab = model.vocab
    compiler = GrammarCompiler(vocab)
    out: dict[str, Any] = {"items": args.items}
    for kind in args.kinds.split(","):
        doc = document(args.items, kind)
        ids = model.encode_bytes(doc.encode())
        assert ids is not None
        unique = {"type": "array", "items": ITEMS[kind], "uniqueItems": True}
        plain = {"type": "array", "items": ITEMS[kind]}
        got: dict[str, Any] = {"tokens": len(ids)}
        for name, schema in (("plain", plain), ("unique", unique)):
            t0 = time.perf_counter()
            compiled = compiler.compile_json_schema(schema)
            compile_s = time.perf_counter() - t0
            res = run(compiled, ids)
            res["compile_s"] = round(compile_s, 3)
            if name == "unique":
                program = GrammarMatcher(compiled)._program
                res["program"] = type(program).__name__
                info = program.cache_info()
                res["suspect_tokens_simulated"] = info.get("unique_items_simulated", 0)
                res["completion_searches"] = info.get("unique_items_searched", 0)
                # an earlier item again is refused (byte by byte and as tokens)
                m = GrammarMatcher(compiled)
                assert m.accept_bytes(doc[:-1] + ",")
                assert not m.fork().accept_bytes(AGAIN[kind])
                again = model.encode_bytes(AGAIN[kind].encode()) or []
                assert m.validate_tokens(again) < len(again)
            got[name] = res
        key = "mask_cpu_p99_us"
        got["mask_cpu_p99_ratio"] = round(got["unique"][key] / max(got["plain"][key], 1e-9), 2)
        out[kind] = got
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
