"""``minProperties`` over distinct undeclared keys, counted at run time (``kind="keys"`` marks,
:class:`formcast.index.programs.unique.keys.DistinctKeysProgram`).

Oracles: ``jsonschema`` (Draft 2020-12 with its format checker) on hand-picked and generated
instances (duplicate keys included: a validator keeps the last value); random walks of the mask
on a vocabulary with multi-byte tokens (``{}``, ``"}``, ``}}``...: every state has an allowed
token or accepts, every allowed token is accepted and every refused one refused, every finished
walk validates).  (A brute-force enumeration is out of reach here: the shortest valid
document already has 12 bytes over an unbounded key language.)"""

from __future__ import annotations

import functools
import json
import random
from typing import Any

import pytest

from formcast.errors import UnsupportedFeatureError
from formcast.index.compiler import GrammarCompiler
from formcast.index.programs.unique.keys import DistinctKeysProgram
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary
from mask_walk_helpers import (
    accepts,
    assert_walks_validate,
    byte_vocab,
    mask_walk,
    validator,
)

BYTES = byte_vocab()
MULTI = [
    b"{}", b'"}', b"}}", b'"},', b'":"', b'","', b'{"', b'"a"', b'a"}', b"1}", b"}]", b"ab",
    b'":{', b"}}}", b'":{}}', b'"a":1}', b'{"b":', b"[{}]", b'"\\u0061"', b'":1,"', b"},{",
]  # fmt: skip
MIXED = byte_vocab(MULTI)
COMPILERS = {id(v): GrammarCompiler(v, cache_size=0) for v in (BYTES, MIXED)}


def _compile(schema: Any, vocab: Vocabulary = BYTES) -> Any:
    return COMPILERS[id(vocab)].compile_json_schema(schema)


