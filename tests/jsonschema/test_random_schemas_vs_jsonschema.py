"""Differential soundness: random schemas × random instances against ``jsonschema``.

For every schema formcast compiles, an instance the grammar accepts (compact serialization)
must be valid for ``jsonschema`` — a false positive is a broken guarantee.  (Rejecting a valid
instance is allowed here: property order, integer spelling and the documented subsets make
that expected; the per-keyword tests check acceptance.)
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jsonschema
from formcast.errors import LimitExceededError, UnsatisfiableGrammarError, UnsupportedFeatureError
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.testing.reference import ReferenceRecognizer

KEYS = ["a", "b", "c"]
PATTERNS = ["^a", "b", "^[ab]+$", "^.$", "\\d", "^$", "a|^b"]
FORMATS = ["date", "ipv4", "uuid", "email"]
SCALARS: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2.5,
    10,
    -3.5,
    0.5,
    "",
    "a",
    "ab",
    "abc",
    "0",
    "b1",
    "2020-01-01",
    "1.2.3.4",
]
TYPES: list[Any] = [
    "null",
    "boolean",
    "integer",
    "number",
    "string",
    "array",
    "object",
    ["string", "integer"],
    ["null", "object"],
]

values = st.recursive(
    st.sampled_from(SCALARS),
    lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.sampled_from(KEYS), ch, max_size=3),
    max_leaves=6,
)
numbers = st.sampled_from([0, 1, 2, -1, 0.5, 2.5, 10])
leaf = st.one_of(
    st.booleans(),
    st.just({}),
    st.builds(lambda t: {"type": t}, st.sampled_from(TYPES)),
    st.builds(lambda v: {"const": v}, values),
    st.builds(lambda vs: {"enum": vs}, st.lists(values, min_size=1, max_size=3)),
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["number", "integer"]),
            "minimum": numbers,
            "maximum": numbers,
            "exclusiveMinimum": numbers,
            "exclusiveMaximum": numbers,
            "multipleOf": st.sampled_from([1, 2, 0.5, 3]),
        },
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.just("string"),
            "minLength": st.integers(0, 3),
            "maxLength": st.integers(0, 3),
            "pattern": st.sampled_from(PATTERNS),
            "format": st.sampled_from(FORMATS),
        },
    ),
)


def _extend(ch: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    objects = st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", ["object", "string"]]),
            "properties": st.dictionaries(st.sampled_from(KEYS), ch, max_size=2),
            "required": st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
            "additionalProperties": ch,
            "patternProperties": st.dictionaries(st.sampled_from(PATTERNS), ch, max_size=1),
            "propertyNames": st.sampled_from(
                [{"maxLength": 1}, {"pattern": "^[ab]"}, {"enum": ["a", "c"]}]
            ),
            "minProperties": st.integers(0, 2),
            "maxProperties": st.integers(0, 2),
            "dependentRequired": st.just({"a": ["b"]}),
            "dependentSchemas": st.dictionaries(st.just("a"), ch, max_size=1),
            "unevaluatedProperties": ch,
        },
    )
    arrays = st.fixed_dictionaries(
        {},
        optional={
            "type": st.just("array"),
            "items": ch,
            "prefixItems": st.lists(ch, min_size=1, max_size=2),
            "minItems": st.integers(0, 2),
            "maxItems": st.integers(0, 3),
            "contains": ch,
            "minContains": st.integers(0, 2),
            "maxContains": st.integers(0, 2),
            "uniqueItems": st.booleans(),
            "unevaluatedItems": ch,
        },
    )
    lists = st.lists(ch, min_size=1, max_size=3)
    combinators = st.one_of(
        st.builds(lambda xs: {"allOf": xs}, lists),
        st.builds(lambda xs: {"anyOf": xs}, lists),
        st.builds(lambda xs: {"oneOf": xs}, lists),
        st.builds(lambda x: {"not": x}, ch),
        st.fixed_dictionaries({"if": ch}, optional={"then": ch, "else": ch}),
    )
    merged = st.tuples(objects | arrays | combinators, leaf).map(
        lambda ab: {**ab[1], **ab[0]} if isinstance(ab[1], dict) else ab[0]
    )
    return objects | arrays | combinators | merged


schemas = st.recursive(leaf, _extend, max_leaves=8)


def _compact(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


#: more examples for a long run:
#: FORMCAST_FUZZ_EXAMPLES=5000 pytest tests/jsonschema/test_random_schemas_vs_jsonschema.py
EXAMPLES = int(os.environ.get("FORMCAST_FUZZ_EXAMPLES", "150"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(schemas, st.lists(values, min_size=25, max_size=25))
def test_no_invalid_instance_is_accepted(schema: Any, instances: list[Any]) -> None:
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    try:
        grammar, _ = schema_to_grammar(schema)
    except UnsatisfiableGrammarError:
        assert not any(validator.is_valid(x) for x in instances)
        return
    except (UnsupportedFeatureError, LimitExceededError):
        return
    rr = ReferenceRecognizer(grammar)
    for x in instances:
        if rr.matches(_compact(x)):
            assert validator.is_valid(x), f"accepted invalid {_compact(x)} for {json.dumps(schema)}"
