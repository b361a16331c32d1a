"""``multipleOf`` automata keyed by residue classes, not residues (issue #29 item 6).

:func:`~formcast.frontends.jsonschema.numbers.multiple_of_dfa` merges the residues modulo ``M``
that have the same futures (``_residue_classes``): ``multipleOf: 10000`` needs 5 classes, where
10,000 residues ran past ``max_automaton_states``.  Checked against exact arithmetic on every
integer of a range and on decimal spellings, and end to end against ``jsonschema``.
"""

from __future__ import annotations

import itertools
import json
from decimal import Decimal
from fractions import Fraction

import pytest

import jsonschema
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.jsonschema.numbers import _residue_classes, multiple_of_dfa
from formcast.testing.reference import ReferenceRecognizer

MODULI = [
    "256",
    "1024",
    "20",
    "40",
    "100",
    "250",
    "1000",
    "10000",
    "12",
    "96",
    "7",
    "1000000",
    "0.05",
    "2.5",
]


def _integer_strings() -> list[str]:
    out = [str(v) for v in range(-2100, 2100)]
    out += [str(v) for v in range(9_900, 10_100)]
    out += [str(k * 10**6 + d) for k in (1, 3, 17) for d in (-1000, -1, 0, 1, 10, 1000, 10**5)]
    out += ["0", "-0", "00", "010", "-", ""]
    return out


def _decimal_strings() -> list[str]:
    out: list[str] = []
    for i, f in itertools.product(
        ["0", "1", "2", "7", "12", "25", "100"], ["", "0", "5", "05", "50", "25", "500", "001"]
    ):
        out.append(f"{i}.{f}" if f else i)
        out.append(f"-{i}.{f}" if f else f"-{i}")
    return out


def _is_multiple(s: str, m: Fraction, integer_only: bool) -> bool:
    try:
        v = Fraction(Decimal(s))
    except ArithmeticError:
        return False
    canonical = s not in ("", "-") and not s.startswith(("00", "-00")) and s != "-0"
    canonical = canonical and not (s.lstrip("-").startswith("0") and s.lstrip("-")[1:2].isdigit())
    canonical = canonical and not s.endswith(".")
    if integer_only and "." in s:
        return False
    return canonical and (v / m).denominator == 1


@pytest.mark.parametrize("m", MODULI)
@pytest.mark.parametrize("integer_only", [True, False])
def test_class_automaton_is_exact(m: str, integer_only: bool) -> None:
    mf = Fraction(Decimal(m))
    if integer_only and mf.denominator != 1:
        pytest.skip("integer multipleOf of a fraction: the integer modulus applies")
    d = multiple_of_dfa(mf, integer_only)
    strings = _integer_strings() + ([] if integer_only else _decimal_strings())
    for s in strings:
        if s == "-0" or s.startswith("-0."):
            continue  # "-0" spellings: the number ranges decide those, not this automaton
        assert d.matches(s) == _is_multiple(s, mf, integer_only), (m, integer_only, s)


def test_residues_with_the_same_future_share_a_class() -> None:
    key = _residue_classes(10_000)
    assert len({key(v) for v in range(10_000)}) == 5  # by the trailing zeros, 0 to 4
    key = _residue_classes(1024)  # a digit string shorter than 10 reaches few residues
    assert len({key(v) for v in range(1024)}) == 159
    key = _residue_classes(12)  # classes of v mod 3 times what the last two digits allow
    assert len({key(v) for v in range(12)}) == 7


@pytest.mark.parametrize("m", [10_000, 10**6, 500, 3, 0.25])
def test_large_powers_of_ten_compile_and_agree(m: float) -> None:
    for typ in ("integer", "number"):
        schema = {"type": typ, "multipleOf": m}
        grammar, _ = schema_to_grammar(schema)
        rr = ReferenceRecognizer(grammar)
        validator = jsonschema.Draft202012Validator(schema)
        for x in [
            0,
            1,
            3,
            250,
            500,
            750,
            1000,
            9999,
            10000,
            20000,
            10**6,
            3 * 10**6,
            -(10**6),
            12 * 10**6 + 500,
            2.5,
            0.25,
            1.5,
        ]:
            text = json.dumps(x)
            if typ == "integer" and isinstance(x, float):
                continue
            assert rr.matches(text) == validator.is_valid(x), (schema, text)
