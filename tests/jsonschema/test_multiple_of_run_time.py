"""``multipleOf`` on integers checked at run time (issue #29 item 6): ``kind="residue"`` marks,
:class:`formcast.index.programs.residue.ResidueProgram`.

A large modulus (``1024``, ``4096``, ``12345``, ``65536``...) ran out of compile fuel or
``max_automaton_states``: the exact automaton needs a state per residue class times the digit
positions.  The front-end now emits the plain range automaton, marked, and the program tracks the
digits.  Oracles: exact arithmetic on every integer of ranges around the bounds and the
multiples (with ``jsonschema`` end to end), a brute-force enumeration of the prefixes for the
reachability arithmetic (:class:`ResidueSpec`), and random walks of the mask on a vocabulary of
multi-byte tokens (``1024``, ``00}``, ``0,``, ``:12``...: every state allows a token or accepts,
every allowed token is accepted and every refused one refused, every finished walk validates).
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

import jsonschema
from formcast.errors import UnsatisfiableGrammarError, UnsupportedFeatureError
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.jsonschema.residue import ResidueSpec
from formcast.index.compiled import CompiledGrammar
from formcast.index.compiler import GrammarCompiler
from formcast.index.programs.residue import ResidueProgram
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary
from mask_walk_helpers import accepts, assert_walks_validate, byte_vocab, mask_walk

BYTES = byte_vocab()
MULTI = [
    b"1024",
    b"00}",
    b"0,",
    b"00",
    b"000",
    b"12",
    b"96",
    b"-1",
    b"-",
    b":1",
    b":12",
    b'":1',
    b"5}",
    b"0}",
    b"0]",
    b"1,",
    b"[1",
    b",1",
    b",-2",
    b"48,",
    b"99",
    b"999",
    b"0000",
    b"123",
    b'{"a":',
    b'{"a":1',
    b"},{",
    b'"b":',
    b"}]",
    b"4096",
    b"65536",
    b"7,",
    b"0}}",
    b"[0,",
]
MIXED = byte_vocab(MULTI)
COMPILERS = {id(v): GrammarCompiler(v, cache_size=0) for v in (BYTES, MIXED)}

MODULI = [3, 7, 128, 256, 1000, 1024, 4096, 10000, 12345, 65536, 10**9]


def _compile(schema: Any, vocab: Vocabulary = BYTES) -> Any:
    return COMPILERS[id(vocab)].compile_json_schema(schema)


def _near(m: int, bounds: list[int]) -> list[int]:
    """Integers around 0, the bounds and a few multiples of ``m`` (and the 20-digit bound)."""
    out = set(range(-40, 41))
    for c in [*bounds, m, 2 * m, -m, 7 * m, -3 * m, 10**19 // m * m, -(10**19 // m) * m]:
        out.update(range(c - 3, c + 4))
    out.update(range(m - 300, m + 300))
    out.update(k * m for k in range(-5, 6))
    out.update([10**19, 10**20 - 1, 10**20, -(10**20) + 1])
    return sorted(out)


@pytest.mark.parametrize("m", MODULI)
@pytest.mark.parametrize(
    "bounds",
    [{}, {"minimum": 0}, {"minimum": -5000, "maximum": 70000}, {"exclusiveMinimum": 1024}],
    ids=["free", "min0", "range", "exclmin"],
)
def test_integers_agree_with_jsonschema(m: int, bounds: dict[str, int]) -> None:
    schema = {"type": "integer", "multipleOf": m, **bounds}
    compiled = _compile(schema)
    if m in (1024, 4096, 12345, 65536):
        assert isinstance(compiled.program, ResidueProgram)
    v = jsonschema.Draft202012Validator(schema)
    rng = random.Random(m)
    values = _near(m, [int(x) for x in bounds.values()])
    values += [rng.randrange(-(10**19), 10**19) for _ in range(200)]
    values += [rng.randrange(-(10**19) // m, 10**19 // m) * m for _ in range(200)]
    for x in values:
        digits_ok = len(str(abs(x))) <= 20  # the default max_integer_digits
        assert accepts(compiled, str(x)) == (v.is_valid(x) and digits_ok), (schema, x)
    for text in ["-0", "00", "0" + str(m), "-", "", str(m) + ".0", "+" + str(m), str(m) + "0,"]:
        assert not accepts(compiled, text), (schema, text)


def _brute(spec_ivs: list[tuple[int, int]], m: int) -> set[tuple[bool, str]]:
    """Every prefix (sign, digits) of the canonical spelling of a multiple in the intervals."""
    out: set[tuple[bool, str]] = set()
    for lo, hi in spec_ivs:
        for x in range(lo, hi + 1):
            if x % m:
                continue
            neg, digits = x < 0, str(abs(x))
            for k in range(len(digits) + 1):
                out.add((neg, digits[:k]))
    return out


def test_reachability_arithmetic_is_exact() -> None:
    """:meth:`ResidueSpec.viable` against enumeration; :meth:`ResidueSpec.safe` only claims
    lengths whose every digit continuation is viable."""
    rng = random.Random(7)
    for _ in range(300):
        ivs: list[tuple[int, int]] = []
        for _ in range(rng.randint(1, 3)):
            a = rng.randint(-3000, 3000)
            ivs.append((a, a + rng.randint(0, rng.choice([5, 50, 3000]))))
        m = rng.choice([1, 2, 3, 7, 10, 16, 97, 128, 250, 1024, 1000])
        spec = ResidueSpec(m, ivs)
        truth = _brute(ivs, m)
        members = {x for lo, hi in ivs for x in range(lo, hi + 1)}
        assert spec.nonempty() == any(x % m == 0 for x in members)
        for neg in (False, True):
            for n in range(0, 5):
                for digits in ("".join(p) for p in itertools.product("0123456789", repeat=n)):
                    if n > 2 and rng.random() < 0.9:
                        continue
                    if len(digits) > 1 and digits[0] == "0":
                        continue
                    assert spec.viable(neg, digits) == ((neg, digits) in truth), (
                        ivs,
                        m,
                        neg,
                        digits,
                    )
                    for k in (1, 2, 3):
                        if not spec.safe(neg, digits, k):
                            continue
                        # every continuation that is a prefix of a member is viable
                        for tail in itertools.product("0123456789", repeat=k):
                            d = digits + "".join(tail)
                            if d[0] == "0" and len(d) > 1:
                                continue
                            if any(str(abs(x)).startswith(d) and (x < 0) == neg for x in members):
                                assert (neg, d) in truth, (ivs, m, neg, digits, k, d)


WALK_SCHEMAS: list[Any] = [
    {"type": "integer", "multipleOf": 1024},
    {"type": "integer", "multipleOf": 12345, "minimum": -30000, "maximum": 40000},
    {"type": "array", "items": {"type": "integer", "multipleOf": 4096}, "maxItems": 4},
    {
        "type": "object",
        "properties": {"a": {"type": "integer", "multipleOf": 96}, "b": {"type": "string"}},
        "required": ["a"],
    },
    {"anyOf": [{"type": "integer", "multipleOf": 1024}, {"type": "integer", "maximum": 5}]},
    {"type": "integer", "multipleOf": 65536, "minimum": 0, "maximum": 10**6},
    {"type": "array", "items": {"type": "integer", "multipleOf": 128, "maximum": -1}},
    # a number entered inside a token (``:12``, ``,1``) whose prefix reaches no multiple
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "multipleOf": 65536, "minimum": 1, "maximum": 200000}
        },
        "required": ["a"],
    },
    {
        "type": "array",
        "items": {"type": "integer", "multipleOf": 65536, "minimum": 1, "maximum": 100000},
    },
]


def _walk(compiled: Any, vocab: Vocabulary, rng: random.Random, steps: int) -> str | None:
    """A random walk of the mask (:func:`mask_walk`), digits and number tokens preferred."""

    def choose(m: GrammarMatcher, allowed: list[int], n: int, rng: random.Random) -> int:
        numeric = [t for t in allowed if vocab.token_bytes(t)[:1] in b"0123456789-:,[]}"]
        return rng.choice(numeric if numeric and rng.random() < 0.8 else allowed)

    return mask_walk(compiled, vocab, rng, steps=steps, rounds=steps * 8, stop_p=0.1, choose=choose)


@pytest.mark.parametrize("index", range(len(WALK_SCHEMAS)))
@pytest.mark.parametrize("vocab", [BYTES, MIXED], ids=["bytes", "mixed"])
def test_random_walks_have_no_dead_end_and_validate(index: int, vocab: Vocabulary) -> None:
    schema = WALK_SCHEMAS[index]
    compiled = _compile(schema, vocab)
    rng = random.Random(500 + index)
    walk = functools.partial(_walk, compiled, vocab, rng, 12)
    assert_walks_validate(walk, jsonschema.Draft202012Validator(schema).is_valid, 5, 1)


def test_inside_structures_agree_with_jsonschema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "multipleOf": 1024, "minimum": -4096},
            "b": {"type": "array", "items": {"type": "integer", "multipleOf": 12345}},
        },
        "additionalProperties": False,
    }
    compiled = _compile(schema)
    v = jsonschema.Draft202012Validator(schema)
    for a in (-5120, -4096, -1024, 0, 1, 1023, 1024, 2048, 2049, 10**6 * 1024):
        for b in ([], [0], [12345, -24690], [12345, 1], [123450, 12346]):
            for doc in ({"a": a, "b": b}, {"a": a}, {"b": b}):  # (schema order)
                text = json.dumps(doc, separators=(",", ":"))
                assert accepts(compiled, text) == v.is_valid(doc), text


def test_no_multiple_in_range_is_empty() -> None:
    with pytest.raises(UnsatisfiableGrammarError):
        _compile({"type": "integer", "multipleOf": 1024, "minimum": 1, "maximum": 1000})
    compiled = _compile(
        {
            "type": "array",
            "items": {"type": "integer", "multipleOf": 1024, "minimum": 1, "maximum": 1000},
        }
    )
    assert accepts(compiled, "[]")
    assert not accepts(compiled, "[0]")


def test_serialized_grammar_keeps_the_check() -> None:
    compiled = _compile({"type": "integer", "multipleOf": 4096})
    again = CompiledGrammar.deserialize(compiled.serialize(), BYTES)
    assert isinstance(again.program, ResidueProgram)
    assert accepts(again, "8192")
    assert not accepts(again, "8191")


def test_refused_beside_run_time_unique_items() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "multipleOf": 1024},
            "u": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        },
    }
    with pytest.raises(UnsupportedFeatureError) as err:
        _compile(schema)
    assert err.value.feature == "multipleOf"


def test_small_moduli_keep_the_automaton() -> None:
    """Where the exact automaton is small (``7``, ``10**9``: a few residue classes) there is
    no mark, and a grammar without marks (printed) keeps the automaton too."""
    for m in (3, 7, 10**9):
        grammar, _ = schema_to_grammar({"type": "integer", "multipleOf": m}, marks=[])
        assert not grammar.marks, m
    grammar, _ = schema_to_grammar({"type": "integer", "multipleOf": 1024}, marks=[])
    assert [mk.kind for mk in grammar.marks] == ["residue"]


def test_constraint_json_checks_at_run_time_and_refuses_printing() -> None:
    from formcast import constraints as fc

    c = fc.json({"type": "integer", "multipleOf": 1024})
    compiled = COMPILERS[id(BYTES)].compile(c)
    assert accepts(compiled, "2048")
    assert not accepts(compiled, "2047")
    with pytest.raises(UnsupportedFeatureError) as err:
        c.to_gbnf()
    assert err.value.feature == "multipleOf"


WS_VOCAB = byte_vocab(
    [b" 1", b" 12", b" 1024", b"\n ", b" -", b", 2", b"[ 4", b": 6", b" 0", b"0\n"]
)
COMPILERS[id(WS_VOCAB)] = GrammarCompiler(WS_VOCAB, cache_size=0)


@pytest.mark.parametrize(
    ("schema", "options"),
    [
        (
            {"type": "array", "items": {"type": "integer", "multipleOf": 1024}},
            {"whitespace": "flexible"},
        ),
        (
            {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 12345}}},
            {"indent": 2},
        ),
        # the digit bound is what stops the digits: at most 6 (raised past 12345's length)
        ({"type": "integer", "multipleOf": 12345}, {"max_integer_digits": 5}),
    ],
)
def test_walks_with_whitespace_and_a_tight_digit_bound(schema: Any, options: Any) -> None:
    from formcast.frontends.jsonschema.options import JsonSchemaOptions

    opts = JsonSchemaOptions(**options)
    for vocab in (WS_VOCAB, MIXED):
        compiled = COMPILERS[id(vocab)].compile_json_schema(schema, opts)
        rng = random.Random(len(str(options)))
        walk = functools.partial(_walk, compiled, vocab, rng, 10)
        assert_walks_validate(walk, jsonschema.Draft202012Validator(schema).is_valid, 4, 1)
    if "max_integer_digits" in options:
        # (the bound is raised to one digit beyond the modulus: 6 digits, up to 999,990)
        compiled = COMPILERS[id(BYTES)].compile_json_schema(schema, opts)
        xs = [*range(-1_100_000, 1_100_001, 97), *(12345 * k for k in range(-90, 91))]
        for x in xs:
            want = x % 12345 == 0 and len(str(abs(x))) <= 6
            assert accepts(compiled, str(x)) == want, x
        assert not accepts(compiled, "1234500")


def _decimal_ok(text: str, m: Fraction, bounds: dict[str, str]) -> bool:
    """formcast's constrained-number language (exponent-free, canonical integer part, no
    negative zero, at most 20 digits each side) and exact arithmetic."""
    if not re.fullmatch(r"-?(0|[1-9][0-9]{0,19})(\.[0-9]{1,20})?", text):
        return False
    v = Fraction(Decimal(text))
    if text.startswith("-") and v == 0:
        return False
    b = {k: Fraction(Decimal(x)) for k, x in bounds.items()}
    if ("minimum" in b and v < b["minimum"]) or ("maximum" in b and v > b["maximum"]):
        return False
    if "exclusiveMinimum" in b and v <= b["exclusiveMinimum"]:
        return False
    if "exclusiveMaximum" in b and v >= b["exclusiveMaximum"]:
        return False
    return (v / m).denominator == 1


def _decimal_texts(m: Fraction, rng: random.Random) -> list[str]:
    out: list[str] = []
    for k in [*range(-30, 31), *(rng.randrange(-(10**9), 10**9) for _ in range(60))]:
        v = Decimal(k * m.numerator) / Decimal(m.denominator)
        for d in (v, v + Decimal("0.01"), v - Decimal("0.5"), v + Decimal("0.001")):
            s = format(d, "f")
            out += [s, s + "0", s + "00"] if "." in s else [s, s + ".0", s + ".5", s + ".00"]
    out += ["-0", "-0.0", "0.0", "00.5", "1.", ".5", "-", "", "1e3"]
    return out


@pytest.mark.parametrize("m", ["1024", "6.75", "0.0123", "12.5", "77"])
@pytest.mark.parametrize(
    "bounds",
    [
        {},
        {"minimum": "-100", "maximum": "5000.5"},
        {"minimum": "0.5"},
        {"exclusiveMinimum": "-2048", "exclusiveMaximum": "13.5"},
        {"exclusiveMinimum": "0", "maximum": "0.0246"},
    ],
)
def test_decimals_agree_with_exact_arithmetic(m: str, bounds: dict[str, str]) -> None:
    mf = Fraction(Decimal(m))
    schema: dict[str, Any] = {"type": "number", "multipleOf": json.loads(m)}
    schema.update({k: json.loads(v) for k, v in bounds.items()})
    texts = _decimal_texts(mf, random.Random(m))
    for v in bounds.values():
        x = Decimal(v)
        texts += [format(x + d, "f") for d in (Decimal(0), Decimal("0.0123"), Decimal("-6.75"))]
    try:
        compiled = _compile(schema)
    except UnsatisfiableGrammarError:  # no multiple in the range (1024 in (0, 0.0246])
        assert not any(_decimal_ok(text, mf, bounds) for text in texts)
        return
    if m in ("1024", "6.75", "0.0123") and bounds != {"exclusiveMinimum": "0", "maximum": "0.0246"}:
        assert isinstance(compiled.program, ResidueProgram), m
    for text in texts:
        assert accepts(compiled, text) == _decimal_ok(text, mf, bounds), (schema, text)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number", "multipleOf": 2.5, "minimum": 0.5},
        {"type": "number", "multipleOf": 6.75, "maximum": -0.5},
        {"type": "number", "multipleOf": 0.0123, "exclusiveMinimum": 0, "maximum": 1},
        {"type": "integer", "multipleOf": 1024, "minimum": -1000},
        {"type": "number", "multipleOf": 1024},
        {"type": "number", "multipleOf": 1024, "exclusiveMinimum": -2048, "maximum": 5000},
        {"type": "number", "multipleOf": 6.75, "exclusiveMaximum": 20.25},
        {"type": "number", "multipleOf": 1024, "exclusiveMinimum": 1024, "maximum": 2100},
    ],
)
def test_masks_equal_accept_token_after_prefixes(schema: Any) -> None:
    """At the start, inside the integer part, after the point and deep in the fraction, the
    mask is exactly what ``accept_token`` accepts (a decimal's ``0`` must lead to a multiple
    in ``[0, 1)``; ``-`` to a negative multiple)."""
    for vocab in (BYTES, MIXED):
        compiled = _compile(schema, vocab)
        stops = set(vocab.stop_token_ids)
        prefixes = ("", "-", "0", "1", "12", "0.", "0.0", "1.", "-0.", "13.5", "-6.7", "204", "-20")
        deep = ("1024." + "0" * 19, "20.25" + "0" * 17)  # (the fraction digit bound: 20)
        for prefix in (*prefixes, "20.2", "20", *deep):
            m = GrammarMatcher(compiled)
            if not m.accept_bytes(prefix.encode()):
                continue
            allowed = set(m.allowed_token_ids().tolist())
            assert allowed - stops or m.is_accepting(), (schema, prefix)
            for t in range(vocab.vocab_size):
                if t not in stops:
                    twin = m.fork()
                    assert twin.accept_token(t) == (t in allowed), (schema, prefix, t)
                    if t in allowed:  # and no dead end one token on
                        after = set(twin.allowed_token_ids().tolist())
                        assert after - stops or twin.is_accepting(), (schema, prefix, t)


DECIMAL_WALKS: list[Any] = [
    {"type": "number", "multipleOf": 6.75},
    {"type": "array", "items": {"type": "number", "multipleOf": 0.0123, "maximum": 2}},
    {"type": "number", "multipleOf": 2.5, "minimum": 0.5, "maximum": 1000, "not": {"const": 5}},
]


@pytest.mark.parametrize("index", range(len(DECIMAL_WALKS)))
def test_decimal_walks_have_no_dead_end(index: int) -> None:
    schema = DECIMAL_WALKS[index]
    compiled = _compile(schema, MIXED)
    rng = random.Random(900 + index)
    finished = 0
    for _ in range(4):
        text = _walk(compiled, MIXED, rng, 10)
        if text is not None:
            finished += 1
            value = json.loads(text, parse_float=Decimal)
            items = value if isinstance(value, list) else [value]
            mf = Fraction(Decimal(str(schema.get("multipleOf") or schema["items"]["multipleOf"])))
            assert all((Fraction(x) / mf).denominator == 1 for x in items), text
    assert finished >= 1
