"""Fast-forward on SmolLM2: model calls and wall time per request, against plain masking and
against llama.cpp's own grammar sampler, on schema-shaped output.

Three ways to decode the same prompt (token ids, the ChatML template applied once) under the
same JSON Schema, greedy, on the same loaded ``llama_cpp.Llama`` (SmolLM2-135M-Instruct Q4_1,
one thread):

* ``mask``: ``formcast.generate(schema=...)``, per-step masking (a token the mask allows alone
  is taken without sampling and evaluated with the next one);
* ``fast-forward``: the same with ``fast_forward=True`` (forced bytes appended in the
  tokenizer's spelling, :mod:`formcast.generation.fast_forward`);
* ``llama.cpp grammar``: ``Llama.generate(prompt_ids, grammar=LlamaGrammar.from_json_schema(
  schema), temp=0)`` until EOS: llama.cpp's GBNF sampler in llama.cpp's own loop, one decode
  per token.

Model calls: formcast's are counted by the loop (the prefill plus one per ``model.step``, i.e.
``1 + len(result.timings.decode_step_s)``); llama.cpp decodes every generated text token (its
EOS is sampled after the last decode), so its calls are ``1 + output tokens``.  Wall time:
the whole request (``time.perf_counter`` around the call), median over the repetitions; the
three methods run interleaved (mask, fast-forward, llama.cpp, mask, ...) so that they share
the machine's noise.  Every method runs once untimed first per schema (the
grammar compiles, first-visit masks and llama.cpp's grammar parse stay out of the timings; the
prompt's KV cache is shared by all three).

Also reported: the output's validity against the schema (``jsonschema``), whether the token
ids are the tokenizer's own encoding of the text (``is_canonical``), and whether fast-forward's
text equals plain masking's (greedy: a different spelling can change what the model writes
next).  For the distributional cost see ``benchmarks/fidelity.py --model-methods mask,mask+ff``.

Usage::

    python benchmarks/fast_forward.py                 # 4 schemas x 5 repetitions
    python benchmarks/fast_forward.py --reps 3 --only person

Lifetime: a script; prints a markdown table.  Cost: about 1-3 s per request on an idle core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "person": (
        "Give a JSON record for Ada Lovelace, 36, who lives in London (ada@example.com).",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 30},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "city": {"type": "string", "maxLength": 30},
                "email": {"type": "string", "maxLength": 40},
            },
            "required": ["name", "age", "city", "email"],
            "additionalProperties": False,
        },
    ),
    "product": (
        "Describe a laptop for sale as JSON: its name, price in dollars, whether it is in "
        "stock, and up to three tags.",
        {
            "type": "object",
            "properties": {
                "product_name": {"type": "string", "maxLength": 30},
                "price": {"type": "number", "minimum": 0},
                "in_stock": {"type": "boolean"},
                "category": {"enum": ["electronics", "books", "clothing"]},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 12},
                         "maxItems": 3},
            },
            "required": ["product_name", "price", "in_stock", "category", "tags"],
            "additionalProperties": False,
        },
    ),
    "event": (
        "Create a calendar event as JSON for a team meeting on March 3rd 2025 in room 4.",
        {
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 30},
                "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
                "location": {
                    "type": "object",
                    "properties": {
                        "room": {"type": "integer", "minimum": 1, "maximum": 99},
                        "building": {"type": "string", "maxLength": 20},
                    },
                    "required": ["room", "building"],
                    "additionalProperties": False,
                },
                "attendees": {"type": "array", "items": {"type": "string", "maxLength": 15},
                              "maxItems": 3},
                "priority": {"enum": ["low", "medium", "high"]},
            },
            "required": ["title", "date", "location", "attendees", "priority"],
            "additionalProperties": False,
        },
    ),
    "config": (
        "Write a JSON configuration for a web server: host, port, debug mode, worker count "
        "and log level.",
        {
            "type": "object",
            "properties": {
                "server_host": {"type": "string", "maxLength": 20},
                "server_port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "debug_mode": {"type": "boolean"},
                "worker_count": {"type": "integer", "minimum": 1, "maximum": 64},
                "log_level": {"enum": ["debug", "info", "warning", "error"]},
                "enable_cache": {"type": "boolean"},
            },
            "required": ["server_host", "server_port", "debug_mode", "worker_count",
                         "log_level", "enable_cache"],
            "additionalProperties": False,
        },
    ),
}  # fmt: skip

METHODS = ("mask", "fast-forward", "llama.cpp grammar")


@dataclass
class Sample:
    text: str
    tokens: int
    calls: int
    seconds: float
    valid: bool
    canonical: bool | None


@dataclass
class Cell:
    samples: list[Sample] = field(default_factory=list)

    def median(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.samples)


def _valid(text: str, schema: dict[str, Any]) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def run_formcast(
    model: Any, ids: list[int], schema: dict[str, Any], max_tokens: int, ff: bool
) -> Sample:
    from formcast.generation import generate
    from formcast.vocab.canonical import is_canonical

    t0 = time.perf_counter()
    r = generate(model, ids, schema=schema, max_tokens=max_tokens, fast_forward=ff)
    dt = time.perf_counter() - t0
    return Sample(
        r.text,
        len(r.token_ids),
        1 + len(r.timings.decode_step_s),
        dt,
        r.finish_reason == "completed" and _valid(r.text, schema),
        is_canonical(model.vocab, model.encode_bytes, r.token_ids),
    )


def run_llama_grammar(
    model: Any, ids: list[int], schema: dict[str, Any], grammar: Any, max_tokens: int
) -> Sample:
    """llama.cpp's own loop (``Llama.generate``: penalties off, its grammar sampler, greedy)
    until an end-of-generation token or ``max_tokens``."""
    from formcast.vocab.canonical import is_canonical

    llm = model.llm
    stops = model.vocab.stop_token_ids
    out: list[int] = []
    finished = False
    t0 = time.perf_counter()
    for tok in llm.generate(ids, temp=0.0, repeat_penalty=1.0, grammar=grammar):
        if tok in stops:
            finished = True
            break
        out.append(int(tok))
        if len(out) >= max_tokens:
            break
    dt = time.perf_counter() - t0
    text = model.vocab.decode(out).decode("utf-8", "replace")
    # the prefill, then one decode per generated token but the last (never evaluated)
    return Sample(
        text, len(out), 1 + len(out), dt, finished and _valid(text, schema),
        is_canonical(model.vocab, model.encode_bytes, out),
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per method")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--only", default="", help="run only the schemas whose name contains this")
    args = ap.parse_args(argv)

    from llama_cpp import LlamaGrammar

    from formcast import load_model
    from formcast.generation import generate

    model = load_model("smollm2")
    rows: list[tuple[str, dict[str, Cell], str]] = []
    for name, (question, schema) in SCHEMAS.items():
        if args.only and args.only not in name:
            continue
        warm = generate(model, question, schema=schema, max_tokens=args.max_tokens)
        ids = list(warm.prompt_ids)
        grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
        cells = {m: Cell() for m in METHODS}

        def once(method: str, ids: list[int] = ids, schema: dict[str, Any] = schema,
                 grammar: Any = grammar) -> Sample:  # fmt: skip
            if method == "llama.cpp grammar":
                return run_llama_grammar(model, ids, schema, grammar, args.max_tokens)
            return run_formcast(model, ids, schema, args.max_tokens, method == "fast-forward")

        for method in METHODS:  # untimed: compile, first-visit masks, grammar parse
            once(method)
        for _ in range(args.reps):
            for method in METHODS:
                cells[method].samples.append(once(method))
        same = cells["mask"].samples[-1].text == cells["fast-forward"].samples[-1].text
        rows.append((name, cells, "same text" if same else "text differs"))
        print(f"  {name}: done", file=sys.stderr)
        for method in METHODS:
            print(f"    {method}: {cells[method].samples[-1].text}", file=sys.stderr)

    print(
        "\n| schema | method | output tokens | model calls / request | ms / request (median) "
        "| ms vs mask | valid | canonical | fast-forward text vs mask |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name, cells, same in rows:
        base = cells["mask"].median("seconds")
        for method in METHODS:
            c = cells[method]
            valid = sum(s.valid for s in c.samples)
            canon = [s.canonical for s in c.samples if s.canonical is not None]
            print(
                f"| {name} | {method} | {c.median('tokens'):.0f} | {c.median('calls'):.0f} | "
                f"{1000 * c.median('seconds'):.0f} | {c.median('seconds') / base:.2f}x | "
                f"{valid}/{len(c.samples)} | "
                f"{sum(canon)}/{len(canon) if canon else '-'} | "
                f"{same if method == 'fast-forward' else ''} |"
            )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\n{os.uname().machine if hasattr(os, 'uname') else ''}, {os.cpu_count()} CPUs, "
        f"load average {load:.2f}, n_threads=1, reps={args.reps}, greedy, "
        f"max_tokens={args.max_tokens}."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
