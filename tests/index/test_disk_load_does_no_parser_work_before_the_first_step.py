"""A grammar loaded from disk (format 3) fills its first mask without parser work: the
initial state is read from the file, not recomputed (no closure, no per-rule table built),
and the grammar's call lists travel as sparse nested tuples; crafted variants of both are a
typed ``SerializationError``.  The masks themselves are checked bit-identical by
``test_serialized_grammar_round_trip.py``; here, that the state read is the state a fresh
compile computes, and that the parser works as before once it is stepped.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest

from formcast import CompiledGrammar, GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.automata.pda import PushdownAutomaton
from formcast.errors import SerializationError
from formcast.index import serialize
from formcast.index.serialize import _sparse_tuple, _tuple_depth, _tuple_sparse
from serialize_helpers import CONSTRAINTS, compile_named, small_vocab

HEAD = struct.Struct("<8sIIQQQII")
PUSHDOWN = [n for n in sorted(CONSTRAINTS) if n != "regex"]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return small_vocab()


def _content(state: Any) -> tuple[Any, ...]:
    def chain(f: Any) -> tuple[Any, ...]:
        out = []
        while f is not None:
            out.append((f.rule, f.state, f.need, f.left))
            f = f.parent
        return tuple(out)

    return (sorted(chain(f) for f in state.frames), state.accepting, state.error)


@pytest.mark.parametrize("name", PUSHDOWN)
def test_the_initial_state_is_read_not_recomputed(vocab: Vocabulary, name: str) -> None:
    fresh = compile_named(GrammarCompiler(vocab, cache_size=0), name)
    pda = getattr(fresh.program, "pda", None)
    if not isinstance(pda, PushdownAutomaton):
        pytest.skip("not a pushdown grammar")
    first = GrammarMatcher(fresh).allowed_token_ids().tolist()
    loaded = CompiledGrammar.deserialize(fresh.serialize(), vocab)
    lpda = loaded.program.pda  # type: ignore[attr-defined]
    assert lpda._initial_state is not None
    assert _content(lpda.initial) == _content(pda.initial)
    computed = loaded.cache_info()["mask_computations"]
    m = GrammarMatcher(loaded)
    assert m.allowed_token_ids().tolist() == first
    # no closure computed and no rule's tables turned into lists: the mask was a lookup
    # (a uniqueItems grammar's run-time check steps the parser itself: index/unique_items.py)
    if "unique" not in name:
        assert len(lpda._closures) == 0
        assert len(lpda._has_bytes) == len(lpda._accepting) == len(lpda._tail) == 0
    assert loaded.cache_info()["mask_computations"] == computed
    # stepping then builds what it needs, as a fresh parser does
    token = first[0]
    assert m.accept_token(token) == GrammarMatcher(fresh).accept_token(token)
    assert lpda.initial is lpda.state_of(lpda.initial.frames, lpda.initial.accepting)


def test_a_parser_computes_its_initial_state_on_first_use(vocab: Vocabulary) -> None:
    fresh = compile_named(GrammarCompiler(vocab, cache_size=0), "json_schema")
    pda = fresh.program.pda  # type: ignore[attr-defined]
    lazy = PushdownAutomaton(pda.auto, pda.limits, far_count=pda.far_count, initial_closure=False)
    assert lazy._initial_state is None
    assert _content(lazy.initial) == _content(pda.initial)
    assert lazy.initial is lazy.initial
    with pytest.raises(IndexError):
        _ = lazy._has_bytes[len(pda.auto.dfas)]


@pytest.mark.parametrize(
    "v",
    [
        (),
        ((), ()),
        ((1, 2), (), (3,)),
        ((), ((1, 2),), ()),
        (((), ()), (((3,),),), ()),
        tuple(((i, i + 1),) if i % 7 == 0 else () for i in range(50)),
    ],
)
def test_sparse_nested_tuples_round_trip(v: tuple[Any, ...]) -> None:
    depth = _tuple_depth(v)
    assert depth is not None
    encoded = json.loads(json.dumps(_tuple_sparse(v)))
    assert _sparse_tuple(encoded, depth[0]) == v


def _split(data: bytes) -> tuple[dict[str, Any], bytes, int]:
    _, _, _, meta_len, _, main, _, _ = HEAD.unpack_from(data)
    meta = json.loads(data[HEAD.size : HEAD.size + meta_len])
    return meta, data[HEAD.size + meta_len :], main


def _rebuild(meta: dict[str, Any], blob: bytes, main: int) -> bytes:
    m = json.dumps(meta).encode()
    crc = zlib.crc32(blob[:main], zlib.crc32(m))
    version = serialize.FORMAT_VERSION
    return HEAD.pack(b"FCGRAMMR", version, 0, len(m), len(blob), main, crc, 0) + m + blob


def _find(v: Any, tag: str) -> list[Any]:
    out: list[Any] = []
    if isinstance(v, list):
        if v and v[0] == tag:
            out.append(v)
        for x in v:
            out += _find(x, tag)
    elif isinstance(v, dict):
        for x in v.values():
            out += _find(x, tag)
    return out


def test_crafted_call_lists_and_initial_states_are_refused(vocab: Vocabulary) -> None:
    grammar = compile_named(GrammarCompiler(vocab), "json_schema")
    GrammarMatcher(grammar).allowed_token_ids()
    meta, blob, main = _split(grammar.serialize())
    assert _find(meta["program"], "tz")
    assert _find(meta["program"], "pda")
    cases = []

    def case(edit: Any, message: str) -> None:
        m = json.loads(json.dumps(meta))
        edit(m)
        cases.append((m, message))

    case(lambda m: _find(m["program"], "tz")[0].__setitem__(1, 9), "nested tuples")
    case(lambda m: _find(m["program"], "tz")[0][2].__setitem__(0, -1), "corrupt")
    case(lambda m: _find(m["program"], "tz")[0][2].append(0), "corrupt")  # even length
    case(lambda m: _find(m["program"], "tz")[0][2].extend([10**9, [1]]), "corrupt")
    case(lambda m: _find(m["program"], "pda")[0].pop(), "corrupt")
    case(lambda m: _find(m["program"], "pda")[0].__setitem__(5, None), "initial state")
    case(lambda m: _find(m["program"], "pda")[0][5].__setitem__(1, [10**6]), "corrupt")
    for bad, message in cases:
        with pytest.raises(SerializationError, match=message) as e:
            CompiledGrammar.deserialize(_rebuild(bad, blob, main), vocab)
        assert e.value.reason == "corrupt"
    assert CompiledGrammar.deserialize(_rebuild(meta, blob, main), vocab).kind == "json_schema"
