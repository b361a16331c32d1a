"""``TokenTrie._reach``: the bound a walk's path choice reads (depth-first, class trie, level
pass), refined by the second bytes the first states keep alive.

Brute force on random byte tries through random tables: the refined reach is exactly the live
first-level nodes plus every node below a second-level child their states keep alive, never
more than the first-level bound, and never fewer than the nodes the walk keeps alive (so the
depth-first walk is picked only where it touches few nodes).  Masks do not depend on it: every
path gives the same walk (tests/vocab/test_native_trie_walk.py, test_class_trie_walk.py).
"""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import formcast.vocab.trie as trie_module
from formcast.vocab.trie import TokenTrie


def _prefixes(strings: list[bytes]) -> set[bytes]:
    return {s[:k] for s in strings for k in range(1, len(s) + 1)}


def _brute(strings: list[bytes], table: np.ndarray, start: int) -> tuple[int, int, int]:
    """(first-level bound, refined bound, live nodes) by enumerating the trie's prefixes."""
    nodes = _prefixes(strings)
    first_live = {p for p in nodes if len(p) == 1 and table[start, p[0]]}
    first = sum(1 for p in nodes if p[:1] in first_live)
    second_live = {
        p for p in nodes if len(p) == 2 and p[:1] in first_live and table[table[start, p[0]], p[1]]
    }
    refined = len(first_live) + sum(1 for p in nodes if len(p) >= 2 and p[:2] in second_live)
    live = 0
    for p in nodes:
        s = start
        for b in p:
            s = int(table[s, b])
            if not s:
                break
        live += s != 0
    return first, refined, live


@given(
    st.lists(st.binary(min_size=1, max_size=7), min_size=1, max_size=60, unique=True),
    st.integers(2, 9),
    st.integers(0, 2**31),
    st.floats(0.0, 0.9),
)
@settings(max_examples=120, deadline=None)
def test_reach_bounds_the_live_nodes(
    strings: list[bytes], n_states: int, seed: int, dead_share: float
) -> None:
    alphabet = sorted({b for s in strings for b in s})
    rng = np.random.default_rng(seed)
    table = np.zeros((n_states, 256), dtype=np.int32)
    table[1:, alphabet] = rng.integers(1, n_states, size=(n_states - 1, len(alphabet)))
    table[1:, alphabet] *= rng.random((n_states - 1, len(alphabet))) >= dead_share
    trie = TokenTrie(strings, vocab_size=len(strings))
    flat = table.reshape(-1)
    for start in range(1, n_states):
        states = np.take(flat, trie.level_bytes[1] + start * 256)
        nodes = np.flatnonzero(states)
        first, refined, live = _brute(strings, table, start)
        # small reaches are not refined
        assert trie._reach(table, nodes, states) == first
        with mock.patch.object(trie_module, "_REACH_SECOND_LEVEL", 0):
            got = trie._reach(table, nodes, states)
        assert got == refined
        assert live <= got <= first


def test_a_whitespace_state_on_llama3_is_refined_to_its_live_branches() -> None:
    """A state allowing spaces but only ``"`` or more spaces after them (a JSON whitespace gap
    before a key) reaches 130k nodes by its first byte and a few hundred by its second."""
    from formcast.vocab.loaders import load_vocabulary

    trie = load_vocabulary("llama3").trie
    table = np.zeros((3, 256), dtype=np.int32)
    table[1, [ord(" "), ord("\n")]] = 1
    table[1, ord('"')] = 2
    flat = table.reshape(-1)
    states = np.take(flat, trie.level_bytes[1] + 256)
    nodes = np.flatnonzero(states)
    assert int(trie._below_first[nodes].sum()) > 100_000
    reach = trie._reach(table, nodes, states)
    idx, _ = trie.walk_pairs(table, 1)
    assert idx.size <= reach < 5_000
