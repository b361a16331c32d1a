"""JSON Schema → grammar: per-keyword behaviour, with ``jsonschema`` as the oracle of validity.

Every instance is serialized compactly (``json.dumps(x, separators=(",", ":"),
ensure_ascii=False)``) and matched with the reference recognizer; the expected answer comes
from ``jsonschema`` (so the test lists double as a check of our reading of the spec).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import referencing
import referencing.jsonschema

import jsonschema
from formcast.errors import (
    ConfigurationError,
    LimitExceededError,
    UnsatisfiableGrammarError,
    UnsupportedFeatureError,
)
from formcast.frontends.jsonschema.api import JsonSchemaOptions, schema_to_grammar
from formcast.ir.nodes import Grammar, Repeat, RuleRef, iter_nodes
from formcast.testing.reference import ReferenceRecognizer


def compact(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def recognizer(schema: Any, **opts: Any) -> ReferenceRecognizer:
    grammar, ignored = schema_to_grammar(schema, JsonSchemaOptions(**opts))
    assert ignored == [] or opts.get("lenient")
    return ReferenceRecognizer(grammar)


def valid(schema: Any, x: Any) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return bool(cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(x))


def check(schema: Any, good: list[Any], bad: list[Any], **opts: Any) -> None:
    """``good`` must be valid (oracle) and accepted; ``bad`` invalid and rejected."""
    rr = recognizer(schema, **opts)
    for x in good:
        assert valid(schema, x), f"test bug: {x!r} is not valid for {schema}"
        assert rr.matches(compact(x)), f"valid {compact(x)} rejected for {schema}"
    for x in bad:
        assert not valid(schema, x), f"test bug: {x!r} is valid for {schema}"
        assert not rr.matches(compact(x)), f"invalid {compact(x)} accepted for {schema}"


# -- types, enum, const --------------------------------------------------------------------------
def test_types_and_unions() -> None:
    check({"type": "null"}, [None], [0, False, "", [], {}])
    check({"type": "boolean"}, [True, False], [0, None, "true"])
    check({"type": "integer"}, [0, -5, 12345678901234567890], [1.5, "1", None])
    check({"type": "number"}, [0, -1.5, 3, 1e-7, 2.5e20], ["1", None, True])
    check({"type": "string"}, ["", "héllo", 'q"\\\n\t\u0001', "日本語", "😀"], [1, None])
    check({"type": "array"}, [[], [1, "a", None, [[]]]], [{}, "[]"])
    check({"type": "object"}, [{}, {"a": [1, {"b": None}]}], [[], "{}"])
    check({"type": ["string", "null"]}, ["x", None], [1, [], {}])
    check({"type": ["integer", "number"]}, [1, 1.5], ["1"])
    check(True, [None, 1, "x", [], {}], [])


def test_integer_is_written_without_fraction() -> None:
    # documented departure: 1.0 is an integer for the spec but is never generated
    rr = recognizer({"type": "integer"})
    assert rr.matches("1")
    assert not rr.matches("1.0")
    assert not rr.matches("1e2")
    assert not rr.matches("-0")
    assert not rr.matches("01")


def test_enum_and_const_any_values() -> None:
    values = [
        "café",
        "日本",
        'a"b',
        "back\\slash",
        "\n",
        "",
        1,
        2.5,
        None,
        True,
        [1, "x"],
        {"k": [None]},
    ]
    check({"enum": values}, values, ["cafe", 3, False, [1], {"k": []}, 'a\\"b'])
    check(
        {"const": {"a": 1, "b": [True]}}, [{"a": 1, "b": [True]}, {"b": [True], "a": 1}], [{"a": 1}]
    )
    check({"const": "😀\u0000"}, ["😀\u0000"], ["😀"])


def test_const_numbers_in_both_spellings() -> None:
    rr = recognizer({"enum": [1, 2.5, 0]})
    for text in ("1", "1.0", "2.5", "0", "0.0"):
        assert rr.matches(text), text
    assert not rr.matches("2.50000001")
    assert not rr.matches("true")
    # 1 and true are different JSON Schema values
    assert not recognizer({"const": 1}).matches("true")
    assert not recognizer({"const": True}).matches("1")


def test_enum_unicode_is_escaped_canonically() -> None:
    rr = recognizer({"enum": ["a\u0007b", "tab\there"]})
    assert rr.matches('"a\\u0007b"')
    assert rr.matches('"tab\\there"')
    assert not rr.matches('"a\u0007b"')  # raw control characters are never valid JSON


# -- numbers -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "integer", "minimum": -12, "maximum": 130}, [-12, 0, 99, 130], [-13, 131, 1000]),
        ({"type": "integer", "exclusiveMinimum": 0}, [1, 2, 10**19], [0, -1]),
        ({"type": "integer", "minimum": 2.5, "maximum": 7.5}, [3, 7], [2, 8]),
        ({"type": "number", "minimum": 0, "maximum": 1}, [0, 0.5, 1, 0.999], [-0.1, 1.01, 2]),
        ({"type": "number", "exclusiveMinimum": 0}, [0.001, 5, 0.0001], [0, -0.5]),
        (
            {"type": "number", "minimum": -1.25, "exclusiveMaximum": 3.5},
            [-1.25, 0, 3.49],
            [-1.26, 3.5],
        ),
        ({"type": "number", "maximum": -0.5}, [-0.5, -1, -100.25], [0, -0.49]),
        ({"minimum": 10}, [10, 11.5, "x", None], [9, 9.99]),
        ({"type": "integer", "multipleOf": 5}, [0, 5, -15, 100], [1, 7, -3]),
        ({"type": "integer", "multipleOf": 3, "minimum": 0}, [0, 3, 999], [-3, 4, 1000]),
        ({"type": "number", "multipleOf": 0.25}, [0.25, 1, -0.75, 3.5], [0.1, 1.3]),
        ({"type": "number", "multipleOf": 0.01, "maximum": 1}, [0.01, 0.5, 1], [0.005, 1.01]),
    ],
)
def test_numeric_bounds_exact(schema: dict[str, Any], good: list[Any], bad: list[Any]) -> None:
    check(schema, good, bad)


def test_long_integers_need_a_raised_digit_bound() -> None:
    """A valid 31-digit integer is past the default ``max_integer_digits`` (20) and is written
    once the bound is lifted; the schema's own bounds raise it without being asked."""
    schema = {"type": "integer", "exclusiveMinimum": 0}
    assert not recognizer(schema).matches(compact(10**30))
    check(schema, [1, 10**30], [0, -1], max_integer_digits=None)
    check({"type": "integer", "minimum": 10**29}, [10**30], [10**28])


