"""The regular-language toolbox behind the JSON Schema front-end, checked by brute force.

Code-point automata (:mod:`charfa`), the regex helpers (search semantics, length restriction),
number ranges / multipleOf, and the JSON string encodings — each against Python's ``re``,
``decimal`` arithmetic or ``json`` over every short string of a small alphabet.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from decimal import Decimal
from fractions import Fraction

import pytest

from formcast.automata import charfa
from formcast.errors import LimitExceededError
from formcast.frontends.jsonschema.numbers import (
    decimal_range,
    integer_range,
    multiple_of_dfa,
    split_decimal,
)
from formcast.frontends.jsonschema.regexlang import (
    length_bounds,
    node_matches,
    pattern_node,
    restrict_length,
    split_top_level,
)
from formcast.frontends.jsonschema.strings import any_unit, encode_node, encode_text
from formcast.frontends.regex import parse_regex
from formcast.testing.reference import ReferenceRecognizer


def strings(alphabet: str, max_len: int) -> list[str]:
    return ["".join(t) for n in range(max_len + 1) for t in itertools.product(alphabet, repeat=n)]


SMALL = strings("ab0", 5)

PATTERNS = [r"a*b", r"(ab|a)*", r"[ab]{2,3}", r"a?b?0?", r"(a|b)*a(a|b)", r"", r"[^a]*", r"0|a+0"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_dfa_and_back_to_ir(pattern: str) -> None:
    dfa = charfa.dfa_from_node(parse_regex(pattern))
    node = charfa.dfa_to_node(dfa)
    start, rules = charfa.dfa_to_rules(dfa, "s")
    from formcast.ir.nodes import Grammar, Rule

    by_rules = ReferenceRecognizer(Grammar((Rule("top", start), *rules), "top"))
    rr = ReferenceRecognizer.for_node(node)
    for s in SMALL:
        expected = re.fullmatch(pattern, s) is not None
        assert dfa.matches(s) == expected, s
        assert rr.matches(s) == expected, s
        assert by_rules.matches(s) == expected, s


def test_boolean_operations() -> None:
    x = charfa.dfa_from_node(parse_regex(r"[ab]*a[ab]*"))
    y = charfa.dfa_from_node(parse_regex(r"[ab0]{0,3}"))
    ops = {
        "and": charfa.intersect(x, y),
        "or": charfa.union(x, y),
        "minus": charfa.difference(x, y),
        "not": charfa.complement(x),
    }
    for s in SMALL:
        a, b = x.matches(s), y.matches(s)
        assert ops["and"].matches(s) == (a and b)
        assert ops["or"].matches(s) == (a or b)
        assert ops["minus"].matches(s) == (a and not b)
        assert ops["not"].matches(s) == (not a)
    assert charfa.complement(charfa.CharDFA([], [])).matches("anything")
    assert charfa.intersect(x, charfa.complement(x)).is_empty()


def test_finite_sets_lengths_and_limits() -> None:
    words = ["ab", "abc", "b", ""]
    d = charfa.finite_set_dfa(words)
    assert all(d.matches(w) for w in words)
    assert not d.matches("a")
    assert charfa.length_bounds(d) == (0, 3)
    ld = charfa.length_dfa(2, 4)
    assert [ld.matches("x" * n) for n in range(6)] == [False, False, True, True, True, False]
    assert charfa.length_bounds(charfa.length_dfa(3, None)) == (3, None)
    with pytest.raises(LimitExceededError):
        charfa.length_dfa(0, 10**6, max_states=1000)
    with pytest.raises(LimitExceededError):
        charfa.dfa_from_node(parse_regex(r"[ab]{500}"), max_states=100)


def test_state_elimination_budget() -> None:
    d = multiple_of_dfa(Fraction(7), integer_only=True)
    with pytest.raises(LimitExceededError):
        charfa.dfa_to_node(d, max_size=50)


@pytest.mark.parametrize(
    "pattern", ["abc", "^a", "b$", "^a|b$", "^(a|b)+$", r"a\$", "[$]", r"\\$", "a|"]
)
def test_pattern_search_semantics(pattern: str) -> None:
    node = pattern_node(pattern)
    for s in strings("ab$\\z", 4):
        assert node_matches(node, s) == (re.search(pattern, s) is not None), (pattern, s)


def test_split_top_level() -> None:
    assert split_top_level(r"a|(b|c)|[|]|\|") == ["a", "(b|c)", "[|]", r"\|"]


@pytest.mark.parametrize(
    "pattern", [r"^[a-z]+$", r"^[a-z]{2,}-\d$", r"^(ab|c)*$", r"^x(a|bb)$", r"^a+|b+$"]
)
def test_restrict_length_is_exact(pattern: str) -> None:
    node = pattern_node(pattern)
    for lo, hi in [(0, 2), (2, 3), (3, None), (1, 1)]:
        r = restrict_length(node, lo, hi)
        if r is None:
            continue
        for s in strings("abx-1", 4):
            expected = re.search(pattern, s) is not None and lo <= len(s) <= (
                hi if hi is not None else 99
            )
            assert node_matches(r, s) == expected, (pattern, lo, hi, s)


def test_length_bounds() -> None:
    assert length_bounds(parse_regex("ab(c|de)f?")) == (3, 5)
    assert length_bounds(parse_regex("a+")) == (1, None)


# -- numbers --------------------------------------------------------------------------------------
NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")
NUM_STRINGS = sorted(s for s in strings("0159-.", 4) if NUMBER.fullmatch(s))


def test_integer_ranges() -> None:
    rng = random.Random(7)
    ints = [s for s in NUM_STRINGS if "." not in s and s != "-0"]
    for _ in range(200):
        lo = rng.choice([None, *range(-120, 120)])
        hi = rng.choice([None, *range(-120, 120)])
        node = integer_range(lo, hi)
        for s in NUM_STRINGS:
            expected = s in ints and (lo is None or int(s) >= lo) and (hi is None or int(s) <= hi)
            assert node_matches(node, s) == expected, (lo, hi, s)
    big = integer_range(10**20, 10**21 + 5)
    assert node_matches(big, str(10**21))
    assert not node_matches(big, str(10**21 + 6))


BOUNDS = ["0", "1", "-1", "0.5", "-0.5", "1.05", "10", "-10", "0.01", "-9.9", "5", "15", "99"]


def test_decimal_ranges() -> None:
    rng = random.Random(11)
    for _ in range(200):
        lo = rng.choice([None, *map(Decimal, BOUNDS)])
        hi = rng.choice([None, *map(Decimal, BOUNDS)])
        lx, hx = rng.random() < 0.5, rng.random() < 0.5
        node = decimal_range(lo, lx, hi, hx)
        for s in NUM_STRINGS:
            v = Decimal(s)
            in_range = (lo is None or (v > lo if lx else v >= lo)) and (
                hi is None or (v < hi if hx else v <= hi)
            )
            negative_zero = s.startswith("-") and v == 0
            assert node_matches(node, s) == (in_range and not negative_zero), (lo, lx, hi, hx, s)


def test_split_decimal() -> None:
    assert split_decimal(Decimal("12.340")) == (12, "34")
    assert split_decimal(Decimal("1E+3")) == (1000, "")
    assert split_decimal(Decimal("0.005")) == (0, "005")


@pytest.mark.parametrize("m", ["5", "2", "3", "0.5", "0.01", "1.5", "7", "0.3"])
@pytest.mark.parametrize("integer_only", [True, False])
def test_multiple_of(m: str, integer_only: bool) -> None:
    mf = Fraction(Decimal(m))
    d = multiple_of_dfa(mf, integer_only)
    for s in NUM_STRINGS:
        if s.startswith("-0") and "." not in s:
            continue
        expected = (Fraction(Decimal(s)) / mf).denominator == 1 and (
            not integer_only or "." not in s
        )
        assert d.matches(s) == expected, (m, integer_only, s)


def test_multiple_of_limit() -> None:
    with pytest.raises(LimitExceededError):
        multiple_of_dfa(Fraction(Decimal("123456.789")), integer_only=False, max_states=1000)


# -- JSON string encodings ------------------------------------------------------------------------
def test_canonical_encoding_matches_json_dumps() -> None:
    for s in [
        "plain",
        'q"uote',
        "back\\slash",
        "\n\r\t\b\f",
        "\u0000\u001f\u007f",
        "é日😀",
        "\u2028",
    ]:
        assert '"' + encode_text(s) + '"' == json.dumps(s, ensure_ascii=False)


def test_encode_node_is_a_homomorphism() -> None:
    node = parse_regex('[a"\\\\\\n\\x01]{1,2}')
    enc = ReferenceRecognizer.for_node(encode_node(node))
    for s in strings('a"\\\n\x01', 2):
        expected = re.fullmatch('[a"\\\\\n\x01]{1,2}', s) is not None
        assert enc.matches(encode_text(s)) == expected, s


def test_any_unit_escapes() -> None:
    rr = ReferenceRecognizer.for_node(any_unit())
    for text in ["a", "é", "\\n", "\\/", "\\u00e9", "\\uD7FF", "\\ud83d\\ude00"]:
        assert rr.matches(text), text
    for text in ['"', "\\", "\\x", "\\ud83d", "\\ude00", "\u0001", "ab"]:
        assert not rr.matches(text), text


def test_undeclared_keys_are_exactly_the_other_strings() -> None:
    """``not_in_set``: the canonical encoding of a key is accepted iff the key is not
    declared, for keys that diverge from a declared one with any kind of character (DEL was
    once left out of the diverging characters, so ``{"d\\x7f": ...}`` was rejected)."""
    from formcast.frontends.jsonschema.keys import not_in_set

    declared = ["dev", "d", "ab", "é", "a\u007fb"]
    rr = ReferenceRecognizer.for_node(not_in_set(declared))
    alphabet = ["d", "e", "v", "a", "b", "\u007f", "\u0001", '"', "\\", "é", "😀", " "]
    keys = ["".join(t) for n in range(4) for t in itertools.product(alphabet, repeat=n)]
    rng = random.Random(7)
    for key in [*rng.sample(keys, 1500), *declared, "dev\u007f", "\u007f", "a\u007f"]:
        assert rr.matches(encode_text(key)) == (key not in declared), repr(key)
