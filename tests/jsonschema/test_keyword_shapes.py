"""Every keyword's value has the shape its draft's meta-schema gives it (#29 item 2): a
malformed value fails with a :class:`ConfigurationError` naming its JSON pointer, instead of
being dropped (``{"type": "array", "prefixItems": {"type": "string"}}`` compiled as any array).

Oracle: jsonschema's meta-schema of each draft, on every keyword formcast reads and a set of
values of every JSON type: whatever the meta-schema accepts formcast accepts, and what formcast
accepts beyond it is one of the listed leniencies (each keeps one meaning, documented in
docs/json_schema.md).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import jsonschema
from formcast.errors import ConfigurationError
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.jsonschema.keywords import _DRAFTS, SHAPES, check_shapes

VALIDATORS = {
    "4": jsonschema.Draft4Validator,
    "6": jsonschema.Draft6Validator,
    "7": jsonschema.Draft7Validator,
    "2019-09": jsonschema.Draft201909Validator,
    "2020-12": jsonschema.Draft202012Validator,
}
VALUES: list[Any] = [
    "a", 3, -1, 1.5, 0, 2.0, True, False, None, [], [1], ["a"], ["a", "a"], [{}], [True],
    [{}, 3], {}, {"a": 1}, {"a": {}}, {"a": True}, {"a": ["b"]}, {"a": [1]}, "string",
    ["string", "null"], ["strin"], ["integer", "integer"],
]  # fmt: skip


def _lenient(key: str, draft: str, value: Any) -> bool:
    """Values formcast reads although the draft's meta-schema does not allow them."""
    if key in ("exclusiveMinimum", "exclusiveMaximum"):
        return isinstance(value, (bool, int, float))  # draft 4's boolean and 6's number: both
    if key == "items" and isinstance(value, list):  # the tuple form in every draft; empty
        return True
    if key in ("required", "enum"):  # empty or repeated entries: same meaning as without
        return isinstance(value, list)
    if draft != "4":
        return False
    # draft 4 knows no boolean schemas (formcast reads true: anything, false: nothing) and no
    # integer written 2.0 (6 and later do)
    parts = list(value.values()) if isinstance(value, dict) else value
    parts = parts if isinstance(parts, list) else [parts]
    return any(isinstance(x, bool) for x in parts) or (type(value) is float and value.is_integer())


@pytest.mark.parametrize("key", sorted(SHAPES))
def test_shapes_against_the_meta_schemas(key: str) -> None:
    for draft, cls in VALIDATORS.items():
        if draft not in _DRAFTS[key]:
            continue
        meta = cls(cls.META_SCHEMA)
        for value in VALUES:
            try:
                check_shapes({key: value}, draft, "#")
                ours = True
            except ConfigurationError:
                ours = False
            theirs = meta.is_valid({key: value})
            if key == "$ref" and draft == "4":  # JSON Reference: not in draft 4's meta-schema
                assert ours is isinstance(value, str)
            elif theirs:
                assert ours, (key, draft, value)
            elif ours:
                assert _lenient(key, draft, value), (key, draft, value)


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"type": "array", "prefixItems": {"type": "string"}}, "#/prefixItems"),
        ({"type": "array", "prefixItems": []}, "#/prefixItems"),
        ({"properties": {"a": {"uniqueItems": "yes"}}}, "#/properties/a/uniqueItems"),
        ({"properties": {"a": 5}}, "#/properties/a"),
        ({"required": ["a", 1]}, "#/required/1"),
        ({"items": [{"type": "string"}, 4]}, "#/items/1"),
        ({"type": ["string", "string"]}, "#/type/1"),
        ({"type": []}, "#/type"),
        ({"contains": 3, "type": "array"}, "#/contains"),
        ({"propertyNames": "x"}, "#/propertyNames"),
        ({"dependentRequired": {"a": "b"}}, "#/dependentRequired/a"),
        ({"$defs": {"a/b": 1}}, "#/$defs/a~1b"),
        ({"anyOf": [{"maxItems": -1}, {}]}, "#/anyOf/0/maxItems"),
        ({"minContains": 1.5, "contains": {}}, "#/minContains"),
        ({"$schema": "http://json-schema.org/draft-07/schema#", "dependencies": {"a": 3}},
         "#/dependencies/a"),
    ],
)  # fmt: skip
def test_malformed_values_name_their_pointer(schema: dict[str, Any], pointer: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"invalid schema at {pointer}:")):
        schema_to_grammar(schema)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    with pytest.raises(jsonschema.SchemaError):
        cls.check_schema(schema)


def test_other_drafts_keywords_are_not_checked() -> None:
    """``prefixItems`` is no keyword of draft 7: any value is an unknown annotation there."""
    schema_to_grammar({"$schema": "http://json-schema.org/draft-07/schema#", "prefixItems": {}})