def test_draft4_boolean_exclusive_bounds() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1,
    }
    check(schema, [0.5, 1], [0, -1, 1.5])


def test_decimal_ranges_agree_with_arithmetic() -> None:
    from decimal import Decimal

    rr = recognizer({"type": "number", "minimum": -2.05, "maximum": 3.1})
    for i in range(-250, 350):
        for text in (str(Decimal(i) / 100), str(Decimal(i) / 10)):
            assert rr.matches(text) == (Decimal("-2.05") <= Decimal(text) <= Decimal("3.1")), text


# -- strings -------------------------------------------------------------------------------------
def test_lengths_count_code_points() -> None:
    check(
        {"type": "string", "minLength": 2, "maxLength": 3},
        ["ab", "日本語", "😀😀", "a\nb"],
        ["a", "abcd", "😀"],
    )
    rr = recognizer({"type": "string", "maxLength": 1})
    assert rr.matches('"\\u00e9"')
    assert rr.matches('"\\ud83d\\ude00"')
    assert rr.matches('"\\/"')
    assert not rr.matches('"\\ud83d"')  # a lone surrogate is not a character


def test_pattern_search_semantics_and_anchors() -> None:
    check({"type": "string", "pattern": "b+"}, ["abbc", "b"], ["ac", ""])
    check({"type": "string", "pattern": "^a"}, ["a", "abc"], ["ba"])
    check({"type": "string", "pattern": "c$"}, ["abc", "c"], ["ca"])
    check({"type": "string", "pattern": "^a|b$"}, ["ax", "xb"], ["xa", "bx"])
    check({"type": "string", "pattern": "^[a-z]{2,3}$"}, ["ab", "abc"], ["a", "abcd", "aB"])
    check({"type": "string", "pattern": '^"\\\\$'}, ['"\\'], ['"\\\\'])


def test_pattern_with_length_bounds() -> None:
    check(
        {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4, "minLength": 2},
        ["ab", "abcd"],
        ["a", "abcde", "AB"],
    )
    check({"type": "string", "pattern": "x", "maxLength": 3}, ["x", "axb"], ["abcx", "ab"])
    check(
        {"type": "string", "pattern": "^[0-9]+-[a-z]*$", "maxLength": 4},
        ["1-", "12-a"],
        ["12-ab", "-a"],
    )


