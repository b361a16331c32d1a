"""Per-emitter memo of ``Emitter._dfa_node`` (issue #31 TTFM p99, MaskBench o82766).

One ``pattern`` + ``maxLength`` whose DFA is too large for state elimination becomes
right-linear rules; used in three properties, ``string_dfa``'s cache returns the same CharDFA
and the memo emits those rules once (before: three copies).  Oracle: ``jsonschema``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import jsonschema
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.jsonschema.emit import Emitter
from formcast.testing.reference import ReferenceRecognizer

CURIE = {
    "type": "string",
    "pattern": r"^([a-z0-9-]+):([a-z0-9\.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$",
    "maxLength": 146,
}
SCHEMA = {
    "type": "object",
    "properties": {"a": CURIE, "b": dict(CURIE), "c": dict(CURIE)},
    "required": ["a", "b", "c"],
    "additionalProperties": False,
}


def _dfa_rule_stems(grammar: object) -> set[str]:
    """The distinct ``strdfa_<n>`` stems of the right-linear rules in ``grammar``."""
    names = [r.name for r in grammar.rules]  # type: ignore[attr-defined]
    return {n.split("_")[0] + "_" + n.split("_")[1] for n in names if n.startswith("strdfa_")}


def test_repeated_pattern_dfa_emits_its_rules_once() -> None:
    grammar, _ = schema_to_grammar(SCHEMA)
    single, _ = schema_to_grammar(CURIE)
    stems = _dfa_rule_stems(grammar)
    assert len(stems) == 1, stems
    count = sum(r.name.startswith("strdfa_") for r in grammar.rules)
    assert count == sum(r.name.startswith("strdfa_") for r in single.rules)
    assert count > 0


def test_repeated_pattern_matches_jsonschema() -> None:
    grammar, _ = schema_to_grammar(SCHEMA)
    rr = ReferenceRecognizer(grammar)
    validator = jsonschema.Draft4Validator(SCHEMA)
    good = "ab:c.d::e"
    long_ok, too_long = "a" * 141 + ":b::c", "a" * 142 + ":b::c"  # maxLength 146
    values = [good, "ab:c:d:e", "a:b:c", "A:b::c", "a:b::", ":b::c", long_ok, too_long]
    docs = [{"a": v, "b": w, "c": good} for v in values for w in values[:3]]
    docs += [{"a": good, "b": good, "c": v} for v in values]
    assert any(validator.is_valid(d) for d in docs)
    assert not all(validator.is_valid(d) for d in docs)
    for doc in docs:
        text = json.dumps(doc, separators=(",", ":"))
        assert rr.matches(text) == validator.is_valid(doc), doc


NON_INTEGER = {"type": "number", "not": {"type": "integer"}}
NUM_SCHEMA = {
    "type": "object",
    "properties": {"x": NON_INTEGER, "y": dict(NON_INTEGER), "z": {"type": "number"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}


def test_equal_number_schemas_are_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    uncached = Emitter._number_node_uncached

    def spy(self: Emitter, s: Any, max_int: int | None, max_frac: int | None) -> Any:
        calls.append(repr(s))
        return uncached(self, s, max_int, max_frac)

    monkeypatch.setattr(Emitter, "_number_node_uncached", spy)
    schema_to_grammar(NUM_SCHEMA)
    assert calls
    assert len(calls) == len(set(calls))


def test_memoized_numbers_match_jsonschema() -> None:
    grammar, _ = schema_to_grammar(NUM_SCHEMA)
    rr = ReferenceRecognizer(grammar)
    validator = jsonschema.Draft7Validator(NUM_SCHEMA)  # 1e3 and 3.0 are integers
    values = ["1.5", "2", "-0.25", "1e3", "0", "3.0", "-7"]  # 1.5e-1: formcast refuses (base too)
    docs = [f'{{"x":{a},"y":{b}}}' for a in values for b in values]
    docs += [f'{{"x":1.5,"y":{b},"z":{b}}}' for b in values]
    for text in docs:
        assert rr.matches(text) == validator.is_valid(json.loads(text)), text
