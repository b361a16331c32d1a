"""The compile cache's key covers everything that changes the language.

``GrammarCompiler`` caches compiled grammars by (kind, source, options, vocabulary).  For JSON
Schema the key is the schema's JSON *in its own key order* (properties are generated in schema
order, so two orders are two grammars) and :meth:`JsonSchemaOptions.cache_key`: every field,
with the ``registry`` replaced by a digest of its resources (a registry that can retrieve
resources on demand cannot be digested: such compiles are not cached).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import referencing
import referencing.jsonschema

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.errors import LimitExceededError
from formcast.frontends.jsonschema.api import JsonSchemaOptions

REMOTE = "https://example.com/remote.json"


def byte_vocab() -> Vocabulary:
    return Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )


def accepts(compiled: Any, text: str) -> bool:
    m = GrammarMatcher(compiled)
    return bool(m.accept_bytes(text.encode()) and m.is_accepting())


def registry_with(contents: Any) -> Any:
    return referencing.Registry().with_resource(
        REMOTE, referencing.jsonschema.DRAFT202012.create_resource(contents)
    )


def test_registries_with_different_contents_get_different_grammars() -> None:
    compiler = GrammarCompiler(byte_vocab())
    schema = {"$ref": REMOTE}
    as_string = compiler.compile_json_schema(
        schema, JsonSchemaOptions(registry=registry_with({"type": "string"}))
    )
    as_integer = compiler.compile_json_schema(
        schema, JsonSchemaOptions(registry=registry_with({"type": "integer"}))
    )
    assert as_string is not as_integer
    assert accepts(as_string, '"abc"')
    assert not accepts(as_string, "5")
    assert accepts(as_integer, "5")
    assert not accepts(as_integer, '"abc"')
    assert as_string.fingerprint != as_integer.fingerprint
    # an equal registry (a different object) is a cache hit
    again = compiler.compile_json_schema(
        schema, JsonSchemaOptions(registry=registry_with({"type": "integer"}))
    )
    assert again is as_integer


def test_registry_digest_sees_contents_and_order() -> None:
    a = JsonSchemaOptions(registry=registry_with({"type": "string"})).cache_key()
    b = JsonSchemaOptions(registry=registry_with({"type": "integer"})).cache_key()
    assert a is not None
    assert b is not None
    assert a != b
    # the registry's repr ("<Registry (1 uncrawled resource)>") is not in the key
    assert "Registry (" not in a
    props1 = {"properties": {"x": {"type": "integer"}, "y": {"type": "string"}}}
    props2 = {"properties": {"y": {"type": "string"}, "x": {"type": "integer"}}}
    assert (
        JsonSchemaOptions(registry=registry_with(props1)).cache_key()
        != JsonSchemaOptions(registry=registry_with(props2)).cache_key()
    )


def test_a_retrieving_registry_is_not_cached() -> None:
    def retrieve(uri: str) -> Any:
        return referencing.jsonschema.DRAFT202012.create_resource({"type": "integer"})

    registry = referencing.Registry(retrieve=retrieve)  # type: ignore[call-arg]
    opts = JsonSchemaOptions(registry=registry)
    assert opts.cache_key() is None
    compiler = GrammarCompiler(byte_vocab())
    first = compiler.compile_json_schema({"$ref": REMOTE}, opts)
    second = compiler.compile_json_schema({"$ref": REMOTE}, opts)
    assert first is not second  # built twice, never served from the cache
    assert accepts(second, "5")
    assert not accepts(second, '"abc"')


def test_property_order_is_part_of_the_key() -> None:
    compiler = GrammarCompiler(byte_vocab())
    xy = {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"],
        "additionalProperties": False,
    }
    yx = {**xy, "properties": {"y": {"type": "integer"}, "x": {"type": "integer"}}}
    g_xy = compiler.compile_json_schema(xy)
    g_yx = compiler.compile_json_schema(yx)
    assert g_xy is not g_yx
    assert accepts(g_xy, '{"x":1,"y":2}')
    assert not accepts(g_xy, '{"y":2,"x":1}')
    assert accepts(g_yx, '{"y":2,"x":1}')
    assert not accepts(g_yx, '{"x":1,"y":2}')
    # same order, same grammar (also when given as JSON text)
    assert compiler.compile_json_schema(json.dumps(yx)) is g_yx


def test_every_option_field_is_in_the_key() -> None:
    base = JsonSchemaOptions().cache_key()
    assert base is not None
    for changed in (
        JsonSchemaOptions(whitespace="flexible"),
        JsonSchemaOptions(max_whitespace=2, whitespace="flexible"),
        JsonSchemaOptions(allow_extra_properties=False),
        JsonSchemaOptions(format_assertion=False),
        JsonSchemaOptions(max_enum=5),
    ):
        assert changed.cache_key() != base


@pytest.mark.parametrize("as_text", [False, True])
def test_a_schema_too_deep_for_json_is_a_named_limit(as_text: bool) -> None:
    schema: Any = {"type": "integer"}
    for _ in range(5_000):
        schema = {"items": schema}
    source = '{"items":' * 5_000 + '{"type":"integer"}' + "}" * 5_000
    compiler = GrammarCompiler(byte_vocab())
    with pytest.raises(LimitExceededError) as e:
        compiler.compile_json_schema(source if as_text else schema)
    assert e.value.limit == "max_depth"
    assert "5001 levels deep" in str(e.value)
    if not as_text:
        assert "/items/items" in str(e.value)


def test_cached_is_the_memory_cache_without_a_compile() -> None:
    """``GrammarCompiler.cached``: the grammar ``compile`` returned for an equal spec (counted
    as a hit), None for one never compiled, for other options, or with caching off; it never
    compiles."""
    from formcast.index.spec import JsonSchemaSpec

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    compiler = GrammarCompiler(byte_vocab())
    assert compiler.cached(JsonSchemaSpec.of(schema)) is None
    assert compiler.misses == 0, "a look-up compiles nothing"
    assert compiler.hits == 0
    compiled = compiler.compile(JsonSchemaSpec.of(schema))
    assert compiler.cached(JsonSchemaSpec.of(json.loads(json.dumps(schema)))) is compiled
    assert compiler.hits == 1
    assert compiler.cached(JsonSchemaSpec.of(schema, JsonSchemaOptions(lenient=True))) is None
    assert compiler.cached(JsonSchemaSpec.of({**schema, "required": []})) is None
    off = GrammarCompiler(byte_vocab(), cache_size=0)
    off.compile(JsonSchemaSpec.of(schema))
    assert off.cached(JsonSchemaSpec.of(schema)) is None