def test_unsupported_pattern_fails_closed_with_pointer() -> None:
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"properties": {"a": {"type": "string", "pattern": "(?=x)"}}})
    assert e.value.where == "#/properties/a/pattern"
    _grammar, ignored = schema_to_grammar(
        {"properties": {"a": {"type": "string", "pattern": "(?=x)"}}},
        JsonSchemaOptions(lenient=True),
    )
    assert any("#/properties/a/pattern" in x for x in ignored)


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date", ["2020-02-29", "1999-12-31"], ["2021-02-29", "2020-13-01", "20200101"]),
        (
            "date-time",
            ["2020-01-01T10:00:00Z", "2020-01-01T10:00:00.5+01:00"],
            ["2020-01-01 10:00"],
        ),
        ("time", ["23:59:59Z", "00:00:00.1-05:30"], ["24:00:00Z", "12:00"]),
        ("duration", ["P1D", "PT1H30M", "P1W", "P1Y2M3DT4H5M6S"], ["P", "PT", "1D"]),
        ("email", ["a@b.co", "first.last+tag@example.org"], ["a", "a@", "@b", "a..b@c.d"]),
        ("hostname", ["example.com", "a-b.c1.org", "localhost"], ["-a.com", "a_b.com", "a..b"]),
        ("ipv4", ["1.2.3.4", "255.255.255.255"], ["256.1.1.1", "1.2.3", "01.2.3.4"]),
        ("ipv6", ["::1", "fe80::1", "1:2:3:4:5:6:7:8", "::ffff:1.2.3.4"], ["1:::2", "12345::"]),
        ("uuid", ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000"]),
        ("uri", ["https://example.com/a?b=c#d", "urn:isbn:0451450523"], ["//x", "no scheme"]),
        ("uri-reference", ["../a/b?c", "https://x.y/", "#frag"], ["a b"]),
        ("json-pointer", ["", "/a/b~0~1"], ["a", "/~2"]),
    ],
)
def test_formats(fmt: str, good: list[str], bad: list[str]) -> None:
    rr = recognizer({"type": "string", "format": fmt})
    for s in good:
        assert rr.matches(compact(s)), (fmt, s)
    for s in bad:
        assert not rr.matches(compact(s)), (fmt, s)


def test_unknown_format_fails_closed_unless_lenient_or_annotation() -> None:
    schema = {"type": "string", "format": "credit-card"}
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar(schema)
    assert e.value.feature == "format"
    assert e.value.where == "#/format"
    _, ignored = schema_to_grammar(schema, JsonSchemaOptions(lenient=True))
    assert len(ignored) == 1
    assert "credit-card" in ignored[0]
    grammar, ignored = schema_to_grammar(schema, JsonSchemaOptions(format_assertion=False))
    assert ignored == []
    assert ReferenceRecognizer(grammar).matches('"anything"')
    # a format on a non-string type cannot constrain anything
    schema_to_grammar({"type": "integer", "format": "credit-card"})


def test_openapi_int_formats_bound_integers() -> None:
    rr = recognizer({"type": "integer", "format": "int32"})
    assert rr.matches(str(2**31 - 1))
    assert not rr.matches(str(2**31))


# -- arrays --------------------------------------------------------------------------------------
def test_items_prefix_items_and_counts() -> None:
    check({"type": "array", "items": {"type": "integer"}}, [[], [1, 2]], [[1, "a"]])
    check(
        {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        [[], ["a"], ["a", 1]],
        [[1], ["a", 1, 2]],
    )
    check(
        {"type": "array", "prefixItems": [{"const": 1}], "minItems": 2, "maxItems": 3},
        [[1, "x"], [1, None, 3]],
        [[1], [2, 2], [1, 2, 3, 4]],
    )
    check({"type": "array", "minItems": 2, "items": {"type": "null"}}, [[None, None]], [[None]])


def test_draft7_items_array_and_additional_items() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "items": [{"type": "integer"}],
        "additionalItems": {"type": "string"},
    }
    check(schema, [[1], [1, "a", "b"], []], [["a"], [1, 2]])


def test_contains_counts() -> None:
    check({"contains": {"const": 1}}, [[1], [0, 1, 2]], [[], [0, 2]])
    check(
        {"contains": {"const": 1}, "minContains": 2, "maxContains": 3},
        [[1, 1], [1, 0, 1, 1]],
        [[1], [1, 1, 1, 1]],
    )
    check({"contains": {"type": "string"}, "maxItems": 2}, [["a"], [1, "a"]], [[1, 2], [1, 2, "a"]])


def test_unique_items_on_finite_values() -> None:
    check(
        {"type": "array", "items": {"enum": ["a", "b", 1]}, "uniqueItems": True},
        [[], ["a", "b", 1], [1, "a"]],
        [["a", "a"], [1, "b", 1]],
    )
    check(
        {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
        [[True, False]],
        [[True, True]],
    )
    check({"type": "array", "maxItems": 1, "uniqueItems": True}, [[], [{}]], [[1, 2]])
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"type": "array", "items": {"type": "string"}, "uniqueItems": True})
    assert e.value.feature == "uniqueItems"


