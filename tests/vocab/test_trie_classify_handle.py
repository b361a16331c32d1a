"""The kernel's classify through a trie handle (``_trie_walk.trie_handle``, what
``TokenTrie._classify_head`` keeps: the only form since walk38, session 24, dropped the one
that took the trie's 8 arrays, the first tokens and the memo on every call) gives what the
numpy walk gives.

Random tries and tables, with and without the subtree memo (and its text memo, where the
strings are text), every start state, both walks (depth-first and the pass over every node),
bits and candidates compared with ``TokenTrie.walk_pairs`` in the pure package's numpy; a
handle's arrays stay alive with it; a capsule of another kind, or a wrong argument count, is
refused (the 19-argument form among them).  Compiled build only (skipped in the pure
package; tests/project/test_native_build.py runs it there).
"""

from __future__ import annotations

import datetime
import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import formcast.vocab.trie as trie_module
from _native_kernel import kernel_or_skip
from formcast.vocab.trie import TokenTrie

KERNEL = kernel_or_skip(trie_module._KERNEL, "formcast.vocab._trie_walk")


def _fixed(trie: TokenTrie) -> tuple[np.ndarray, ...]:
    first, count, byte, end, parent, _ = trie._flat_nodes()
    snode = trie.string_node = np.ascontiguousarray(trie.string_node, dtype=np.int64)
    ftok = trie.first_token = np.ascontiguousarray(trie.first_token, dtype=np.int64)
    return (first, count, byte, end, parent, snode, trie._below_first, trie._below_second, ftok)


def _numpy_classify(
    trie: TokenTrie, table: np.ndarray, start: int, sink: int, n_words: int
) -> tuple[list[int], list[int]]:
    """(bitmask words, candidates ascending) of a walk by the pure package's numpy walk."""
    trie_module._KERNEL = None
    try:
        idx, ends = trie.walk_pairs(table, start)
    finally:
        trie_module._KERNEL = KERNEL
    order = np.argsort(idx, kind="stable")
    idx, ends = idx[order], ends[order]
    bits = np.zeros(n_words * 32, dtype=bool)
    bits[trie.first_token[idx[ends != sink]]] = True
    words = np.packbits(bits, bitorder="little").view("<i4")
    return words.tolist(), idx[ends == sink].tolist()


@given(
    st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=80, unique=True),
    st.integers(2, 10),
    st.integers(0, 2**31),
    st.booleans(),
    st.sampled_from([0, 1 << 40]),
)
@settings(max_examples=60, deadline=None)
def test_handle_classify_equals_the_numpy_walk(
    strings: list[bytes], n_states: int, seed: int, with_memo: bool, max_reach: int
) -> None:
    trie = TokenTrie(strings, vocab_size=len(strings))
    fixed = _fixed(trie)
    memo = trie._subtree_memo() if with_memo else None
    if memo is not None:
        memo = trie._memo_words(memo, (len(strings) + 31) // 32)
    handle = KERNEL.trie_handle(*fixed, memo)
    rng = np.random.default_rng(seed)
    table = np.zeros((n_states, 256), dtype=np.int32)
    table[1:] = rng.integers(0, n_states, size=(n_states - 1, 256))
    sink = n_states - 1
    pending = np.zeros(n_states, dtype=bool)
    n_words = (len(strings) + 31) // 32
    for start in range(1, n_states):
        want_words, want_cands = _numpy_classify(trie, table, start, sink, n_words)
        words = np.zeros(n_words, dtype=np.int32)
        got = KERNEL.classify(handle, table, start, pending, sink, None, None, words, max_reach)
        assert np.frombuffer(got[0], dtype=np.int64).tolist() == want_cands, start
        assert bytes(got[1]) == b"", start
        assert words.tolist() == want_words, start


def test_a_handle_keeps_its_arrays_and_checks_its_arguments() -> None:
    trie = TokenTrie([b"ab", b"abc", b"b"], vocab_size=3)
    handle = KERNEL.trie_handle(*(a.copy() for a in _fixed(trie)))  # only the handle holds them
    gc.collect()
    table = np.zeros((4, 256), dtype=np.int32)
    table[1, ord("a")], table[2, ord("b")], table[1, ord("b")] = 2, 2, 3
    words = np.zeros(1, dtype=np.int32)
    pending = np.zeros(4, dtype=bool)
    cands, _ = KERNEL.classify(handle, table, 1, pending, 3, None, None, words, 0, None)
    assert np.frombuffer(cands, dtype=np.int64).tolist() == [2]  # "b" ends in the sink
    assert words.tolist() == [0b1]  # "ab" ("abc" dies on its "c")
    other = datetime.datetime_CAPI  # a capsule, not a handle
    with pytest.raises(ValueError, match="incorrect name"):
        KERNEL.classify(other, table, 1, pending, 3, None, None, words, 0, None)
    with pytest.raises(TypeError):
        KERNEL.classify(handle, table, 1, pending, 3, None, None, words, 0, None, None)
    with pytest.raises(TypeError):
        KERNEL.classify_from(handle, table, 1, pending, 3, None, None, words, 0, None)
    # the trie's arrays in place of the handle (the dropped 17-19-argument form): refused
    fixed = _fixed(trie)
    with pytest.raises((TypeError, ValueError)):
        KERNEL.classify(*fixed[:8], table, 1, pending, 3, fixed[8], None, None, words, 0)
    with pytest.raises(TypeError):
        KERNEL.classify_from(
            *fixed[:8], table, 1, pending, 3, fixed[8], None, None, words, 0, None, None
        )


def test_an_empty_trie_is_left_to_the_caller() -> None:
    """A walk of a trie without strings (an exit byte no token holds) is not the kernel's:
    None, the caller walks with numpy (no handle is made: there are no nodes to flatten)."""
    vocab_trie = TokenTrie([b"ab", b"b"], vocab_size=2)
    empty = TokenTrie._of_strings([])
    table = np.zeros((3, 256), dtype=np.int32)
    table[1, ord("b")] = 2
    words = np.zeros(1, dtype=np.int32)
    pending = np.zeros(3, dtype=bool)
    assert trie_module.classify_walk(empty, table, 1, pending, 2, vocab_trie, words) is None
    got = trie_module.classify_walk(vocab_trie, table, 1, pending, 2, vocab_trie, words)
    assert got is not None
