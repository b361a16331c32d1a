"""``uniqueItems`` over string items: what compiles with the run-time check, what fails closed,
and instances against ``jsonschema`` (a vocabulary of the 256 single bytes, compact texts)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import jsonschema
from formcast.errors import UnsatisfiableGrammarError, UnsupportedFeatureError
from formcast.frontends.jsonschema.api import JsonSchemaOptions
from formcast.index.compiler import GrammarCompiler
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary

VOCAB = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"<eos>"], stop_token_ids=[256])
COMPILER = GrammarCompiler(VOCAB, cache_size=0)


def _accepts(schema: Any, text: str) -> bool:
    m = GrammarMatcher(COMPILER.compile_json_schema(schema))
    return bool(m.accept_bytes(text.encode("utf-8")) and m.is_accepting())


CASES: list[tuple[Any, list[str]]] = [
    (
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        ['[]', '["a"]', '["a","b"]', '["a","a"]', '["a","\\u0061"]', '["\\ud83d\\ude00","😀"]',
         '["a","A"]', '["","a",""]', '["x\\"y","x\\"y"]', '["é","\\u00e9"]'],
    ),
    (
        {"type": "array", "items": {"type": "string", "maxLength": 2}, "uniqueItems": True,
         "minItems": 2},
        ['["a"]', '["a","b"]', '["ab","ab"]', '["ab","abc"]', '["\\n","\\u000a"]'],
    ),
    (
        {"type": "array", "items": {"type": "string", "format": "date"}, "uniqueItems": True},
        ['["2024-01-01","2024-01-02"]', '["2024-01-01","2024-01-01"]'],
    ),
    (
        {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True,
         "items": {"enum": [f"v{i}" for i in range(12)]}}}},
        ['{"tags":["v1","v2","v11"]}', '{"tags":["v1","v2","v1"]}', '{"tags":[]}'],
    ),
    (
        {"anyOf": [{"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                   {"type": "array", "items": {"const": "a"}}]},
        ['["a","a"]', '["b","b"]', '["a","b"]'],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("schema", "texts"), CASES)
def test_instances_agree_with_jsonschema(schema: Any, texts: list[str]) -> None:
    compiled = COMPILER.compile_json_schema(schema)
    assert compiled.unique_items  # the run-time check is what is tested here
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    for text in texts:
        want = validator.is_valid(json.loads(text))
        assert _accepts(schema, text) == want, text


def test_the_mark_names_the_array() -> None:
    schema = {"properties": {"tags": {"type": "array", "items": {"type": "string"},
                                      "uniqueItems": True}}}  # fmt: skip
    (mark,) = COMPILER.compile_json_schema(schema).unique_items
    assert mark.pointer == "#/properties/tags"
    assert not mark.canonical
    assert mark.max_len is None


def test_fewer_distinct_strings_than_min_items_is_unsatisfiable() -> None:
    schema = {"type": "array", "items": {"type": "string", "pattern": "^[ab]$"},
              "uniqueItems": True, "minItems": 3}  # fmt: skip
    with pytest.raises(UnsatisfiableGrammarError):
        COMPILER.compile_json_schema(schema)
    # two fit: the third comma is refused at run time
    schema["minItems"] = 2
    m = GrammarMatcher(COMPILER.compile_json_schema(schema))
    assert m.accept_bytes('["b","a"')
    assert not m.fork().accept_bytes(",")
    assert m.accept_bytes("]")
    assert m.is_accepting()


@pytest.mark.parametrize(
    ("extra", "pointer"),
    [
        # minItems 2 over items whose number of distinct values has no established bound
        ({"items": {"type": "object", "required": ["k"]}, "minItems": 2}, "#/properties/a"),
        # contains beside uniqueItems
        ({"items": {"type": "integer"}, "contains": {"const": 1}}, "#/properties/a"),
    ],
)  # fmt: skip
def test_what_still_fails_closed(extra: Any, pointer: str) -> None:
    schema = {"properties": {"a": {"type": "array", "uniqueItems": True, **extra}}}
    with pytest.raises(UnsupportedFeatureError) as e:
        COMPILER.compile_json_schema(schema)
    assert e.value.feature == "uniqueItems"
    assert e.value.where == pointer
    lenient = COMPILER.compile_json_schema(schema, JsonSchemaOptions(lenient=True))
    assert any("uniqueItems" in w for w in lenient.warnings)


@pytest.mark.parametrize(
    "items",
    [{"type": "object"}, {"type": "integer"}, {},
     {"anyOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "maxLength": 3}]}],
)  # fmt: skip
def test_other_item_types_are_checked_on_values(items: Any) -> None:
    schema = {"properties": {"a": {"type": "array", "items": items, "uniqueItems": True}}}
    (mark,) = COMPILER.compile_json_schema(schema).unique_items
    assert mark.kind == "value"
    assert mark.pointer == "#/properties/a"
