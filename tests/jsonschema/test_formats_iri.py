"""``iri`` and ``iri-reference`` are RFC 3987 exactly (formats._resource): RFC 3986's grammar
with ``ucschar`` among the unreserved characters and ``iprivate`` in the query only.

Oracles: the JSON-Schema-Test-Suite's ``optional/format`` cases of both formats (every draft),
through formcast's IR (the code-point automaton the grammar is built from) and through the
format's Python regex; RFC 3987's character ranges at their edges; the ``uri`` formats are the
same language as before (an IRI without non-ASCII characters is a URI).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from formcast.automata import charfa
from formcast.frontends.jsonschema import formats as F
from formcast.ir.nodes import CharSet, repeat

SUITE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "JSON-Schema-Test-Suite"


def _dfa(name: str) -> charfa.CharDFA:
    node = F.format_node(name)
    assert node is not None
    return charfa.dfa_from_node(node)


def test_suite_cases() -> None:
    if not SUITE.is_dir():
        pytest.skip(f"JSON-Schema-Test-Suite not found at {SUITE}")
    dfas = {name: _dfa(name) for name in ("iri", "iri-reference")}
    seen = 0
    for path in sorted(SUITE.glob("tests/*/optional/format/iri*.json")):
        for group in json.loads(path.read_text(encoding="utf-8")):
            fmt = group["schema"].get("format")
            for case in group["tests"]:
                if fmt not in dfas or not isinstance(case["data"], str):
                    continue
                text = case["data"]
                ours = dfas[fmt].matches(text)
                assert ours is case["valid"], (path.name, text)
                assert ours is (re.fullmatch(F.FORMATS[fmt].regex, text) is not None), text
                seen += 1
    assert seen >= 20


@pytest.mark.parametrize(
    ("text", "iri"),
    [
        ("http://ex.com/\u00a0", True),  # first ucschar
        ("http://ex.com/\u009f", False),  # a C1 control is no ucschar
        ("http://ex.com/\ud7ff", True),
        ("http://ex.com/\uf8ff", False),  # iprivate outside the query
        ("http://ex.com/?\uf8ff", True),  # iprivate in the query
        ("http://ex.com/#\uf8ff", False),  # ... but not in the fragment
        ("http://ex.com/\ufdd0", False),  # a noncharacter
        ("http://ex.com/\U0001fffd", True),
        ("http://ex.com/\U0001fffe", False),
        ("http://ex.com/\U000e1000", True),
        ("http://ex.com/\U000e0fff", False),
        ("http://ex.com/?\U0010fffd", True),
        ("http://[v1.\u00e9]/", False),  # IPvFuture stays ASCII
        ("h\u00e9ttp://ex.com/", False),  # so does the scheme
        ("http://\u00fcser@h\u00f6st:80/p\u00e4th", True),
    ],
)
def test_rfc_3987_ranges(text: str, iri: bool) -> None:
    assert _dfa("iri").matches(text) is iri
    assert _dfa("iri-reference").matches(text) is iri


def test_an_ascii_iri_is_a_uri() -> None:
    ascii_text = charfa.dfa_from_node(repeat(CharSet(((0, 0x7F),)), 0, None))
    for iri, uri in (("iri", "uri"), ("iri-reference", "uri-reference")):
        ascii_iri = charfa.intersect(_dfa(iri), ascii_text)
        assert charfa.difference(ascii_iri, _dfa(uri)).is_empty()
        assert charfa.difference(_dfa(uri), ascii_iri).is_empty()
