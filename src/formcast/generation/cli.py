"""``formcast generate``: constrained generation with a real model from the command line.

::

    formcast generate --prompt "Today's date?" --regex '\\d{4}-\\d{2}-\\d{2}'
    formcast generate --prompt "Ada Lovelace, 36" --schema person.json --json
    formcast generate --prompt "..." --grammar expr.gbnf --stream
    formcast generate --prompt "..." --grammar json --backend transformers

stdout carries only the generated text (or, with ``--json``, one JSON object; with
``--stream --json``, one ``{"piece": ...}`` line per piece and then the result object).
Progress (model load, compile) and the finish line with timings go to stderr.  Exit status: 0
completed (or stopped by ``--stop``), 1 truncated (``max_tokens``) or dead end, 2 error.

The parser and the command live here (the ``generation`` layer); ``formcast.cli.main``
registers them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import replace
from typing import Any

from ..errors import ConfigurationError, FormcastError
from ..index.compiled import CompiledGrammar
from .api import compile_constraint, generate, stream
from .results import GenerationResult

__all__ = ["add_generate_arguments", "run_generate"]


def _progress(msg: str) -> None:
    print(f"[formcast] {msg}", file=sys.stderr, flush=True)


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``formcast generate``."""
    c = p.add_mutually_exclusive_group()
    c.add_argument("--schema", metavar="FILE", help="JSON Schema file: output is valid JSON for it")
    c.add_argument("--regex", metavar="RE", help="regular expression the whole output matches")
    c.add_argument(
        "--grammar", metavar="FILE", help="GBNF or Lark grammar file, or 'json' for any JSON"
    )
    p.add_argument(
        "--grammar-syntax",
        choices=["gbnf", "lark"],
        default=None,
        help="syntax of --grammar (default: lark for *.lark files, else gbnf)",
    )
    p.add_argument("--prompt", help="the prompt (default: read from stdin)")
    p.add_argument("--system", default=None, help="system message for the chat template")
    p.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    p.add_argument("--model", default="smollm2", help="smollm2 (default) or a .gguf path")
    p.add_argument("--backend", default="llama_cpp", help="llama_cpp (default) | transformers")
    p.add_argument("--n-ctx", type=int, default=2048, help="context length (llama.cpp)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    p.add_argument("--stream", action="store_true", help="print text as it is generated")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the {what} file {path!r}: {exc}") from None


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_safe(v) for v in obj]
    return obj


def _finish_line(result: GenerationResult) -> str:
    t = result.timings
    parts = [
        f"{result.finish_reason}: {t.output_tokens} tokens",
        f"first token {t.time_to_first_token_s:.2f} s",
    ]
    if t.output_tokens > 1:
        parts.append(f"{t.per_token_s * 1000:.1f} ms/token")
    if t.mask_step_s and t.decode_step_s:
        parts.append(
            f"mask p50 {t.mask_p50_s * 1e3:.2f} ms, max {t.mask_max_s * 1e3:.2f} ms "
            f"({t.mask_overhead:.1%} of decode)"
        )
    return ", ".join(parts)


def run_generate(args: argparse.Namespace) -> int:
    """Run ``formcast generate``; returns the exit status."""
    from ..models import BACKENDS, load_model

    if args.backend not in BACKENDS:
        raise ConfigurationError(
            f"unknown backend {args.backend!r}: use one of {', '.join(BACKENDS)}"
        )
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    schema: Any = None
    grammar = None
    syntax = args.grammar_syntax or "gbnf"
    if args.schema is not None:
        try:
            schema = json.loads(_read(args.schema, "schema"))
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{args.schema!r} is not JSON: {exc}") from None
    if args.grammar is not None:
        if args.grammar == "json":
            grammar = "json"
        else:
            grammar = _read(args.grammar, "grammar")
            if args.grammar_syntax is None and args.grammar.endswith(".lark"):
                syntax = "lark"

    t0 = time.perf_counter()
    _progress(f"loading model {args.model!r} on {args.backend} ...")
    model = load_model(args.model, backend=args.backend, n_ctx=args.n_ctx, n_threads=args.threads)
    _progress(f"model ready ({time.perf_counter() - t0:.2f} s)")

    compiled: CompiledGrammar | None = None
    compile_s = 0.0
    if any(v is not None for v in (schema, args.regex, grammar)):
        _progress("compiling the constraint ...")
        t1 = time.perf_counter()
        compiled, _ = compile_constraint(
            model.vocab, schema=schema, regex=args.regex, grammar=grammar, grammar_syntax=syntax
        )
        compile_s = time.perf_counter() - t1
        _progress(f"compiled in {compile_s:.3f} s")

    kwargs: dict[str, Any] = {
        "compiled": compiled,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "seed": args.seed,
        "stop": args.stop,
        "chat": False if args.no_chat else None,
        "system": args.system,
    }
    if args.stream:
        result: GenerationResult | None = None
        for item in stream(model, prompt, **kwargs):
            if isinstance(item, GenerationResult):
                result = item
            elif args.json:
                print(json.dumps({"piece": item}), flush=True)
            else:
                sys.stdout.write(item)
                sys.stdout.flush()
        if result is None:  # pragma: no cover - a stream always ends with its result
            raise FormcastError("internal error: the stream ended without a result")
    else:
        result = generate(model, prompt, **kwargs)
    timings = replace(
        result.timings,
        compile_s=compile_s,
        time_to_first_token_s=result.timings.time_to_first_token_s + compile_s,
        total_s=result.timings.total_s + compile_s,
    )
    result = replace(result, timings=timings)

    if args.json:
        out = result.to_dict()
        out["model"] = args.model if os.path.sep not in args.model else os.path.basename(args.model)
        out["backend"] = args.backend
        print(json.dumps(_json_safe(out), ensure_ascii=False))
    elif args.stream:
        sys.stdout.write("\n")
    else:
        sys.stdout.write(result.text + "\n")
    sys.stdout.flush()
    _progress(_finish_line(result))
    if result.diagnostic is not None:
        _progress(str(result.diagnostic))
    if result.finish_reason == "max_tokens":
        _progress("the output is truncated (max_tokens): it is NOT a complete document")
    return 0 if result.finish_reason in ("completed", "stop") else 1
