"""The compile fuel charges a repeated subschema once per compile, and stays deterministic.

A format or pattern used by fifty properties, or one ``$ref`` merged into many ``allOf``s, is
built once; its cost was charged fifty times (each hit of the process-wide caches charges what
the build cost), which made real SchemaStore schemas (``template.json``, ``okh.json``,
``claude-code-launch.json``) stop at ``max_compile_work``.  Now the first use in a compile pays
the build and a repeat pays a lookup (:func:`formcast.limits.compile_memo`;
:meth:`~formcast.frontends.jsonschema.algebra.Algebra.conj` memoizes its merges): the fuel of
a compile is still a function of the compile alone (cold or warm caches, the same units).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.limits import WorkBudget, compile_scope

EMAIL = {"type": "string", "pattern": "^[a-z]+(\\.[a-z]+)*@[a-z]+\\.(com|org)$", "maxLength": 40}


def _front_end_work(schema: Any) -> int:
    budget = WorkBudget(10**12)
    with compile_scope(budget):
        schema_to_grammar(schema)
    return budget.used


def _props(n: int, sub: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {f"p{i}": sub for i in range(n)}}


def test_a_pattern_used_fifty_times_is_charged_once() -> None:
    one = _front_end_work(_props(1, EMAIL))
    fifty = _front_end_work(_props(50, EMAIL))
    # (~7x, and ~15x since charfa.minimize charges less for the build; ~50x when each use
    # charged the automaton's build)
    assert fifty < 25 * one, (one, fifty)


def test_a_ref_merged_into_many_all_ofs_is_merged_once() -> None:
    base = {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(30)}}

    def schema(n: int) -> dict[str, Any]:
        merged = {"allOf": [{"$ref": "#/$defs/b"}, {"$ref": "#/$defs/b"}, {"required": ["k1"]}]}
        return {"$defs": {"b": base}, **_props(n, merged)}

    one = _front_end_work(schema(1))
    forty = _front_end_work(schema(40))
    assert forty < 40 * one, (one, forty)


def test_the_fuel_does_not_depend_on_the_caches() -> None:
    fresh = {**_props(20, {**EMAIL, "maxLength": 41}), "required": ["p3"]}
    cold = _front_end_work(fresh)  # builds the string automaton
    warm = _front_end_work(fresh)  # finds it in the process-wide cache
    assert cold == warm


def test_schemastore_template_is_no_longer_stopped_by_the_fuel() -> None:
    """``template.json`` (SchemaStore) merged the same nodes ~150,000 times: it ran out of
    ``max_compile_work`` in the set algebra; now it gets to its real refusal (an overlapping
    ``oneOf``)."""
    import pytest

    from formcast.errors import CompileBudgetError, UnsupportedFeatureError
    from formcast.limits import CompileLimits

    path = (
        Path(__file__).resolve().parents[3]
        / "shared/data/SchemaStore/src/schemas/json/template.json"
    )
    if not path.is_file():
        pytest.skip(f"SchemaStore not found at {path.parent} (<repo>/../shared/data)")
    budget = WorkBudget(CompileLimits().max_compile_work)
    with compile_scope(budget), pytest.raises((UnsupportedFeatureError, CompileBudgetError)) as e:
        schema_to_grammar(path)
    assert isinstance(e.value, UnsupportedFeatureError), e.value
