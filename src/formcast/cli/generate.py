"""``formcast generate``: constrained generation with a real model from the command line.

::

    formcast generate --prompt "Today's date?" --regex '\\d{4}-\\d{2}-\\d{2}'
    formcast generate --prompt "Ada Lovelace, 36" --schema person.json --json
    formcast generate --prompt "..." --grammar expr.gbnf --stream
    formcast generate --prompt "..." --grammar json --backend transformers

stdout carries only the generated text (or, with ``--json``, one JSON object; with
``--stream --json``, one ``{"piece": ...}`` line per piece and then the result object).
Progress (model load, compile) and the finish line with timings go to stderr.  Exit status: 0
completed (or stopped by ``--stop``), 1 truncated (``max_tokens``) or dead end, 2 error,
130 interrupted (Ctrl-C: one line on stderr, no traceback).

The options and the command live here; ``formcast.cli.main`` registers them, and the options
shared with the other subcommands come from :mod:`formcast.cli.common`.

Lifetime: functions, no state.  Costs: loading the model (seconds; cached per process by
:func:`formcast.model.loading.load_model`), compiling the constraint, then the generation.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ..errors import FormcastError
from ..generation.api import generate, stream
from ..generation.options import GenerationOptions
from ..generation.results import GenerationResult
from .common import (
    add_constraint_arguments,
    add_json_argument,
    add_max_tokens_argument,
    add_model_arguments,
    add_temperature_argument,
    check_backend,
    compile_from_args,
    load_model_from_args,
    non_negative_int,
    progress,
    read_constraint,
    top_p_type,
)

__all__ = ["add_generate_arguments", "run_generate"]


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``formcast generate``."""
    add_constraint_arguments(p, required=False)
    p.add_argument("--prompt", help="the prompt (default: read from stdin)")
    p.add_argument("--system", default=None, help="system message for the chat template")
    p.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    add_model_arguments(p)
    add_max_tokens_argument(p, default=256, what="generated tokens")
    add_temperature_argument(p, default=0.0)
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
    add_json_argument(p, help="one JSON object on stdout")


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
    check_backend(args)
    # everything that can be checked without the model is checked before it loads
    options = GenerationOptions(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop=args.stop,
        chat=False if args.no_chat else None,
        system=args.system,
    )
    constraint = read_constraint(args)
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()

    model = load_model_from_args(args)
    t1 = time.perf_counter()
    compiled = compile_from_args(model.vocab, args, constraint)
    compile_s = time.perf_counter() - t1 if compiled is not None else 0.0

    if args.stream:
        items = stream(model, prompt, options=options, compiled=compiled)
        result = _print_stream(items, as_json=args.json)
    else:
        result = generate(model, prompt, options=options, compiled=compiled)
    result = _with_compile_time(result, compile_s)
    _print_result(result, args)
    _print_finish(result)
    return 0 if result.finish_reason in ("completed", "stop") else 1


def _print_stream(
    items: Iterator[str | GenerationResult], *, as_json: bool
) -> GenerationResult:
    """Print the pieces as they come (one ``{"piece": ...}`` line each with ``--json``);
    returns the stream's result."""
    result: GenerationResult | None = None
    try:
        for item in items:
            if isinstance(item, GenerationResult):
                result = item
            elif as_json:
                print(json.dumps({"piece": item}), flush=True)
            else:
                sys.stdout.write(item)
                sys.stdout.flush()
    except KeyboardInterrupt:
        if not as_json:  # end the partial line; the command reports the interruption
            sys.stdout.write("\n")
            sys.stdout.flush()
        raise
    if result is None:  # pragma: no cover - a stream always ends with its result
        raise FormcastError("internal error: the stream ended without a result")
    return result


def _with_compile_time(result: GenerationResult, compile_s: float) -> GenerationResult:
    """The command compiled before calling the library: its time joins the result's timings."""
    timings = replace(
        result.timings,
        compile_s=compile_s,
        time_to_first_token_s=result.timings.time_to_first_token_s + compile_s,
        total_s=result.timings.total_s + compile_s,
    )
    return replace(result, timings=timings)


def _print_result(result: GenerationResult, args: argparse.Namespace) -> None:
    """stdout: the text (after the streamed pieces, a newline), or the JSON object."""
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


def _print_finish(result: GenerationResult) -> None:
    """stderr: the finish line with timings, the dead-end diagnostic, the truncation warning."""
    progress(_finish_line(result))
    if result.diagnostic is not None:
        progress(str(result.diagnostic))
    if result.finish_reason == "max_tokens":
        progress("the output is truncated (max_tokens): it is NOT a complete document")
