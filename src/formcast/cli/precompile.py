"""``formcast compile C --cache-dir DIR``: precompile a constraint into a disk cache.

The grammar is compiled (or found) with ``GrammarCompiler(vocab, cache_dir=DIR)``, optionally
warmed up for ``--warm-up`` seconds (masks of the states nearest the start), and written to
``DIR`` with every mask computed so far: a server using the same directory (its
``cache_dir=`` or ``$FORMCAST_CACHE_DIR``), the same tokenizer and the same default limits
then loads it in milliseconds instead of compiling.  The cache key is that of the call the
other subcommands and ``formcast.generate`` make for the same flags:
``compile_json_schema(<the file's JSON>, JsonSchemaOptions(lenient=...))``,
``compile_regex(RE, dialect=...)``, ``compile_grammar(<text>, syntax=...)`` or
``compile_builtin_json_grammar()``.

Lifetime: one process per command.  Cost: loading the tokenizer, the compile (or a load), the
warm-up, one write.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from ..index.compiler import GrammarCompiler
from .common import compile_with, load_vocab, progress, read_constraint

__all__ = ["add_cache_arguments", "run_precompile"]


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


def add_cache_arguments(p: argparse.ArgumentParser) -> None:
    """``--cache-dir DIR`` and ``--warm-up SECONDS`` (the ``compile`` subcommand)."""
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="write the compiled grammar (with its masks) to this disk cache directory, the "
        "one a server passes as GrammarCompiler(cache_dir=...) or $FORMCAST_CACHE_DIR",
    )
    p.add_argument(
        "--warm-up",
        metavar="SECONDS",
        type=_seconds,
        default=0.0,
        help="with --cache-dir: precompute masks for up to this long before writing "
        "(default: %(default)s, the first mask only)",
    )


def run_precompile(args: argparse.Namespace) -> int:
    """Compile (or load) into ``args.cache_dir``; print what was done.  Exit status 0, or 2
    when the grammar could not be written."""
    read_constraint(args)  # a missing or malformed file fails before the tokenizer loads
    vocab = load_vocab(args.tokenizer)
    comp = GrammarCompiler(vocab, cache_dir=args.cache_dir)
    t0 = time.perf_counter()
    compiled = compile_with(comp, args, read_constraint(args))
    seconds = time.perf_counter() - t0
    loaded = comp.disk_hits > 0
    progress(f"{'loaded from the cache' if loaded else 'compiled'} in {seconds:.3f} s")
    for warning in compiled.warnings:
        progress(f"warning: {warning}")
    prepared = compiled.warm_up(args.warm_up) if args.warm_up > 0 else 0
    saved = comp.save(compiled)
    path = comp.cache_path(compiled) or ""
    info: dict[str, Any] = {
        "kind": compiled.kind,
        "cache_file": path,
        "cache_hit": loaded,
        "seconds": round(seconds, 6),
        "warmed_up": prepared,
        "masks_cached": compiled.cache_info().get("masks_cached", 0),
        "bytes": os.path.getsize(path) if saved else 0,
        "fingerprint": compiled.fingerprint[:16],
    }
    if compiled.warnings:
        info["warnings"] = list(compiled.warnings)
    print(json.dumps(info) if args.json else "\n".join(f"{k}: {v}" for k, v in info.items()))
    if not saved:
        progress(f"error: could not write to the cache directory {args.cache_dir!r}")
        return 2
    return 0
