"""Overlapping ``oneOf`` over objects told apart at run time (``kind="oneof"`` marks,
:class:`formcast.index.programs.oneof.OneOfProgram`, :mod:`formcast.frontends.jsonschema.oneof`).

Oracles: ``jsonschema`` (Draft 2020-12, and the schema's own draft for the SchemaStore file) on
hand-picked and generated instances -- accepted implies valid, and a valid instance whose members
are in the grammar's order is accepted; random walks of the mask on a byte vocabulary and on one
with multi-byte tokens (``}}``, ``"}``, ``{}``...): every state allows a token or accepts, the
mask equals what ``accept_token`` accepts, every finished walk validates.  Refusals by name where
the escape proof fails."""

from __future__ import annotations

import functools
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import jsonschema
from formcast.errors import UnsupportedFeatureError
from formcast.index.compiler import GrammarCompiler
from formcast.index.programs.oneof import OneOfProgram
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary
from mask_walk_helpers import (
    accepts,
    allowed_ids,
    assert_walks_validate,
    byte_vocab,
    mask_walk,
    validator,
)

BYTES = byte_vocab()
MULTI = [
    b"{}", b'"}', b"}}", b'"},', b'":"', b'","', b'{"', b'"a"', b'a"}', b"1}", b"}]", b"ab",
    b'":{', b"}}}", b'":{}}', b'"a":1}', b'{"b":', b"[{}]", b'":null}', b'":1,"', b"},{",
]  # fmt: skip
MIXED = byte_vocab(MULTI)
COMPILERS = {id(v): GrammarCompiler(v, cache_size=0) for v in (BYTES, MIXED)}

