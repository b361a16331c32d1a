"""A schema is read and checked once, by one function, with one message per mistake.

``generate(schema=...)`` / ``compile_constraint``, ``GrammarCompiler.compile_json_schema`` and
``schema_to_grammar`` all read a schema (text, dict, boolean, Pydantic class) through
:func:`formcast.frontends.jsonschema.source.load_schema`; the text is parsed once on the way
from the top to the front-end.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from formcast.errors import ConfigurationError, LimitExceededError
from formcast.frontends.jsonschema import source
from formcast.frontends.jsonschema.api import JsonSchemaOptions, schema_to_grammar
from formcast.generation.inputs import compile_constraint
from formcast.index.compiler import GrammarCompiler
from formcast.vocab.vocabulary import Vocabulary

VOCAB = Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256])


def _entry_points() -> list[Callable[[Any], object]]:
    compiler = GrammarCompiler(VOCAB, cache_size=0)
    return [
        lambda s: compile_constraint(VOCAB, schema=s, compiler=compiler),
        compiler.compile_json_schema,
        schema_to_grammar,
    ]


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        ('{"type": "integer"', "the schema is not valid JSON"),
        ("[1, 2]", "schema must be a JSON Schema object or boolean, JSON text or a Pydantic"),
        (3, "schema must be a JSON Schema object or boolean, JSON text or a Pydantic"),
        ({"const": {1, 2}}, "the schema is not JSON-serializable"),
    ],
)
def test_every_entry_point_gives_the_same_message(schema: Any, needle: str) -> None:
    for call in _entry_points():
        with pytest.raises(ConfigurationError) as e:
            call(schema)
        assert needle in str(e.value)


def test_every_entry_point_checks_the_size() -> None:
    opts = JsonSchemaOptions(max_schema_bytes=50)
    big = {"description": "x" * 100}
    with pytest.raises(LimitExceededError, match="max_schema_bytes"):
        GrammarCompiler(VOCAB, cache_size=0).compile_json_schema(big, opts)
    with pytest.raises(LimitExceededError, match="max_schema_bytes"):
        schema_to_grammar(json.dumps(big), opts)


def test_the_text_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class CountingJson:
        @staticmethod
        def loads(text: str) -> Any:
            calls.append(text)
            return json.loads(text)

        dumps = staticmethod(json.dumps)

    monkeypatch.setattr(source, "json", CountingJson)
    text = '{"type": "object", "properties": {"a": {"type": "integer"}}}'
    cg, kind = compile_constraint(VOCAB, schema=text, compiler=GrammarCompiler(VOCAB, cache_size=0))
    assert kind == "json_schema"
    assert cg is not None
    assert calls == [text]
    assert cg.source == json.dumps(json.loads(text), ensure_ascii=False)


def test_a_pydantic_class_is_read_by_the_front_end_too() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        x: int
        y: int

    grammar, _ = schema_to_grammar(Point)
    assert grammar.start == "root"
    cg = GrammarCompiler(VOCAB, cache_size=0).compile_json_schema(Point)
    assert cg.source == json.dumps(Point.model_json_schema(), ensure_ascii=False)