#: (schema, instances as compact texts, the declared keys a grammar writes once)
SCHEMAS: list[tuple[Any, list[str]]] = [
    (
        {"type": "object", "minProperties": 2},
        ['{}', '{"a":1}', '{"a":1,"a":2}', '{"a":1,"b":2}', '{"a":1,"\\u0061":2}',
         '{"a":{"x":1,"y":2}}', '{"a":{},"b":[{"c":1}]}', '{"a":1,"b":2,"a":3}',
         '{"\\ud83d\\ude00":1,"😀":2}', '{"é":1,"e":2,"é":3}', '{"é":1,"é":3}'],
    ),
    (
        {"type": "object", "properties": {"p": {"type": "integer"}}, "minProperties": 3,
         "additionalProperties": {"type": "string"}},
        ['{"p":1,"a":"x"}', '{"p":1,"a":"x","b":"y"}', '{"a":"x","b":"y","c":"z"}',
         '{"a":"x","b":"y","a":"z"}', '{"p":1,"a":"x","a":"y"}', '{"p":"x","a":"x","b":"y"}'],
    ),
    (
        {"type": "object", "required": ["r"], "properties": {"r": {"const": 0}},
         "minProperties": 4, "patternProperties": {"^x": {"type": "integer"}},
         "additionalProperties": False},
        ['{"r":0,"x1":1,"x2":2}', '{"r":0,"x1":1,"x2":2,"x3":3}', '{"r":0,"x1":1,"x1":2,"x3":3}',
         '{"r":0,"x":1,"xx":2,"xxx":"s"}', '{"x1":1,"x2":2,"x3":3,"x4":4}'],
    ),
    (
        {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "minProperties": 3},
        ['{"a":1,"b":2}', '{"a":1,"b":2,"c":3}', '{"a":1,"b":2,"b":3}', '{"a":1,"B":2,"c":3}'],
    ),
    (
        {"type": "object", "additionalProperties": {"type": "object", "minProperties": 2}},
        ['{"k":{"a":1,"b":2}}', '{"k":{"a":1,"a":2}}', '{"k":{"a":1,"b":2},"k":{"c":1}}',
         '{"k":{"a":1,"b":2},"l":{"a":{},"b":{}}}', '{}'],
    ),
    (
        {"anyOf": [{"type": "object", "minProperties": 3}, {"type": "array"}]},
        ['{"a":1,"b":2}', '{"a":1,"b":2,"c":3}', '[]', '{"a":1,"b":2,"b":3}'],
    ),
    (
        {"type": "array", "items": {"type": "object", "minProperties": 2}},
        ['[{"a":1,"b":2},{"a":1,"b":2}]', '[{"a":1,"b":2},{"a":1}]', '[]', '[{"a":{"b":1}}]'],
    ),
    (
        {"$defs": {"t": {"type": "object", "minProperties": 2,
                         "additionalProperties": {"anyOf": [{"$ref": "#/$defs/t"},
                                                            {"type": "integer"}]}}},
         "$ref": "#/$defs/t"},
        ['{"a":1,"b":2}', '{"a":{"x":1,"y":2},"b":2}', '{"a":{"x":1,"x":2},"b":2}',
         '{"a":{"x":{"p":1,"q":2},"y":2},"b":{"c":1,"d":2}}', '{"a":{"x":{"p":1},"y":2},"b":2}'],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("schema", "texts"), SCHEMAS)
def test_instances_agree_with_jsonschema(schema: Any, texts: list[str]) -> None:
    compiled = _compile(schema)
    assert any(m.kind == "keys" for m in compiled.unique_items)
    assert isinstance(compiled.program, DistinctKeysProgram)
    v = validator(schema)
    for text in texts:
        assert accepts(compiled, text) == v.is_valid(json.loads(text)), text


def _gen_value(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth > 2 or r < 0.4:
        return rng.choice([0, 1, "s", True, None])
    if r < 0.75:
        return _gen_members(rng, depth + 1)
    return [_gen_value(rng, depth + 1) for _ in range(rng.randrange(3))]


def _gen_members(rng: random.Random, depth: int) -> list[tuple[str, Any]]:
    """An object as a member list whose keys may repeat -- with the same value each time, so
    that "every member valid" (what a grammar checks) and "the last one valid" (a validator)
    agree; what differs is the count of distinct keys, the thing under test."""
    keys = ["a", "b", "c", "x1", "x2", "xx", "p", "r", "B"]
    chosen: dict[str, Any] = {}
    out = []
    for _ in range(rng.randrange(6)):
        k = rng.choice(keys)
        if k not in chosen:
            chosen[k] = _gen_value(rng, depth)
        out.append((k, chosen[k]))
    return out


def _dump(v: Any) -> str:
    """Compact JSON text; a member list is an object whose keys may repeat."""
    if isinstance(v, list) and v and isinstance(v[0], tuple):
        return "{" + ",".join(json.dumps(k) + ":" + _dump(x) for k, x in v) + "}"
    if isinstance(v, list) and not v:
        return "{}" if random.random() < 0.5 else "[]"
    if isinstance(v, list):
        return "[" + ",".join(_dump(x) for x in v) + "]"
    return json.dumps(v, separators=(",", ":"))


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_generated_instances_never_accepted_when_invalid(index: int) -> None:
    """Accepted implies valid on 400 generated objects with repeated keys; valid implies
    accepted where no declared key repeats (a grammar writes a declared key once)."""
    schema = SCHEMAS[index][0]
    compiled = _compile(schema)
    v = validator(schema)
    declared = set(schema.get("properties", {})) if isinstance(schema, dict) else set()
    rng = random.Random(index)
    random.seed(index)
    agreed = 0
    for _ in range(400):
        text = _dump(_gen_members(rng, 0))
        valid = v.is_valid(json.loads(text))
        got = accepts(compiled, text)
        if got:
            assert valid, text
        pairs = json.loads(text, object_pairs_hook=lambda p: p) if text[0] == "{" else []
        keys = [k for k, _ in pairs]
        if valid and not got and not (declared & {k for k in keys if keys.count(k) > 1}):
            # formcast writes declared members in order: a valid text in another order may be
            # refused; the same members in declared order must be accepted
            order = {k: i for i, k in enumerate(schema.get("properties", {}))}
            fixed = sorted(pairs, key=lambda kv: order.get(kv[0], len(order)))
            again = _dump(fixed) if fixed else "{}"
            assert v.is_valid(json.loads(again)), (text, again)
            assert accepts(compiled, again), (text, again)
        agreed += 1
    assert agreed == 400


CLOSERS = {b"}", b"]", b'"', b"0", b",", b":", b"}}", b'"}', b"1}", b"}]"}


def _walk(compiled: Any, vocab: Vocabulary, rng: random.Random, steps: int) -> str | None:
    """A random walk of the mask (:func:`mask_walk`); past ``steps`` closing tokens, or else
    tokens that start a name, are preferred."""

    def choose(m: GrammarMatcher, allowed: list[int], n: int, rng: random.Random) -> int:
        pool = allowed
        if n > steps:
            late = [t for t in allowed if vocab.token_bytes(t) in CLOSERS]
            fresh = [t for t in allowed if 0x61 <= vocab.token_bytes(t)[0] <= 0x7A]
            pool = late if late and (rng.random() < 0.6 or not fresh) else fresh or allowed
        return rng.choice(pool)

    return mask_walk(
        compiled, vocab, rng, steps=steps, rounds=steps * 12, stop_p=0.05, choose=choose
    )


WALK_SCHEMAS = [0, 1, 2, 4, 6, 7]


@pytest.mark.parametrize("index", WALK_SCHEMAS)
@pytest.mark.parametrize("vocab", [BYTES, MIXED], ids=["bytes", "mixed"])
def test_random_walks_have_no_dead_end_and_validate(index: int, vocab: Vocabulary) -> None:
    schema = SCHEMAS[index][0]
    compiled = _compile(schema, vocab)
    rng = random.Random(1000 + index)
    walk = functools.partial(_walk, compiled, vocab, rng, 25)
    assert_walks_validate(walk, validator(schema).is_valid, tries=6, at_least=3)


def test_refused_where_a_fresh_name_cannot_be_proven() -> None:
    """Finitely many undeclared names, ``maxProperties`` beside, or a run-time ``uniqueItems``
    in the same schema: still refused by name (``minProperties``)."""
    finite = {"type": "object", "minProperties": 3, "propertyNames": {"enum": ["a", "b", "c", "d"]}}
    with_max = {"type": "object", "minProperties": 3, "maxProperties": 5}
    both = {
        "type": "object",
        "minProperties": 3,
        "properties": {"u": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
    }
    for schema in (finite, with_max, both):
        with pytest.raises(UnsupportedFeatureError) as err:
            _compile(schema)
        assert err.value.feature == "minProperties", schema


def test_serialized_grammar_keeps_the_check() -> None:
    from formcast.index.compiled import CompiledGrammar

    compiled = _compile({"type": "object", "minProperties": 2})
    again = CompiledGrammar.deserialize(compiled.serialize(), BYTES)
    assert isinstance(again.program, DistinctKeysProgram)
    assert not accepts(again, '{"a":1,"a":2}')
    assert accepts(again, '{"a":1,"b":2}')


def test_through_constraints_and_inside_a_larger_constraint() -> None:
    from formcast import constraints

    schema = {"type": "object", "minProperties": 2}
    c = constraints.seq("obj: ", constraints.json(schema), "\n")
    compiled = COMPILERS[id(BYTES)].compile(c)
    assert isinstance(compiled.program, DistinctKeysProgram)
    assert accepts(compiled, 'obj: {"a":1,"b":{"c":1}}\n')
    assert not accepts(compiled, 'obj: {"a":1,"a":{"c":1}}\n')
    with pytest.raises(UnsupportedFeatureError) as err:
        c.to_gbnf()
    assert err.value.feature == "minProperties"
