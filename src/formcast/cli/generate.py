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
from ..generation.api import generate, get_compiler, stream
from ..generation.results import GenerationResult
from ..index.compiled import CompiledGrammar
from ..sampling import SamplingParams
from ..vocab.vocabulary import Vocabulary

__all__ = [
    "add_constraint_arguments",
    "add_generate_arguments",
    "compile_from_args",
    "read_constraint",
    "run_generate",
]


def _progress(msg: str) -> None:
    print(f"[formcast] {msg}", file=sys.stderr, flush=True)


# -- option types: bad values are rejected by the parser, before anything loads ------------------
def _number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return v


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def temperature_type(text: str) -> float:
    """``--temperature``: a finite number ``>= 0`` (0 = greedy)."""
    v = _number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (0 = greedy), got {text}")
    return v


def top_p_type(text: str) -> float:
    """``--top-p``: a number in ``(0, 1]`` (1 = off)."""
    v = _number(text)
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] (1 = off), got {text}")
    return v


def non_negative_int(text: str) -> int:
    """An integer ``>= 0`` (``--top-k``: 0 = off; ``--seed``)."""
    v = _integer(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return v


def positive_int(text: str) -> int:
    """An integer ``>= 1`` (``--max-tokens``, ``--n-ctx``, ``--threads``, ``--n``)."""
    v = _integer(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return v


def add_constraint_arguments(p: argparse.ArgumentParser, *, required: bool) -> None:
    """``--schema FILE | --regex RE | --grammar FILE`` and their modifiers (every subcommand)."""
    c = p.add_mutually_exclusive_group(required=required)
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
    p.add_argument(
        "--dialect",
        choices=["ecma", "python"],
        default="ecma",
        help="dialect of --regex: ecma (ECMA-262, as in JSON Schema 'pattern': ASCII \\d \\w) "
        "or python (re with str patterns: Unicode \\d \\w) (default: %(default)s)",
    )
    p.add_argument(
        "--lenient",
        action="store_true",
        help="--schema only: ignore keywords formcast cannot enforce instead of failing; each "
        "ignored keyword is reported on stderr (the output may then violate them)",
    )


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``formcast generate``."""
    add_constraint_arguments(p, required=False)
    p.add_argument("--prompt", help="the prompt (default: read from stdin)")
    p.add_argument("--system", default=None, help="system message for the chat template")
    p.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    p.add_argument(
        "--model", default="smollm2", help="smollm2 or a .gguf path (default: %(default)s)"
    )
    p.add_argument(
        "--backend", default="llama_cpp", help="llama_cpp | transformers (default: %(default)s)"
    )
    p.add_argument(
        "--n-ctx", type=positive_int, default=2048, help="context length, llama.cpp "
        "(default: %(default)s)"
    )
    p.add_argument(
        "--threads", type=positive_int, default=1, help="CPU threads (default: %(default)s)"
    )
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=256,
        help="stop after this many generated tokens (default: %(default)s)",
    )
    p.add_argument(
        "--temperature",
        type=temperature_type,
        default=0.0,
        help=">= 0; 0 = greedy (default: %(default)s)",
    )
    p.add_argument(
        "--top-k", type=non_negative_int, default=0, help=">= 0; 0 = off (default: %(default)s)"
    )
    p.add_argument(
        "--top-p", type=top_p_type, default=1.0, help="in (0, 1]; 1 = off (default: %(default)s)"
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=None, help="sampling seed (default: random)"
    )
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


def read_constraint(args: argparse.Namespace) -> tuple[Any, str | None, str]:
    """Read ``--schema`` / ``--grammar`` files: ``(schema, grammar, grammar_syntax)``.

    Done before any model or tokenizer loads, so a missing or malformed file fails fast.
    """
    schema: Any = None
    grammar: str | None = None
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
    if args.lenient and args.schema is None:
        raise ConfigurationError("--lenient applies to --schema only")
    return schema, grammar, syntax


def compile_from_args(
    vocab: Vocabulary,
    args: argparse.Namespace,
    constraint: tuple[Any, str | None, str] | None = None,
) -> CompiledGrammar | None:
    """Compile the constraint named by ``args`` (None when there is none).

    ``--regex`` uses ``--dialect`` and ``--schema`` uses ``--lenient``; every compile warning (a
    keyword ignored by ``--lenient``, an unknown keyword treated as an annotation) goes to
    stderr as a ``[formcast] warning:`` line.
    """
    schema, grammar, syntax = constraint if constraint is not None else read_constraint(args)
    if schema is None and grammar is None and args.regex is None:
        return None
    comp = get_compiler(vocab)
    _progress("compiling the constraint ...")
    t0 = time.perf_counter()
    compiled: CompiledGrammar
    if args.regex is not None:
        compiled = comp.compile_regex(args.regex, dialect=args.dialect)
    elif grammar == "json":
        compiled = comp.compile_builtin_json_grammar()
    elif grammar is not None:
        compiled = comp.compile_grammar(grammar, syntax=syntax)
    else:
        from ..frontends.jsonschema.options import JsonSchemaOptions

        compiled = comp.compile_json_schema(schema, JsonSchemaOptions(lenient=args.lenient))
    _progress(f"compiled in {time.perf_counter() - t0:.3f} s")
    for warning in compiled.warnings:
        _progress(f"warning: {warning}")
    return compiled


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
    from ..model.loading import BACKENDS, load_model

    if args.backend not in BACKENDS:
        raise ConfigurationError(
            f"unknown backend {args.backend!r}: use one of {', '.join(BACKENDS)}"
        )
    # everything that can be checked without the model is checked before it loads
    SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    constraint = read_constraint(args)
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()

    t0 = time.perf_counter()
    _progress(f"loading model {args.model!r} on {args.backend} ...")
    model = load_model(args.model, backend=args.backend, n_ctx=args.n_ctx, n_threads=args.threads)
    _progress(f"model ready ({time.perf_counter() - t0:.2f} s)")

    t1 = time.perf_counter()
    compiled = compile_from_args(model.vocab, args, constraint)
    compile_s = time.perf_counter() - t1 if compiled is not None else 0.0

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
