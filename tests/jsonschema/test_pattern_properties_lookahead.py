"""Leading lookaheads in every pattern, ``patternProperties`` keys included (issue #29 item 8).

``^(?!X)(?=Y)R`` is compiled by :func:`~formcast.frontends.jsonschema.regexlang.pattern_node`
itself (the automata of the parts intersected and subtracted), so that ``patternProperties``
keys of real schemas (SchemaStore: ``^(?!@@)[\\w@]+$``, ``^(?!variables$).+$``,
``^(?!\\.{1,2}$)(?!.*\\/)[a-zA-Z0-9\\-\\._]+$``...) compile exactly.  Oracles: Python ``re``
(these patterns mean the same in ECMA 262) on every short string of a small alphabet, and
``jsonschema`` end to end.
"""

from __future__ import annotations

import itertools
import json
import re

import pytest

import jsonschema
from formcast.errors import UnsupportedFeatureError
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.jsonschema.regexlang import node_matches, pattern_node
from formcast.testing.reference import ReferenceRecognizer

PATTERNS = [
    r"^(?!@@)[\w@]+$",
    r"^(?!variables$).+$",
    r"^(?!\.{1,2}$)(?!.*\/)[a-zA-Z0-9\-\._]+$",
    r"^(?!pattern$).*$",
    r"^(?!bundle::)(?!with$).*",
    r"^(?!relationships$|links$)\w[-\w_]*$",
    r"^(?=a)(?!ab)",
    r"^(?=.*b)(?!.*bb)a",
]
ALPHABET = "a@b.:/w"


def _strings(max_len: int) -> list[str]:
    out = [""]
    for n in range(1, max_len + 1):
        out += ["".join(t) for t in itertools.product(ALPHABET, repeat=n)]
    return [*out, "variables", "pattern", "with", "bundle::x", "links", "relationships", "@@x"]


@pytest.mark.parametrize("p", PATTERNS)
def test_pattern_node_agrees_with_re(p: str) -> None:
    node = pattern_node(p)
    rx = re.compile(p)
    for s in _strings(4):
        assert node_matches(node, s) == (rx.search(s) is not None), (p, s)


@pytest.mark.parametrize("p", PATTERNS[:6])
def test_pattern_properties_with_lookahead_vs_jsonschema(p: str) -> None:
    schema = {
        "type": "object",
        "patternProperties": {p: {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    }
    grammar, _ = schema_to_grammar(schema)
    rr = ReferenceRecognizer(grammar)
    validator = jsonschema.Draft202012Validator(schema)
    keys = [
        "a",
        "@@",
        "@a",
        "variables",
        "variablesx",
        ".",
        "..",
        "...",
        "a/b",
        "pattern",
        "with",
        "bundle::",
        "links",
        "linksx",
        "w-x",
        "",
    ]
    for k in keys:
        for v in (1, "s"):
            doc = {k: v}
            text = json.dumps(doc, separators=(",", ":"))
            assert rr.matches(text) == validator.is_valid(doc), (p, text)


def test_other_lookaround_still_fails_closed() -> None:
    # (``^(?!.*\bx\b)`` compiles now: word boundaries are exact, test_pattern_word_boundary.py)
    for p in (r"a(?!b)", r"^a|(?!b)c", r"(?<=a)b", r"^(?!.*(?<=x)y)"):
        with pytest.raises(UnsupportedFeatureError):
            schema_to_grammar({"type": "object", "patternProperties": {p: {"type": "integer"}}})
