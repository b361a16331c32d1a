"""Hostile inputs: every error a schema or regex can cause is a :class:`FormcastError`.

``errors.py`` promises that every error a user can meet derives from ``FormcastError``; these
are the inputs that once escaped as ``RecursionError``, ``UnicodeEncodeError``,
``OverflowError``, ``ValueError`` or ``TypeError`` (or hung), and more of their kind.  Each
either fails with a named error (with the JSON pointer of the culprit where there is one) or
compiles to a grammar that is still exact.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from formcast.errors import (
    ConfigurationError,
    FormcastError,
    LimitExceededError,
    UnsupportedFeatureError,
)
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.index.compiler import GrammarCompiler
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary

STOP = 256


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[STOP]
    )
    return GrammarCompiler(vocab, cache_size=0)


def _accepts(compiled: Any, text: str) -> bool:
    m = GrammarMatcher(compiled)
    return bool(m.accept_bytes(text.encode("utf-8")) and m.is_token_allowed(STOP))


def _nested(n: int, key: str) -> dict[str, Any]:
    s: dict[str, Any] = {}
    for _ in range(n):
        s = {key: s}
    return s


def _nested_props(n: int) -> dict[str, Any]:
    s: dict[str, Any] = {}
    for _ in range(n):
        s = {"properties": {"a": s}}
    return s


def _nested_list(n: int) -> list[Any]:
    v: list[Any] = []
    for _ in range(n - 1):
        v = [v]
    return v


# (schema, error class, text the message must contain) -- the pointer where there is one
FAILS: dict[str, tuple[Any, type[FormcastError], str]] = {
    # non-finite numbers: not JSON (json.loads reads NaN/Infinity, a dict may hold them)
    "enum NaN": ({"enum": [1, float("nan")]}, ConfigurationError, "#/enum/1"),
    "enum NaN text": ('{"enum":[NaN]}', ConfigurationError, "#/enum/0"),
    "const Infinity": ({"const": float("inf")}, ConfigurationError, "#/const"),
    "const -Infinity text": ('{"const":-Infinity}', ConfigurationError, "#/const"),
    "const 1e400 text": ('{"const":1e400}', ConfigurationError, "#/const"),
    "nested const NaN": ({"const": {"a": [float("nan")]}}, ConfigurationError, "#/const/a/0"),
    "minimum Infinity": ({"minimum": float("inf")}, ConfigurationError, "#/minimum"),
    "maximum NaN": ({"maximum": float("nan")}, ConfigurationError, "#/maximum"),
    "exclusiveMinimum 1e400 text": ('{"exclusiveMinimum":1e400}', ConfigurationError, "#/excl"),
    "multipleOf Infinity": ({"multipleOf": float("inf")}, ConfigurationError, "#/multipleOf"),
    "minLength Infinity": ({"minLength": float("inf")}, ConfigurationError, "#/minLength"),
    "maxItems NaN": ({"maxItems": float("nan")}, ConfigurationError, "#/maxItems"),
    "default NaN": ({"type": "integer", "default": float("nan")}, ConfigurationError, "#/default"),
    "deep NaN": (
        {"properties": {"a~/b": {"enum": [float("-inf")]}}},
        ConfigurationError,
        "#/properties/a~0~1b/enum/0",
    ),
    # not JSON at all
    "int key": ({"properties": {1: {}}}, ConfigurationError, "#/properties"),
    "None key in const": ({"const": {None: 1}}, ConfigurationError, "#/const"),
    "int key in enum object": ({"enum": [{"a": {2: 3}}]}, ConfigurationError, "#/enum/0/a"),
    "tuple enum": ({"enum": (1, 2)}, ConfigurationError, "#/enum"),
    "tuple in const": ({"const": [1, (2, 3)]}, ConfigurationError, "#/const/1"),
    "bytes key": ({b"type": "string"}, ConfigurationError, "bytes"),
    "set enum": ({"enum": {1, 2}}, ConfigurationError, "set"),
    "bytes const": ({"const": b"x"}, ConfigurationError, "bytes"),
    "object value": ({"const": object()}, ConfigurationError, "object"),
    "5000-digit bound text": ('{"minimum":' + "9" * 5000 + "}", ConfigurationError, "digits"),
    # lone surrogates: legal JSON text ("\ud800"), no UTF-8 form
    "const lone surrogate": ({"const": "a\ud800"}, UnsupportedFeatureError, "#/const"),
    "const lone surrogate text": ('{"const":"\\ud800"}', UnsupportedFeatureError, "#/const"),
    "enum lone surrogate": ({"enum": ["ok", "\udfff"]}, UnsupportedFeatureError, "#/enum"),
    "const key lone surrogate": ({"const": {"\ud800": 1}}, UnsupportedFeatureError, "#/const"),
    "property lone surrogate": (
        {"properties": {"\ud800": {}}},
        UnsupportedFeatureError,
        "#/properties/\\ud800",
    ),
    "not const lone surrogate": (
        {"not": {"const": "\ud800"}},
        UnsupportedFeatureError,
        "#/not/const",
    ),
    "required lone surrogate": ({"required": ["\ud800"]}, UnsupportedFeatureError, "#/required"),
    "dependentRequired lone surrogate": (
        {"dependentRequired": {"a": ["\udc00"]}},
        UnsupportedFeatureError,
        "#/dependentRequired/a",
    ),
    "pattern lone surrogate": (
        {"type": "string", "pattern": "a\ud800b"},
        UnsupportedFeatureError,
        "#/pattern",
    ),
    "pattern lone surrogate escape": (
        {"type": "string", "pattern": "\\ud800"},
        UnsupportedFeatureError,
        "#/pattern",
    ),
    "patternProperties lone surrogate": (
        {"patternProperties": {"\ud800": {}}},
        UnsupportedFeatureError,
        "#/patternProperties/\\ud800",
    ),
    # depth: json.loads / json.dumps / the normalizer recurse
    "500 nested not": (_nested(500, "not"), LimitExceededError, "max_depth"),
    "5000 nested not": (_nested(5000, "not"), LimitExceededError, "max_depth"),
    "500 nested properties": (_nested_props(500), LimitExceededError, "max_depth"),
    "500 nested items text": (json.dumps(_nested(500, "items")), LimitExceededError, "max_depth"),
    "100000 nested text": (
        '{"not":' * 100_000 + "{}" + "}" * 100_000,
        LimitExceededError,
        "max_depth",
    ),
    "5000 nested const": ({"const": _nested_list(5000)}, LimitExceededError, "max_depth"),
    "5000 nested enum value": ({"enum": [1, _nested_list(5000)]}, LimitExceededError, "max_depth"),
    # sizes
    "huge enum": ({"enum": list(range(20_000))}, LimitExceededError, "max_enum"),
    "huge maxProperties": (
        {"type": "object", "maxProperties": 10**30},
        LimitExceededError,
        "max_count_states",
    ),
    "huge minContains": (
        {"contains": {}, "minContains": 10**30},
        LimitExceededError,
        "max_count_states",
    ),
    "huge multipleOf": ({"type": "integer", "multipleOf": 10**400}, LimitExceededError, ""),
    "huge minProperties": (
        {"type": "object", "minProperties": 10**30},
        UnsupportedFeatureError,
        "minProperties",
    ),
    # wrong keyword types
    "pattern int": ({"pattern": 1}, ConfigurationError, "pattern"),
    "format int": ({"format": 1}, ConfigurationError, "format"),
    "minimum string": ({"minimum": "1"}, ConfigurationError, "minimum"),
    "properties list": ({"properties": [1]}, ConfigurationError, "properties"),
    "items int": ({"items": 3}, ConfigurationError, "#/items"),
    "required of ints": ({"required": [1]}, ConfigurationError, "required"),
    "unknown format lone surrogate": (
        {"type": "string", "format": "\ud800"},
        UnsupportedFeatureError,
        "format",
    ),
}


@pytest.mark.parametrize("name", sorted(FAILS))
def test_hostile_schema_fails_with_a_named_error(compiler: GrammarCompiler, name: str) -> None:
    schema, cls, needle = FAILS[name]
    with pytest.raises(FormcastError) as e:
        compiler.compile_json_schema(schema)
    assert isinstance(e.value, cls), f"{type(e.value).__name__}: {e.value}"
    assert needle in str(e.value)
    str(e.value).encode("utf-8")  # printable: no lone surrogate in the message


@pytest.mark.parametrize("name", ["enum NaN", "const Infinity", "property lone surrogate"])
def test_the_front_end_alone_names_the_pointer_too(name: str) -> None:
    schema, cls, needle = FAILS[name]
    with pytest.raises(cls) as e:
        schema_to_grammar(schema)
    assert needle in str(e.value)


# (schema, valid texts, invalid texts): hostile but compilable, and still exact
COMPILES: dict[str, tuple[Any, list[str], list[str]]] = {
    "minimum 10**400": (
        {"type": "integer", "minimum": 10**400},
        ["1" + "0" * 400, "2" + "0" * 400],
        ["9" * 400, "0", "-" + "1" + "0" * 400],
    ),
    "maximum -10**400": (
        {"type": "integer", "maximum": -(10**400)},
        ["-1" + "0" * 400, "-2" + "0" * 400],
        ["-" + "9" * 400, "0"],
    ),
    "const 10**400": ({"const": 10**400}, ["1" + "0" * 400], ["1" + "0" * 399, "1e400"]),
    "minItems 10**30": ({"type": "array", "minItems": 10**30}, [], ["[]", "[1,2,3]"]),
    "maxItems 10**30": ({"type": "array", "maxItems": 10**30}, ["[]", "[1,2]"], ["[1,]"]),
    "maxLength 10**400": ({"type": "string", "maxLength": 10**400}, ['""', '"abc"'], ['"a']),
    "minLength 10**30": ({"type": "string", "minLength": 10**30}, [], ['""', '"abc"']),
    "deep const array": (
        {"const": _nested_list(100)},
        ["[" * 100 + "]" * 100],
        ["[" * 99 + "]" * 99],
    ),
    "surrogate pair": ({"const": "\U0001f600"}, ['"\U0001f600"'], ['"\\ud83d\\ude00x"']),
    "lone surrogate annotation": (
        {"type": "integer", "description": "\ud800", "title": {"x": "\udc00"}},
        ["1"],
        ['"x"'],
    ),
    "propertyNames pattern class with surrogates": (
        {"type": "string", "pattern": "^[^\ud800-\udfff]$"},
        ['"a"', '"\U0001f600"'],
        ['"ab"'],
    ),
}


@pytest.mark.parametrize("name", sorted(COMPILES))
def test_hostile_schema_compiles_exactly(compiler: GrammarCompiler, name: str) -> None:
    schema, valid, invalid = COMPILES[name]
    compiled = compiler.compile_json_schema(schema)
    for text in valid:
        assert _accepts(compiled, text), text[:60]
    for text in invalid:
        assert not _accepts(compiled, text), text[:60]


@pytest.mark.parametrize(
    ("pattern", "where"),
    [
        ("a\ud800b", "position 1"),
        ("(?i)\udc00", "position 4"),
        ("x|\udbff", "position 2"),
        ("\\ud800", "position 0"),
        ("[\\ud800-\\udbff]", "position 1"),
    ],
)
def test_regex_lone_surrogate_is_a_named_error(
    compiler: GrammarCompiler, pattern: str, where: str
) -> None:
    with pytest.raises(UnsupportedFeatureError) as e:
        compiler.compile_regex(pattern)
    assert "surrogate" in e.value.feature
    assert where in e.value.where
    str(e.value).encode("utf-8")


def test_regex_class_with_literal_surrogates_keeps_the_scalar_values(
    compiler: GrammarCompiler,
) -> None:
    # a set: the surrogate code points are dropped (no UTF-8 form), the rest is kept
    compiled = compiler.compile_regex("x[^\ud800-\udfff]")
    assert _accepts(compiled, "xa")
    assert _accepts(compiled, "x\U0001f600")
    assert not _accepts(compiled, "xab")


def test_literal_surrogate_in_a_grammar_ir_is_a_named_error(compiler: GrammarCompiler) -> None:
    from formcast.ir.nodes import Grammar, Rule, literal

    grammar = Grammar((Rule("root", literal("a\ud800")),), "root")
    with pytest.raises(UnsupportedFeatureError, match="lone surrogate"):
        compiler.compile_grammar_ir(grammar)
