"""The compiled build's trie walk (``formcast.vocab._trie_walk``) finds what the numpy walk finds.

``TokenTrie.walk_pairs`` runs restrictive walks depth-first in C when the compiled build is
installed (docs/native.md); here every walk is done both ways (the kernel switched off for the
reference) and must give the same strings with the same end states: random byte tries through
random tables, and the Llama-3 trie through the lexers of real grammars from every start
state.  A table that leads to a state it does not have raises ``ValueError`` (never a read out
of bounds).

In the pure-Python package the kernel is absent and these tests skip;
``tests/project/test_native_build.py`` runs this file against the compiled copy, where
``FORMCAST_EXPECT_NATIVE=1`` makes a missing kernel a failure.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import formcast.index.cfg_program as cfg_program
import formcast.vocab.trie as trie_module
from _native_kernel import kernel_or_skip
from formcast.vocab.trie import TokenTrie

KERNEL = kernel_or_skip(trie_module._KERNEL, "formcast.vocab._trie_walk")


def _both(trie: TokenTrie, table: np.ndarray, start: int) -> None:
    """``walk_pairs`` and ``walk`` with the kernel and without it (strings compared sorted);
    both compiled walks (depth-first and the pass over every node) are checked on their own
    whichever one ``walk_pairs`` picks."""
    trie_module._KERNEL = None
    try:
        ref_idx, ref_states = trie.walk_pairs(table, start)
        ref_full = trie.walk(table, start)
    finally:
        trie_module._KERNEL = KERNEL
    order = np.argsort(ref_idx, kind="stable")
    want = (ref_idx[order].tolist(), ref_states[order].tolist())
    got_idx, got_states = trie.walk_pairs(table, start)
    assert got_idx.dtype == np.int64
    assert got_states.dtype == np.int32
    got_order = np.argsort(got_idx, kind="stable")
    assert (got_idx[got_order].tolist(), got_states[got_order].tolist()) == want
    assert trie.walk(table, start).tolist() == ref_full.tolist()
    if trie._native_takes(table, start):
        for reach in (0, trie_module._NATIVE_WALK_MAX_REACH):
            found = trie._native_walk(table, start, reach)
            assert found is not None
            assert (found[0].tolist(), found[1].tolist()) == want, reach


@given(
    st.lists(st.binary(min_size=1, max_size=9), min_size=1, max_size=60, unique=True),
    st.integers(2, 12),
    st.integers(0, 2**31),
    st.floats(0.0, 0.9),
)
@settings(max_examples=150, deadline=None)
def test_random_tries_through_random_tables(
    strings: list[bytes], n_states: int, seed: int, dead_share: float
) -> None:
    alphabet = sorted({b for s in strings for b in s})
    rng = np.random.default_rng(seed)
    table = np.zeros((n_states, 256), dtype=np.int32)
    table[1:, alphabet] = rng.integers(1, n_states, size=(n_states - 1, len(alphabet)))
    table[1:, alphabet] *= rng.random((n_states - 1, len(alphabet))) >= dead_share
    trie = TokenTrie(strings, vocab_size=len(strings))
    for start in range(1, n_states):
        _both(trie, table, start)


def test_every_start_state_of_real_lexers_on_llama3() -> None:
    from formcast import GrammarCompiler
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    compiler = GrammarCompiler(vocab)
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):  # the whole (eager) tables
        grammars = [
            compiler.compile_json_schema(
                {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "maxLength": 12},
                        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}},
                        "n": {"type": "number"},
                    },
                    "required": ["name"],
                }
            ),
            compiler.compile_builtin_json_grammar(),
        ]
    used = 0
    for grammar in grammars:
        positions = grammar.program._positions
        exit_trie = positions._exit[0]
        for table in (positions._lex_aug, positions._cut_aug):
            n = (table.shape[0] - 1) // 3
            for state in range(1, n):
                start = state + 2 * n
                if vocab.trie._native_takes(table, start):
                    used += 1
                _both(vocab.trie, table, start)
                _both(exit_trie, table, start)
    assert used > 100  # the kernel served most of these walks


def test_a_table_leading_to_a_missing_state_raises() -> None:
    trie = TokenTrie([b"ab", b"abc", b"b"], vocab_size=3)
    table = np.zeros((3, 256), dtype=np.int32)
    table[1, ord("a")] = 2
    table[2, ord("b")] = 7  # no state 7
    with pytest.raises(ValueError, match="state it lacks"):
        trie._native_walk(table, 1)
    with pytest.raises(ValueError, match="state it lacks"):
        trie._native_levels(table, 1)


def test_tables_the_kernel_does_not_take_use_numpy() -> None:
    trie = TokenTrie([b"ab", b"b"], vocab_size=2)
    table = np.zeros((3, 256), dtype=np.int64)
    table[1, ord("b")] = 2
    assert trie._native_walk(table, 1) is None  # int64: the numpy walk
    idx, states = trie.walk_pairs(table, 1)
    assert idx.tolist() == [1]
    assert states.tolist() == [2]
    assert trie._native_walk(table.astype(np.int32), 0) is None  # the dead state
