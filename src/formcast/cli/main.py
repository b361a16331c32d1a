"""The ``formcast`` command line.

Subcommands::

    formcast --version
    formcast demo                       compile a regex against a real tokenizer, show the mask
                                        and a constrained sample (offline)
    formcast compile C                  compile and print statistics (or the error)
    formcast compile C --cache-dir D    precompile into a disk cache (with its first masks)
    formcast mask C --prefix P          allowed tokens after a prefix (debugging)
    formcast check C TEXT               does TEXT match? (exit status 0 / 1)
    formcast sample C                   constrained samples from random logits
    formcast generate --prompt P [C]    constrained generation with a real model (default:
                                        the bundled SmolLM2-135M-Instruct on llama.cpp)
    formcast eval --tool S --data D     run a dataset through the action runner: the
                                        per-layer table and task quality
    formcast serve [--model M --port P] the OpenAI-compatible HTTP server (docs/server.md;
                                        needs the server extra)

where the constraint C is ``--regex RE`` (``--dialect ecma`` by default, or ``python``),
``--schema FILE`` (``--lenient`` to ignore keywords formcast cannot enforce) or
``--grammar FILE`` (GBNF, or Lark for ``*.lark``; ``json`` for any JSON value).

Results go to stdout; progress, compile warnings and diagnostics go to stderr (``--json`` for
machine output).  Exit status: 0 success, 1 no match / not completed, 2 usage or compile error.
Bad option values (a negative ``--temperature``, ``--top-p`` outside (0, 1]) are rejected
before any tokenizer or model loads.

The options several subcommands share, the constraint reading and the progress lines are in
:mod:`formcast.cli.common`; ``generate`` is :mod:`formcast.cli.generate`.

Lifetime: one process per command.  Costs: loading the tokenizer (seconds for a real one) and
compiling the constraint dominate; ``sample`` and ``demo`` then cost one mask per token.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._version import __version__
from ..bitmask import allocate_token_bitmask
from ..errors import ContextLengthError, DeadEndError, FormcastError, UnsupportedFeatureError
from ..index.compiled import CompiledGrammar
from ..runtime.matcher import GrammarMatcher
from ..vocab.vocabulary import Vocabulary
from .check import explain_rejection
from .common import (
    add_constraint_arguments,
    add_json_argument,
    add_max_tokens_argument,
    add_temperature_argument,
    add_tokenizer_argument,
    compile_for_tokenizer,
    compile_from_args,
    non_negative_int,
    positive_int,
    read_constraint,
    require_compiled,
)
from .eval import add_eval_arguments
from .generate import add_generate_arguments
from .precompile import add_cache_arguments
from .serve import add_serve_arguments

__all__ = ["main"]

DEMO_PATTERN = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\dZ"


def _byte_vocabulary() -> Vocabulary:
    """One token per byte plus a stop token: ``check`` needs no real tokenizer."""
    tokens = [bytes([b]) for b in range(256)] + [b"<|end|>"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[256], name="bytes")


def _token_repr(vocab: Vocabulary, tid: int) -> str:
    return repr(vocab.tokens[tid].decode("utf-8", "backslashreplace"))


def sample_constrained(
    cg: CompiledGrammar, *, seed: int, max_tokens: int, temperature: float = 1.0
) -> tuple[bytes, str, list[float]]:
    """Generate from random-noise logits under the constraint.

    Returns (text, finish_reason, per-step mask seconds).  Raises :class:`DeadEndError` on a dead
    end.  Logits are Gaussian noise: this shows the guarantee, not a model's preferences.
    """
    from ..sampling import SamplingParams, sample_token

    vocab = cg.vocab
    rng = np.random.default_rng(seed)
    matcher = GrammarMatcher(cg)
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    params = SamplingParams(temperature=temperature)
    mask_times: list[float] = []
    for _ in range(max_tokens):
        t0 = time.perf_counter()
        ok = matcher.fill_next_token_bitmask(bitmask)
        mask_times.append(time.perf_counter() - t0)
        if not ok:
            diag = matcher.diagnose()
            if diag is None:  # pragma: no cover - fill reported a dead end, diagnose agrees
                raise FormcastError("inconsistent dead-end report")
            raise DeadEndError(diag)
        logits = rng.normal(0.0, 3.0, vocab.vocab_size)
        tid = sample_token(logits, bitmask[0], params, rng)
        matcher.accept_token(tid)
        if matcher.is_terminated():
            return matcher.accepted_bytes(), "completed", mask_times
    return matcher.accepted_bytes(), "max_tokens", mask_times


def _cmd_demo(args: argparse.Namespace) -> int:
    args.regex = args.regex or DEMO_PATTERN
    cg = compile_for_tokenizer(args)
    allowed = GrammarMatcher(cg).allowed_token_ids()
    text, reason, times = sample_constrained(cg, seed=args.seed, max_tokens=args.max_tokens)
    decoded = text.decode("utf-8", "replace")
    ok = _fullmatch(cg, args.regex, args.dialect, text)
    t_us = np.array(times) * 1e6
    dfa = getattr(cg.program, "dfa", None)  # None: a long bounded repeat, counted by a parser
    states = None if dfa is None else int(dfa.num_states)
    if args.json:
        print(
            json.dumps(
                {
                    "regex": args.regex,
                    "tokenizer": args.tokenizer,
                    "dfa_states": states,
                    "compile_seconds": cg.compile_seconds,
                    "allowed_first": int(allowed.size),
                    "sample": decoded,
                    "finish_reason": reason,
                    "fullmatch": ok,
                    "mask_us_p50": float(np.percentile(t_us, 50)),
                    "mask_us_max": float(t_us.max()),
                }
            )
        )
        return 0 if ok else 1
    vocab = cg.vocab
    shown = ", ".join(_token_repr(vocab, int(t)) for t in allowed[:12])
    print(f"regex:          {args.regex}")
    fp = vocab.fingerprint[:12]
    print(f"tokenizer:      {args.tokenizer} ({len(vocab)} tokens, fingerprint {fp})")
    ms = cg.compile_seconds * 1000
    shape = "a counting parser" if states is None else f"{states} DFA states"
    print(f"automaton:      {shape}, compiled in {ms:.1f} ms")
    print(f"first step:     {allowed.size} allowed tokens, e.g. {shown}")
    print(f"sample:         {decoded}   ({reason}, from random-noise logits, seed {args.seed})")
    print(f"re.fullmatch:   {'yes' if ok else 'NO'}")
    print(
        f"mask time:      p50 {np.percentile(t_us, 50):.0f} us, max {t_us.max():.0f} us "
        f"over {len(times)} steps (first visit of a state walks the vocabulary once)"
    )
    return 0 if ok else 1


def _fullmatch(cg: CompiledGrammar, regex: str, dialect: str, text: bytes) -> bool:
    """An independent check of a sample with Python's ``re`` (ASCII classes for the ECMA
    dialect); for ECMA-only syntax, formcast's own matcher is the check."""
    import re

    flags = re.ASCII if dialect == "ecma" else 0
    try:
        return re.fullmatch(regex, text.decode("utf-8", "replace"), flags) is not None
    except re.error:
        m = GrammarMatcher(cg)
        return m.accept_bytes(text) and m.is_accepting()