#: a branch whose negation the algebra refuses (uniqueItems), next to an open object
UNIQUE = {
    "oneOf": [
        {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True}
            },
        },
        {"type": "object", "properties": {"name": {"type": "string"}}},
    ]
}
#: propertyNames (not negated by the algebra) against a declared member
NAMES = {
    "oneOf": [
        {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
        {"type": "object", "properties": {"n": {"type": "integer"}}},
    ]
}
#: the SchemaStore utam shape: a closed object whose branches overlap on a member value that
#: may be an object (negated as one run-time checked object), recursive through ``args``
NESTED = {
    "$defs": {
        "sel": {
            "type": "object",
            "propertyNames": {"pattern": "^[a-z]+$"},
            "properties": {"css": {"type": "string"}, "args": {"$ref": "#/$defs/args"}},
        },
        "args": {"type": "array", "items": {"$ref": "#"}},
    },
    "type": "object",
    "properties": {
        "kind": {"enum": ["a", "b", "c"]},
        "value": {"type": ["integer", "object"]},
        "args": {"$ref": "#/$defs/args"},
    },
    "additionalProperties": False,
    "oneOf": [
        {"properties": {"kind": {"enum": ["a", "b"]}}, "required": ["kind"]},
        {
            "properties": {
                "kind": {"enum": ["b", "c"]},
                "value": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/sel"}]},
            },
            "required": ["value"],
        },
    ],
}
#: three branches, two of them overlapping only on objects; arrays and strings exact
MIXED_KINDS = {
    "oneOf": [
        {"type": ["object", "string"], "propertyNames": {"maxLength": 2}},
        {"type": "object", "properties": {"ab": {"type": "boolean"}}},
        {"type": ["array", "string"], "items": {"type": "integer"}, "maxLength": 3},
    ]
}
SCHEMAS: list[tuple[Any, list[str]]] = [
    (UNIQUE, ['{}', '{"tags":["a"]}', '{"name":"x"}', '{"tags":["a","a"]}',
              '{"tags":[],"name":null}', '{"name":"x","tags":null}', '{"x":1}',
              '{"tags":["a","a"],"name":"x"}']),
    (NAMES, ['{}', '{"n":1}', '{"n":"x"}', '{"_":1}', '{"n":1,"_":2}', '{"ab":{}}',
             '{"n":1,"n":"s"}', '{"n":"s","n":1}', '{"A":1,"n":null}']),
    (NESTED, ['{"kind":"a"}', '{"kind":"b","value":1}', '{"kind":"b","value":{"css":"x"}}',
              '{"kind":"b","value":{"_":1}}', '{"kind":"c","value":{"_":1}}', '{"value":{"Q":1}}',
              '{"kind":"a","value":{"css":"x","_":1}}', '{"kind":"a","value":{}}',
              '{"kind":"a","args":[{"kind":"b","value":2}]}', '{"kind":"a","args":[{"kind":"b"}]}',
              '{"kind":"b","value":{"args":[{"kind":"c","value":{"_":[]}}],"_":0}}']),
    (MIXED_KINDS, ['{}', '"ab"', '"abcd"', '[1]', '{"long":true}', '{"ab":1}', '{"abc":1}',
                   '{"ab":true}', '{"ab":true,"abc":1}', '[]', '"a"', '{"ab":1,"long":true}']),
]  # fmt: skip


def _compile(schema: Any, vocab: Vocabulary = BYTES) -> Any:
    return COMPILERS[id(vocab)].compile_json_schema(schema)


@pytest.mark.parametrize(("schema", "texts"), SCHEMAS)
def test_instances_agree_with_jsonschema(schema: Any, texts: list[str]) -> None:
    compiled = _compile(schema)
    assert any(m.kind == "oneof" for m in compiled.unique_items)
    assert isinstance(compiled.program, OneOfProgram)
    v = validator(schema)
    for text in texts:
        valid = v.is_valid(json.loads(text))
        if accepts(compiled, text):
            assert valid, text
        elif valid:  # (declared members are written in schema order)
            assert _in_other_order(text, schema, compiled), text


def _declared(schema: Any, out: list[str]) -> list[str]:
    """Every ``properties`` name of ``schema``, in document order."""
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "properties" and isinstance(v, dict):
                out.extend(x for x in v if x not in out)
            _declared(v, out)
    elif isinstance(schema, list):
        for v in schema:
            _declared(v, out)
    return out


def _sorted(value: Any, order: list[str], inner: list[str]) -> Any:
    if isinstance(value, dict):
        rank = {k: i for i, k in enumerate(order)}
        keys = sorted(value, key=lambda k: rank.get(k, len(rank)))
        return {k: _sorted(value[k], inner, inner) for k in keys}
    if isinstance(value, list):
        return [_sorted(x, inner, inner) for x in value]
    return value


def _in_other_order(text: str, schema: Any, compiled: Any = None) -> bool:
    """A valid text formcast refuses must be accepted with its members in some branch's
    declared order (formcast writes declared members in schema order, then the others)."""
    value = json.loads(text)
    if compiled is None:
        compiled = _compile(schema)
    inner = _declared(schema, [])
    top = list(schema.get("properties", {}))
    for branch in schema.get("oneOf", []):
        order = top + [k for k in branch.get("properties", {}) if k not in top]
        again = json.dumps(_sorted(value, order, inner), separators=(",", ":"))
        if again != text and accepts(compiled, again):
            return True
    return False


def _gen(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth > 2 or r < 0.45:
        return rng.choice([0, 1, -1, "s", "ab", "abcd", True, None, []])
    if r < 0.85:
        keys = ["tags", "name", "n", "_", "x", "ab", "abc", "long", "kind", "value", "css", "args"]
        keys += ["x1"] if r < 0.5 else []
        out: dict[str, Any] = {}
        for _ in range(rng.randrange(4)):
            k = rng.choice(keys)
            if k == "kind":
                out[k] = rng.choice(["a", "b", "c", "d"])
            elif k == "tags":
                out[k] = rng.choice([["a"], ["a", "a"], ["b", "a"], [], 1])
            else:
                out[k] = _gen(rng, depth + 1)
        return out
    return [_gen(rng, depth + 1) for _ in range(rng.randrange(3))]


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_generated_instances_never_accepted_when_invalid(index: int) -> None:
    """Accepted implies valid on 500 generated values; a valid one is accepted unless its
    declared members are out of schema order."""
    schema = SCHEMAS[index][0]
    compiled = _compile(schema)
    v = validator(schema)
    rng = random.Random(index)
    accepted = 0
    for _ in range(500):
        value = _gen(rng, 0)
        text = json.dumps(value, separators=(",", ":"))
        valid = v.is_valid(value)
        got = accepts(compiled, text)
        if got:
            assert valid, text
            accepted += 1
        elif valid:
            assert _in_other_order(text, schema, compiled), text
    assert accepted >= 5


ESCAPES = [b',"name":0', b',"tags":0', b',"n":null', b',"_":0', b',"ab":null', b',"oneOf":0']


CLOSERS = {b"}", b"]", b'"', b"0", b",", b":", b"}}", b'"}', b"1}", b"}]", b'":null}'}


def _walk(compiled: Any, vocab: Vocabulary, rng: random.Random, steps: int) -> str | None:
    """A random walk of the mask (:func:`mask_walk`); past ``steps`` closing tokens are
    preferred, and now and then a member that sets a branch apart (``ESCAPES``) is fed."""

    def choose(m: GrammarMatcher, allowed: list[int], n: int, rng: random.Random) -> int | bytes:
        pool = allowed
        if n > steps:
            late = [t for t in allowed if vocab.token_bytes(t) in CLOSERS]
            pool = late or allowed
            snippet = rng.choice(ESCAPES)
            if rng.random() < 0.3 and m.fork().accept_bytes(snippet):
                return snippet
        return rng.choice(pool)

    return mask_walk(
        compiled, vocab, rng, steps=steps, rounds=steps * 12, stop_p=0.05, choose=choose
    )


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
@pytest.mark.parametrize("vocab", [BYTES, MIXED], ids=["bytes", "mixed"])
def test_random_walks_have_no_dead_end_and_validate(index: int, vocab: Vocabulary) -> None:
    schema = SCHEMAS[index][0]
    compiled = _compile(schema, vocab)
    rng = random.Random(2000 + index)
    walk = functools.partial(_walk, compiled, vocab, rng, 20)
    assert_walks_validate(walk, validator(schema).is_valid, tries=6, at_least=3)


def test_walks_steered_into_the_overlap_never_dead_end() -> None:
    """Prefixes that already match both branches (``{"tags":[],"name":"x"`` in ``UNIQUE``;
    ``{"kind":"b","value":{"css":"x"`` in ``NESTED``) still have an allowed continuation, the
    ``}`` that would close the overlap is refused, and the completions validate."""
    for schema, prefix, refused in (
        (UNIQUE, '{"tags":[],"name":"x"', "}"),
        (NAMES, '{"n":1', "}"),
        (NESTED, '{"kind":"b","value":{"css":"x"', "}"),
    ):
        compiled = _compile(schema)
        m = GrammarMatcher(compiled)
        assert m.accept_bytes(prefix.encode())
        assert not m.fork().accept_bytes(refused.encode()), prefix
        rng = random.Random(7)
        for _ in range(5):
            twin = m.fork()
            out = prefix.encode()
            for _n in range(400):
                if twin.is_accepting():
                    break
                allowed = allowed_ids(twin, BYTES)
                assert allowed, out
                snippet = rng.choice(ESCAPES)
                if rng.random() < 0.3 and twin.fork().accept_bytes(snippet):
                    assert twin.accept_bytes(snippet)
                    out += snippet
                    continue
                closers = [t for t in allowed if bytes([t]) in (b"}", b"]", b'"', b"0", b":")]
                t = rng.choice(closers if closers and rng.random() < 0.7 else allowed)
                assert twin.accept_token(t)
                out += bytes([t])
            assert twin.is_accepting(), out
            assert validator(schema).is_valid(json.loads(out)), out


def test_refused_by_name_where_no_escape_exists() -> None:
    """Branches that declare the same members and take the same extra members (a prefix
    ``{"c":1`` past ``t`` would match both forever), or ``maxProperties`` beside: still
    refused, ``oneOf``."""
    overlap = {
        "type": "object",
        "oneOf": [
            {"properties": {"t": {"enum": ["x"]}, "c": {"type": "integer"}},
             "propertyNames": {"maxLength": 3}},
            {"properties": {"t": {"enum": ["y"]}, "c": {"type": "integer"}},
             "propertyNames": {"maxLength": 4}},
        ],
    }  # fmt: skip
    closed = {
        "oneOf": [
            {"type": "object", "propertyNames": {"pattern": "^[a-z]$"}, "maxProperties": 3},
            {"type": "object", "properties": {"n": {"type": "integer"}}},
        ]
    }
    for schema in (overlap, closed):
        with pytest.raises(UnsupportedFeatureError) as err:
            _compile(schema)
        assert err.value.feature == "oneOf", schema


def test_lenient_option_still_compiles_as_any_of() -> None:
    from formcast import JsonSchemaOptions

    compiled = COMPILERS[id(BYTES)].compile_json_schema(
        UNIQUE, JsonSchemaOptions(oneof_as_anyof=True)
    )
    assert not isinstance(compiled.program, OneOfProgram)
    assert accepts(compiled, '{"tags":["a"]}')


def test_not_of_a_run_time_one_of_is_refused() -> None:
    with pytest.raises(UnsupportedFeatureError) as err:
        _compile({"not": UNIQUE})
    assert err.value.feature in ("oneOf", "not")


def test_serialized_grammar_in_the_same_process_keeps_the_check() -> None:
    from formcast.index.compiled import CompiledGrammar

    compiled = _compile(NAMES)
    again = CompiledGrammar.deserialize(compiled.serialize(), BYTES)
    assert isinstance(again.program, OneOfProgram)
    assert not accepts(again, '{"n":1}')
    assert accepts(again, '{"n":1,"_":2}')


SCHEMASTORE = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "SchemaStore"


def _utam_walk(
    compiled: Any, rng: random.Random, steps: int, rounds: int, late: int, escapes: list[bytes]
) -> str | None:
    """A walk of a large grammar on ``BYTES`` (:func:`mask_walk` without the token-by-token
    mask check: too slow there; stopping with probability 0.02 once accepting): now and then
    (p 0.2) one of ``escapes``, and past ``late`` tokens closing bytes preferred."""

    def choose(m: GrammarMatcher, allowed: list[int], n: int, rng: random.Random) -> int | bytes:
        if escapes:
            snippet = rng.choice(escapes)
            if rng.random() < 0.2 and m.fork().accept_bytes(snippet):
                return snippet
        pool = allowed
        if n > late:
            pool = [t for t in allowed if bytes([t]) in b'}]"0:,'] or allowed
        return rng.choice(pool)

    return mask_walk(
        compiled, BYTES, rng, steps=steps, rounds=rounds, stop_p=0.02, choose=choose,
        check_mask=False,
    )  # fmt: skip


@pytest.mark.skipif(not SCHEMASTORE.is_dir(), reason="SchemaStore corpus not present")
def test_schemastore_utam_page_object_walks_validate() -> None:
    """The real schema this was built for (SchemaStore ``utam-page-object-2.2.0.json``, draft
    07): compiles with run-time checks; random walks validate under its own draft."""
    path = SCHEMASTORE / "src" / "schemas" / "json" / "utam-page-object-2.2.0.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    compiled = COMPILERS[id(BYTES)].compile_json_schema(path)
    assert isinstance(compiled.program, OneOfProgram)
    cls = jsonschema.validators.validator_for(schema)
    v = cls(schema, format_checker=cls.FORMAT_CHECKER)
    walk = functools.partial(_utam_walk, compiled, random.Random(3), 150, 600, 80, [])
    assert_walks_validate(walk, v.is_valid, tries=4, at_least=1)


#: texts whose verdict is known: (schema, text, accepted)
KNOWN = [
    (NAMES, '{"n":1}', False), (NAMES, '{"n":1,"_":2}', True), (NAMES, '{"A":1}', True),
    (UNIQUE, '{"tags":[],"name":"x"}', False), (UNIQUE, '{"tags":["a"],"name":1}', True),
    (NESTED, '{"kind":"b","value":{"css":"x"}}', False),
    (NESTED, '{"kind":"b","value":{"css":"x","_":1}}', True), (NESTED, '{"value":1}', True),
    (NESTED, '{"kind":"a","value":{"_":1}}', True), (NESTED, '{"kind":"b","value":1}', False),
]  # fmt: skip

#: run in a fresh process: load each grammar (argv[1]: a JSON list of [file, texts]) and
#: print, per text, its verdict and the digest of the mask before each byte
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


def _masks_and_verdicts(compiled: Any, texts: list[str]) -> list[Any]:
    import hashlib

    out: list[Any] = [[[m.rule, m.check] for m in compiled.unique_items]]
    for text in texts:
        m = GrammarMatcher(compiled)
        h = hashlib.sha256()
        ok = True
        for b in text.encode():
            h.update(m.allowed_token_ids().tobytes())
            if not m.accept_token(b):
                ok = False
                break
        out.append([ok and m.is_accepting(), h.hexdigest()])
    return out


def _run_child(code: str, *args: str) -> Any:
    import os
    import subprocess
    import sys

    import formcast

    env = dict(os.environ)
    src = str(Path(formcast.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_serialized_grammar_in_a_fresh_process_gives_the_same_masks_and_verdicts(
    tmp_path: Path,
) -> None:
    """The check travels in the marks: a grammar serialized here and loaded in a fresh
    process (no state shared with this one) has the same marks, the same mask before every
    byte and the same verdicts; the verdicts agree with jsonschema and with the known ones
    (a broken check text fails here, not only in the comparison)."""
    jobs: list[Any] = []
    expected: list[Any] = []
    for k, (schema, texts) in enumerate(SCHEMAS):
        texts = texts + [t for sch, t, _ in KNOWN if sch is schema]
        compiled = _compile(schema)
        path = tmp_path / f"g{k}.bin"
        path.write_bytes(compiled.serialize())
        jobs.append([str(path), texts])
        here = _masks_and_verdicts(compiled, texts)
        expected.extend(here)
        v = validator(schema)
        for text, (ok, _) in zip(texts, here[1:], strict=True):
            assert not ok or v.is_valid(json.loads(text)), text
    got = _run_child(_CHILD, json.dumps(jobs))
    assert got == expected
    verdicts = {(id(sch), t): ok for sch, t, ok in KNOWN}
    rows = iter(got)
    for schema, texts in SCHEMAS:
        next(rows)  # (the marks)
        for text in texts + [t for sch, t, _ in KNOWN if sch is schema]:
            ok, _ = next(rows)
            if (id(schema), text) in verdicts:
                assert ok == verdicts[id(schema), text], text
                assert ok == validator(schema).is_valid(json.loads(text)), text


_CACHED_CHILD = """
import json, sys
from formcast.index.compiler import GrammarCompiler
from formcast.index.programs.oneof import OneOfProgram
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary
vocab = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"<eos>"], stop_token_ids=[256])
comp = GrammarCompiler(vocab, cache_dir=sys.argv[1])
g = comp.compile_json_schema(json.loads(sys.argv[2]))
assert isinstance(g.program, OneOfProgram)
out = [comp.disk_hits, comp.misses]
for text in json.loads(sys.argv[3]):
    m = GrammarMatcher(g)
    out.append(bool(m.accept_bytes(text.encode()) and m.is_accepting()))
print(json.dumps(out))
"""


def test_disk_cache_hits_in_a_fresh_process(tmp_path: Path) -> None:
    """A grammar with run-time oneOf checks written to the disk cache here is loaded (a hit,
    no compile) by a fresh process, and checks there."""
    comp = GrammarCompiler(BYTES, cache_dir=tmp_path)
    compiled = comp.compile_json_schema(NAMES)
    assert comp.disk_writes == 1
    texts = ['{"n":1}', '{"n":1,"_":2}', '{"A":1}', "{}"]
    got = _run_child(_CACHED_CHILD, str(tmp_path), json.dumps(NAMES), json.dumps(texts))
    assert got[:2] == [1, 0]
    assert got[2:] == [False, True, True, accepts(compiled, "{}")]


def test_compile_worker_result_loads_with_the_check() -> None:
    """A compile worker's grammar (another process) loads here with its checks; its marks
    equal an in-process compile's (rule names and check texts: the IR is deterministic)."""
    comp = GrammarCompiler(BYTES, workers=1, cache_size=0, cache_dir=False)
    try:
        remote = comp.compile_json_schema(NESTED)
        assert comp.worker_pids()
    finally:
        comp.close()
    assert isinstance(remote.program, OneOfProgram)
    here = _compile(NESTED)
    assert remote.unique_items == here.unique_items
    for schema, text, ok in KNOWN:
        if schema is NESTED:
            assert accepts(remote, text) == ok, text


def test_one_schema_compiled_twice_gives_the_same_ir() -> None:
    """No serial in rule names: two compiles of one schema give equal marks and rules."""
    from formcast.frontends.jsonschema.api import schema_to_grammar

    a, _ = schema_to_grammar(NESTED, marks=[])
    b, _ = schema_to_grammar(NESTED, marks=[])
    assert a.marks == b.marks
    assert any(m.kind == "oneof" for m in a.marks)
    assert a.rules == b.rules


def test_a_corrupt_check_text_is_a_serialization_error() -> None:
    from formcast.errors import SerializationError
    from formcast.frontends.jsonschema.oneof import check_of_mark

    (mark, *_) = (m for m in _compile(NAMES).unique_items if m.kind == "oneof")
    assert check_of_mark(mark)(b'{"n":1,"_":2}')
    for bad in ("", "[]", '{"v":99}', mark.check.replace('"top":[0]', '"top":[7]')):
        with pytest.raises(SerializationError):
            check_of_mark(replace(mark, check=bad))


@pytest.mark.skipif(not SCHEMASTORE.is_dir(), reason="SchemaStore corpus not present")
@pytest.mark.parametrize("name", ["utam-page-object-2.2.0.json", "utam-page-object-1.5.0.json"])
def test_schemastore_utam_arg_walks_never_dead_end_and_validate(name: str) -> None:
    """utam's recursive ``arg`` (the ``oneOf`` formcast refused before): 40 walks from it,
    the members that tell its branches apart offered now and then; no dead end, every text
    valid under draft 07."""
    path = SCHEMASTORE / "src" / "schemas" / "json" / name
    full = json.loads(path.read_text(encoding="utf-8"))
    schema = {"definitions": full["definitions"], "$ref": "#/definitions/arg"}
    compiled = _compile(schema)
    assert isinstance(compiled.program, OneOfProgram)
    v = jsonschema.Draft7Validator(schema)
    escapes = [b',"value":1', b',"name":"n"', b',"type":"locator"', b',"predicate":[]', b',"_":0']
    walk = functools.partial(_utam_walk, compiled, random.Random(11), 300, 1500, 60, escapes)
    assert_walks_validate(walk, v.is_valid, tries=40, at_least=30)


#: branches with most of what a check reads: required, pattern and additional properties,
#: numbers, string patterns and lengths, uniqueItems, minProperties
RICH = {
    "oneOf": [
        {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True},
                "n": {"type": "number", "minimum": 0, "multipleOf": 0.5},
            },
            "patternProperties": {"^x": {"type": "integer"}},
            "required": ["tags"],
        },
        {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 3, "pattern": "^[a-z]"}},
            "additionalProperties": {"type": ["string", "null", "integer", "array"]},
            "minProperties": 1,
        },
    ]
}

