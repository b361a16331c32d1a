"""A trie below ``_MEMO_MIN_NODES`` gets no subtree memo with its flattened nodes (walk38,
session 24): its fresh compiled walks never reach the memo's least reach, so the memo (built
in a grammar's first mask for its exit-byte trie, ~0.1-0.2 ms) would only number a resumable
walk's stops.  ``_subtree_memo()`` still builds one on request, and the classifications are
the same with it and without it (plain and resumable walks, through random tables with
sentinel rows).  Compiled build only (the pure package has no memo).
"""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import formcast.vocab.trie as trie_module
from _native_kernel import kernel_or_skip
from formcast.vocab.trie import TokenTrie, classify_walk

KERNEL = kernel_or_skip(trie_module._KERNEL, "formcast.vocab._trie_walk")


def test_small_tries_get_their_memo_on_request_only() -> None:
    strings = [b"a", b"ab", b"abc", b"b", b"ba", b"c"]
    small = TokenTrie(strings, vocab_size=len(strings))
    small._flat_nodes()
    assert small.total_nodes < trie_module._MEMO_MIN_NODES
    assert small._memo is None  # (not built with the nodes)
    memo = small._subtree_memo()
    assert memo is not None  # (built on request,
    assert small._memo is memo  # then kept)
    with mock.patch.object(trie_module, "_MEMO_MIN_NODES", 3):
        big = TokenTrie(strings, vocab_size=len(strings))
        big._flat_nodes()
        assert big._memo is not None  # (a trie at the bound: built with its nodes)


@given(
    st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=50, unique=True),
    st.integers(3, 10),
    st.integers(0, 2**31),
)
@settings(max_examples=60, deadline=None)
def test_walks_without_the_memo_equal_walks_with_it(
    strings: list[bytes], n_states: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    table = np.zeros((n_states, 256), dtype=np.int32)
    alphabet = sorted({b for s in strings for b in s})
    table[1:, alphabet] = rng.integers(0, n_states, size=(n_states - 1, len(alphabet)))
    sink = n_states - 1
    pending = np.zeros(n_states, dtype=bool)
    pending[1:-1] = rng.random(n_states - 2) < 0.2
    n_words = (len(strings) + 31) // 32
    bare = TokenTrie(strings, vocab_size=len(strings))
    bare._flat_nodes()
    memo = TokenTrie(strings, vocab_size=len(strings))
    got_memo = memo._subtree_memo()
    assert bare._memo is None
    assert got_memo is not None
    # (the memo's least reach 0: every fresh walk of `memo` runs on it)
    memo._memo = got_memo._replace(min_reach=0)
    for start in range(1, n_states):
        out = []
        for trie in (bare, memo):
            words = np.zeros(n_words, dtype=np.int32)
            got = classify_walk(trie, table, start, pending, sink, trie, words)
            assert got is not None
            out.append((got[0].tolist(), sorted(got[1].tolist()), words.tolist()))
        assert out[0] == out[1], start
