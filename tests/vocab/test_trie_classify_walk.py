"""The compiled build's one-call classification walk (``_trie_walk.classify``, reached through
``formcast.vocab.trie.classify_walk``) gives what the numpy walk and its glue give.

``_LazyExitSplitClassifier`` classifies a new parser position with one C call per walk in the
compiled build: the trie walk, the test of the end states against the sentinel rows, the
bitmask of the live tokens and the candidates (issue #31).  The pure package does the same with
``TokenTrie.walk_pairs`` (the kernel switched off here) and numpy; both are compared on random
tries through random tables (depth-first and the pass over every node both forced, a
sub-trie's strings mapped to the vocabulary's, dropped candidates, sentinel rows), and whole
grammars' classifications with the kernel and without it on Llama-3.

In the pure-Python package the kernel is absent and these tests skip;
``tests/project/test_native_build.py`` runs this file against the compiled copy.
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
from formcast.bitmask import bitmask_words
from formcast.vocab.trie import TokenTrie, classify_walk

KERNEL = kernel_or_skip(trie_module._KERNEL, "formcast.vocab._trie_walk")


def _reference(
    trie: TokenTrie,
    table: np.ndarray,
    start: int,
    pending: np.ndarray,
    sink: int,
    vocab_trie: TokenTrie,
    vocab_size: int,
    string_map: np.ndarray | None,
    drop: np.ndarray | None,
) -> tuple[list[int], list[int], set[int]]:
    """(bitmask words, candidates, stopped states) by the numpy walk and numpy glue."""
    trie_module._KERNEL = None
    try:
        idx, ends = trie.walk_pairs(table, start)
    finally:
        trie_module._KERNEL = KERNEL
    order = np.argsort(idx, kind="stable")
    idx, ends = idx[order], ends[order]
    stopped = pending[ends]
    if stopped.any():
        return [], [], set(ends[stopped].tolist())
    g = idx if string_map is None else string_map[idx]
    sink_m = ends == sink
    words = np.zeros(bitmask_words(vocab_size), dtype=np.int32)
    ids = vocab_trie.first_token[g[~sink_m]]
    bits = np.zeros(words.size * 32, dtype=bool)
    bits[ids] = True
    words = np.packbits(bits, bitorder="little").view("<i4")
    cands = g[sink_m]
    if drop is not None:
        cands = cands[~drop[cands]]
    return words.tolist(), cands.tolist(), set()


def _check(
    trie: TokenTrie,
    table: np.ndarray,
    start: int,
    pending: np.ndarray,
    sink: int,
    vocab_trie: TokenTrie,
    vocab_size: int,
    string_map: np.ndarray | None = None,
    drop: np.ndarray | None = None,
) -> None:
    want_words, want_cands, want_stopped = _reference(
        trie, table, start, pending, sink, vocab_trie, vocab_size, string_map, drop
    )
    # both compiled walks: depth-first (a huge threshold) and the pass over every node (0)
    for threshold in (1 << 40, 0, trie_module._NATIVE_WALK_MAX_REACH):
        with mock.patch.object(trie_module, "_NATIVE_WALK_MAX_REACH", threshold):
            words = np.zeros(bitmask_words(vocab_size), dtype=np.int32)
            got = classify_walk(
                trie, table, start, pending, sink, vocab_trie, words, string_map, drop
            )
        assert got is not None
        cands, stopped = got
        assert cands.dtype == np.int64
        assert stopped.dtype == np.int64
        assert len(set(stopped.tolist())) == stopped.size  # each stopped state once
        assert set(stopped.tolist()) == want_stopped, threshold
        if not want_stopped:
            assert words.tolist() == want_words, threshold
            assert cands.tolist() == want_cands, threshold  # ascending, as walk_pairs'


@given(
    st.lists(st.binary(min_size=1, max_size=7), min_size=1, max_size=60, unique=True),
    st.integers(3, 12),
    st.integers(0, 2**31),
    st.floats(0.0, 0.9),
    st.floats(0.0, 0.4),
    st.integers(0, 255),
)
@settings(max_examples=150, deadline=None)
def test_random_tries_through_random_tables(
    strings: list[bytes], n_states: int, seed: int, dead_share: float, pend: float, xb: int
) -> None:
    alphabet = sorted({b for s in strings for b in s})
    rng = np.random.default_rng(seed)
    table = np.zeros((n_states, 256), dtype=np.int32)
    table[1:, alphabet] = rng.integers(1, n_states, size=(n_states - 1, len(alphabet)))
    table[1:, alphabet] *= rng.random((n_states - 1, len(alphabet))) >= dead_share
    pending = rng.random(n_states) < pend
    sink = int(rng.integers(1, n_states))
    pending[sink] = False
    vocab = TokenTrie(strings, vocab_size=len(strings))
    drop = rng.random(vocab.num_strings + 1) < 0.5
    byte = alphabet[xb % len(alphabet)]
    sub, sub_idx = vocab.with_byte(byte)
    for start in range(1, n_states):
        _check(vocab, table, start, pending, sink, vocab, len(strings))
        _check(vocab, table, start, pending, sink, vocab, len(strings), drop=drop)
        if sub.num_strings:
            _check(sub, table, start, pending, sink, vocab, len(strings), sub_idx)


def test_out_of_range_inputs_raise() -> None:
    trie = TokenTrie([b"ab", b"abc", b"b"], vocab_size=3)
    table = np.zeros((3, 256), dtype=np.int32)
    table[1, ord("a")] = 2
    table[2, ord("b")] = 7  # no state 7
    pending = np.zeros(3, dtype=bool)
    words = np.zeros(1, dtype=np.int32)
    for threshold in (1 << 40, 0):
        with (
            mock.patch.object(trie_module, "_NATIVE_WALK_MAX_REACH", threshold),
            pytest.raises(ValueError, match="state it lacks"),
        ):
            classify_walk(trie, table, 1, pending, 2, trie, words)
    table[2, ord("b")] = 2
    with pytest.raises(ValueError, match="out of range"):  # a string map past the vocabulary
        classify_walk(trie, table, 1, pending, 1, trie, words, np.asarray([9, 9, 9]))
    with pytest.raises(ValueError, match="lengths disagree"):  # pending shorter than the table
        classify_walk(trie, table, 1, pending[:2], 1, trie, words)
    assert classify_walk(trie, table.astype(np.int64), 1, pending, 1, trie, words) is None


@pytest.mark.parametrize("which", ["json", "gbnf"])
def test_grammar_classifications_with_and_without_the_kernel(which: str) -> None:
    """Every stack top a few random walks meet is classified the same with the fused kernel
    and with the numpy glue (fresh programs, the vocabulary's shared walks cleared)."""
    from pathlib import Path

    from formcast import GrammarCompiler
    from formcast.index.context import context_for
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")

    def compile_it() -> cfg_program.CfgProgram:
        context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
        compiler = GrammarCompiler(vocab, cache_size=0)
        if which == "json":
            grammar = compiler.compile_builtin_json_grammar()
        else:
            gbnf = Path(__file__).resolve().parents[3] / "shared" / "data" / "llama.cpp-grammars"
            path = gbnf / "grammars" / "c.gbnf"
            if not path.is_file():
                pytest.skip("../shared/data lacks llama.cpp's c.gbnf")
            grammar = compiler.compile_grammar(path.read_text())
        program = grammar.program
        assert isinstance(program, cfg_program.CfgProgram)
        return program

    program = compile_it()
    positions = program._positions
    if not isinstance(positions, cfg_program._LazyExitSplitClassifier):
        pytest.skip("not a lazy exit-split classifier")
    lexer = positions.lexer
    # the first live states of every rule (their lexer rows are built as the walks need)
    tops = [
        (r, s)
        for r, dfa in enumerate(lexer.auto.dfas)
        for s in range(1, min(40, dfa.table.shape[0]))
    ]
    fused = {t: positions.classify(*t) for t in tops}
    trie_module._KERNEL = None
    try:
        reference = compile_it()._positions
        plain = {t: reference.classify(*t) for t in tops}
    finally:
        trie_module._KERNEL = KERNEL
    assert len(tops) > 20
    for t in tops:
        assert fused[t].words.tolist() == plain[t].words.tolist(), t
        # (the numpy walks give strings in level order, the compiled ones ascending)
        assert sorted(fused[t].candidates.tolist()) == sorted(plain[t].candidates.tolist()), t