def _cmd_compile(args: argparse.Namespace) -> int:
    if args.cache_dir is not None:
        from .precompile import run_precompile

        return run_precompile(args)
    cg = compile_for_tokenizer(args)
    info: dict[str, Any] = {"kind": cg.kind}
    dfa = getattr(cg.program, "dfa", None)  # a context-free grammar has no single DFA
    if dfa is not None:
        info["dfa_states"] = dfa.num_states
    info["compile_seconds"] = round(cg.compile_seconds, 6)
    info["fingerprint"] = cg.fingerprint[:16]
    if cg.warnings:
        info["warnings"] = list(cg.warnings)
    print(json.dumps(info) if args.json else "\n".join(f"{k}: {v}" for k, v in info.items()))
    return 0


def _cmd_mask(args: argparse.Namespace) -> int:
    cg = compile_for_tokenizer(args)
    vocab = cg.vocab
    m = GrammarMatcher(cg)
    if args.prefix and not m.accept_bytes(args.prefix):
        print(f"the prefix {args.prefix!r} is not a prefix of the language", file=sys.stderr)
        return 1
    allowed = m.allowed_token_ids()
    if args.json:
        print(json.dumps({"count": int(allowed.size), "token_ids": allowed[: args.limit].tolist()}))
        return 0
    print(f"{allowed.size} tokens allowed after {args.prefix!r}; accepting={m.is_accepting()}")
    for t in allowed[: args.limit]:
        print(f"{int(t):>8}  {_token_repr(vocab, int(t))}")
    if allowed.size > args.limit:
        print(f"... and {allowed.size - args.limit} more")
    diag = m.diagnose()
    if diag is not None:
        print(str(diag), file=sys.stderr)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    constraint = read_constraint(args)
    cg = require_compiled(compile_from_args(_byte_vocabulary(), args, constraint))
    m = GrammarMatcher(cg)
    data = args.text.encode("utf-8")
    ok = m.accept_bytes(data) and m.is_accepting()
    why = None if ok else explain_rejection(cg, data, args, constraint)  # where, which bound
    if args.json:
        print(json.dumps({"match": ok} if ok else {"match": ok, "reason": why}))
    else:
        print("match" if ok else "no match")
        if why:
            print(f"[formcast] {why}", file=sys.stderr)
    return 0 if ok else 1


