"""Overlapping ``oneOf`` over arrays told apart at run time (issue #29 item 4): marked array
rules (``mark:oneof_arr``) whose exactly-one check runs at the structural ``]``
(:class:`formcast.index.programs.oneof.OneOfProgram`), kept only where an escape item is
proven (:func:`formcast.frontends.jsonschema.oneof.escape_items`).

Oracles: ``jsonschema`` (Draft 2020-12) on every array of length 0 to 5 over a small item
domain (brute force: the grammar accepts exactly the valid ones, since arrays have no member
order), on nested and mixed schemas; random walks of the mask on a byte vocabulary and on one
with multi-byte tokens (``]]``, ``"]``, ``[]``...): no dead end, the mask equals what
``accept_token`` accepts, finished walks validate; a grammar serialized and loaded in a fresh
process gives the same masks and verdicts.  Refusals by name where no escape item exists."""

from __future__ import annotations

import functools
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

import jsonschema
from formcast.errors import UnsupportedFeatureError
from formcast.index.compiler import GrammarCompiler
from formcast.index.programs.oneof import OneOfProgram
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary
from mask_walk_helpers import accepts, assert_walks_validate, byte_vocab, mask_walk, validator

BYTES = byte_vocab()
MULTI = [
    b"[]", b'"]', b"]]", b'"],', b'","', b'["', b'"a"', b"1]", b"null]", b"[[", b"],[",
    b",null", b"[1", b'a"]', b"[{}]", b"}]", b'{"_":', b',"a"',
]  # fmt: skip
MIXED = byte_vocab(MULTI)
COMPILERS = {id(v): GrammarCompiler(v, cache_size=0) for v in (BYTES, MIXED)}

