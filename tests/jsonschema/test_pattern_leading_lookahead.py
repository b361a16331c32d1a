"""``pattern`` with lookaheads right after ``^`` (issue #29 item 8): ``^(?!X)(?=Y)R`` is the
string constraint "``^(?:Y)`` and ``^(?:R)`` match, ``^(?:X)`` does not" — exact under
``pattern``'s search semantics — compiled as positive and negated patterns.  A lookahead
anywhere else, or one whose scope a top-level ``|`` ends, still fails closed naming
``pattern``.  Oracle: ``jsonschema`` (Python ``re.search``) on fixed and random strings.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jsonschema
from formcast.errors import UnsupportedFeatureError
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.testing.reference import ReferenceRecognizer

#: real shapes (SchemaStore: chrome-extension, emmet, pre-commit-config, bukkit-plugin,
#: bitrise, chisel-slices, venvironment), and two synthetic ones
PATTERNS = [
    r"^(?!@@)[\w@]+$",
    r"^(?!variables$).+$",
    r"^(?!(?:meta|local)$).*$",
    r"^(?!org\.bukkit\.)([a-zA-Z_$][a-zA-Z\d_$]*\.)*[a-zA-Z_$][a-zA-Z\d_$]*$",
    r"^(?!bundle::)(?!with$).*",
    r"^(?=[A-Z])[a-zA-Z0-9.,;()\s]*[^.,;!?\s]$",
    r"^(?!.*(\{x\}|[<>])).*\.[bB]$",
    r"^(?=a)(?!ab)",
    r"^(?!\)a|[(])[()ab]+",
]
WORDS = [
    "",
    "a",
    "ab",
    "abc",
    "b",
    "@@x",
    "@x",
    "variables",
    "variablesx",
    "meta",
    "local",
    "metax",
    "org.bukkit.X",
    "org.bukk",
    "bundle::x",
    "with",
    "withx",
    "A",
    "Ab.",
    "Ab c",
    "x.b",
    "{x}.b",
    "y.B",
    "<.b",
    "]a",
    "b]",
    ")a",
    "(b",
    "a)",
]
ALPHABET = "ab@.{}<>]()xX:Bw$ "  # no "\n": Python's "$" also matches before a final newline


def _recognizer(p: str) -> ReferenceRecognizer:
    grammar, ignored = schema_to_grammar({"type": "string", "pattern": p})
    assert ignored == []
    return ReferenceRecognizer(grammar)


def _check(p: str, rr: ReferenceRecognizer, words: list[str]) -> None:
    validator = jsonschema.Draft202012Validator({"type": "string", "pattern": p})
    for w in words:
        text = json.dumps(w, ensure_ascii=False)
        assert rr.matches(text) == validator.is_valid(w), (p, w)


@pytest.mark.parametrize("p", PATTERNS)
def test_leading_lookaheads_agree_with_jsonschema(p: str) -> None:
    _check(p, _recognizer(p), WORDS)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.text(ALPHABET, max_size=8), min_size=40, max_size=40))
def test_leading_lookaheads_on_random_strings(words: list[str]) -> None:
    for p in PATTERNS:
        _check(p, _RECOGNIZERS.setdefault(p, _recognizer(p)), words)


_RECOGNIZERS: dict[str, ReferenceRecognizer] = {}


@pytest.mark.parametrize("p", [r"^(?!a)b|c", r"^a(?!b)", r"(?!a)b"])
def test_other_lookaheads_fail_closed(p: str) -> None:
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"type": "string", "pattern": p})
    assert e.value.feature == "pattern"
