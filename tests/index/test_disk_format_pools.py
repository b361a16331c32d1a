"""Format 5 of serialized grammars: pooled arrays and the lazily loaded rule analysis.

* arrays of one region with one dtype, row shape, writability and packing are stored as one
  pool and loaded as views of it (``["av", pool, first, end]``, ``["tav", pool, first,
  rows...]``): same values, dtypes, shapes and writability as written, rows never shared
  between two arrays, identity kept (an array the grammar holds twice is one object);
* a rule automaton's FIRST / FOLLOW analysis is a lazy section: not loaded by a load or by
  the masks the file carries, loaded (after the sections it may refer to) on first use or by
  ``load_sections``, equal to the analysis written;
* crafted rows outside their pool are refused (typed, ``reason="corrupt"``); a file of
  format 4 is refused by version.
"""

from __future__ import annotations

import itertools
import json
import struct
import zlib
from typing import Any

import numpy as np
import pytest

from formcast import CompiledGrammar, GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.automata.analysis import GrammarAnalysis
from formcast.bitmask import allocate_token_bitmask
from formcast.errors import SerializationError
from formcast.index.persist import FORMAT_VERSION
from formcast.index.persist.codec import _LazyAttr
from serialize_helpers import (
    CONSTRAINTS,
    assert_same_data,
    compile_named,
    random_walks,
    replay_masks,
    small_vocab,
)

HEAD = struct.Struct("<8sIIQQQII")


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return small_vocab()


@pytest.fixture(scope="module")
def grammar(vocab: Vocabulary) -> CompiledGrammar:
    g = compile_named(GrammarCompiler(vocab), "json_schema")
    g.program.token_mask(g.program.initial_state())
    return g


def _split(data: bytes) -> tuple[dict[str, Any], bytes, int]:
    _, _, _, meta_len, _, main, _, _ = HEAD.unpack_from(data)
    return json.loads(data[HEAD.size : HEAD.size + meta_len]), data[HEAD.size + meta_len :], main


def _rebuild(meta: dict[str, Any], blob: bytes, main: int, version: int = FORMAT_VERSION) -> bytes:
    m = json.dumps(meta).encode()
    crc = zlib.crc32(blob[:main], zlib.crc32(m))
    return HEAD.pack(b"FCGRAMMR", version, 0, len(m), len(blob), main, crc, 0) + m + blob


def _nodes(tree: Any, tag: str) -> list[list[Any]]:
    out: list[list[Any]] = []
    stack = [tree]
    while stack:
        x = stack.pop()
        if isinstance(x, list):
            if x and x[0] == tag:
                out.append(x)
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    return out


@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
def test_pooled_arrays_round_trip(vocab: Vocabulary, name: str) -> None:
    """Every array (and every cached mask along seeded walks) as written; pooled members
    are disjoint views of one pool; every constraint kind."""
    g = compile_named(GrammarCompiler(vocab), name)
    walks = random_walks(g, walks=3, steps=12, seed=3)
    want = replay_masks(g, walks)
    data = g.serialize()
    meta, _, _ = _split(data)
    loaded = CompiledGrammar.deserialize(data, vocab)
    loaded.load_sections()
    assert_same_data(g, loaded, vocab)
    assert np.array_equal(replay_masks(loaded, walks), want)
    trees = [meta, *(json.loads(sec[3]) for sec in meta["sections"])]
    whole = {n[1] for t in trees for n in _nodes(t, "a")}
    ranges: dict[int, set[tuple[int, int]]] = {}
    for t in trees:
        for n in _nodes(t, "av"):
            ranges.setdefault(n[1], set()).add((n[2], n[3]))
        for n in _nodes(t, "tav"):
            first = n[2]
            for rows in n[3:]:
                ranges.setdefault(n[1], set()).add((first, first + rows))
                first += rows
    for spans in ranges.values():  # the rows of a pool: no two arrays share one
        ordered = sorted(spans)
        for (_, end), (start, _) in itertools.pairwise(ordered):
            assert end <= start, "overlapping pooled rows"
    distinct = len(whole) + sum(len(v) for v in ranges.values())
    assert len(meta["arrays"]) == len(whole | set(ranges))  # what is stored, listed once
    if ranges:
        assert len(meta["arrays"]) < distinct


