"""A Pydantic model class is accepted wherever ``generate`` / ``stream`` / ``compile_constraint``
accept a schema, and ``result.parsed`` is an instance of it (``result.value`` stays the JSON).

Only a completed output is parsed: a truncated one has ``parsed`` and ``value`` ``None`` and a
``parse_error`` that says why; a document the class's own validators reject (something JSON
Schema cannot say) is reported in ``parse_error``, never raised from the loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

pydantic = pytest.importorskip("pydantic")

from pydantic import BaseModel, ConfigDict, Field, field_validator  # noqa: E402

from formcast.generation import GenerationResult, compile_constraint, generate, stream  # noqa: E402
from formcast.model.callable import CallableModel  # noqa: E402
from formcast.vocab.vocabulary import Vocabulary  # noqa: E402

EOS = 256


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")  # additionalProperties: false

    name: str = Field(min_length=1, max_length=20)
    age: int = Field(ge=0, le=150)


class Picky(BaseModel):
    name: str

    @field_validator("name")
    @classmethod
    def no_bob(cls, v: str) -> str:
        if v == "Bob":
            raise ValueError("Bob is not allowed")
        return v


def byte_vocab() -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>", b'{"', b'":', b'",']
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes")


def scripted(vocab: Vocabulary, target: bytes) -> Callable[[list[int]], np.ndarray]:
    """Logits preferring the longest token that continues ``target``, then EOS."""

    def fn(seq: list[int]) -> np.ndarray:
        done = vocab.decode(seq[1:])
        logits = np.full(vocab.vocab_size, -5.0)
        rest = target[len(done) :] if target.startswith(done) else b""
        if not rest:
            logits[EOS] = 10.0
            return logits
        best = max(
            (i for i, t in enumerate(vocab.tokens) if t and rest.startswith(t) and i != EOS),
            key=lambda i: len(vocab.tokens[i]),
        )
        logits[best] = 10.0
        return logits

    return fn


DOC = b'{"name":"Ada Lovelace","age":36}'


def test_generate_accepts_a_pydantic_class_and_returns_an_instance() -> None:
    vocab = byte_vocab()
    result = generate(CallableModel(scripted(vocab, DOC), vocab), [65], schema=Person)
    assert result.finish_reason == "completed"
    assert result.constraint == "json_schema"
    assert isinstance(result.parsed, Person)
    assert result.parsed == Person(name="Ada Lovelace", age=36)
    assert result.value == {"name": "Ada Lovelace", "age": 36}
    assert result.parse_error is None


def test_stream_accepts_a_pydantic_class() -> None:
    vocab = byte_vocab()
    items = list(stream(CallableModel(scripted(vocab, DOC), vocab), [65], schema=Person))
    result = items[-1]
    assert isinstance(result, GenerationResult)
    assert isinstance(result.parsed, Person)
    assert "".join(p for p in items[:-1] if isinstance(p, str)) == DOC.decode()


def test_compile_constraint_accepts_a_pydantic_class() -> None:
    vocab = byte_vocab()
    by_class, kind = compile_constraint(vocab, schema=Person)
    by_schema, _ = compile_constraint(vocab, schema=Person.model_json_schema())
    assert kind == "json_schema"
    assert by_class is by_schema  # the same compiled grammar: the class is its JSON Schema


def test_the_schema_of_the_class_is_enforced() -> None:
    """The model wants age 999; the class's ``le=150`` keeps the output valid."""
    vocab = byte_vocab()
    model = CallableModel(scripted(vocab, b'{"name":"Ada","age":999}'), vocab)
    result = generate(model, [65], schema=Person, max_tokens=60)
    assert result.finish_reason == "completed"
    assert isinstance(result.parsed, Person)
    assert result.parsed.age <= 150


def test_a_truncated_output_is_never_parsed() -> None:
    vocab = byte_vocab()
    model = CallableModel(scripted(vocab, DOC), vocab)
    result = generate(model, [65], schema=Person, max_tokens=3)
    assert result.finish_reason == "max_tokens"
    assert result.parsed is None
    assert result.value is None
    assert result.parse_error is not None
    assert "max_tokens" in result.parse_error


def test_validators_beyond_json_schema_are_reported_not_raised() -> None:
    vocab = byte_vocab()
    ok = generate(CallableModel(scripted(vocab, b'{"name":"Ada"}'), vocab), [65], schema=Picky)
    assert ok.parsed == Picky(name="Ada")
    bob = generate(CallableModel(scripted(vocab, b'{"name":"Bob"}'), vocab), [65], schema=Picky)
    assert bob.finish_reason == "completed"
    assert bob.value == {"name": "Bob"}  # the document is valid JSON for the schema ...
    assert bob.parsed is None  # ... but the class refuses it
    assert bob.parse_error is not None
    assert "Picky" in bob.parse_error
    assert "Bob is not allowed" in bob.parse_error


def test_plain_schema_parsed_is_the_value() -> None:
    vocab = byte_vocab()
    result = generate(
        CallableModel(scripted(vocab, DOC), vocab), [65], schema=Person.model_json_schema()
    )
    assert result.parsed == result.value == {"name": "Ada Lovelace", "age": 36}