# -- objects -------------------------------------------------------------------------------------
def test_properties_required_additional() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["b"],
        "additionalProperties": False,
    }
    check(schema, [{"b": "x"}, {"a": 1, "b": "x"}], [{}, {"a": 1}, {"b": 1}, {"b": "x", "c": 1}])
    schema2 = {"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    check(schema2, [{}, {"a": 1, "z": "s", "y": ""}], [{"z": 1}, {"a": "s"}])


def test_declared_keys_are_generated_in_schema_order() -> None:
    rr = recognizer({"properties": {"a": {}, "b": {}}, "required": ["a", "b"]})
    assert rr.matches('{"a":1,"b":2}')
    assert not rr.matches('{"b":2,"a":1}')


def test_extra_keys_never_shadow_declared_ones() -> None:
    rr = recognizer({"properties": {"a": {"type": "integer"}}})
    assert rr.matches('{"a":1,"b":"x"}')
    assert not rr.matches('{"b":"x","a":"s"}')  # "a" as an extra key would escape its schema
    assert not rr.matches('{"\\u0061":"s"}')  # nor spelled with an escape


def test_pattern_properties_and_property_names() -> None:
    schema = {
        "patternProperties": {"^x-": {"type": "string"}, "n$": {"type": "integer"}},
        "additionalProperties": False,
    }
    check(schema, [{}, {"x-a": "s", "an": 1}], [{"x-n": "s"}, {"x-n": 1}, {"b": 1}])
    check({"propertyNames": {"maxLength": 2}}, [{"ab": 1}, {}], [{"abc": 1}])
    check(
        {"properties": {"long": {}}, "propertyNames": {"pattern": "^[a-z]$"}},
        [{"a": 1}],
        [{"long": 1}, {"A": 1}],
    )


def test_min_max_properties_and_dependencies() -> None:
    check(
        {"minProperties": 1, "maxProperties": 2},
        [{"a": 1}, {"a": 1, "b": 2}],
        [{}, {"a": 1, "b": 2, "c": 3}],
    )
    check(
        {"properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
        [{}, {"b": 1}, {"a": 1, "b": 2}],
        [{"a": 1}],
    )
    check(
        {
            "properties": {"a": {}, "b": {}},
            "dependentSchemas": {"a": {"properties": {"b": {"type": "string"}}}},
        },
        [{"b": 1}, {"a": 1, "b": "s"}],
        [{"a": 1, "b": 2}],
    )


def test_allow_extra_properties_false_generates_declared_keys_only() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    rr = recognizer(schema, allow_extra_properties=False)
    assert rr.matches('{"a":1}')
    assert not rr.matches('{"a":1,"b":2}')
    rr = recognizer(
        {**schema, "additionalProperties": {"type": "integer"}}, allow_extra_properties=False
    )
    assert rr.matches('{"a":1,"b":2}')  # an explicit additionalProperties is honoured


# -- applicators ---------------------------------------------------------------------------------
def test_all_of_merges() -> None:
    check(
        {"allOf": [{"type": "integer", "minimum": 0}, {"maximum": 10}, {"multipleOf": 2}]},
        [0, 4, 10],
        [-2, 3, 12, "x"],
    )
    check(
        {"allOf": [{"type": "string", "pattern": "^a"}, {"pattern": "b$"}, {"maxLength": 3}]},
        ["ab", "axb"],
        ["a", "b", "axxb"],
    )
    check(
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}},
                {"properties": {"a": {"minimum": 3}}},
            ]
        },
        [{"a": 3}, {}],
        [{"a": 2}],
    )


