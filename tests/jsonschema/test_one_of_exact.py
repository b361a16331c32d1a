"""Overlapping ``oneOf`` built exactly with the schema algebra (issue #29 item 4), against
``jsonschema`` as the oracle.

``oneOf [A, B]`` is ``(A ∧ ¬B) ∨ (B ∧ ¬A)``: formcast builds it one JSON type at a time, inside
what the schema object's other keywords already require, with the impossible alternatives pruned
as they appear.  These tests compare the compiled grammar with ``jsonschema`` on every instance
of a small enumerated universe (both directions: an invalid instance accepted is a soundness
failure; a valid one rejected, in every order of its keys, an exactness failure), and on random
schemas (soundness).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jsonschema
from formcast.errors import LimitExceededError, UnsatisfiableGrammarError, UnsupportedFeatureError
from formcast.frontends.jsonschema.api import JsonSchemaOptions, schema_to_grammar
from formcast.testing.reference import ReferenceRecognizer

KEYS = ("kind", "a", "b")
LEAVES: list[Any] = [
    None,
    True,
    0,
    1,
    2.5,
    "",
    "x",
    "y",
    [],
    [1],
    [1, 2],
    [1, 1],
    ["x", 1],
    [1, "x", "y"],
    [2, 1],
    ["x", "x"],
]


def _compact(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def _universe() -> list[Any]:
    """Every leaf, and every object over :data:`KEYS` with up to three members from a few
    values (the discriminating ones included)."""
    member_values: list[Any] = [None, 1, "x", "y", {"a": 1}]
    out: list[Any] = list(LEAVES)
    for n in range(4):
        for keys in itertools.combinations(KEYS, n):
            for vals in itertools.product(member_values, repeat=n):
                out.append(dict(zip(keys, vals, strict=True)))
    return out


UNIVERSE = _universe()


def _accepts(rr: ReferenceRecognizer, x: Any) -> bool:
    """Accepted in some order of its keys (formcast writes declared keys in schema order)."""
    if not isinstance(x, dict) or len(x) < 2:
        return rr.matches(_compact(x))
    return any(
        rr.matches(_compact({k: x[k] for k in order})) for order in itertools.permutations(x)
    )


def _agree(schema: Any) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    grammar, ignored = schema_to_grammar(schema)
    assert ignored == []
    rr = ReferenceRecognizer(grammar)
    for x in UNIVERSE:
        want = validator.is_valid(x)
        if want:
            assert _accepts(rr, x), f"valid {_compact(x)} rejected for {json.dumps(schema)}"
        else:
            assert not rr.matches(_compact(x)), (
                f"invalid {_compact(x)} accepted for {json.dumps(schema)}"
            )


TAGGED_NO_TYPE = {
    # no "type": every non-object matches both branches, so none is valid
    "oneOf": [
        {"properties": {"kind": {"const": "x"}, "a": {"type": "integer"}}, "required": ["kind"]},
        {"properties": {"kind": {"const": "y"}, "b": {}}, "required": ["kind"]},
    ]
}
SIBLING_REQUIRED = {
    # the branches overlap only on objects without "kind", which the sibling "required" rules out
    "required": ["kind"],
    "oneOf": [
        {"properties": {"kind": {"enum": ["x"]}}, "required": ["a"]},
        {"properties": {"kind": {"enum": ["y"]}}},
    ],
}
NESTED_ONE_OF = {
    # a branch that is itself an overlapping oneOf (SchemaStore's testenvironments.json)
    "type": "object",
    "required": ["kind"],
    "oneOf": [
        {
            "properties": {"kind": {"enum": ["x"]}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
        },
        {"properties": {"kind": {"enum": ["y"]}}, "required": ["a"]},
    ],
}
REQUIRED_ONLY = {"oneOf": [{"required": ["a"]}, {"required": ["b"]}, {"required": ["kind"]}]}
OVERLAPPING_ENUMS = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "a": {}},
    "additionalProperties": False,
    "oneOf": [
        {"properties": {"kind": {"enum": ["x", "y"]}}, "required": ["kind", "a"]},
        {"properties": {"kind": {"enum": ["y"]}, "a": {"type": "string"}}, "required": ["a"]},
    ],
}
CLOSED_BRANCHES = {
    # additionalProperties: false in the branches: their negation needs a witness member, and
    # the negation of a branch that holds such a witness (a nested exclusion) is a rule again
    "oneOf": [
        {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
        {"type": "object", "properties": {"b": {}}, "additionalProperties": False},
        {
            "not": {
                "oneOf": [
                    {"required": ["a"]},
                    {"properties": {"b": {}}, "additionalProperties": False},
                ]
            }
        },
    ]
}
UNIQUE_ARRAYS = {
    # both array branches are uniqueItems (stylelint's indentation): the exclusion of one from
    # the other needs no "some item repeated" alternative, and an item schema both share needs
    # no negation
    "type": ["null", "integer", "array"],
    "oneOf": [
        {"type": ["null", "integer"]},
        {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": [1, 2, "x"]}},
        {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "uniqueItems": True,
            "items": {"enum": [1, 2, "x"]},
        },
    ],
}
OPEN_AND_TAGGED = {
    # an open branch overlapping tagged ones that are disjoint among themselves (WashingtonPost's
    # promo items): the complement of the tagged ones is a sum over the tag, not a product
    "oneOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}},
        {
            "type": "object",
            "properties": {"kind": {"const": "x"}, "a": {"type": "string"}},
            "required": ["kind"],
        },
        {
            "type": "object",
            "properties": {"kind": {"enum": ["y", 1]}, "b": {"type": "integer"}},
            "required": ["kind", "b"],
        },
        {"type": "object", "properties": {"kind": {"const": None}}, "required": ["kind", "a"]},
    ]
}
TYPES_AND_CONSTS = {
    "oneOf": [
        {"type": ["string", "integer"]},
        {"enum": ["x", 1, None]},
        {"type": "number", "minimum": 1},
    ]
}


@pytest.mark.parametrize(
    "schema",
    [
        TAGGED_NO_TYPE,
        SIBLING_REQUIRED,
        NESTED_ONE_OF,
        REQUIRED_ONLY,
        OVERLAPPING_ENUMS,
        CLOSED_BRANCHES,
        TYPES_AND_CONSTS,
        UNIQUE_ARRAYS,
        OPEN_AND_TAGGED,
    ],
    ids=[
        "tagged-no-type",
        "sibling-required",
        "nested-oneOf",
        "required-only",
        "overlapping-enums",
        "closed-branches",
        "types-and-consts",
        "unique-arrays",
        "open-and-tagged",
    ],
)
def test_overlapping_one_of_agrees_with_jsonschema(schema: Any) -> None:
    _agree(schema)


def test_many_tagged_branches_without_type_stay_small() -> None:
    """21 branches told apart by a ``const`` tag, with no ``type`` (enonic-xp's inputsDef):
    every non-object matches all of them, so only the objects remain; before the per-type
    split the exclusions grew past ``max_union``."""
    branches = [
        {
            "properties": {"type": {"const": f"T{i}"}, "name": {"type": "string"}, f"p{i}": {}},
            "required": ["type", "name"],
            "additionalProperties": False,
        }
        for i in range(21)
    ]
    schema = {"oneOf": branches}
    grammar, _ = schema_to_grammar(schema)
    rr = ReferenceRecognizer(grammar)
    validator = jsonschema.Draft202012Validator(schema)
    for x in [
        None,
        1,
        "s",
        [],
        {},
        {"type": "T3", "name": "n"},
        {"type": "T3", "name": "n", "p3": 1},
        {"type": "T3", "name": "n", "p4": 1},
        {"type": "T30", "name": "n"},
    ]:
        assert rr.matches(_compact(x)) == validator.is_valid(x), _compact(x)


def test_an_inexpressible_exclusion_still_fails_closed() -> None:
    schema = {
        "oneOf": [
            {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True},
            {"type": "array", "maxItems": 1},
        ]
    }
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar(schema)
    assert e.value.feature == "oneOf"
    _, ignored = schema_to_grammar(schema, JsonSchemaOptions(oneof_as_anyof=True))
    assert ignored
    assert "anyOf" in ignored[0]


# -- random schemas: both directions -------------------------------------------------------
_values = st.sampled_from(["x", "y", 1, None])
_branch = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["object", "string", ["object", "integer"]]),
        "properties": st.dictionaries(
            st.sampled_from(KEYS),
            st.one_of(
                st.builds(lambda v: {"const": v}, _values),
                st.builds(lambda vs: {"enum": vs}, st.lists(_values, min_size=1, max_size=2)),
                st.builds(lambda t: {"type": t}, st.sampled_from(["string", "integer", "null"])),
                st.just({}),
            ),
            max_size=2,
        ),
        "required": st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
        "additionalProperties": st.booleans(),
        "enum": st.lists(st.sampled_from(["x", 1, None, {"a": 1}]), min_size=1, max_size=2),
        "minProperties": st.integers(0, 2),
    },
)
_schemas = st.builds(
    lambda branches, outer: {**outer, "oneOf": branches},
    st.lists(_branch, min_size=2, max_size=4),
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", ["object", "string"]]),
            "required": st.lists(st.sampled_from(KEYS), max_size=1, unique=True),
        },
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(_schemas)
def test_random_one_of_agrees_with_jsonschema(schema: Any) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    try:
        grammar, _ = schema_to_grammar(schema)
    except UnsatisfiableGrammarError:
        assert not any(validator.is_valid(x) for x in UNIVERSE)
        return
    except (UnsupportedFeatureError, LimitExceededError):
        return
    rr = ReferenceRecognizer(grammar)
    for x in UNIVERSE:
        if validator.is_valid(x):
            assert _accepts(rr, x), f"valid {_compact(x)} rejected for {json.dumps(schema)}"
        else:
            assert not rr.matches(_compact(x)), (
                f"accepted invalid {_compact(x)} for {json.dumps(schema)}"
            )
