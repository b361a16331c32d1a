"""What every ``formcast`` subcommand shares: option types, options, constraints, progress lines.

* Option types (:func:`temperature_type`, :func:`top_p_type`, :func:`non_negative_int`,
  :func:`positive_int`) reject bad values in the parser, before any tokenizer or model loads.
* The options that several subcommands take (the constraint group, ``--tokenizer``,
  ``--json``, ``--max-tokens``, ``--temperature``), each written once.
* :func:`read_constraint` reads the ``--schema`` / ``--grammar`` files (fails fast), and
  :func:`compile_from_args` compiles them with the shared compiler of the vocabulary (a
  schema's relative ``$ref``s read the files next to it, within ``--ref-root``).
* :func:`progress` and :func:`timed`: the ``[formcast] ...`` lines on stderr (stdout carries
  only results).

Lifetime: functions, no state.  Costs: reading the constraint files; :func:`load_vocab` loads a
tokenizer (seconds for a real one) and :func:`compile_from_args` compiles (cached per
vocabulary by :func:`formcast.generation.get_compiler`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import ConfigurationError, FormcastError
from ..generation.inputs import get_compiler
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..index.spec import AnyJsonSpec, ConstraintSpec, GrammarTextSpec, JsonSchemaSpec, RegexSpec
from ..vocab.vocabulary import Vocabulary

__all__ = [
    "add_constraint_arguments",
    "add_json_argument",
    "add_max_tokens_argument",
    "add_temperature_argument",
    "add_tokenizer_argument",
    "compile_for_tokenizer",
    "compile_from_args",
    "load_vocab",
    "non_negative_int",
    "positive_int",
    "progress",
    "read_constraint",
    "require_compiled",
    "spec_from_args",
    "temperature_type",
    "timed",
    "top_p_type",
]

T = TypeVar("T")


# -- progress on stderr --------------------------------------------------------------------------
def progress(msg: str) -> None:
    """One ``[formcast] msg`` line on stderr."""
    print(f"[formcast] {msg}", file=sys.stderr, flush=True)


def timed(start: str, work: Callable[[], T], done: Callable[[T, float], str]) -> T:
    """Print ``start``, run ``work``, print ``done(its result, seconds)``; returns the result."""
    progress(start)
    t0 = time.perf_counter()
    result = work()
    progress(done(result, time.perf_counter() - t0))
    return result


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


def _option_type(
    name: str, parse: Callable[[str], T], ok: Callable[[T], bool], must: str, doc: str
) -> Callable[[str], T]:
    """An argparse ``type``: ``parse`` the text, then reject values that are not ``ok`` with
    ``must be <must>, got <text>``."""

    def check(text: str) -> T:
        v = parse(text)
        if not ok(v):
            raise argparse.ArgumentTypeError(f"must be {must}, got {text}")
        return v

    check.__name__ = check.__qualname__ = name
    check.__doc__ = doc
    return check


temperature_type = _option_type(
    "temperature_type", _number, lambda v: v >= 0, ">= 0 (0 = greedy)",
    "``--temperature``: a finite number ``>= 0`` (0 = greedy).",
)
top_p_type = _option_type(
    "top_p_type", _number, lambda v: 0.0 < v <= 1.0, "in (0, 1] (1 = off)",
    "``--top-p``: a number in ``(0, 1]`` (1 = off).",
)
non_negative_int = _option_type(
    "non_negative_int", _integer, lambda v: v >= 0, "an integer >= 0",
    "An integer ``>= 0`` (``--top-k``: 0 = off; ``--seed``).",
)
positive_int = _option_type(
    "positive_int", _integer, lambda v: v >= 1, "an integer >= 1",
    "An integer ``>= 1`` (``--max-tokens``, ``--n-ctx``, ``--threads``, ``--n``).",
)


# -- options shared by several subcommands -------------------------------------------------------
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
        "--ref-root",
        metavar="DIR",
        default=None,
        help="--schema only: the directory that $refs to local files may read (default: the "
        "schema file's directory); relative $refs resolve against the schema file, never the "
        "network",
    )
    p.add_argument(
        "--lenient",
        action="store_true",
        help="--schema only: ignore keywords formcast cannot enforce instead of failing; each "
        "ignored keyword is reported on stderr (the output may then violate them)",
    )


def add_tokenizer_argument(p: argparse.ArgumentParser) -> None:
    """``--tokenizer NAME|PATH`` (default ``llama3``)."""
    p.add_argument(
        "--tokenizer",
        default="llama3",
        help="llama3 | smollm2 | cl100k | PATH (default: %(default)s)",
    )


def add_json_argument(p: argparse.ArgumentParser, help: str = "machine-readable output") -> None:
    """``--json``: machine output on stdout."""
    p.add_argument("--json", action="store_true", help=help)


def add_max_tokens_argument(p: argparse.ArgumentParser, *, default: int, what: str) -> None:
    """``--max-tokens N`` (``>= 1``): stop after N ``what`` (e.g. ``"generated tokens"``)."""
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=default,
        help=f"stop after this many {what} (default: %(default)s)",
    )


def add_temperature_argument(p: argparse.ArgumentParser, *, default: float) -> None:
    """``--temperature T`` (``>= 0``; 0 = greedy)."""
    p.add_argument(
        "--temperature",
        type=temperature_type,
        default=default,
        help=">= 0; 0 = greedy (default: %(default)s)",
    )


# -- constraints ---------------------------------------------------------------------------------
def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the {what} file {path!r}: {exc}") from None


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
    if getattr(args, "ref_root", None) is not None and args.schema is None:
        raise ConfigurationError("--ref-root applies to --schema only")
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
    compiled = timed(
        "compiling the constraint ...",
        lambda: compile_with(comp, args, (schema, grammar, syntax)),
        lambda _, s: f"compiled in {s:.3f} s",
    )
    for warning in compiled.warnings:
        progress(f"warning: {warning}")
    return compiled


def compile_with(
    comp: GrammarCompiler, args: argparse.Namespace, constraint: tuple[Any, str | None, str]
) -> CompiledGrammar:
    """Compile ``constraint`` (``read_constraint(args)``) with ``comp``: ``--regex`` with
    ``--dialect``, a grammar with its syntax, a schema with ``--lenient`` and ``--ref-root``,
    its relative ``$ref``s resolved against the schema file.  Used by ``generate`` and
    ``compile``; one spec, compiled by ``GrammarCompiler.compile``."""
    return comp.compile(spec_from_args(args, constraint))


def spec_from_args(
    args: argparse.Namespace, constraint: tuple[Any, str | None, str]
) -> ConstraintSpec:
    """The :class:`~formcast.index.spec.ConstraintSpec` of ``constraint`` and ``args`` (a
    schema is read here, its relative ``$ref``s against the schema file)."""
    from pathlib import Path

    from ..frontends.jsonschema.options import JsonSchemaOptions

    schema, grammar, syntax = constraint
    if args.regex is not None:
        return RegexSpec(args.regex, args.dialect)
    if grammar == "json":
        return AnyJsonSpec()
    if grammar is not None:
        return GrammarTextSpec(grammar, syntax)
    opts = JsonSchemaOptions(lenient=args.lenient, local_ref_root=getattr(args, "ref_root", None))
    # relative $refs resolve against the schema file (its siblings are read from disk)
    base = Path(args.schema).absolute() if getattr(args, "schema", None) is not None else None
    return JsonSchemaSpec.of(schema, opts, base_uri=base)


def load_vocab(spec: str) -> Vocabulary:
    """The tokenizer named ``spec`` (``llama3``, ``smollm2``, ``cl100k`` or a path), with
    progress lines."""
    from ..vocab.loaders import load_vocabulary

    return timed(
        f"loading tokenizer {spec!r} ...",
        lambda: load_vocabulary(spec),
        lambda vocab, s: f"tokenizer ready: {len(vocab)} tokens ({s:.2f} s)",
    )


def compile_for_tokenizer(args: argparse.Namespace) -> CompiledGrammar:
    """Read the constraint files, then load ``--tokenizer`` and compile for it (the first steps
    of ``demo``, ``compile``, ``mask`` and ``sample``; the vocabulary is ``compiled.vocab``)."""
    constraint = read_constraint(args)
    vocab = load_vocab(args.tokenizer)
    return require_compiled(compile_from_args(vocab, args, constraint))


def require_compiled(compiled: CompiledGrammar | None) -> CompiledGrammar:
    """``compiled``; a subcommand that needs a constraint got one (argparse requires it)."""
    if compiled is None:  # pragma: no cover - argparse requires a constraint
        raise FormcastError("no constraint given: use --regex, --schema or --grammar")
    return compiled


def add_model_arguments(
    p: argparse.ArgumentParser,
    *,
    threads_help: str = "CPU threads",
    threads_default: int | None = 1,
) -> None:
    """``--model``, ``--backend``, ``--n-ctx`` and ``--threads``: the options that choose and load
    a model (``formcast generate`` and ``formcast serve``).  ``threads_default`` ``None``: the
    caller resolves a missing ``--threads`` (``formcast serve``: the machine's cores)."""
    p.add_argument(
        "--model", default="smollm2",
        help="smollm2, a .gguf path or a transformers model directory (default: %(default)s)",
    )
    p.add_argument(
        "--backend", default="auto",
        help="auto | llama_cpp | transformers; auto: transformers for a directory with a "
        "config.json, llama.cpp otherwise (default: %(default)s)",
    )
    p.add_argument(
        "--n-ctx", type=positive_int, default=2048,
        help="context length, llama.cpp (default: %(default)s)",
    )
    p.add_argument(
        "--threads", type=positive_int, default=threads_default,
        help=f"{threads_help} (default: "
        + ("%(default)s)" if threads_default is not None else "the cores this process may use)"),
    )


def check_backend(args: argparse.Namespace) -> str | None:
    """``args.backend`` as :func:`formcast.load_model` takes it (``None`` for ``auto``), checked
    before anything loads."""
    from ..model.loading import BACKENDS

    if args.backend == "auto":
        return None
    if args.backend not in BACKENDS:
        raise ConfigurationError(
            f"unknown backend {args.backend!r}: use auto or one of {', '.join(BACKENDS)}"
        )
    return str(args.backend)


def load_model_from_args(args: argparse.Namespace) -> Any:
    """The model of ``--model``/``--backend``/``--n-ctx``/``--threads``, loaded with progress
    on stderr."""
    from ..model.loading import load_model

    backend = check_backend(args)
    model = timed(
        f"loading model {args.model!r}" + (f" on {backend}" if backend else "") + " ...",
        lambda: load_model(args.model, backend=backend, n_ctx=args.n_ctx, n_threads=args.threads),
        lambda _, s: f"model ready ({s:.2f} s)",
    )
    if backend is None:  # what auto chose, for the --json output
        from ..model.llama_cpp import LlamaCppModel
        from ..model.transformers import TransformersModel

        args.backend = (
            "transformers" if isinstance(model, TransformersModel)
            else "llama_cpp" if isinstance(model, LlamaCppModel)
            else type(model).__name__
        )
    return model