def test_any_of_and_one_of() -> None:
    check({"anyOf": [{"type": "string"}, {"minimum": 3}]}, ["x", 3, None], [2])
    check({"oneOf": [{"type": "string"}, {"type": "integer"}]}, ["x", 1], [None, 1.5])
    tagged = {
        "oneOf": [
            {
                "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                "required": ["kind"],
            },
            {"properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]},
        ]
    }
    check(
        tagged,
        [{"kind": "a", "x": 1}, {"kind": "b", "y": "s"}],
        [{"kind": "c"}, {"kind": "a", "x": "s"}],
    )
    # overlapping branches: the exact form subtracts the others
    check({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 2.5, "x"], [2, 3])


def test_one_of_that_cannot_be_made_exact() -> None:
    # overlapping object branches: made exact with a "witness member" negation
    check(
        {"oneOf": [{"additionalProperties": {"type": "string"}}, {"required": ["a"]}]},
        [{}, {"b": "x"}, {"a": 1}, {"a": "x", "b": 1}],
        [{"a": "x"}, {"b": 1}, 3],
    )
    # the negation of uniqueItems is not compiled: fail closed
    schema = {
        "oneOf": [
            {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True},
            {"type": "array", "maxItems": 1},
        ]
    }
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar(schema)
    assert e.value.feature == "oneOf"
    assert e.value.where == "#/oneOf"
    _, ignored = schema_to_grammar(schema, JsonSchemaOptions(oneof_as_anyof=True))
    assert ignored
    assert "anyOf" in ignored[0]


def test_not_and_conditionals() -> None:
    check({"not": {"type": "string"}}, [1, None, {}], ["x"])
    check({"type": "string", "not": {"enum": ["a", "b"]}}, ["c", "", "ab"], ["a", "b"])
    check({"type": "integer", "not": {"const": 3}}, [2, 4, -3], [3])
    check({"not": {"required": ["a"]}}, [{}, {"b": 1}], [{"a": 1}, 1, "x"])
    schema = {
        "if": {"properties": {"t": {"const": "n"}}, "required": ["t"]},
        "then": {"properties": {"v": {"type": "number"}}},
        "else": {"properties": {"v": {"type": "string"}}},
    }
    check(
        schema,
        [{"t": "n", "v": 1}, {"t": "s", "v": "x"}, {"v": "x"}],
        [{"t": "n", "v": "x"}, {"v": 1}],
    )


def test_unevaluated_properties() -> None:
    schema = {
        "allOf": [{"properties": {"a": {}}}],
        "properties": {"b": {}},
        "unevaluatedProperties": False,
    }
    rr = recognizer(schema)
    assert rr.matches('{"b":1,"a":2}') or rr.matches('{"a":2,"b":1}')
    assert not rr.matches('{"a":1,"c":2}')
    assert not rr.matches('{"b":1,"c":2}')


# -- references ----------------------------------------------------------------------------------
def test_recursive_ref_is_a_rule_not_unrolled() -> None:
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    }
    grammar, _ = schema_to_grammar(schema)
    rr = ReferenceRecognizer(grammar)
    deep: dict[str, Any] = {"v": 0}
    for i in range(30):
        deep = {"v": i, "kids": [deep, {"v": 1}]}
    assert rr.matches(compact(deep))
    assert not rr.matches(compact({"v": 1, "kids": [{"kids": []}]}))
    assert _has_cycle(grammar)


def _has_cycle(grammar: Grammar) -> bool:
    edges = {
        r.name: {n.name for n in iter_nodes(r.body) if isinstance(n, RuleRef)}
        for r in grammar.rules
    }
    seen: set[str] = set()
    stack: set[str] = set()

    def visit(n: str) -> bool:
        if n in stack:
            return True
        if n in seen:
            return False
        seen.add(n)
        stack.add(n)
        found = any(visit(m) for m in edges.get(n, ()))
        stack.discard(n)
        return found

    return any(visit(r.name) for r in grammar.rules)


def test_refs_definitions_ids_anchors() -> None:
    check(
        {
            "definitions": {"a": {"type": "integer"}},
            "properties": {"x": {"$ref": "#/definitions/a"}},
        },
        [{"x": 1}],
        [{"x": "s"}],
    )
    check(
        {
            "$id": "https://example.com/root.json",
            "$defs": {"b": {"$id": "b.json", "$defs": {"c": {"$anchor": "C", "type": "string"}}}},
            "properties": {
                "x": {"$ref": "b.json#C"},
                "y": {"$ref": "https://example.com/b.json#/$defs/c"},
            },
        },
        [{"x": "s", "y": "t"}],
        [{"x": 1}, {"y": 2}],
    )
    # draft 7: $ref ignores its siblings
    schema7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"a": {"type": "integer"}},
        "$ref": "#/definitions/a",
        "minimum": 10,
    }
    check(schema7, [1, 20], ["x"])
    # 2020-12: siblings apply
    check({"$defs": {"a": {"type": "integer"}}, "$ref": "#/$defs/a", "minimum": 10}, [20], [1, "x"])


def test_remote_refs_need_a_registry() -> None:
    schema = {"$ref": "https://example.com/remote.json"}
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar(schema)
    assert e.value.feature == "$ref"
    registry = referencing.Registry().with_resource(
        "https://example.com/remote.json",
        referencing.jsonschema.DRAFT202012.create_resource({"type": "integer"}),
    )
    grammar, _ = schema_to_grammar(schema, JsonSchemaOptions(registry=registry))
    rr = ReferenceRecognizer(grammar)
    assert rr.matches("5")
    assert not rr.matches('"x"')


