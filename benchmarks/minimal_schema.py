#!/usr/bin/env python3
"""What the minimal generation schema saves: the full tool schema vs the one the model writes.

Issue 13 item 6: a tool's schema names fields the server can fill (ids, timestamps, schema
``default``s such as a currency, totals derived from other fields).  The model should generate
only what needs its judgement; :func:`formcast.actions.schema_split.generation_schema` removes
the server-filled fields and the runner fills them before validating against the full schema.
For each schema below this script compiles both versions for the bundled model's vocabulary and
generates from the same prompt under each (greedy), and reports:

* **rules / rule DFA states** -- ``CompiledGrammar.cache_info()["rules"]`` and
  ``["rule_states"]`` (the per-rule byte DFAs of the grammar, :mod:`formcast.automata.rules`);
  **lexer states** -- the expanded lexer's table rows (``CfgProgram.lexer``), what the token
  index is built over;
* **compile work** -- the compile's deterministic fuel (``CompiledGrammar.compile_work``, the
  same on any machine and whatever the process compiled before), and **compile ms** -- the best
  of ``--reps`` cold compiles, each in a fresh process (after a warm-up compile of an unrelated
  schema, so imports are not timed): formcast's process-wide rule caches would otherwise serve
  the generation schema's fields from the full schema's compile;
* **TTFM ms** -- time to first mask: that cold compile plus the first
  ``GrammarMatcher.fill_next_token_bitmask`` (the latency a new schema adds before the first
  token can be sampled), best of ``--reps``;
* **bytes after compile / after the request** -- ``CompiledGrammar.nbytes()`` (tables plus
  the masks the request filled in);
* **tokens / generation s / masks computed** -- greedy ``generate(compiled=...)`` of the same
  prompt (max 256 tokens): output tokens, wall time, the grammar states whose masks were computed.

Schemas: ``refund`` and ``booking`` are the tool schemas of the actions docs style, with server
fields (an id, a ``created_at`` timestamp, a currency ``default``, derived totals, a status);
``todo`` is a real one from JSONSchemaBench (``Glaiveai2K---create_todo_e7e42931``, whose
``completed`` has ``"default": false``), read from ``../shared/data`` when present.

Usage::

    python benchmarks/minimal_schema.py                 # 3 schemas, 3 compile reps
    python benchmarks/minimal_schema.py --reps 1 --json out.json

Lifetime and cost: a script; loads the model once, starts ``reps`` fresh processes per schema
variant for the cold timings (~2 s each: interpreter, model file, compile), compiles each variant
once more in-process and generates once per variant (greedy, up to 256 tokens): about a minute
with the defaults.  docs/benchmarks_actions.md holds the table it printed.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TODO_PATH = (REPO.parent / "shared" / "data" / "JSONSchemaBench" / "maskbench" / "data"
             / "Glaiveai2K---create_todo_e7e42931.json")

REFUND_FULL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "refund_id": {"type": "string", "pattern": "^RF-[0-9a-f]{12}$", "readOnly": True},
        "order_id": {"type": "string", "pattern": "^ORD-[0-9]{5}$"},
        "amount": {"type": "number", "minimum": 0, "maximum": 10000},
        "currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY", "CHF"],
                     "default": "USD"},
        "reason": {"type": "string", "minLength": 1, "maxLength": 80},
        "restocking_fee": {"type": "number", "minimum": 0, "default": 0},
        "total": {"type": "number", "minimum": 0},
        "channel": {"type": "string", "enum": ["chat", "email", "phone", "store"],
                    "default": "chat"},
        "created_at": {"type": "string", "format": "date-time", "readOnly": True},
    },
    "required": ["refund_id", "order_id", "amount", "currency", "reason", "restocking_fee",
                 "total", "channel", "created_at"],
    "additionalProperties": False,
}
REFUND_DERIVED = ("total",)  # total = amount - restocking_fee

BOOKING_FULL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "booking_id": {"type": "string", "format": "uuid", "readOnly": True},
        "city": {"type": "string", "minLength": 1, "maxLength": 40},
        "check_in": {"type": "string", "format": "date"},
        "check_out": {"type": "string", "format": "date"},
        "nights": {"type": "integer", "minimum": 1, "maximum": 60},
        "guests": {"type": "integer", "minimum": 1, "maximum": 8},
        "nightly_rate": {"type": "number", "minimum": 0},
        "total_price": {"type": "number", "minimum": 0},
        "currency": {"type": "string", "enum": ["USD", "EUR", "GBP"], "default": "EUR"},
        "status": {"type": "string", "enum": ["pending", "confirmed", "cancelled"],
                   "default": "pending"},
        "created_at": {"type": "string", "format": "date-time", "readOnly": True},
    },
    "required": ["booking_id", "city", "check_in", "check_out", "nights", "guests",
                 "nightly_rate", "total_price", "currency", "status", "created_at"],
    "additionalProperties": False,
}
# check_out = check_in + nights; nightly_rate from the rates table; total = nights * rate
BOOKING_DERIVED = ("check_out", "nightly_rate", "total_price")

#: a copy of the JSONSchemaBench schema, used when ../shared/data is not there
TODO_FALLBACK: dict[str, Any] = {
    "properties": {
        "completed": {"default": False, "description": "Indicates whether the todo item is "
                      "completed", "type": "boolean"},
        "due_date": {"description": "The due date of the todo item", "format": "date",
                     "type": "string"},
        "priority": {"description": "The priority of the todo item",
                     "enum": ["High", "Medium", "Low"], "type": "string"},
        "title": {"description": "The title of the todo item", "type": "string"},
    },
    "required": ["title", "due_date", "priority"],
    "type": "object",
}


@dataclass(frozen=True)
class Case:
    name: str
    full: dict[str, Any]
    derived: tuple[str, ...]
    prompt: str
    source: str


def _todo() -> tuple[dict[str, Any], str]:
    if TODO_PATH.exists():
        data = json.loads(TODO_PATH.read_text(encoding="utf-8"))
        return data["schema"], "JSONSchemaBench Glaiveai2K---create_todo_e7e42931"
    return TODO_FALLBACK, "JSONSchemaBench Glaiveai2K---create_todo_e7e42931 (bundled copy)"


def cases() -> list[Case]:
    todo, todo_src = _todo()
    return [
        Case("refund", REFUND_FULL, REFUND_DERIVED,
             "Extract the refund as JSON. Customer: I want my money back for order ORD-48213, "
             "23.50, the mug arrived broken.", "written here (tool schema)"),
        Case("booking", BOOKING_FULL, BOOKING_DERIVED,
             "Extract the hotel booking as JSON. User: Book Lisbon from 2026-03-14 for 3 "
             "nights, 2 guests.", "written here (tool schema)"),
        Case("todo", todo, (),
             "Extract the todo item as JSON. User: remind me to renew my passport by "
             "2026-06-30, high priority.", todo_src),
    ]


def _lexer_states(cg: Any) -> int | None:
    lexer = getattr(cg.program, "lexer", None)
    return None if lexer is None else int(lexer.table.shape[0])


_WARM_UP_SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def cold_child() -> int:
    """``--cold-child``: in this fresh process, time one compile of the schema read from stdin
    and its first mask, after a warm-up compile of an unrelated schema (imports, numpy) so that
    only the schema's own work is timed.  Prints ``{"compile_s", "ttfm_s"}``."""
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.model.loading import load_model

    schema = json.loads(sys.stdin.read())
    vocab = load_model("smollm2").vocab
    GrammarCompiler(vocab).compile_json_schema(_WARM_UP_SCHEMA)
    t0 = time.perf_counter()
    cg = GrammarCompiler(vocab).compile_json_schema(schema)
    t1 = time.perf_counter()
    GrammarMatcher(cg).fill_next_token_bitmask(allocate_token_bitmask(1, vocab.vocab_size))
    t2 = time.perf_counter()
    print(json.dumps({"compile_s": t1 - t0, "ttfm_s": t2 - t0}))
    return 0


