"""Why ``formcast check`` rejected a text: where, and which output bound it crossed (#29 item 9).

A JSON Schema compiles to an *output shape*: compact by default (no whitespace at all), or
``whitespace="flexible"`` with at most ``max_whitespace`` characters per gap, and numbers of at
most ``max_integer_digits`` / ``max_fraction_digits`` / ``max_exponent_digits`` digits (so a
model cannot spend its budget on spaces or digits).  A pretty-printed or long-numbered document
that is *valid* can therefore be rejected; :func:`explain_rejection` finds the first rejected
byte, names the bound crossed there and the option that lifts it, and confirms it by compiling
the schema again with the bounds lifted (a document that still fails violates the schema
itself).

Lifetime: per call; cost: one byte-by-byte walk, plus one more compile of the constraint when
the text was rejected (only for a schema or the built-in JSON grammar).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import FormcastError
from ..frontends.builtin_json import BUILTIN_JSON_BOUNDS
from ..frontends.jsonschema.options import JsonSchemaOptions
from ..generation.inputs import get_compiler
from ..index.compiled import CompiledGrammar
from ..index.spec import JsonSchemaSpec
from ..runtime.matcher import GrammarMatcher

__all__ = ["explain_rejection"]

_WS = b" \t\r\n"


def _first_rejected(cg: CompiledGrammar, data: bytes) -> int:
    """Index of the first byte the matcher refuses; ``len(data)`` when all are accepted."""
    m = GrammarMatcher(cg)
    for i in range(len(data)):
        if not m.accept_bytes(data[i : i + 1]):
            return i
    return len(data)


def _where(data: bytes, i: int) -> str:
    line = data.count(b"\n", 0, i) + 1
    col = i - (data.rfind(b"\n", 0, i) + 1) + 1
    return f"line {line}, column {col} (byte {i})"


def _runs(data: bytes) -> int:
    """The longest run of JSON whitespace in ``data``."""
    best = cur = 0
    for b in data:
        cur = cur + 1 if b in _WS else 0
        best = max(best, cur)
    return best


def _number_part(data: bytes, i: int) -> str | None:
    """Which part of a JSON number the digit at ``i`` belongs to (None: not in a number)."""
    j = i
    while j > 0 and data[j - 1 : j] in (b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9"):
        j -= 1
    before = data[j - 1 : j]
    if before in (b"e", b"E") or (before in (b"+", b"-") and data[j - 2 : j - 1] in (b"e", b"E")):
        return "exponent"
    if before == b".":
        return "fraction"
    return "integer"


def explain_rejection(
    cg: CompiledGrammar,
    data: bytes,
    args: argparse.Namespace,
    constraint: tuple[Any, str | None, str],
) -> str:
    """One line for stderr: where ``data`` is rejected and, for a JSON Schema or the built-in
    JSON grammar (``constraint`` as :func:`~formcast.cli.common.read_constraint` returns it),
    which output bound it crosses there and how to lift it."""
    schema, grammar, _ = constraint
    i = _first_rejected(cg, data)
    if i == len(data):
        return f"the text is incomplete: it ends at {_where(data, i)} where more is required"
    head = f"rejected at {_where(data, i)}, byte {data[i : i + 1]!r}"
    builtin = grammar == "json"
    if not (schema is not None or builtin):
        return head
    byte = data[i : i + 1]
    if builtin:
        if byte and byte in _WS:
            ws = BUILTIN_JSON_BOUNDS["max_ws"]
            return (
                f"{head}: a whitespace run longer than the built-in JSON grammar's bound of {ws} "
                "characters per gap; compile formcast.frontends.builtin_json.json_grammar() "
                "(unbounded) with GrammarCompiler.compile_grammar_ir to accept it"
            )
        if byte.isdigit():
            part = _number_part(data, i)
            bound = BUILTIN_JSON_BOUNDS.get(f"max_{part}_digits")
            return (
                f"{head}: more {part} digits than the built-in JSON grammar's bound of {bound}; "
                "compile json_grammar() (unbounded) to accept them"
            )
        return head
    opts = JsonSchemaOptions(lenient=args.lenient, local_ref_root=getattr(args, "ref_root", None))
    lifted = JsonSchemaOptions(
        lenient=args.lenient,
        local_ref_root=getattr(args, "ref_root", None),
        whitespace="flexible",
        max_whitespace=max(1, _runs(data)),
        max_integer_digits=None,
        max_fraction_digits=None,
        max_exponent_digits=None,
    )
    base = Path(args.schema).absolute() if getattr(args, "schema", None) else None
    try:
        relaxed = get_compiler(cg.vocab).compile(JsonSchemaSpec.of(schema, lifted, base_uri=base))
        m = GrammarMatcher(relaxed)
        fits = m.accept_bytes(data) and m.is_accepting()
    except FormcastError:  # the relaxed schema does not compile: no diagnosis from it
        fits = False
    if byte and byte in _WS:
        if opts.whitespace == "compact":
            why = (
                "whitespace, and the schema compiles to compact output by default "
                "(JsonSchemaOptions.whitespace='compact': none between tokens)"
            )
        else:  # pragma: no cover - the command line compiles compact
            why = f"a whitespace run longer than max_whitespace={opts.max_whitespace}"
        fix = (
            f"JsonSchemaOptions(whitespace='flexible', max_whitespace={lifted.max_whitespace}) "
            "accepts this document's layout"
        )
    elif byte.isdigit() and _number_part(data, i) is not None:
        part = _number_part(data, i)
        bound = getattr(opts, f"max_{part}_digits")
        why = f"more {part} digits than max_{part}_digits={bound}"
        fix = f"JsonSchemaOptions(max_{part}_digits=None) lifts the bound"
    else:
        return head + ("" if fits else ": the document does not match the schema here")
    verdict = (
        "the document is valid otherwise"
        if fits
        else "the document also breaks the schema elsewhere"
    )
    return f"{head}: {why}; {fix} ({verdict})"