def test_merging_with_a_recursive_ref_is_deferred() -> None:
    schema = {
        "$defs": {
            "t": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/t", "required": ["v"]}, "v": {}},
            }
        },
        "$ref": "#/$defs/t",
    }
    check(schema, [{}, {"next": {"v": 1}}, {"next": {"next": {"v": 2}, "v": 1}}], [{"next": {}}])


# -- errors, limits, unsatisfiable ---------------------------------------------------------------
def test_unknown_keywords_are_annotations_or_fail_closed_on_request() -> None:
    schema = {"properties": {"a": {"items": {"frobnicate": 3, "type": "integer"}}}}
    # default: an annotation (the specification's reading), listed in the warnings
    grammar, ignored = schema_to_grammar(schema)
    assert ignored == [
        "frobnicate at #/properties/a/items (unknown keyword, treated as an annotation)"
    ]
    assert ReferenceRecognizer(grammar).matches('{"a":[1,2]}')
    assert not ReferenceRecognizer(grammar).matches('{"a":["x"]}')
    strict = JsonSchemaOptions(unknown_keywords="error")
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar(schema, strict)
    assert e.value.feature == "frobnicate"
    assert e.value.where == "#/properties/a/items"
    _grammar, ignored = schema_to_grammar(
        schema, JsonSchemaOptions(unknown_keywords="error", lenient=True)
    )
    assert ignored == [
        "frobnicate at #/properties/a/items (unknown keyword (unknown_keywords='error'))"
    ]
    with pytest.raises(ConfigurationError):
        JsonSchemaOptions(unknown_keywords="maybe")
    # annotations and x- extensions are fine
    schema_to_grammar(
        {
            "title": "t",
            "description": "d",
            "examples": [1],
            "x-order": 3,
            "default": 1,
            "deprecated": True,
        }
    )


def test_dynamic_ref_fails_closed() -> None:
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"$dynamicRef": "#x"})
    assert e.value.feature == "$dynamicRef"


@pytest.mark.parametrize(
    "schema",
    [
        False,
        {"type": "integer", "minimum": 5, "maximum": 3},
        {"type": "object", "properties": {"a": False}, "required": ["a"]},
        {"allOf": [{"type": "string"}, {"type": "number"}]},
        {"type": "string", "minLength": 3, "maxLength": 2},
        {"enum": [1, 2], "type": "string"},
        {
            "$defs": {
                "r": {
                    "type": "object",
                    "properties": {"a": {"$ref": "#/$defs/r"}},
                    "required": ["a"],
                }
            },
            "$ref": "#/$defs/r",
        },
    ],
)
def test_unsatisfiable_schemas(schema: Any) -> None:
    with pytest.raises(UnsatisfiableGrammarError):
        schema_to_grammar(schema)


def test_unproductive_optional_branches_are_removed() -> None:
    schema = {
        "$defs": {
            "r": {"type": "object", "properties": {"a": {"$ref": "#/$defs/r"}}, "required": ["a"]}
        },
        "properties": {"x": {"$ref": "#/$defs/r"}, "y": {"type": "integer"}},
        "additionalProperties": False,
    }
    grammar, _ = schema_to_grammar(schema)
    rr = ReferenceRecognizer(grammar)
    assert rr.matches('{"y":1}')
    assert not rr.is_prefix('{"x"')


def test_limits() -> None:
    with pytest.raises(LimitExceededError) as e:
        schema_to_grammar({"enum": list(range(20))}, JsonSchemaOptions(max_enum=10))
    assert e.value.limit == "max_enum"
    with pytest.raises(LimitExceededError):
        schema_to_grammar({"description": "x" * 1000}, JsonSchemaOptions(max_schema_bytes=100))
    deep: dict[str, Any] = {}
    for _ in range(50):
        deep = {"items": deep}
    with pytest.raises(LimitExceededError) as e:
        schema_to_grammar(deep, JsonSchemaOptions(max_depth=20))
    assert e.value.limit == "max_depth"


def test_huge_bounds_compile_without_unrolling() -> None:
    t0 = time.perf_counter()
    grammar, _ = schema_to_grammar(
        {
            "type": "object",
            "properties": {
                "s": {"type": "string", "minLength": 5, "maxLength": 100_000},
                "a": {"type": "array", "maxItems": 1_000_000},
            },
        }
    )
    assert time.perf_counter() - t0 < 2
    repeats = [n for r in grammar.rules for n in iter_nodes(r.body) if isinstance(n, Repeat)]
    assert any(n.max == 100_000 for n in repeats)
    assert any(n.max == 999_999 for n in repeats)
    rr = ReferenceRecognizer(grammar)
    assert rr.matches('{"s":"abcde"}')
    assert not rr.matches('{"s":"abcd"}')