#: "items after prefixItems" (a negation the algebra refuses): branch 0's arrays all match
#: branch 1 too except where an item is null; branch 1 is told apart at run time (null)
PREFIX = {
    "oneOf": [
        {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}},
        {"type": "array", "items": {"type": ["integer", "string", "null"]}},
    ]
}
#: branch 1 bounded (maxItems 3): branch 0 outgrows it (a length escape); exactly-one is
#: "four strings or more"
BOUNDED = {
    "oneOf": [
        {"type": "array", "items": {"type": "string"}},
        {
            "type": "array",
            "prefixItems": [{"type": "string"}],
            "items": {"type": "string"},
            "maxItems": 3,
        },
    ]
}
#: the run-time arrays nested in an object and in an array, beside an object told apart at
#: run time (one program checks both kinds of marks)
NESTED = {
    "type": "object",
    "properties": {
        "a": PREFIX,
        "b": {"type": "array", "items": PREFIX, "maxItems": 2},
        "o": {
            "oneOf": [
                {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
                {"type": "object", "properties": {"n": {"type": "integer"}}},
            ]
        },
    },
    "additionalProperties": False,
}
SCHEMAS = [PREFIX, BOUNDED, NESTED]
DOMAIN = [1, "a", None, "b"]


def _compile(schema: Any, vocab: Vocabulary = BYTES) -> Any:
    return COMPILERS[id(vocab)].compile_json_schema(schema)


def _arrays(domain: list[Any], top: int) -> list[Any]:
    return [list(t) for n in range(top + 1) for t in itertools.product(domain, repeat=n)]


@pytest.mark.parametrize("schema", [PREFIX, BOUNDED], ids=["prefix", "bounded"])
def test_every_small_array_agrees_with_jsonschema(schema: Any) -> None:
    """Brute force: every array of 0 to 5 items over ``DOMAIN`` is accepted iff valid."""
    compiled = _compile(schema)
    assert isinstance(compiled.program, OneOfProgram)
    assert any(m.rule.startswith("mark:oneof_arr") for m in compiled.unique_items)
    v = validator(schema)
    valid = 0
    for value in _arrays(DOMAIN, 5):
        text = json.dumps(value, separators=(",", ":"))
        ok = v.is_valid(value)
        valid += ok
        assert accepts(compiled, text) == ok, text
    assert valid > 40


def test_nested_arrays_and_objects_agree_with_jsonschema() -> None:
    """Arrays told apart at run time inside an object member and inside an array, next to an
    object told apart at run time: accepted iff valid (members in schema order)."""
    compiled = _compile(NESTED)
    v = validator(NESTED)
    rng = random.Random(5)
    small = _arrays([1, "a", None], 3)
    objs: list[Any] = [{}, {"n": 1}, {"n": 1, "x": 2}, {"n": "s"}, {"Q": 1}, {"n": 1, "Q": 1}]
    seen = [0, 0]
    for _ in range(600):
        value: dict[str, Any] = {}
        if rng.random() < 0.7:
            value["a"] = rng.choice(small)
        if rng.random() < 0.5:
            value["b"] = [rng.choice(small) for _ in range(rng.randrange(3))]
        if rng.random() < 0.5:
            value["o"] = rng.choice(objs)
        text = json.dumps(value, separators=(",", ":"))
        ok = v.is_valid(value)
        seen[ok] += 1
        assert accepts(compiled, text) == ok, text
    assert min(seen) > 50


CLOSERS = {b"]", b'"', b"1", b",", b"]]", b'"]', b"1]", b"null]", b"}", b"}]"}


def _walk(compiled: Any, vocab: Vocabulary, rng: random.Random, steps: int) -> str | None:
    def choose(m: GrammarMatcher, allowed: list[int], n: int, rng: random.Random) -> int:
        if n > steps:
            late = [t for t in allowed if vocab.token_bytes(t) in CLOSERS]
            if late and rng.random() < 0.8:
                return rng.choice(late)
        return rng.choice(allowed)

    return mask_walk(
        compiled, vocab, rng, steps=steps, rounds=steps * 12, stop_p=0.05, choose=choose
    )


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
@pytest.mark.parametrize("vocab", [BYTES, MIXED], ids=["bytes", "mixed"])
def test_random_walks_have_no_dead_end_and_validate(index: int, vocab: Vocabulary) -> None:
    schema = SCHEMAS[index]
    compiled = _compile(schema, vocab)
    rng = random.Random(3000 + index)
    walk = functools.partial(_walk, compiled, vocab, rng, 16)
    assert_walks_validate(walk, validator(schema).is_valid, tries=5, at_least=3)


def test_prefixes_in_the_overlap_never_dead_end() -> None:
    """A prefix matching both branches whichever way it closes (``[1,"a"`` in ``PREFIX``,
    ``["a","b","c"`` in ``BOUNDED``): its ``]`` is refused, a token is still allowed, and
    every walk from it finishes valid."""
    for schema, prefix in ((PREFIX, '[1,"a"'), (BOUNDED, '["a","b","c"'), (PREFIX, "[1")):
        compiled = _compile(schema)
        m = GrammarMatcher(compiled)
        assert m.accept_bytes(prefix.encode())
        assert not m.fork().accept_bytes(b"]"), prefix
        rng = random.Random(11)
        for _ in range(4):
            twin = m.fork()
            out = prefix.encode()
            for _n in range(300):
                if twin.is_accepting():
                    break
                allowed = [t for t in twin.allowed_token_ids().tolist() if t < 256]
                assert allowed, out
                pool = [t for t in allowed if bytes([t]) in (b"]", b'"', b",", b"1", b"n")]
                t = rng.choice(pool if pool and rng.random() < 0.7 else allowed)
                assert twin.accept_token(t)
                out += bytes([t])
            assert twin.is_accepting(), out
            assert validator(schema).is_valid(json.loads(out)), out


def test_refused_by_name_where_no_escape_item_exists() -> None:
    """Branches bounded on both sides (no item to append), whose items the other branch all
    takes (``uniqueItems`` strings against bounded strings: the length escape needs repeated
    items), or equal languages: still refused, naming ``oneOf``."""
    both_bounded = {
        "oneOf": [
            {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"},
             "maxItems": 3},
            {"type": "array", "items": {"type": ["integer", "string"]}, "maxItems": 4},
        ]
    }  # fmt: skip
    unique = {
        "oneOf": [
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        ]
    }
    #: the same arrays spelled two ways: every item the one appends, the other takes
    same = {
        "oneOf": [
            {"type": "array", "items": {"type": "string"}},
            {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "string"}},
        ]
    }
    for schema in (both_bounded, unique, same):
        with pytest.raises(UnsupportedFeatureError) as info:
            _compile(schema)
        assert info.value.feature == "oneOf"


