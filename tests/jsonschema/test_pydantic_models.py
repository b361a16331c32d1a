"""Pydantic models as constraints: ``compile_json_schema(Model)`` uses the model's JSON Schema.

Every generated document must parse with ``Model.model_validate_json``; the checks below walk
real serializations (``model_dump_json``, compact) through a matcher over a byte vocabulary,
and check that documents Pydantic rejects are refused.
"""

from __future__ import annotations

import enum
from typing import Literal

import pytest

pydantic = pytest.importorskip("pydantic")

from pydantic import BaseModel, Field  # noqa: E402

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary  # noqa: E402


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    street: str = Field(max_length=40)
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=20)
    age: int = Field(ge=0, le=150)
    color: Color
    kind: Literal["customer", "staff"]
    address: Address
    tags: list[str] = Field(default_factory=list, max_length=3)
    nickname: str | None = None
    score: float = 0.5


def _vocab() -> Vocabulary:
    return Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )


def _accepts(compiled: object, text: str) -> bool:
    m = GrammarMatcher(compiled)  # type: ignore[arg-type]
    for b in text.encode("utf-8"):
        if not m.accept_token(b):
            return False
    return m.is_token_allowed(256)


@pytest.fixture(scope="module")
def compiled() -> object:
    return GrammarCompiler(_vocab(), cache_size=0).compile_json_schema(Person)


def test_model_class_compiles_like_its_schema(compiled: object) -> None:
    from_dict = GrammarCompiler(_vocab(), cache_size=0).compile_json_schema(
        Person.model_json_schema()
    )
    doc = _person().model_dump_json()
    assert _accepts(compiled, doc)
    assert _accepts(from_dict, doc)


def _person(**changes: object) -> Person:
    base: dict[str, object] = {
        "name": "Ada",
        "age": 36,
        "color": Color.GREEN,
        "kind": "staff",
        "address": {"street": "1 Loop Rd", "zip_code": "12345"},
        "tags": ["a", "b"],
        "nickname": None,
        "score": 0.25,
    }
    base.update(changes)
    return Person.model_validate(base)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"tags": []},
        {"nickname": "Countess"},
        {"name": "é" * 20, "age": 0, "score": -1e-3},
        {"color": Color.RED, "kind": "customer", "age": 150},
    ],
)
def test_valid_models_serialize_into_the_language(
    compiled: object, changes: dict[str, object]
) -> None:
    doc = _person(**changes).model_dump_json()
    assert _accepts(compiled, doc), doc


@pytest.mark.parametrize(
    "doc",
    [
        '{"name":"","age":36,"color":"red","kind":"staff","address":{"street":"x","zip_code":"12345"}}',
        '{"name":"Ada","age":151,"color":"red","kind":"staff","address":{"street":"x","zip_code":"12345"}}',
        '{"name":"Ada","age":36,"color":"blue","kind":"staff","address":{"street":"x","zip_code":"12345"}}',
        '{"name":"Ada","age":36,"color":"red","kind":"boss","address":{"street":"x","zip_code":"12345"}}',
        '{"name":"Ada","age":36,"color":"red","kind":"staff","address":{"street":"x","zip_code":"1234"}}',
        '{"name":"Ada","age":36,"color":"red","kind":"staff","address":{"street":"x","zip_code":"12345"},'
        '"tags":["a","b","c","d"]}',
        '{"name":"Ada","age":36,"color":"red","kind":"staff"}',
    ],
)
def test_documents_pydantic_rejects_are_refused(compiled: object, doc: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        Person.model_validate_json(doc)
    assert not _accepts(compiled, doc)