def _cmd_sample(args: argparse.Namespace) -> int:
    """Exit status 1 when a sample ran out of ``--max-tokens`` (its printed text is then a
    truncated prefix, said on stderr), as ``generate`` does."""
    cg = compile_for_tokenizer(args)
    truncated = 0
    for i in range(args.n):
        text, reason, _ = sample_constrained(
            cg, seed=args.seed + i, max_tokens=args.max_tokens, temperature=args.temperature
        )
        out = text.decode("utf-8", "replace")
        print(json.dumps({"text": out, "finish_reason": reason}) if args.json else out)
        truncated += reason != "completed"
    if truncated:
        print(
            f"[formcast] {truncated} of {args.n} sample(s) truncated (max_tokens): they are NOT "
            "complete; raise --max-tokens",
            file=sys.stderr,
        )
        return 1
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from .generate import run_generate

    return run_generate(args)


def _cmd_eval(args: argparse.Namespace) -> int:
    from .eval import run_eval_command

    return run_eval_command(args)


def _cmd_serve(args: argparse.Namespace) -> int:
    from .serve import run_serve

    return run_serve(args)


def version_text() -> str:
    """What ``formcast --version`` prints: the version, then which build runs (the modules
    compiled with mypyc and the C kernels loaded, from :func:`formcast._native.native_summary`)
    and where the package and the interpreter are."""
    import platform
    from pathlib import Path

    from .. import _native

    where = Path(_native.__file__).resolve().parent
    return (
        f"formcast {__version__}\n"
        f"build: {_native.native_summary()}\n"
        f"at: {where} (Python {platform.python_version()})"
    )