def test_tslint_options_without_unique_items_compile_exactly() -> None:
    """SchemaStore tslint's ``ban`` options (an array of items, or one item that may be an
    array of 1-3 strings) without ``uniqueItems``: exact in the grammar (no run-time
    check), accepted iff valid on small instances."""
    item = {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
            {"type": "object", "properties": {"name": {"type": "string"}},
             "required": ["name"], "additionalProperties": False},
        ]
    }  # fmt: skip
    schema = {"oneOf": [{"type": "array", "items": item, "minItems": 1}, item]}
    compiled = _compile(schema)
    assert not compiled.unique_items
    v = validator(schema)
    leaves: list[Any] = ["a", ["a"], ["a", "b"], {"name": "a"}, 1, []]
    for value in leaves + _arrays(leaves, 3) + _arrays(["a", "b"], 4):
        text = json.dumps(value, separators=(",", ":"))
        assert accepts(compiled, text) == v.is_valid(value), text


def test_schemastore_tslint_names_the_remaining_reason() -> None:
    """tslint's own ``ban`` options carry ``uniqueItems``: the array alternative needs a
    run-time uniqueItems check beside the exactly-one check, refused by name (``oneOf``)."""
    path = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "SchemaStore"
    path = path / "src" / "schemas" / "json" / "tslint.json"
    if not path.exists():
        pytest.skip("SchemaStore data not present")
    with pytest.raises(UnsupportedFeatureError) as info:
        _compile(json.loads(path.read_text()))
    assert info.value.feature == "oneOf"


def test_a_broken_check_is_caught() -> None:
    """The verdicts come from the check in the mark: an always-true check accepts an array
    that matches both branches (the mutation the brute-force test catches)."""
    compiled = _compile(PREFIX)
    prog = compiled.program
    assert isinstance(prog, OneOfProgram)
    assert not accepts(compiled, "[1]")
    saved = dict(prog._check)
    try:
        for rid in prog._check:
            prog._check[rid] = lambda text: True
        prog._verdicts.clear()
        assert accepts(compiled, "[1]")
    finally:
        prog._check.update(saved)
        prog._verdicts.clear()


_CHILD = """
import hashlib, json, sys
from formcast.index.compiled import CompiledGrammar
from formcast.index.programs.oneof import OneOfProgram
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary
vocab = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"<eos>"], stop_token_ids=[256])
out = []
for path, texts in json.loads(sys.argv[1]):
    with open(path, "rb") as f:
        g = CompiledGrammar.deserialize(f.read(), vocab)
    assert isinstance(g.program, OneOfProgram)
    out.append([[m.rule, m.check] for m in g.unique_items])
    for text in texts:
        m = GrammarMatcher(g)
        h = hashlib.sha256()
        ok = True
        for b in text.encode():
            h.update(m.allowed_token_ids().tobytes())
            if not m.accept_token(b):
                ok = False
                break
        out.append([ok and m.is_accepting(), h.hexdigest()])
print(json.dumps(out))
"""