def cold_times(schema: dict[str, Any], reps: int) -> tuple[float, float]:
    """The best of ``reps`` cold (fresh-process) compile and time-to-first-mask, seconds.
    A fresh process because the process-wide rule/sub-automaton caches would otherwise serve
    the generation schema's fields from the full schema's compile."""
    import subprocess

    best_c = best_t = float("inf")
    for _ in range(reps):
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--cold-child"],
            input=json.dumps(schema), capture_output=True, text=True, check=True, timeout=600,
        )
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        best_c = min(best_c, got["compile_s"])
        best_t = min(best_t, got["ttfm_s"])
    return best_c, best_t


def measure_variant(model: Any, schema: dict[str, Any], prompt: str, reps: int,
                    max_tokens: int) -> dict[str, Any]:
    """Cold compiles (best of ``reps``, fresh processes), the states, one greedy generation."""
    from formcast import GrammarCompiler
    from formcast.generation import generate

    compile_s, ttfm_s = cold_times(schema, reps)
    cg = GrammarCompiler(model.vocab).compile_json_schema(schema)
    info_compiled = cg.cache_info()
    bytes_compiled = cg.nbytes()
    lexer_states = _lexer_states(cg)
    # the generation uses the compile above: its masks start empty
    res = generate(model, prompt, compiled=cg, max_tokens=max_tokens, temperature=0.0)
    info_after = cg.cache_info()
    return {
        "properties": len(schema.get("properties", {})),
        "rules": info_compiled.get("rules"),
        "rule_states": info_compiled.get("rule_states"),
        "lexer_states": lexer_states,
        "compile_work": cg.compile_work,
        "compile_s": compile_s,
        "ttfm_s": ttfm_s,
        "bytes_compiled": bytes_compiled,
        "bytes_after_request": cg.nbytes(),
        "masks_computed": info_after.get("mask_computations"),
        "output_tokens": res.timings.output_tokens,
        "forced_tokens": res.timings.forced_tokens,
        "generation_s": res.timings.total_s,
        "finish_reason": res.finish_reason,
        "text": res.text,
        "schema_chars": len(json.dumps(schema, separators=(",", ":"))),
    }


