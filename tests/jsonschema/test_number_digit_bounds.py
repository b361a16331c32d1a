"""Digit bounds of JSON Schema numbers (``JsonSchemaOptions.max_*_digits``).

A model must not be able to pad a number until ``max_tokens`` (``1.000000…`` under
``{"type": "number", "minimum": 0, "maximum": 1}``): every number spelling has at most
``max_integer_digits`` / ``max_fraction_digits`` / ``max_exponent_digits`` digits, raised per
number where the schema's own bounds, excluded values or ``multipleOf`` need more.

* differential: random spellings against the schema's arithmetic (``jsonschema`` on exact
  decimals) and the documented bound;
* the raised bounds keep every value the schema names, and a value between two close bounds;
* ``1.`` and 1000 zeros is rejected; at the bound the mask offers no digit, only the stop token;
* masked random walks that prefer digits always stop within the bound;
* a scripted model that only wants to write ``0`` finishes ``completed``.
"""

from __future__ import annotations

import decimal
import json
import math
import random
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary, allocate_token_bitmask
from formcast.bitmask import bitmask_to_bool
from formcast.errors import ConfigurationError
from formcast.frontends.jsonschema.api import JsonSchemaOptions, schema_to_grammar
from formcast.frontends.jsonschema.numbers import decimal_range, digit_limits
from formcast.frontends.jsonschema.regexlang import node_matches

EOS = 256
BYTES = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[EOS], name="bytes"
)
DIGITS = [ord(c) for c in "0123456789"]
NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE][+-]?([0-9]+))?")


def _compiled(schema: Any, **options: Any) -> Any:
    opts = JsonSchemaOptions(max_compile_seconds=None, **options)
    grammar, _ = schema_to_grammar(schema, opts)
    return GrammarCompiler(BYTES, cache_size=0).compile_grammar_ir(grammar)


def _accepts(compiled: Any, text: str) -> bool:
    m = GrammarMatcher(compiled)
    return bool(m.accept_bytes(text.encode()) and m.is_accepting() and m.is_token_allowed(EOS))


def _digit_counts(text: str) -> tuple[int, int, int]:
    m = NUMBER.fullmatch(text)
    assert m is not None, text
    return len(m.group(1)), len(m.group(2) or ""), len(m.group(3) or "")


def _valid(schema: dict[str, Any], text: str) -> bool:
    """jsonschema's verdict on exact decimals (schema and instance parsed with Decimal)."""
    import jsonschema

    with decimal.localcontext() as ctx:
        ctx.prec = 1000  # exact for these sizes (multipleOf is Decimal % Decimal)
        exact = json.loads(json.dumps(schema), parse_float=Decimal)
        instance = json.loads(text, parse_float=Decimal)
        return bool(jsonschema.Draft202012Validator(exact).is_valid(instance))


# -- options --------------------------------------------------------------------------------------
def test_defaults_and_validation() -> None:
    o = JsonSchemaOptions()
    assert (o.max_integer_digits, o.max_fraction_digits, o.max_exponent_digits) == (20, 20, 3)
    JsonSchemaOptions(max_integer_digits=None, max_fraction_digits=0, max_exponent_digits=None)
    for bad in (
        {"max_integer_digits": 0},
        {"max_fraction_digits": -1},
        {"max_exponent_digits": True},
        {"max_fraction_digits": 2.5},
        {"max_whitespace": None},
    ):
        with pytest.raises(ConfigurationError):
            JsonSchemaOptions(**bad)


def test_digit_limits_are_raised_by_the_schemas_numbers() -> None:
    assert digit_limits([None, Decimal(1)], [], 64, 20) == (64, 20)
    assert digit_limits([Decimal("1e70")], [], 64, 20) == (72, 20)
    assert digit_limits([Decimal("-0.1234567890123456789012345")], [], 64, 20) == (64, 26)
    assert digit_limits([], [Fraction(1, 10**25)], 64, 20) == (64, 26)
    assert digit_limits([], [Fraction(10**80)], 64, 20) == (82, 20)
    assert digit_limits([Decimal("1e70")], [], None, None) == (None, None)


# -- the schema ---------------------------------------------------------------------------
UNIT = {"type": "number", "minimum": 0, "maximum": 1}


