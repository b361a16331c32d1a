"""``pattern`` + length bounds as counted repeats when the pattern has several variable-width
parts (issue #29 item 8: SchemaStore sigmacv, ``^data:image/(jpeg|png|webp|gif);base64,
[A-Za-z0-9+/]+={0,2}$`` with ``maxLength: 1400000``, which passed ``max_automaton_states``).

:func:`~formcast.frontends.jsonschema.regexlang.restrict_length` splits small finite choices
(an alternation, ``x{a,b}``) into one concatenation per choice, so the one unbounded
repetition left gets its count from the length bounds.  Oracles: Python ``re`` with the
length check on every short string of a small alphabet, and ``jsonschema`` end to end.
"""

from __future__ import annotations

import itertools
import json
import re

import pytest

import jsonschema
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.jsonschema.regexlang import node_matches, pattern_node, restrict_length
from formcast.testing.reference import ReferenceRecognizer

PATTERNS = [
    r"^x(ab|c);[ab]+=?$",
    r"^(a|bb)(c|ab)a*$",
    r"^a{1,3}b+c{0,2}$",
    r"^(ab|c)c{1,2}[abc]*$",
]
BOUNDS = [(0, 3), (2, 4), (3, 5), (5, 6), (0, None), (4, None)]


def _strings() -> list[str]:
    out = [""]
    for n in range(1, 7):
        out += ["".join(t) for t in itertools.product("abcx;=", repeat=n) if n <= 4 or "x" in t]
    return out


@pytest.mark.parametrize("p", PATTERNS)
def test_restrict_length_with_several_variable_parts_is_exact(p: str) -> None:
    node = pattern_node(p)
    rx = re.compile(p)
    strings = _strings()
    for lo, hi in BOUNDS:
        got = restrict_length(node, lo, hi)
        assert got is not None, (p, lo, hi)
        for s in strings:
            want = rx.search(s) is not None and lo <= len(s) and (hi is None or len(s) <= hi)
            assert node_matches(got, s) == want, (p, lo, hi, s)


def test_data_url_pattern_with_a_huge_max_length() -> None:
    p = r"^data:image\/(jpeg|png|webp|gif);base64,[A-Za-z0-9+/]+={0,2}$"
    for max_len in (1_400_000, 27):
        schema = {"type": "string", "maxLength": max_len, "pattern": p}
        grammar, _ = schema_to_grammar(schema)
        rr = ReferenceRecognizer(grammar)
        validator = jsonschema.Draft7Validator(schema)
        for v in [
            "data:image/png;base64,AAAA",
            "data:image/png;base64,AAAA==",
            "data:image/jpeg;base64,AA==",
            "data:image/jpeg;base64,AAA==",
            "data:image/jpeg;base64,A===",
            "data:image/gif;base64,",
            "data:image/bmp;base64,AAAA",
            "data:image/webp;base64,AB+/",
        ]:
            assert rr.matches(json.dumps(v)) == validator.is_valid(v), (max_len, v)
