"""The compiled resumable classification walk (``formcast.vocab.trie.classify_walk_resume``,
``_trie_walk.classify_from``; #31): a walk stopped by sentinels of unbuilt lexer rows goes on
from its stops once those rows are written, never again from the start.

Oracle: on a random lexer (some rows unbuilt, some targets dead) and a random trie, the
resumable walk from the start state alone, each round's stopped lexer states then written by
``_LazyWalkTables.write`` (as ``_ensure`` does) and the walk resumed from its stops (or, where
they were met on the first bytes and nothing was walked, walked again from the start), ends with
the bitmask words and candidates (sorted union of the rounds') of the pure-Python reference:
``TokenTrie.walk_pairs`` on tables where every reachable state was written beforehand.  Small
rooms make walks stop where the tables are full (they grow between rounds; rows never move);
wide walks (a zero ``_NATIVE_WALK_MAX_REACH``) take the level-order pass.  Every stop is a
sentinel of a not-ready state, and each string is classified once (no duplicate candidate).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import formcast.index.cfg_program as cfg_program
import formcast.vocab.trie as trie_module
from _native_kernel import kernel_or_skip
from formcast.bitmask import bitmask_words
from formcast.vocab.trie import TokenTrie, WalkRows, classify_walk_resume

KERNEL = kernel_or_skip(trie_module._KERNEL, "formcast.vocab._trie_walk")
SINK = cfg_program._LAZY_SINK


def _rows(
    lexer: np.ndarray,
    split: np.ndarray,
    built: np.ndarray,
    tables: cfg_program._LazyWalkTables,
    xb: int | None,
) -> WalkRows:
    return WalkRows(
        lexer,
        split,
        built,
        tables.ids,
        tables.ready,
        tables.states,
        tables.lex,
        tables.cut,
        tables.pending,
        tables.count,
        -1 if xb is None else xb,
    )


def _reference(
    trie: TokenTrie,
    lexer: np.ndarray,
    split: np.ndarray,
    start: int,
    xb: int | None,
    drop: np.ndarray,
    size: int,
) -> tuple[list[int], list[int]]:
    """Words and candidates of the pure walk on tables with every reachable state written."""
    ref = cfg_program._LazyWalkTables(lexer.shape[0], xb)
    frontier, seen = [start], {start}
    while frontier:
        todo = np.asarray(frontier, dtype=np.int64)
        ref.write(todo, lexer[todo], split[todo])
        frontier = sorted({int(t) for s in todo.tolist() for t in lexer[s]} - seen - {0})
        seen.update(frontier)
    _, cut = ref.walk_tables()
    old = trie_module._KERNEL
    trie_module._KERNEL = None  # the pure numpy walk
    try:
        idx, ends = trie.walk_pairs(np.ascontiguousarray(cut), ref.start(start))
    finally:
        trie_module._KERNEL = old
    assert not ref.pending[ends].any()
    sink = ends == SINK
    words = trie.token_words(idx[~sink], size)
    cands = idx[sink]
    cands = cands[~drop[cands]]
    return words.tolist(), cands.tolist()


@given(
    st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=60, unique=True),
    st.integers(3, 14),
    st.integers(0, 2**31),
    st.floats(0.0, 0.8),
    st.floats(0.0, 0.6),
    st.booleans(),
    st.integers(0, 3),
    st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_resumed_walks_match_the_pure_walk(
    strings: list[bytes],
    n: int,
    seed: int,
    dead_share: float,
    unbuilt_share: float,
    with_exit: bool,
    small_room: int,
    wide: bool,
) -> None:
    alphabet = sorted({b for s in strings for b in s})
    rng = np.random.default_rng(seed)
    lexer = np.zeros((n, 256), dtype=np.int32)
    lexer[1:, alphabet] = rng.integers(1, n, size=(n - 1, len(alphabet)))
    lexer[1:, alphabet] *= rng.random((n - 1, len(alphabet))) >= dead_share
    split = rng.random((n, 256)) < 0.3
    split[0] = False
    built = rng.random(n) >= unbuilt_share
    built[0] = True
    start = int(rng.integers(1, n))
    built[start] = True
    xb = alphabet[seed % len(alphabet)] if with_exit else None
    trie = TokenTrie(strings, vocab_size=len(strings))
    size = len(strings)
    drop = rng.random(size + 1) < 0.2
    want_words, want_cands = _reference(trie, lexer, split, start, xb, drop, size)
    old_ids, old_reach = cfg_program._LAZY_IDS, trie_module._NATIVE_WALK_MAX_REACH
    try:
        cfg_program._LAZY_IDS = None if small_room == 0 else small_room + 1
        if wide:
            trie_module._NATIVE_WALK_MAX_REACH = 0
        t = cfg_program._LazyWalkTables(n, xb)
        t.write(np.asarray([start], dtype=np.int64), lexer[[start]], split[[start]])
        words = np.zeros(bitmask_words(size), dtype=np.int32)
        parts: list[int] = []
        resume: np.ndarray | None = None
        restarts = 0
        for _ in range(4 * n + 4):
            rows = _rows(lexer, split, built, t, xb)
            got = classify_walk_resume(
                trie, True, t.start(start), SINK, trie, words, None, drop, rows, resume
            )
            assert got is not None
            cands, stops, written, count = got
            assert built[written].all()
            t.wrote(count)
            parts.extend(cands.tolist())
            if not stops.size:
                break
            pairs = stops.reshape(-1, 2)
            assert t.pending[pairs[:, 1]].all()
            states = np.unique(t.states[pairs[:, 1] // 3])
            assert not t.ready[states].any()
            built[states] = True  # (as _ensure builds them)
            t.write(states, lexer[states], split[states])
            if pairs[0, 0] < 0:  # met on the first bytes: nothing walked, walked again
                assert (pairs[:, 0] == -1).all()
                assert not parts
                assert not words.any()
                resume = None
                restarts += 1
            else:
                assert (pairs[:, 0] >= 0).all()
                resume = stops
        else:
            pytest.fail("the walk never finished")
        assert restarts <= n
        assert len(parts) == len(set(parts))
        assert sorted(parts) == want_cands
        assert words.tolist() == want_words
    finally:
        cfg_program._LAZY_IDS = old_ids
        trie_module._NATIVE_WALK_MAX_REACH = old_reach


def test_resume_must_be_pairs() -> None:
    strings = [b"a", b"ab"]
    trie = TokenTrie(strings, vocab_size=2)
    lexer = np.zeros((3, 256), dtype=np.int32)
    lexer[1, ord("a")] = 2
    lexer[2, ord("b")] = 1
    split = np.zeros((3, 256), dtype=bool)
    built = np.ones(3, dtype=bool)
    t = cfg_program._LazyWalkTables(3, None)
    t.write(np.asarray([1], dtype=np.int64), lexer[[1]], split[[1]])
    words = np.zeros(1, dtype=np.int32)
    rows = _rows(lexer, split, built, t, None)
    with pytest.raises(ValueError, match="pairs"):
        classify_walk_resume(
            trie,
            True,
            t.start(1),
            SINK,
            trie,
            words,
            None,
            None,
            rows,
            np.zeros(3, dtype=np.int64),
        )
    with pytest.raises(ValueError, match="node out of order or range"):  # a node out of range
        classify_walk_resume(
            trie,
            True,
            t.start(1),
            SINK,
            trie,
            words,
            None,
            None,
            rows,
            np.asarray([99, 5], dtype=np.int64),
        )
