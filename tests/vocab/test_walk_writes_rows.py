"""The compiled classification walk that writes the lazy walk tables' rows it meets
(``formcast.vocab.trie.classify_walk_rows``, ``write_walk_state``; #31).

On a random lexer (int32 rows, split flags, some rows unbuilt) and a random trie, tables with
only the start state written, walked by ``classify_walk_rows`` (rows of built lexer states
written as met; unbuilt ones reported as stopped, then written by the Python path and walked
again), give the same bitmask words and candidates as ``classify_walk`` on tables where every
reachable built state was written beforehand by ``_LazyWalkTables.write``; every stop is an
unbuilt lexer state; and the rows written in the walk are those ``write`` writes (compared
through the ids: the same lexer state's rows, renumbered to lexer states).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import formcast.index.cfg_program as cfg_program
import formcast.vocab.trie as trie_module
from _native_kernel import kernel_or_skip
from formcast.bitmask import bitmask_words
from formcast.vocab.trie import TokenTrie, WalkRows, classify_walk, classify_walk_rows

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


def _lexer_rows(t: cfg_program._LazyWalkTables, k: int) -> np.ndarray:
    """Id ``k``'s three rows of the cut table as (lexer state, row kind) pairs (sink: -1)."""
    rows = t.cut[3 * k : 3 * k + 3].astype(np.int64)
    out = np.where(rows == SINK, -1, t.states[rows // 3] * 3 + rows % 3)
    return np.asarray(out)


@given(
    st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=50, unique=True),
    st.integers(3, 14),
    st.integers(0, 2**31),
    st.floats(0.0, 0.8),
    st.floats(0.0, 0.5),
    st.booleans(),
    st.integers(0, 3),
)
@settings(max_examples=120, deadline=None)
def test_rows_written_in_the_walk_match_the_batch_writes(
    strings: list[bytes],
    n: int,
    seed: int,
    dead_share: float,
    unbuilt_share: float,
    with_exit: bool,
    small_room: int,
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
    old_ids = cfg_program._LAZY_IDS
    try:
        # room for few ids at first (walks then stop where the tables are full and grow)
        cfg_program._LAZY_IDS = None if small_room == 0 else small_room + 1
        # the reference: every reachable built state written by the batch path, then walked
        ref = cfg_program._LazyWalkTables(n, xb)
        frontier, seen = [start], {start}
        while frontier:
            todo = np.asarray([s for s in frontier if built[s]], dtype=np.int64)
            if todo.size:
                ref.write(todo, lexer[todo], split[todo])
            frontier = sorted({int(t) for s in todo.tolist() for t in lexer[s]} - seen - {0})
            seen.update(frontier)
        _, cut = ref.walk_tables()
        want = np.zeros(bitmask_words(size), dtype=np.int32)
        got_ref = classify_walk(trie, cut, ref.start(start), ref.pending, SINK, trie, want)
        assert got_ref is not None
        # the walk that writes rows: from the start state alone
        t = cfg_program._LazyWalkTables(n, xb)
        got_w = trie_module.write_walk_state(_rows(lexer, split, built, t, xb), start, SINK)
        assert got_w is not None
        t.wrote(got_w[0])  # (ids may be given where no row was written: no room)
        if not got_w[1]:  # no room for the start's targets: the batch path
            t.write(np.asarray([start], dtype=np.int64), lexer[[start]], split[[start]])
        for _ in range(4 * n + 4):
            words = np.zeros(bitmask_words(size), dtype=np.int32)
            rows = _rows(lexer, split, built, t, xb)
            got = classify_walk_rows(
                trie, True, t.start(start), SINK, trie, words, None, None, rows
            )
            assert got is not None
            cands, stopped, written, count = got
            assert built[written].all()
            t.wrote(count)
            states = np.unique(t.states[stopped // 3])
            assert not t.ready[states].any()
            fresh = states[built[states]]  # (met where the tables had no room for an id)
            if not fresh.size:
                break  # none, or only unbuilt rows: they stop both walks
            t.write(fresh, lexer[fresh], split[fresh])
        ref_stopped = set(np.unique(ref.states[got_ref[1] // 3]).tolist())
        if ref_stopped:
            assert set(np.unique(t.states[stopped // 3]).tolist()) == ref_stopped
        else:
            assert not stopped.size
            assert words.tolist() == want.tolist()
            assert cands.tolist() == got_ref[0].tolist()
        # the rows of every state written by both are the same rows (up to the ids)
        for s in np.flatnonzero(t.ready[:n] & ref.ready[:n]).tolist():
            a = _lexer_rows(t, int(t.ids[s]))
            b = _lexer_rows(ref, int(ref.ids[s]))
            assert np.array_equal(a, b), s
            assert not t.pending[3 * t.ids[s] : 3 * t.ids[s] + 3].any()
        assert np.array_equal(t.states[t.ids[t.ids >= 0]], np.flatnonzero(t.ids >= 0))
    finally:
        cfg_program._LAZY_IDS = old_ids