def test_malformed_schemas() -> None:
    for bad in ({"type": "strin"}, {"minLength": -1}, {"properties": []}, {"enum": 3}, "{not json"):
        with pytest.raises(ConfigurationError):
            schema_to_grammar(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        JsonSchemaOptions(whitespace="pretty")
    with pytest.raises(ConfigurationError):
        JsonSchemaOptions(item_sep=";")


# -- output shape --------------------------------------------------------------------------------
def test_schema_as_json_text_and_bool() -> None:
    grammar, _ = schema_to_grammar('{"type": "integer"}')
    assert ReferenceRecognizer(grammar).matches("12")
    grammar, _ = schema_to_grammar(True)
    assert ReferenceRecognizer(grammar).matches('{"a":[1,2.5e3,null]}')


def test_flexible_whitespace_is_bounded() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
    }
    rr = recognizer(schema, whitespace="flexible", max_whitespace=4)
    assert rr.matches('{ "a" : [ 1 , 2 ] }')
    assert rr.matches('{\n  "a": [1,2]\n}')
    assert not rr.matches("{" + " " * 5 + '"a":[]}')


def test_separators_and_indent() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {
                "type": "array",
                "items": {"type": "object", "properties": {"c": {"type": "null"}}},
            },
        },
    }
    x = {"a": 1, "b": [{"c": None}, {}]}
    rr = recognizer(schema, item_sep=", ", key_sep=": ")
    assert rr.matches(json.dumps(x))
    assert not rr.matches(compact(x))
    rr = recognizer(schema, indent=2, key_sep=": ")
    assert rr.matches(json.dumps(x, indent=2))
    assert not rr.matches(compact(x))


# -- merge order, extensions, lenient ------------------------------------------------------------
def test_parts_merge_in_keyword_order() -> None:
    defs = {"base": {"properties": {"id": {"type": "integer"}}, "required": ["id"]}}
    ref_first = {"$defs": defs, "$ref": "#/$defs/base", "properties": {"name": {"type": "string"}}}
    rr = recognizer(ref_first)
    assert rr.matches('{"id":1,"name":"x"}')
    assert not rr.matches('{"name":"x","id":1}')
    props_first = {
        "$defs": defs,
        "properties": {"name": {"type": "string"}},
        "$ref": "#/$defs/base",
    }
    rr = recognizer(props_first)
    assert rr.matches('{"name":"x","id":1}')
    assert not rr.matches('{"id":1,"name":"x"}')
    # a bare "required" next to a $ref does not reorder the referenced properties
    rr = recognizer(
        {"$defs": {"t": {"properties": {"a": {}, "b": {}}}}, "required": ["b"], "$ref": "#/$defs/t"}
    )
    assert rr.matches('{"a":1,"b":2}')
    assert rr.matches('{"b":2}')
    assert not rr.matches('{"a":1}')


def test_extension_keywords_and_misspellings() -> None:
    schema_to_grammar({"type": "string", "_format": "date", "$license": "MIT", "readonly": True})
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"type": "object", "additonalProperties": False})
    assert "did you mean 'additionalProperties'" in str(e.value)
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"type": "string", "regexp": "^a"})  # an ajv-keywords constraint
    assert e.value.feature == "regexp"


def test_lenient_drops_unique_items_and_lists_it() -> None:
    schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    grammar, ignored = schema_to_grammar(schema, JsonSchemaOptions(lenient=True))
    assert ignored
    assert "uniqueItems" in ignored[0]
    assert ReferenceRecognizer(grammar).matches('["a","b"]')


def test_not_of_a_recursive_definition() -> None:
    schema = {
        "$defs": {
            "list": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/list"}},
                "required": ["next"],
            }
        },
        "not": {"$ref": "#/$defs/list"},
    }
    # nothing satisfies "list" (it needs an infinite chain), so everything satisfies its negation
    check(schema, [1, {}, {"next": {}}, {"next": {"next": 1}}], [])


def test_unevaluated_items() -> None:
    check(
        {"prefixItems": [{"type": "integer"}], "unevaluatedItems": False},
        [[], [1]],
        [[1, 2], ["a"]],
    )
    check(
        {"allOf": [{"prefixItems": [True, True]}], "unevaluatedItems": {"type": "string"}},
        [[1, 2], [1, 2, "x"]],
        [[1, 2, 3]],
    )