def test_serialized_grammar_in_a_fresh_process_gives_the_same_masks_and_verdicts(
    tmp_path: Path,
) -> None:
    import hashlib
    import os
    import subprocess
    import sys

    import formcast

    texts = ['[1]', '[null]', '[1,"a"]', '[1,"a",null]', '["a","b","c","d"]', '["a"]',
             '{"a":[1],"b":[[null]],"o":{"n":1,"_":1}}', '{"a":[null],"o":{"n":1}}']  # fmt: skip
    jobs: list[Any] = []
    expected: list[Any] = []
    for k, schema in enumerate(SCHEMAS):
        compiled = _compile(schema)
        path = tmp_path / f"g{k}.bin"
        path.write_bytes(compiled.serialize())
        jobs.append([str(path), texts])
        expected.append([[m.rule, m.check] for m in compiled.unique_items])
        v = validator(schema)
        for text in texts:
            m = GrammarMatcher(compiled)
            h = hashlib.sha256()
            ok = True
            for b in text.encode():
                h.update(m.allowed_token_ids().tobytes())
                if not m.accept_token(b):
                    ok = False
                    break
            ok = ok and m.is_accepting()
            assert ok == v.is_valid(json.loads(text)), (k, text)
            expected.append([ok, h.hexdigest()])
    env = dict(os.environ)
    src = str(Path(formcast.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(jobs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected


#: SchemaStore dependabot-2.0's ``update``: a closed object whose ``allOf`` item is a ``oneOf``
#: of "``directories`` required" and "``directory`` required", the members referring to the
#: object's own properties (``uniqueItems``: a negation the algebra refuses on its own)
DEPENDABOT = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "directories": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "directory": {"type": "string"},
        "name": {"type": "string"},
    },
    "allOf": [
        {"$comment": "one of them", "oneOf": [
            {"properties": {"directories": {"$ref": "#/properties/directories"}},
             "required": ["directories"]},
            {"properties": {"directory": {"$ref": "#/properties/directory"}},
             "required": ["directory"]},
        ]},
    ],
}  # fmt: skip


def test_one_of_in_all_of_is_told_apart_inside_the_object() -> None:
    """An ``allOf`` item that is only a ``oneOf`` is built beside the object's own keywords:
    "``directory`` present and not a string" is empty there, so no ``uniqueItems`` is negated
    and the ``oneOf`` is exact in the grammar.  Brute force over the members' subsets and a
    few values (schema order), against jsonschema (draft 7)."""
    compiled = _compile(DEPENDABOT)
    assert not any(m.kind == "oneof" for m in compiled.unique_items)
    v = jsonschema.Draft7Validator(DEPENDABOT)
    values = {
        "directories": [["a"], ["a", "a"], [], [1]],
        "directory": ["a", 1],
        "name": ["n"],
    }
    seen = [0, 0]
    for mask in range(8):
        keys = [k for i, k in enumerate(values) if mask >> i & 1]
        for combo in itertools.product(*(values[k] for k in keys)):
            value = dict(zip(keys, combo, strict=True))
            text = json.dumps(value, separators=(",", ":"))
            ok = v.is_valid(value)
            seen[ok] += 1
            assert accepts(compiled, text) == ok, text
    assert min(seen) > 5


#: SchemaStore vector's ``TagValueSet`` (a serde externally tagged enum: ``{"Single": v}`` or
#: ``{"Set": [unique v...]}``), closed by ``unevaluatedProperties`` where it is used: closed,
#: no object holds both members, so no run-time check (nor a negated ``uniqueItems``) is left
TAGS = {
    "$defs": {
        "tv": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "set": {
            "oneOf": [
                {"const": "Empty"},
                {"type": "object", "required": ["Single"],
                 "properties": {"Single": {"$ref": "#/$defs/tv"}}},
                {"type": "object", "required": ["Set"],
                 "properties": {"Set": {"type": "array", "items": {"$ref": "#/$defs/tv"},
                                        "uniqueItems": True}}},
            ]
        },
    },
    "type": "object",
    "properties": {"a": {"$ref": "#/$defs/set", "unevaluatedProperties": False}},
    "additionalProperties": False,
}  # fmt: skip


def test_a_tagged_object_closed_where_used_needs_no_run_time_check() -> None:
    """The branches' objects narrowed past every other branch (closed) are exact: no
    ``oneof`` mark, and every small instance is accepted iff valid."""
    compiled = _compile(TAGS)
    assert not any(m.kind == "oneof" for m in compiled.unique_items)
    v = validator(TAGS)
    inner: list[Any] = ["Empty", "x", {}, {"Single": None}, {"Single": 1}, {"Set": []},
                        {"Set": ["a", "a"]}, {"Set": ["a", None]}, {"Single": "a", "Set": []},
                        {"Set": [], "Single": "a"}, {"Q": 1}, {"Single": None, "Q": 1}]  # fmt: skip
    seen = [0, 0]
    for x in inner:
        for value in ({"a": x}, {}):
            text = json.dumps(value, separators=(",", ":"))
            ok = v.is_valid(value)
            seen[ok] += 1
            assert accepts(compiled, text) == ok, text
    assert min(seen) > 3