def test_unit_interval_bounds_the_fraction() -> None:
    c = _compiled(UNIT)
    assert _accepts(c, "1." + "0" * 20)
    assert _accepts(c, "0." + "9" * 20)
    assert not _accepts(c, "1." + "0" * 21)
    assert not _accepts(c, "0." + "9" * 21)
    m = GrammarMatcher(c)
    assert not m.accept_bytes(("1." + "0" * 1000).encode())
    # at the bound: no digit, and the value may end
    m = GrammarMatcher(c)
    assert m.accept_bytes(("1." + "0" * 20).encode())
    mask = allocate_token_bitmask(1, BYTES.vocab_size)
    assert m.fill_next_token_bitmask(mask)
    allowed = bitmask_to_bool(mask[0], BYTES.vocab_size)
    assert not any(allowed[d] for d in DIGITS)
    assert allowed[EOS]
    # before it: "1." is not a number yet
    m = GrammarMatcher(c)
    assert m.accept_bytes(b"1.")
    assert not m.is_token_allowed(EOS)


def test_unbounded_options_keep_every_spelling() -> None:
    c = _compiled(UNIT, max_fraction_digits=None)
    assert _accepts(c, "1." + "0" * 300)
    c = _compiled({"type": "number"}, max_integer_digits=None, max_exponent_digits=None)
    assert _accepts(c, "9" * 200 + "e+12345")


def _walk(compiled: Any, rng: random.Random, limit: int) -> bytes:
    """A masked random walk that takes a digit whenever one is allowed (else any allowed byte,
    the stop token last): it stops only when the mask forces it."""
    m = GrammarMatcher(compiled)
    mask = allocate_token_bitmask(1, BYTES.vocab_size)
    for _ in range(limit):
        assert m.fill_next_token_bitmask(mask)
        allowed = bitmask_to_bool(mask[0], BYTES.vocab_size)
        digits = [d for d in DIGITS if allowed[d]]
        others = [t for t in np.flatnonzero(allowed).tolist() if t != EOS and t not in DIGITS]
        if digits:
            t = rng.choice(digits)
        elif others:
            t = rng.choice(others)
        else:
            assert allowed[EOS]
            assert m.accept_token(EOS)
            assert m.is_terminated()
            return m.accepted_bytes()
        assert m.accept_token(t)
    raise AssertionError(f"no stop within {limit} tokens: {m.accepted_bytes()[:80]!r}")


@pytest.mark.parametrize(
    ("schema", "limit"),
    [
        (UNIT, 1 + 1 + 20 + 1),  # "1" or "0", ".", 20 digits, stop
        ({"type": "number", "exclusiveMinimum": 0}, 20 + 1 + 20 + 1),
        ({"type": "integer"}, 1 + 20 + 1),
        ({"type": "number"}, 1 + 20 + 1 + 20 + 2 + 3 + 1),
        ({"type": "number", "multipleOf": 0.25, "maximum": 3}, 1 + 1 + 1 + 20 + 1),
    ],
)
def test_digit_loving_random_walks_stop(schema: dict[str, Any], limit: int) -> None:
    c = _compiled(schema)
    rng = random.Random(5)
    for _ in range(40):
        text = _walk(c, rng, limit).decode()
        assert _valid(schema, text), text
        i, f, e = _digit_counts(text)
        assert (i <= 20, f <= 20, e <= 3) == (True, True, True), text


def test_a_model_that_only_wants_zeros_completes() -> None:
    from formcast.generation import generate
    from formcast.model.callable import CallableModel

    def zeros(seq: list[int]) -> np.ndarray:
        logits = np.full(BYTES.vocab_size, -5.0)
        logits[ord("0")] = 10.0
        logits[ord(".")] = 9.0
        logits[ord("1")] = 8.0
        logits[EOS] = -10.0
        return logits

    result = generate(CallableModel(zeros, BYTES), [65], schema=UNIT, max_tokens=256)
    assert result.finish_reason == "completed"
    assert result.text == "0." + "0" * 20
    assert result.value == 0


# -- differential ---------------------------------------------------------------------------------
def _random_spelling(rng: random.Random, exponent: bool) -> str:
    n_int = rng.choice([1, 1, 2, 3, 19, 20, 21, 31, 32, 63, 64, 65, *range(66, 74)])
    head = "0" if n_int == 1 and rng.random() < 0.5 else str(rng.randint(1, 9))
    text = ("-" if rng.random() < 0.3 else "") + head
    text += "".join(rng.choice("0123456789") for _ in range(n_int - 1)) if head != "0" else ""
    n_frac = rng.choice([0, 0, 1, 2, 5, *range(19, 27), 30])
    if n_frac:
        text += "." + "".join(rng.choice("0000123456789") for _ in range(n_frac))
    if exponent and rng.random() < 0.3:
        text += rng.choice("eE") + rng.choice(["", "+", "-"])
        text += "".join(rng.choice("0123456789") for _ in range(rng.choice([1, 2, 3, 4, 5])))
    return text