def test_string_constraints_intersect() -> None:
    check(
        {"type": "string", "format": "date", "pattern": "^2020-"},
        ["2020-02-29", "2020-12-31"],
        ["2021-01-01", "2020-13-01"],
    )
    check(
        {"type": "string", "not": {"pattern": "^a"}, "maxLength": 2},
        ["", "b", "ba"],
        ["a", "ab", "bbb"],
    )


def test_pattern_properties_with_names_and_declared_keys() -> None:
    schema = {
        "properties": {"id": {"type": "integer"}},
        "patternProperties": {"^s_": {"type": "string"}, "_n$": {"type": "number"}},
        "additionalProperties": {"type": "null"},
        "propertyNames": {"maxLength": 4},
    }
    check(
        schema,
        [{"id": 1, "s_a": "x", "b_n": 2, "zz": None}, {}],
        [{"s_a": 1}, {"b_n": "x"}, {"zz": 1}, {"longer": None}, {"id": "x"}],
    )
    rr = recognizer(schema)
    assert not rr.matches('{"s_n":"x"}')
    assert not rr.matches('{"s_n":1}')


def test_negated_additional_properties_needs_a_witness_member() -> None:
    check({"not": {"type": "object", "additionalProperties": False}}, [1, {"a": 1}], [{}])
    check(
        {"not": {"properties": {"a": {}}, "additionalProperties": False}},
        [{"b": 1}, {"a": 1, "z": 2}],
        [{}, {"a": 1}, "x"],
    )
    check(
        {"not": {"additionalProperties": {"type": "string"}}},
        [{"a": 1}, {"a": "x", "b": 2}],
        [{}, {"a": "x"}],
    )
    check(
        {
            "oneOf": [
                {"properties": {"a": {}}, "additionalProperties": False},
                {"properties": {"b": {}}, "additionalProperties": False},
            ]
        },
        [{"a": 1}, {"b": 1}],
        [{}, {"a": 1, "b": 2}],
    )
    check(
        {"not": {"patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False}},
        [{"y": 1}, {"x": "s"}, {"xa": 1, "q": 2}],
        [{}, {"x": 1}, {"x": 1, "xb": 2}],
    )
    check(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "not": {"additionalProperties": False},
            "maxProperties": 2,
        },
        [{"b": 1}, {"a": 1}, {"a": 1, "b": 2}],
        [{}, {"a": 1, "b": 2, "c": 3}],
    )


def test_draft4_id_and_definitions() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "id": "http://example.com/root.json",
        "definitions": {"n": {"id": "#num", "type": "number", "maximum": 3}},
        "properties": {
            "x": {"$ref": "#num"},
            "y": {"$ref": "http://example.com/root.json#/definitions/n"},
        },
    }
    check(schema, [{"x": 1, "y": 3}], [{"x": 4}, {"y": "a"}])


def test_url_and_regex_formats_are_safe_subsets() -> None:
    import re

    rr = recognizer({"type": "string", "format": "regex"})
    assert rr.matches(json.dumps("a\\.b"))
    assert not rr.matches(json.dumps("(unclosed"))
    re.compile("a\\.b")
    rr = recognizer({"type": "string", "format": "url"})
    assert rr.matches('"https://example.com/a/b"')
    assert not rr.matches('"mailto:x@y.z"')


def test_malformed_identifier_is_not_a_base_uri() -> None:
    # draft 4 "id" must be a string; here it is a property map written in the wrong place
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "array",
        "items": {"id": {"type": "integer"}, "type": "object"},
    }
    # (jsonschema itself raises AttributeError on this schema, so no differential check)
    grammar, ignored = schema_to_grammar(schema)
    assert ignored == []
    rr = ReferenceRecognizer(grammar)
    for doc in ("[]", "[{}]", '[{"id":1}]'):
        assert rr.matches(doc), doc
    for doc in ("[1]", "{}"):
        assert not rr.matches(doc), doc


def test_compile_wall_clock_cap() -> None:
    from formcast import GrammarCompiler, Vocabulary
    from formcast.errors import CompileTimeoutError

    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"}}}
    compiler = GrammarCompiler(vocab, cache_size=0)
    with pytest.raises(CompileTimeoutError) as e:
        compiler.compile_json_schema(schema, JsonSchemaOptions(max_compile_seconds=1e-9))
    assert e.value.limit == "max_compile_seconds"
    assert isinstance(e.value, LimitExceededError)
    # the default cap (1.8 s) and no cap both compile it
    assert compiler.compile_json_schema(schema).warnings == ()
    compiler.compile_json_schema(schema, JsonSchemaOptions(max_compile_seconds=None))
    for bad in (0, -1, True, "1"):
        with pytest.raises(ConfigurationError):
            JsonSchemaOptions(max_compile_seconds=bad)  # type: ignore[arg-type]