def test_writable_pooled_rows_are_private_and_disjoint(
    grammar: CompiledGrammar, vocab: Vocabulary
) -> None:
    """A writable array loads writable (a copy: the file is untouched); writing one pooled
    row changes no other array."""
    data = grammar.serialize()
    loaded = CompiledGrammar.deserialize(data, vocab)
    tail = loaded.program.auto.tail
    assert len(tail) >= 2
    assert all(t.flags.writeable for t in tail)  # written writable
    before = [t.copy() for t in tail]
    tail[0][...] = ~tail[0]
    for t, b in zip(tail[1:], before[1:]):
        assert np.array_equal(t, b)
    assert CompiledGrammar.deserialize(data, vocab).program.auto.tail[0].tolist() == (
        before[0].tolist()
    )
    read_only = loaded.program.auto.dfas[0].accepting
    assert not read_only.flags.writeable


def test_the_rule_analysis_loads_on_first_use(grammar: CompiledGrammar, vocab: Vocabulary) -> None:
    auto = grammar.program.auto
    written = auto.analysis
    data = grammar.serialize()
    loaded = CompiledGrammar.deserialize(data, vocab)
    held = loaded.program.auto.__dict__["_analysis"]
    assert type(held) is _LazyAttr  # not decoded by the load
    m = GrammarMatcher(loaded)
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    m.fill_next_token_bitmask(bitmask, 0)  # the mask the file carries: still not decoded
    assert type(loaded.program.auto.__dict__["_analysis"]) is _LazyAttr
    got = loaded.program.auto.analysis.first  # first use: loaded, set on the automaton
    assert type(loaded.program.auto.__dict__["_analysis"]) is GrammarAnalysis
    assert all(np.array_equal(a, b) for a, b in zip(got, written.first))
    again = CompiledGrammar.deserialize(data, vocab)
    again.load_sections()  # every section, the analysis included
    assert type(again.program.auto.__dict__["_analysis"]) is GrammarAnalysis
    assert_same_data(grammar, again, vocab)


def test_rows_outside_their_pool_are_refused(grammar: CompiledGrammar, vocab: Vocabulary) -> None:
    meta, blob, main = _split(grammar.serialize())
    tav = _nodes(meta["program"], "tav")
    av = _nodes(meta["program"], "av")
    assert tav, "the rule automaton's per-rule vectors are pooled"
    cases = []
    for edit in (
        lambda n: n.__setitem__(2, 10**6),  # first row past the pool
        lambda n: n.__setitem__(3, -1),  # a negative row count
        lambda n: n.__setitem__(1, "x"),  # not an array index
    ):
        m = json.loads(json.dumps(meta))
        edit(_nodes(m["program"], "tav")[0])
        cases.append(m)
    if av:
        m = json.loads(json.dumps(meta))
        _nodes(m["program"], "av")[0][3] = 10**6
        cases.append(m)
    for m in cases:
        with pytest.raises(SerializationError) as e:
            CompiledGrammar.deserialize(_rebuild(m, blob, main), vocab)
        assert e.value.reason == "corrupt"
    # the untouched metadata rebuilt the same way loads
    assert CompiledGrammar.deserialize(_rebuild(meta, blob, main), vocab).kind == "json_schema"


def test_a_format_4_file_is_refused_by_version(grammar: CompiledGrammar, vocab: Vocabulary) -> None:
    meta, blob, main = _split(grammar.serialize())
    with pytest.raises(SerializationError) as e:
        CompiledGrammar.deserialize(_rebuild(meta, blob, main, version=4), vocab)
    assert e.value.reason == "version"