RICH_TEXTS = [
    '{"tags":["a"],"x":1}', '{"tags":["a"],"x":1.5}', '{"tags":["a"],"n":0.25}',
    '{"tags":["b"],"n":1.5,"x":2}', '{"tags":["a","a"]}', '{"tags":[],"n":-0.5}',
    '{"name":"ab"}', '{"name":"Ab"}', '{"name":"abcd"}', '{"name":"ab","q":{}}', '{"q":null}',
    '{"tags":["a"],"name":"ab"}', '{"tags":["a"],"name":"ab","n":0.5}', '{}',
]  # fmt: skip


@pytest.mark.parametrize("index", range(len(SCHEMAS) + 1))
def test_check_from_the_mark_agrees_with_the_normalizers_check(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Differential: the check rebuilt from the mark's text (what any process runs) answers
    as the compiling normalizer's own instance check (``OneOfGroup.exactly_one``) on 600
    generated objects and the schema's texts (both verdicts seen)."""
    from formcast.frontends.jsonschema import oneof
    from formcast.frontends.jsonschema.oneof_check import OneOfCheck

    seen: list[tuple[Any, str]] = []
    real = oneof.encode_check
    # (``resolve`` is the normalizer's: kept, it keeps the normalizer alive after the compile,
    # which the groups hold only weakly -- their checks are made during the compile)
    normalizers: list[Any] = []

    def spy(groups: Any, resolve: Any, limit: int) -> str:
        text = real(groups, resolve, limit)
        seen.append((groups, text))
        normalizers.append(resolve)
        return text

    monkeypatch.setattr(oneof, "encode_check", spy)
    schema, texts = (*SCHEMAS, (RICH, RICH_TEXTS))[index]
    GrammarCompiler(BYTES, cache_size=0, cache_dir=False).compile_json_schema(schema)
    assert seen
    rng = random.Random(500 + index)
    values = [_gen(rng, 0) for _ in range(600)] + [json.loads(t) for t in texts]
    values = [v for v in values if isinstance(v, dict)]
    assert len(values) > 200
    verdicts = set()
    for groups, text in seen:
        check = OneOfCheck(text)
        for value in values:
            raw = json.dumps(value, separators=(",", ":")).encode()
            ok = check(raw)
            assert ok == all(g.exactly_one(value) for g in groups), raw
            verdicts.add(ok)
    assert verdicts == {True, False}


def test_verdict_memo_is_bounded_and_shared_by_threads() -> None:
    """The program's verdict memo keeps at most its byte bound of object texts however many
    distinct objects are checked, and threads checking at once get the check's own answers."""
    import threading

    from formcast.index.programs import oneof as program_module

    compiled = _compile(NAMES)
    prog = compiled.program
    assert isinstance(prog, OneOfProgram)
    (rule, check), *_ = prog._check.items()
    pad = "y" * 3000
    texts = [f'{{"n":{i},"p{i}":"{pad}"}}'.encode() for i in range(3000)]
    texts += [b'{"n":1}', b'{"n":1,"_":2}']
    want = [check(t) for t in texts]
    assert True in want
    assert False in want
    errors: list[str] = []

    def run(offset: int) -> None:
        for k in range(len(texts)):
            j = (k * 7 + offset) % len(texts)
            if prog._verdict(rule, texts[j]) != want[j]:
                errors.append(texts[j][:20].decode())

    threads = [threading.Thread(target=run, args=(i * 101,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert prog._verdicts.total_weight <= program_module._MEMO_BYTES
    assert 0 < len(prog._verdicts) < len(texts)
