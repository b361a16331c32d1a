"""``formcast serve``: the OpenAI-compatible HTTP server on a model (docs/server.md).

::

    formcast serve --model smollm2 --host 127.0.0.1 --port 8000
    formcast serve --model /path/to/model.gguf --n-ctx 4096 --max-queue 32 --timeout 60
    formcast serve --threads 1 --max-batch 4           # a busy machine; 4 requests at once

Loads the model (the bundled SmolLM2-135M-Instruct on llama.cpp by default, on the cores this
process may use), then serves it with uvicorn until Ctrl-C / SIGTERM, decoding up to
``--max-batch`` requests together (continuous batching; ``--no-batching``: one after
another).  Progress goes to stderr; uvicorn logs its
requests there too.  Needs the server extra: ``pip install 'formcast[server]'``.

Lifetime: one process; the model and the compiler live as long as it.
"""

from __future__ import annotations

import argparse

from .common import (
    add_model_arguments,
    check_backend,
    load_model_from_args,
    non_negative_int,
    positive_int,
    progress,
)

__all__ = ["add_serve_arguments", "run_serve"]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``formcast serve``."""
    add_model_arguments(p, threads_help="CPU threads of the model", threads_default=None)
    p.add_argument(
        "--served-name",
        default=None,
        help="the model id clients send (default: the --model name or file stem)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=positive_int, default=8000, help="port (default: %(default)s)")
    p.add_argument(
        "--max-queue",
        type=non_negative_int,
        default=16,
        help="requests waiting beyond those generating before 429 (default: %(default)s)",
    )
    p.add_argument(
        "--max-batch",
        type=positive_int,
        default=8,
        help="requests decoded together (continuous batching slots; default: %(default)s)",
    )
    p.add_argument(
        "--share-prefix",
        type=non_negative_int,
        default=16,
        help="share prompt starts of at least this many tokens between batched "
        "requests (0: off; default: %(default)s)",
    )
    p.add_argument(
        "--no-prompt-cache",
        action="store_true",
        help="clear a slot when its request ends (default: keep its cache for a "
        "request whose prompt starts the same)",
    )
    p.add_argument(
        "--fast-forward",
        action="store_true",
        help="append the bytes a schema/grammar forces in the tokenizer's spelling, "
        "evaluated in one model call (fewer model calls; outputs can differ from plain "
        "masking; not with logprobs)",
    )
    p.add_argument(
        "--prefill-tokens",
        type=positive_int,
        default=None,
        help="most prompt tokens joining the batch in one step (default: no bound)",
    )
    p.add_argument(
        "--no-batching",
        action="store_true",
        help="serve one request after another on one model thread",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=120.0,
        help="per-request seconds, queue included; then finish_reason 'timeout' "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--compile-timeout",
        type=_seconds,
        default=30.0,
        help="seconds one schema/tool compile may take (default: %(default)s)",
    )
    p.add_argument(
        "--compile-workers",
        type=non_negative_int,
        default=1,
        help="compile processes; 0 compiles in a thread (default: %(default)s)",
    )
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=256,
        help="max_tokens of a chat request that gives none (default: %(default)s)",
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        help="compiled-grammar disk cache (default: $FORMCAST_CACHE_DIR or none)",
    )
    p.add_argument(
        "--allow-extra-properties",
        action="store_true",
        help="objects of non-strict schemas without additionalProperties may get "
        "undeclared properties (default: declared properties only)",
    )
    p.add_argument(
        "--batch-nice",
        type=non_negative_int,
        default=5,
        help="how much lower the OS priority of the batcher's thread (model calls, masks) is "
        "than the event loop's, on Linux; 0: the same (default: %(default)s)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level (default: %(default)s)",
    )
    p.add_argument(
        "--head-writes",
        default="two",
        choices=["one", "two"],
        help="one: a response's headers and its first body chunk in one socket write (an "
        "experiment: docs/benchmarks_server.md session 25); two: as uvicorn writes them "
        "(default: %(default)s)",
    )


def run_serve(args: argparse.Namespace) -> int:
    """Run ``formcast serve``; returns the exit status when the server stops."""
    import os

    from ..model.batched import default_threads
    from ..server import ServerConfig, run_server  # checks the server extra

    check_backend(args)
    if args.threads is None:  # the machine's cores, for the model and the batched decoder
        args.threads = default_threads()
    name = args.served_name or (
        os.path.splitext(os.path.basename(args.model))[0]
        if args.model.endswith(".gguf")
        else args.model
    )
    config = ServerConfig(
        model_name=name,
        max_queue=args.max_queue,
        batching=not args.no_batching,
        max_batch=args.max_batch,
        share_prefix=args.share_prefix or None,
        prefill_tokens=args.prefill_tokens,
        prompt_cache=not args.no_prompt_cache,
        fast_forward=args.fast_forward,
        n_threads=args.threads,
        request_timeout_s=args.timeout,
        compile_timeout_s=args.compile_timeout,
        compile_workers=args.compile_workers,
        default_max_tokens=args.max_tokens,
        cache_dir=args.cache_dir,
        allow_extra_properties=args.allow_extra_properties,
        batch_nice=args.batch_nice,
    )
    model = load_model_from_args(args)
    progress(f"serving {name!r} on http://{args.host}:{args.port}/v1 (Ctrl-C stops)")
    run_server(model, config, host=args.host, port=args.port, log_level=args.log_level,
               head_in_one_write=args.head_writes == "one")
    return 0