class _VersionAction(argparse.Action):
    """``--version``: prints :func:`version_text` (computed only when asked) and exits 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_text())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="formcast", description=__doc__.split("\n\n")[0].replace("``", "")
    )
    p.add_argument(
        "--version",
        action=_VersionAction,
        help="show the version, which build runs (compiled modules, C kernels) and exit",
    )
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser, *, tokenizer: bool = True) -> None:
        add_constraint_arguments(sp, required=True)
        if tokenizer:
            add_tokenizer_argument(sp)
        add_json_argument(sp)

    def sampling(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--seed", type=non_negative_int, default=0, help="noise seed (default: %(default)s)"
        )
        add_max_tokens_argument(sp, default=64, what="tokens")

    d = sub.add_parser("demo", help="compile a regex against Llama-3 and sample under it")
    d.add_argument("--regex", metavar="RE", help="the regex (default: an ISO 8601 timestamp)")
    d.add_argument(
        "--dialect",
        choices=["ecma", "python"],
        default="ecma",
        help="dialect of --regex (default: %(default)s)",
    )
    add_tokenizer_argument(d)
    add_json_argument(d)
    sampling(d)
    d.set_defaults(func=_cmd_demo, schema=None, grammar=None, grammar_syntax=None, lenient=False)

    c = sub.add_parser("compile", help="compile a constraint and print statistics")
    common(c)
    add_cache_arguments(c)
    c.set_defaults(func=_cmd_compile)

    m = sub.add_parser("mask", help="allowed tokens after a prefix")
    common(m)
    m.add_argument("--prefix", default="", help="text already generated (default: empty)")
    m.add_argument(
        "--limit", type=non_negative_int, default=40, help="tokens listed (default: %(default)s)"
    )
    m.set_defaults(func=_cmd_mask)

    k = sub.add_parser("check", help="does a text match the constraint?")
    common(k, tokenizer=False)
    k.add_argument("text")
    k.set_defaults(func=_cmd_check)

    s = sub.add_parser("sample", help="constrained samples from random logits")
    common(s)
    s.add_argument(
        "--n", type=positive_int, default=3, help="number of samples (default: %(default)s)"
    )
    sampling(s)
    add_temperature_argument(s, default=1.0)
    s.set_defaults(func=_cmd_sample)

    g = sub.add_parser("generate", help="constrained generation with a real model (offline)")
    add_generate_arguments(g)
    g.set_defaults(func=_cmd_generate)

    e = sub.add_parser("eval", help="run a dataset through the action runner (per-layer table)")
    add_eval_arguments(e)
    e.set_defaults(func=_cmd_eval)

    v = sub.add_parser("serve", help="the OpenAI-compatible HTTP server (docs/server.md)")
    add_serve_arguments(v)
    v.set_defaults(func=_cmd_serve)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``formcast`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except FormcastError as exc:
        print(f"formcast: error: {type(exc).__name__}: {_cli_message(exc, args)}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's 128 + SIGINT
        print("\nformcast: interrupted", file=sys.stderr, flush=True)
        return 130


def _cli_message(exc: FormcastError, args: argparse.Namespace) -> str:
    """``exc``'s message, with the way out in the command's own options: ``--lenient`` and
    the docs page for an unsupported feature, ``--max-tokens`` / ``--n-ctx`` for a prompt that
    does not fit."""
    if isinstance(exc, ContextLengthError):
        n_ctx = getattr(args, "n_ctx", None)
        raise_ctx = f", or raise --n-ctx (now {n_ctx})" if n_ctx is not None else ""
        return (
            f"the prompt ({exc.prompt_tokens} tokens) + --max-tokens ({exc.max_tokens}) exceed "
            f"the model's context of {exc.context} tokens: lower --max-tokens, shorten the "
            f"prompt{raise_ctx}"
        )
    if isinstance(exc, UnsupportedFeatureError):
        if getattr(args, "schema", None) is not None:
            return (
                f"{str(exc).rstrip('.')}. formcast fails closed on keywords it cannot "
                "enforce: remove or rewrite it, or pass --lenient to ignore it (the output may "
                "then violate it); docs/json_schema.md lists what is supported"
            )
        if getattr(args, "regex", None) is not None:
            return (
                f"{str(exc).rstrip('.')}. Rewrite the pattern without it; docs/regex.md lists "
                "what is supported"
            )
        return f"{str(exc).rstrip('.')}. docs/grammars.md lists what is supported"
    return str(exc)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