DIFFERENTIAL = [
    (UNIT, 20, 20),
    ({"type": "number"}, 20, 20),
    ({"type": "number", "exclusiveMinimum": -5.5, "exclusiveMaximum": 1e20}, 22, 20),
    ({"type": "number", "minimum": 1e30}, 32, 20),
    ({"type": "number", "maximum": -0.000000000000000000000001}, 20, 25),
    ({"type": "number", "minimum": 0, "multipleOf": 0.125}, 20, 20),
    ({"type": "number", "minimum": -1, "maximum": 1, "multipleOf": 1e-22}, 20, 23),
    ({"type": "integer", "minimum": -(10**66)}, 68, 20),
    ({"type": "integer", "maximum": 10**70, "multipleOf": 7}, 72, 20),
]


@pytest.mark.parametrize(("schema", "max_int", "max_frac"), DIFFERENTIAL)
def test_differential_against_jsonschema_and_the_bound(
    schema: dict[str, Any], max_int: int, max_frac: int
) -> None:
    c = _compiled(schema)
    unconstrained = schema == {"type": "number"}
    integer = schema["type"] == "integer"
    rng = random.Random(json.dumps(schema))
    seen = {True: 0, False: 0}
    for _ in range(600):
        text = _random_spelling(rng, exponent=unconstrained)
        if NUMBER.fullmatch(text) is None or re.match(r"-0(\.0*)?$", text):
            continue  # a leading-zero artefact, or negative zero (never generated)
        i, f, e = _digit_counts(text)
        shape_ok = i <= max_int and f <= max_frac and e <= 3
        if integer:
            shape_ok = shape_ok and "." not in text  # integers: no fraction, no exponent
        elif not unconstrained:
            shape_ok = shape_ok and e == 0  # constrained numbers are written without exponent
        expected = shape_ok and _valid(schema, text)
        got = _accepts(c, text)
        assert got == expected, (schema, text, (i, f, e))
        seen[got] += 1
    assert seen[True] > 0
    assert seen[False] > 0


def test_raised_bounds_keep_what_the_schema_names() -> None:
    big = 10**70
    c = _compiled({"type": "integer", "minimum": big})
    assert _accepts(c, str(big))
    assert _accepts(c, "9" * 72)
    assert not _accepts(c, "1" + "0" * 72)  # 73 digits: past the raised bound
    c = _compiled({"type": "number", "multipleOf": 1e-25})
    assert _accepts(c, "0." + "0" * 24 + "1")
    assert _accepts(c, "-3." + "0" * 24 + "7")
    c = _compiled({"type": "number", "not": {"multipleOf": 1e-25}})
    assert _accepts(c, "0." + "0" * 24 + "15")  # a non-multiple needs 26 digits
    # two neighbouring doubles with 26 fraction digits
    low = 1.2345678901234567e-10
    high = math.nextafter(low, 1.0)
    c = _compiled({"type": "number", "exclusiveMinimum": low, "exclusiveMaximum": high})
    mid = f"{(Decimal(repr(low)) + Decimal(repr(high))) / 2:f}"
    assert len(mid) == 2 + 26
    assert _accepts(c, mid)
    assert not _accepts(c, f"{Decimal(repr(low)):f}")
    # bounds 25 digits apart by one unit: only values with 26 digits lie strictly between
    a, b = Decimal("0." + "1" * 25), Decimal("0." + "1" * 24 + "2")
    max_int, max_frac = digit_limits([a, b], [], 64, 20)
    node = decimal_range(a, True, b, True, max_int=max_int, max_frac=max_frac)
    assert node_matches(node, "0." + "1" * 25 + "5")
    assert not node_matches(node, "0." + "1" * 25 + "55")
    assert not node_matches(node, str(a))
    # a tighter configured bound is raised the same way
    c = _compiled({"type": "number", "minimum": 0.001, "maximum": 0.002}, max_fraction_digits=2)
    assert _accepts(c, "0.001")
    assert _accepts(c, "0.0015")
    assert not _accepts(c, "0.00155")
    # one digit beyond the schema's own (so that 0 < x < 1 keeps values with 0 configured)
    c = _compiled(
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, max_fraction_digits=0
    )
    assert _accepts(c, "0.5")
    assert not _accepts(c, "0.55")
    c = _compiled({"type": "number"}, max_fraction_digits=0)  # unconstrained: not raised
    assert _accepts(c, "12")
    assert not _accepts(c, "1.5")
    # const/enum values are written in full, whatever the bounds
    c = _compiled({"enum": [0.1234567890123456, 123456789012345678901234567890]})
    assert _accepts(c, "0.1234567890123456")
    c = _compiled({"const": 1.5}, max_fraction_digits=0)
    assert _accepts(c, "1.5")
