"""Walks on *narrow* tables (one column per byte class) find what the 256-column table finds.

``TokenTrie.walk_pairs(table, start, (cmap, reps))`` walks ``table`` (``int32[n, k]``) as the
table ``table[:, cmap]``: the compiled build's kernel reads column ``cmap[byte]`` in its
depth-first walk and in its pass over every node (both are checked here whichever one the
walk picks), the pure package walks the class trie of ``cmap`` (permissive walks) or the live
nodes level by level, and a table or map the fast paths do not take is widened.  Each is
compared with the 256-column table walked without the kernel (strings sorted, same end
states), on random tries, class maps and tables (narrow counted windows are built so:
``formcast.index.cfg_program._CountedClassifier``).  A class map past the table's width, or
a table leading to a state it lacks, raises ``ValueError`` in the kernel (never a read out of
bounds).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import formcast.vocab.trie as trie_module
from formcast.vocab.trie import TokenTrie

KERNEL = trie_module._KERNEL


def _pairs(got: tuple[np.ndarray, np.ndarray]) -> tuple[list[int], list[int]]:
    idx, states = got
    order = np.argsort(idx, kind="stable")
    return idx[order].tolist(), states[order].tolist()


def _reference(trie: TokenTrie, wide: np.ndarray, start: int) -> tuple[list[int], list[int]]:
    trie_module._KERNEL = None
    try:
        return _pairs(trie.walk_pairs(wide, start))
    finally:
        trie_module._KERNEL = KERNEL


def _random_case(
    strings: list[bytes], k: int, n_states: int, seed: int, dead_share: float
) -> tuple[TokenTrie, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    cmap = rng.integers(0, k, size=256).astype(np.uint8)
    cmap[rng.permutation(256)[:k]] = np.arange(k, dtype=np.uint8)  # every class used
    reps = np.array([int(np.flatnonzero(cmap == c)[0]) for c in range(k)], dtype=np.int64)
    narrow = np.zeros((n_states, k), dtype=np.int32)
    narrow[1:] = rng.integers(1, n_states, size=(n_states - 1, k))
    narrow[1:] *= rng.random((n_states - 1, k)) >= dead_share
    return TokenTrie(strings, vocab_size=len(strings)), narrow, cmap, reps


@given(
    st.lists(st.binary(min_size=1, max_size=9), min_size=1, max_size=60, unique=True),
    st.integers(1, 30),
    st.integers(2, 12),
    st.integers(0, 2**31),
    st.floats(0.0, 0.9),
)
@settings(max_examples=150, deadline=None)
def test_narrow_walks_equal_the_wide_table(
    strings: list[bytes], k: int, n_states: int, seed: int, dead_share: float
) -> None:
    trie, narrow, cmap, reps = _random_case(strings, k, n_states, seed, dead_share)
    wide = np.ascontiguousarray(narrow[:, cmap])
    for start in range(1, n_states):
        want = _reference(trie, wide, start)
        assert _pairs(trie.walk_pairs(narrow, start, (cmap, reps))) == want, start
        trie_module._KERNEL = None  # the pure package's narrow walks
        try:
            assert _pairs(trie.walk_pairs(narrow, start, (cmap, reps))) == want, start
        finally:
            trie_module._KERNEL = KERNEL
        # a map the fast paths do not take (int64): widened
        got = trie.walk_pairs(narrow, start, (cmap.astype(np.int64), reps))
        assert _pairs(got) == want, start
        if KERNEL is not None:  # both compiled walks, whichever one walk_pairs picks
            for reach in (0, trie_module._NATIVE_WALK_MAX_REACH):
                found = trie._native_walk_checked(narrow, start, reach, trie.num_strings, cmap)
                assert _pairs(found) == want, (start, reach)


@pytest.mark.parametrize("k", [1, 3, 22, 40])
def test_wide_and_deep_walks_on_many_strings(k: int) -> None:
    """Enough strings that the pure walks take the class trie (permissive, ``k`` <= 24) and
    the compiled ones the pass over every node; and sparse walks."""
    rng = np.random.default_rng(k)
    alphabet = np.frombuffer(b'ab,"\\u0 \xc3\xa9', dtype=np.uint8)
    strings = sorted(
        {bytes(rng.choice(alphabet, size=int(rng.integers(1, 9)))) for _ in range(3000)}
    )
    checked_second = 0
    for dead_share in (0.0, 0.3, 0.8):
        trie, narrow, cmap, reps = _random_case(strings, k, 9, k + 7, dead_share)
        narrow[1:, cmap[alphabet]] = np.maximum(narrow[1:, cmap[alphabet]], dead_share < 0.5)
        wide = np.ascontiguousarray(narrow[:, cmap])
        for start in range(1, 9):
            want = _reference(trie, wide, start)
            assert _pairs(trie.walk_pairs(narrow, start, (cmap, reps))) == want
            # the reach that picks the walk (past the second level on wide first levels)
            states = wide[start].take(trie.level_bytes[1])
            nodes = np.flatnonzero(states)
            reach = trie._reach(wide, nodes, states)
            assert trie._reach(narrow, nodes, states, cmap) == reach
            checked_second += reach >= trie_module._REACH_SECOND_LEVEL
            trie_module._KERNEL = None
            try:
                assert _pairs(trie.walk_pairs(narrow, start, (cmap, reps))) == want
            finally:
                trie_module._KERNEL = KERNEL
    assert checked_second


def test_the_kernel_checks_narrow_arguments() -> None:
    if KERNEL is None:
        pytest.skip("the pure-Python package: no kernel")
    trie = TokenTrie([b"ab", b"abc", b"b"], vocab_size=3)
    cmap = np.zeros(256, dtype=np.uint8)
    cmap[ord("a")], cmap[ord("b")] = 1, 2
    table = np.zeros((3, 3), dtype=np.int32)
    table[1, 1], table[2, 2] = 2, 1
    assert _pairs(trie._native_walk_checked(table, 1, 0, 3, cmap)) == ([0], [1])  # "ab"
    assert _pairs(trie._native_walk_checked(table, 1, 10**6, 3, cmap)) == ([0], [1])
    first, count, byte, end, parent, n_root = trie._flat_nodes()
    out = np.empty(4, dtype=np.int32)
    nodes = np.empty(trie.total_nodes, dtype=np.int32)
    for bad_cmap, width in ((cmap, 2), (cmap[:255], 3), (cmap, 0), (cmap, 300)):
        with pytest.raises(ValueError, match=r"cmap|class"):
            KERNEL.walk(first, count, byte, end, table, 1, out, out.copy(), 0, n_root,
                        bad_cmap, width)  # fmt: skip
        with pytest.raises(ValueError, match=r"cmap|class"):
            KERNEL.walk_all(parent, byte, table, 1, nodes, bad_cmap, width)
    table[2, 2] = 7  # no state 7
    with pytest.raises(ValueError, match="state it lacks"):
        trie._native_walk_checked(table, 1, 0, 3, cmap)
    with pytest.raises(ValueError, match="state it lacks"):
        trie._native_levels(table, 1, cmap)
    with pytest.raises(ValueError, match="lengths disagree"):  # rows not `width` wide
        KERNEL.walk_all(parent, byte, np.zeros(7, dtype=np.int32), 1, nodes, cmap, 3)