def run(reps: int, max_tokens: int) -> dict[str, Any]:
    from formcast.actions.schema_split import generation_schema, server_fields
    from formcast.model.loading import load_model

    model = load_model("smollm2")
    out: dict[str, Any] = {}
    for case in cases():
        gen = generation_schema(case.full, derived_fields=case.derived)
        removed = server_fields(case.full, derived_fields=case.derived)
        full = measure_variant(model, case.full, case.prompt, reps, max_tokens)
        small = measure_variant(model, gen, case.prompt, reps, max_tokens)
        out[case.name] = {"source": case.source, "removed": list(removed),
                          "full": full, "generation": small}
        print(f"  {case.name}: full {full['output_tokens']} tokens, minimal "
              f"{small['output_tokens']} tokens", file=sys.stderr, flush=True)
    return out


def _ratio(a: float, b: float) -> str:
    return "-" if not a else f"{(b - a) / a * 100:+.0f}%"


def markdown(results: dict[str, Any]) -> str:
    cols = [
        ("properties", "properties", "{}"),
        ("rules", "rules", "{}"),
        ("rule DFA states", "rule_states", "{}"),
        ("lexer states", "lexer_states", "{}"),
        ("compile work", "compile_work", "{:,}"),
        ("compile ms (cold process)", "compile_s", "ms"),
        ("TTFM ms (cold process)", "ttfm_s", "ms"),
        ("KiB after compile", "bytes_compiled", "kib"),
        ("KiB after the request", "bytes_after_request", "kib"),
        ("masks computed", "masks_computed", "{}"),
        ("output tokens (greedy)", "output_tokens", "{}"),
        ("generation s", "generation_s", "{:.2f}"),
    ]

    def fmt(kind: str, v: Any) -> str:
        if v is None:
            return "-"
        if kind == "ms":
            return f"{v * 1000:.0f}"
        if kind == "kib":
            return f"{v / 1024:,.0f}"
        return kind.format(v)

    lines = ["| schema (fields removed) | measure | full | generation | change |",
             "|---|---|---|---|---|"]
    for name, r in results.items():
        head = f"**{name}** ({', '.join(r['removed'])})"
        for i, (label, key, kind) in enumerate(cols):
            a, b = r["full"][key], r["generation"][key]
            change = _ratio(a, b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) \
                else "-"
            lines.append(f"| {head if i == 0 else ''} | {label} | {fmt(kind, a)} | "
                         f"{fmt(kind, b)} | {change} |")
    lines.append("")
    for name, r in results.items():
        lines.append(f"* `{name}` ({r['source']}): full `{r['full']['text']}` "
                     f"({r['full']['finish_reason']}); generation `{r['generation']['text']}` "
                     f"({r['generation']['finish_reason']})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="full vs minimal generation schema")
    ap.add_argument("--reps", type=int, default=3, help="cold compiles per variant (best of)")
    ap.add_argument("--max-tokens", type=int, default=256, help="budget of the generation")
    ap.add_argument("--json", help="write the numbers to this file")
    ap.add_argument("--cold-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cold_child:
        return cold_child()
    if args.reps < 1:
        raise SystemExit(f"--reps must be >= 1, got {args.reps}")
    t0 = time.perf_counter()
    results = run(args.reps, args.max_tokens)
    print(markdown(results))
    try:
        load = f"{os.getloadavg()[0]:.2f}"
    except OSError:  # pragma: no cover
        load = "n/a"
    print(f"\n{platform.machine()}, {os.cpu_count()} CPUs, load average {load}, "
          f"smollm2 (SmolLM2-135M-Instruct, llama.cpp, n_threads=1), reps={args.reps}; "
          f"{time.perf_counter() - t0:.0f} s.")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
