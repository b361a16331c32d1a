"""Duplicate keys: validators (and ``json.loads``) keep the last value of a repeated key.

formcast lets undeclared members repeat a key (a grammar cannot keep arbitrary keys distinct),
so everything that depends on *which* members an object has must hold under last-value-wins:
undeclared members count as one member towards ``minProperties`` (more needed fails closed),
the witness of "some member breaks it" is the last member (nothing can overwrite it), and "an
object other than this constant" never relies on a member count.  Every document accepted with
the stop token allowed must validate (``jsonschema``) once parsed.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from formcast.errors import UnsupportedFeatureError
from formcast.frontends.jsonschema.api import JsonSchemaOptions, schema_to_grammar
from formcast.index.compiler import GrammarCompiler
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary

jsonschema = pytest.importorskip("jsonschema")

STOP = 256


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[STOP]
    )
    return GrammarCompiler(vocab, cache_size=0)


def _accepts(compiler: GrammarCompiler, schema: Any, text: str) -> bool:
    """``text`` is accepted and then the stop token is allowed."""
    m = GrammarMatcher(compiler.compile_json_schema(schema))
    return bool(m.accept_bytes(text.encode("utf-8")) and m.is_token_allowed(STOP))


def _valid(schema: Any, text: str) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return bool(cls(schema).is_valid(json.loads(text)))


# -- the four examples of the issue ---------------------------------------------------------------
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "minProperties": 2},
        {"type": "object", "not": {"maxProperties": 1}},
        {"type": "object", "minProperties": 3, "properties": {"a": {}}},
    ],
)
def test_a_count_that_needs_several_undeclared_members_is_counted_at_run_time(
    compiler: GrammarCompiler, schema: dict[str, Any]
) -> None:
    # distinct keys counted by the matcher (tests/jsonschema/test_min_properties_distinct_keys.py)
    compiled = compiler.compile_json_schema(schema)
    assert [m.kind for m in compiled.unique_items] == ["keys"]
    need = 3 if "properties" in schema else 2
    dup = "{" + ",".join(f'"b":{i}' for i in range(need + 1)) + "}"  # one distinct key
    fresh = "{" + ",".join(f'"{k}":1' for k in "abcd"[:need]) + "}"
    assert not _valid(schema, dup)
    assert not _accepts(compiler, schema, dup)
    assert _valid(schema, fresh)
    assert _accepts(compiler, schema, fresh)


def test_a_count_past_max_count_states_still_fails_closed(compiler: GrammarCompiler) -> None:
    with pytest.raises(UnsupportedFeatureError) as e:
        compiler.compile_json_schema({"type": "object", "minProperties": 10_001})
    assert e.value.feature == "minProperties"
    assert e.value.where == "#"
    assert "distinct" in str(e.value)


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"type": "object", "minProperties": 2}, '{"a":1,"a":2}'),
        ({"type": "object", "not": {"maxProperties": 1}}, '{"a":1,"a":2}'),
        ({"type": "object", "minProperties": 3, "properties": {"a": {}}}, '{"a":1,"b":1,"b":2}'),
    ],
)
def test_lenient_counts_are_still_recorded(schema: dict[str, Any], text: str) -> None:
    # lenient=True goes on counting every member written, and says so
    _, ignored = schema_to_grammar(schema, JsonSchemaOptions(lenient=True))
    assert any(w.startswith("minProperties at #") for w in ignored), ignored
    assert not _valid(schema, text)


def test_the_witness_of_a_negated_additional_properties_is_the_last_member(
    compiler: GrammarCompiler,
) -> None:
    schema = {"type": "object", "not": {"additionalProperties": {"type": "integer"}}}
    assert not _valid(schema, '{"a":"x","a":1}')
    assert not _accepts(compiler, schema, '{"a":"x","a":1}')
    assert not _accepts(compiler, schema, '{"a":"x","b":1,"a":1}')
    # the witness written last (whatever came before it) is what a validator sees
    for text in ('{"a":1,"a":"x"}', '{"a":"x"}', '{"b":1,"a":"x"}', '{"a":"x","b":1,"a":"y"}'):
        assert _valid(schema, text)
        assert _accepts(compiler, schema, text), text


def test_one_undeclared_member_still_completes_a_count(compiler: GrammarCompiler) -> None:
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 3}
    assert _accepts(compiler, schema, '{"a":1,"b":2,"c":3}')
    assert _accepts(compiler, schema, '{"a":1,"b":2,"c":3,"d":4}')
    # two undeclared members may be one key: they count once
    assert not _valid(schema, '{"a":1,"c":3,"c":4}')
    assert not _accepts(compiler, schema, '{"a":1,"c":3,"c":4}')
    assert not _accepts(compiler, schema, '{"a":1,"c":3,"d":4}')  # a subset: sound
    assert _accepts(compiler, {"type": "object", "minProperties": 1}, '{"x":1,"x":2}')


def test_an_object_other_than_a_constant(compiler: GrammarCompiler) -> None:
    schema = {"not": {"const": {"a": 1}}}
    for text in ('{"a":2,"a":1}', '{"a":1,"a":1}', '{"a":1}'):
        assert not _valid(schema, text)
        assert not _accepts(compiler, schema, text), text
    for text in ('{"a":1,"b":2}', '{"b":2,"a":1}', "{}", '{"a":2}', "[]"):
        assert _valid(schema, text)
        assert _accepts(compiler, schema, text), text
    # valid, but a key the schema names is written once (a subset: sound)
    assert _valid(schema, '{"a":1,"a":2}')
    assert not _accepts(compiler, schema, '{"a":1,"a":2}')
    # several such constants: the "key more" witnesses merge into one
    schema = {"not": {"enum": [{"a": 1}, {"b": 1}]}}
    assert not _accepts(compiler, schema, '{"b":2,"b":1}')
    assert _accepts(compiler, schema, '{"a":1,"c":1}')
    assert _accepts(compiler, schema, '{"c":1,"a":1,"b":1}')
    # valid (each constant lacks a key of the other) but one member must serve both: a subset
    assert _valid(schema, '{"a":1,"b":1}')
    assert not _accepts(compiler, schema, '{"a":1,"b":1}')


# -- differential: random texts with repeated keys against jsonschema -----------------------------
DIFF_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "minProperties": 1},
    {"type": "object", "maxProperties": 2},
    {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 2},
    {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 3},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2},
    {"type": "object", "not": {"maxProperties": 0}},
    {"type": "object", "not": {"minProperties": 2}},
    {"type": "object", "not": {"additionalProperties": {"type": "integer"}}},
    {"type": "object", "not": {"additionalProperties": False}},
    {
        "type": "object",
        "properties": {"a": {}},
        "not": {"properties": {"a": {}}, "additionalProperties": {"type": "string"}},
    },
    {"type": "object", "not": {"patternProperties": {"^b": {"type": "integer"}}}},
    {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1},
    {"type": "object", "patternProperties": {"^a": {"type": "integer"}}, "minProperties": 1},
    {"not": {"const": {"a": 1}}},
    {"not": {"const": {"a": 1, "b": "x"}}},
    {"not": {"enum": [{"a": 1}, {}]}},
    {"type": "object", "oneOf": [{"required": ["a"]}, {"maxProperties": 1}]},
    {"type": "object", "if": {"minProperties": 1}, "then": {"required": ["a"]}},
    {"type": "object", "dependentSchemas": {"a": {"minProperties": 2}}},
    {"type": "object", "propertyNames": {"enum": ["a", "b"]}, "minProperties": 1},
    {"oneOf": [{"const": {"a": 1}}, {"type": "object", "maxProperties": 1}]},
    {"type": "object", "not": {"enum": [{"a": 1}, {"b": "x"}]}, "minProperties": 1},
    {"allOf": [{"not": {"const": {"a": 1}}}, {"not": {"additionalProperties": {"type": "null"}}}]},
    {"enum": [{"a": 1}, {"a": 1, "b": 2}]},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
]

KEYS = ["a", "b", "c"]
VALUES = ["1", '"x"', "null", "[]", "2.5", "{}"]


def _random_object(rng: random.Random) -> str:
    n = rng.choice([0, 1, 2, 2, 3, 3, 4])
    members = [f'"{rng.choice(KEYS)}":{rng.choice(VALUES)}' for _ in range(n)]
    return "{" + ",".join(members) + "}"


@pytest.mark.parametrize("index", range(len(DIFF_SCHEMAS)))
def test_duplicate_key_documents_accepted_are_valid(compiler: GrammarCompiler, index: int) -> None:
    schema = DIFF_SCHEMAS[index]
    try:
        compiled = compiler.compile_json_schema(schema)
    except UnsupportedFeatureError:
        return  # failing closed is sound
    rng = random.Random(index)
    texts = {_random_object(rng) for _ in range(400)}
    with_dups = [t for t in texts if len(json.loads(t)) < t.count(":")]
    assert len(with_dups) > 50
    accepted = 0
    for text in sorted(texts):
        m = GrammarMatcher(compiled)
        if m.accept_bytes(text.encode("utf-8")) and m.is_token_allowed(STOP):
            accepted += 1
            assert _valid(schema, text), f"{json.dumps(schema)} accepts invalid {text}"
    assert accepted > 0 or index == len(DIFF_SCHEMAS) - 2, "the sample accepts nothing"
