"""A definition referenced from many places is compiled once, not once per caller.

The rule-automaton compiler inlines a grammar rule used more than once only when it is small
(``formcast.automata.rules._INLINE_SHARED_MAX_NODES`` IR nodes: a string, a number, a short
key set).  With 300 a mid-sized shared definition (an object of a few typed members, 30-300
nodes) was copied into each caller's DFA, so its subset construction was paid per caller: real
SchemaStore configuration schemas (``app-config.json``, ``venvironment-schema-v4.2.0.json``,
``partial-poe.json``) ran out of ``max_compile_work``.  The language is the same either way:
``jsonschema`` is the oracle for instances built from the schema, valid and invalid.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

import formcast
import jsonschema
from formcast.automata import rules

VOCAB = formcast.Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
)

ITEM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "kind": {"enum": ["a", "bb", "ccc"]},
        "size": {"type": "integer", "minimum": 0},
        "on": {"type": "boolean"},
    },
    "required": ["name"],
    "additionalProperties": False,
}


def _schema(n: int) -> dict[str, Any]:
    return {
        "$defs": {"item": ITEM},
        "type": "object",
        "properties": {f"p{i}": {"$ref": "#/$defs/item"} for i in range(n)},
        "additionalProperties": False,
    }


def _compile(schema: Any) -> formcast.CompiledGrammar:
    compiler = formcast.GrammarCompiler(VOCAB, cache_size=0)
    return compiler.compile_json_schema(schema)


def _accepts(compiled: formcast.CompiledGrammar, value: Any) -> bool:
    m = formcast.GrammarMatcher(compiled)
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return bool(m.accept_bytes(text.encode("utf-8")) and m.is_accepting())


def test_a_shared_definition_is_not_compiled_per_caller() -> None:
    one = _compile(_schema(1)).compile_work
    forty = _compile(_schema(40)).compile_work
    # inlined into each caller (the old 300-node limit: 20,369 -> 647,210 units, 32x); as
    # one rule 21,589 -> 94,156 (4.4x: the forty keys and calls)
    assert forty < 10 * one, (one, forty)


def _random_item(rng: random.Random) -> Any:
    out: dict[str, Any] = {}
    for key in ("name", "kind", "size", "on", "extra"):
        if key != "name" and rng.random() < 0.5:
            continue
        if rng.random() < 0.9 or key == "extra":
            out[key] = {
                "name": rng.choice(["", "x", "abcdefgh", "abcdefghi"]),
                "kind": rng.choice(["a", "bb", "ccc", "d"]),
                "size": rng.choice([0, 7, -1, 1.5]),
                "on": rng.choice([True, False, None]),
                "extra": 1,
            }[key]
    if rng.random() < 0.1:
        out.pop("name", None)
    return out


@pytest.mark.parametrize("limit", [0, 20, 300])
def test_the_language_does_not_depend_on_the_inline_limit(
    limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rules, "_INLINE_SHARED_MAX_NODES", limit)
    schema = _schema(4)
    compiled = _compile(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(limit)
    seen = {True: 0, False: 0}
    for _ in range(150):
        keys = rng.sample([f"p{i}" for i in range(4)] + ["q"], rng.randint(0, 3))
        keys.sort()
        value = {k: _random_item(rng) for k in keys}
        valid = validator.is_valid(value)
        seen[valid] += 1
        assert _accepts(compiled, value) == valid, (limit, value)
    assert seen[True] > 10, seen
    assert seen[False] > 10, seen
