"""The JSON Schema front-end's process-wide memos (the any-number IR, the resolver of a
subschema without an identifier) change neither the grammar nor the fuel a compile charges."""

from __future__ import annotations

from typing import Any

from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.jsonschema.numbers import any_number
from formcast.limits import WorkBudget, compile_scope

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "number"},
        "free": {},
        "inner": {"$id": "http://example.com/inner", "type": "object", "properties": {"x": {}}},
        "again": {"$ref": "http://example.com/inner"},
    },
    "required": ["n", "again"],
}


def _lower() -> tuple[str, int]:
    budget = WorkBudget(1 << 60)
    with compile_scope(budget):
        grammar, _ = schema_to_grammar(_SCHEMA, marks=[])
    return repr(grammar), budget.used


def test_any_number_is_memoized_and_charges_a_fresh_build() -> None:
    assert any_number(20, 20, 5) is any_number(20, 20, 5)
    fresh = WorkBudget(1 << 60)
    with compile_scope(fresh):
        any_number(11, 12, 3)  # (a key no other test uses: built here)
    hit = WorkBudget(1 << 60)
    with compile_scope(hit):
        any_number(11, 12, 3)
    assert fresh.used == hit.used > 0


def test_repeated_lowering_same_grammar_same_fuel() -> None:
    first = _lower()
    assert first == _lower()
    assert "any_number" in first[0]


def test_key_exclusion_is_memoized_by_the_set_of_words() -> None:
    from formcast.frontends.jsonschema.keys import not_in_set

    words = ["width", "height", "w", "radius", "é"]
    node = not_in_set(words)
    assert not_in_set([*reversed(words), "w"]) is node
    fresh = WorkBudget(1 << 60)
    with compile_scope(fresh):
        not_in_set(["memo-test-key-a", "memo-test-key-b"])
    hit = WorkBudget(1 << 60)
    with compile_scope(hit):
        not_in_set(["memo-test-key-b", "memo-test-key-a"])
    assert fresh.used == hit.used > 0
