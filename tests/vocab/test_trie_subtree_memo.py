"""The subtree memo of the compiled classification walks (``TokenTrie._subtree_memo``,
``_trie_walk.subtree_memo`` and ``memo_walk``; lexer35, #31).

A classification walk that arrives at a trie node in a state whose row leads every byte below
the node back to itself knows every string below ends in that state: with the memo (the nodes
in preorder, each subtree's byte set) it takes those strings as one range instead of walking
them.  Oracles:

* the memo's arrays (built in C) are those of a plain numpy reference (preorder numbers by
  sorting the strings' prefixes, byte sets and sizes by brute force) on random tries and on
  Llama-3's;
* classifications with the memo forced on (the preorder walk for every reach, the pass over
  every node with the memo's renumbered stops, the depth-first walk with renumbered stops)
  give the words, candidates and stopped states of the numpy walk
  (test_trie_classify_walk's ``_check``), on random tables whose states loop on many bytes
  (so that subtrees are skipped);
* resumable walks with the memo forced on end with the pure walk's words and candidates
  (test_walk_resumes_after_stops' reference), stops numbered in preorder;
* a memo whose arrays disagree with the trie is refused (ValueError), never read past.

In the pure-Python package the kernel is absent and these tests skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trie_classify_walk import _check
from test_walk_resumes_after_stops import SINK, _rows
from test_walk_resumes_after_stops import _reference as _resume_reference

import formcast.index.cfg_program as cfg_program
import formcast.vocab.trie as trie_module
from _native_kernel import kernel_or_skip
from formcast.bitmask import bitmask_words
from formcast.vocab.trie import TokenTrie, classify_walk, classify_walk_resume

KERNEL = kernel_or_skip(trie_module._KERNEL, "formcast.vocab._trie_walk")

#: the memo's modes: (memo's least reach, _MEMO_WALK_MAX_SHARE); with _check's thresholds
#: (depth-first forced, the pass forced, the default) they run the preorder walk, the pass
#: with renumbered stops and the depth-first walk with renumbered stops
_MODES = [(0, 1 << 40), (1 << 40, 1 << 40), (0, 1)]


def _reference_memo(trie: TokenTrie, min_below: int) -> dict[str, np.ndarray]:
    """The memo's arrays by brute force from the strings: a node is a distinct non-empty
    prefix, preorder is the prefixes' sorted order (a prefix sorts before its extensions)."""
    prefixes = sorted({s[:k] for s in trie.strings for k in range(1, len(s) + 1)})
    first, _, byte, _, parent, _ = trie._flat_nodes()
    # the level-order node of each prefix: follow parents from the flattened nodes
    level: dict[bytes, int] = {}
    for i in range(first.size):
        p = int(parent[i])
        level[(b"" if p < 0 else _prefix_of(p, parent, byte)) + bytes([int(byte[i])])] = i
    strings = set(trie.strings)
    index = {s: i for i, s in enumerate(trie.strings)}
    n = len(prefixes)
    pos = np.zeros(n, dtype=np.int32)
    out: dict[str, list[int]] = {k: [] for k in ("byte", "depth", "size", "own", "str", "sel")}
    sets: list[list[int]] = []
    seen = 0
    for j, pre in enumerate(prefixes):
        pos[level[pre]] = j
        below = [q for q in prefixes if q.startswith(pre) and q != pre]
        out["byte"].append(pre[-1])
        out["depth"].append(len(pre))
        out["size"].append(len(below) + 1)
        out["own"].append(int(pre in strings))
        out["str"].append(seen)
        if pre in strings:
            assert index[pre] == seen  # preorder is the strings' sorted order
        seen += int(pre in strings)
        if len(below) >= min_below:
            words = [0, 0, 0, 0]
            for q in below:
                b = q[-1]
                words[b >> 6] |= 1 << (b & 63)
            out["sel"].append(len(sets))
            sets.append(words)
        else:
            out["sel"].append(-1)
    out["str"].append(seen)
    got = {k: np.asarray(v) for k, v in out.items()}
    got["pos"] = pos
    got["sets"] = np.asarray(sets, dtype=np.uint64).reshape(-1, 4)
    return got


def _prefix_of(i: int, parent: np.ndarray, byte: np.ndarray) -> bytes:
    out = []
    while i >= 0:
        out.append(int(byte[i]))
        i = int(parent[i])
    return bytes(reversed(out))


def _memo_trie(strings: list[bytes], min_below: int, min_reach: int) -> TokenTrie:
    """A trie of ``strings`` whose memo covers the nodes with ``min_below`` nodes below, its
    preorder walk taken from reach ``min_reach`` on."""
    with mock.patch.object(trie_module, "_MEMO_MIN_BELOW", min_below):
        trie = TokenTrie(strings, vocab_size=len(strings))
        trie._flat_nodes()
        memo = trie._subtree_memo()  # (a small trie's: built here, on request)
    assert memo is not None
    trie._memo = memo._replace(min_reach=min_reach)
    return trie


@contextmanager
def _share(share: int) -> Iterator[None]:
    with mock.patch.object(trie_module, "_MEMO_WALK_MAX_SHARE", share):
        yield


@given(
    st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=40, unique=True),
    st.integers(0, 5),
)
@settings(max_examples=60, deadline=None)
def test_memo_arrays_match_the_reference(strings: list[bytes], min_below: int) -> None:
    trie = _memo_trie(strings, min_below, 0)
    memo = trie._subtree_memo()
    assert memo is not None
    want = _reference_memo(trie, min_below)
    for key in ("pos", "byte", "depth", "size", "own", "str", "sel", "sets"):
        assert np.array_equal(getattr(memo, key), want[key]), key
    assert memo.max_depth == max(len(s) for s in strings)


def test_llama3_memo_matches_the_levels() -> None:
    """On Llama-3's trie (275k nodes): preorder numbers are a permutation, a parent's number
    comes before its children's, within its size, one level up; each string's preorder
    string count is its index; a sample of sets and sizes equal brute force."""
    from formcast.vocab.loaders import load_vocabulary

    trie = load_vocabulary("llama3").trie
    memo = trie._subtree_memo()
    assert memo is not None
    first, count, byte, end, parent, _ = trie._flat_nodes()
    pos = memo.pos.astype(np.int64)
    assert np.array_equal(np.sort(pos), np.arange(pos.size))
    own = end >= 0
    assert np.array_equal(memo.str[pos[own]], end[own])
    assert np.array_equal(memo.own[pos], own.astype(np.uint8))
    assert np.array_equal(memo.byte[pos], byte)
    ch = parent >= 0
    pp, cp = pos[parent[ch]], pos[ch]
    assert (cp > pp).all()
    assert (cp < pp + memo.size[pp]).all()
    assert np.array_equal(memo.depth[cp], memo.depth[pp] + 1)
    assert memo.max_depth == trie.num_levels
    rng = np.random.default_rng(0)
    for i in rng.integers(0, first.size, 300).tolist():
        stack, bs, n_below = [i], set(), 0
        while stack:
            x = stack.pop()
            for c in range(int(first[x]), int(first[x]) + int(count[x])):
                bs.add(int(byte[c]))
                n_below += 1
                stack.append(c)
        j = int(pos[i])
        assert memo.size[j] == n_below + 1
        k = int(memo.sel[j])
        assert (k >= 0) == (n_below >= trie_module._MEMO_MIN_BELOW)
        if k >= 0:
            words = memo.sets[k]
            assert {b for b in range(256) if (int(words[b >> 6]) >> (b & 63)) & 1} == bs


def _looping_table(
    rng: np.random.Generator, n_states: int, alphabet: list[int], dead: float, loop: float
) -> np.ndarray:
    """A random table whose live states loop on about ``loop`` of the alphabet's bytes."""
    table = np.zeros((n_states, 256), dtype=np.int32)
    table[1:, alphabet] = rng.integers(1, n_states, size=(n_states - 1, len(alphabet)))
    table[1:, alphabet] *= rng.random((n_states - 1, len(alphabet))) >= dead
    loops = rng.random((n_states - 1, len(alphabet))) < loop
    rows = np.broadcast_to(np.arange(1, n_states)[:, None], loops.shape)
    sub = table[1:, alphabet]
    sub[loops] = rows[loops]
    table[1:, alphabet] = sub
    return table


@given(
    st.lists(st.binary(min_size=1, max_size=7), min_size=1, max_size=60, unique=True),
    st.integers(3, 10),
    st.integers(0, 2**31),
    st.floats(0.0, 0.5),
    st.floats(0.3, 1.0),
    st.floats(0.0, 0.4),
    st.integers(0, 255),
    st.integers(0, 2),
    st.integers(0, 2),
)
@settings(max_examples=150, deadline=None)
def test_memo_walks_match_the_numpy_walk(
    strings: list[bytes],
    n_states: int,
    seed: int,
    dead: float,
    loop: float,
    pend: float,
    xb: int,
    min_below: int,
    mode: int,
) -> None:
    alphabet = sorted({b for s in strings for b in s})
    rng = np.random.default_rng(seed)
    table = _looping_table(rng, n_states, alphabet, dead, loop)
    pending = rng.random(n_states) < pend
    sink = int(rng.integers(1, n_states))
    pending[sink] = False
    min_reach, share = _MODES[mode]
    vocab = _memo_trie(strings, min_below, min_reach)
    drop = rng.random(vocab.num_strings + 1) < 0.5
    byte = alphabet[xb % len(alphabet)]
    sub, sub_idx = vocab.with_byte(byte)
    if sub.num_strings:
        with mock.patch.object(trie_module, "_MEMO_MIN_BELOW", min_below):
            sub._flat_nodes()
            memo = sub._subtree_memo()
        assert memo is not None
        sub._memo = memo._replace(min_reach=min_reach)
    with _share(share):
        for start in range(1, n_states):
            _check(vocab, table, start, pending, sink, vocab, len(strings))
            _check(vocab, table, start, pending, sink, vocab, len(strings), drop=drop)
            if sub.num_strings:
                _check(sub, table, start, pending, sink, vocab, len(strings), sub_idx)


def test_a_uniform_subtree_is_skipped_with_its_strings() -> None:
    """A hand case: from a state looping on letters, "ab..." strings all end in it; a quote
    leads elsewhere; the words and candidates are the numpy walk's."""
    strings = [b"a", b"ab", b"abc", b"abcd", b"abd", b'ab"', b"b", b"bb", b"bbb", b"bbbb"]
    vocab = _memo_trie(strings, 0, 0)
    table = np.zeros((4, 256), dtype=np.int32)
    table[1, [ord("a"), ord("b"), ord("c"), ord("d")]] = 1
    table[1, ord('"')] = 2
    table[2, :] = 3
    pending = np.zeros(4, dtype=bool)
    with _share(1 << 40):
        _check(vocab, table, 1, pending, 2, vocab, len(strings))
        _check(vocab, table, 1, pending, 1, vocab, len(strings))  # all in the sink
        pending[1] = True  # a sentinel's loop: every string stops there
        _check(vocab, table, 1, pending, 2, vocab, len(strings))


@given(
    st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=60, unique=True),
    st.integers(3, 14),
    st.integers(0, 2**31),
    st.floats(0.0, 0.6),
    st.floats(0.3, 1.0),
    st.floats(0.0, 0.6),
    st.booleans(),
    st.integers(0, 3),
    st.integers(0, 2),
)
@settings(max_examples=120, deadline=None)
def test_resumed_memo_walks_match_the_pure_walk(
    strings: list[bytes],
    n: int,
    seed: int,
    dead: float,
    loop: float,
    unbuilt_share: float,
    with_exit: bool,
    small_room: int,
    mode: int,
) -> None:
    """test_walk_resumes_after_stops' rounds with the memo forced on: stops numbered in
    preorder, resumed by the preorder walk."""
    alphabet = sorted({b for s in strings for b in s})
    rng = np.random.default_rng(seed)
    lexer = _looping_table(rng, n, alphabet, dead, loop)
    split = rng.random((n, 256)) < 0.3
    split[0] = False
    built = rng.random(n) >= unbuilt_share
    built[0] = True
    start = int(rng.integers(1, n))
    built[start] = True
    xb = alphabet[seed % len(alphabet)] if with_exit else None
    # the preorder walk; the depth-first walk, stops renumbered; the pass, stops renumbered
    min_reach = 1 << 40 if mode == 1 else 0
    trie = _memo_trie(strings, int(seed % 3), min_reach)
    size = len(strings)
    drop = rng.random(size + 1) < 0.2
    want_words, want_cands = _resume_reference(trie, lexer, split, start, xb, drop, size)
    reach = 0 if mode == 2 else 1 << 40
    with (
        mock.patch.object(cfg_program, "_LAZY_IDS", None if small_room == 0 else small_room + 1),
        mock.patch.object(trie_module, "_NATIVE_WALK_MAX_REACH", reach),
        _share(1 << 40),
    ):
        t = cfg_program._LazyWalkTables(n, xb)
        t.write(np.asarray([start], dtype=np.int64), lexer[[start]], split[[start]])
        words = np.zeros(bitmask_words(size), dtype=np.int32)
        parts: list[int] = []
        resume: np.ndarray | None = None
        for _ in range(4 * n + 4):
            rows = _rows(lexer, split, built, t, xb)
            got = classify_walk_resume(
                trie, True, t.start(start), SINK, trie, words, None, drop, rows, resume
            )
            assert got is not None
            cands, stops, _, count = got
            t.wrote(count)
            parts.extend(cands.tolist())
            if not stops.size:
                break
            pairs = stops.reshape(-1, 2)
            assert t.pending[pairs[:, 1]].all()
            states = np.unique(t.states[pairs[:, 1] // 3])
            built[states] = True
            t.write(states, lexer[states], split[states])
            resume = None if pairs[0, 0] < 0 else stops
        else:
            pytest.fail("the walk never finished")
    assert len(parts) == len(set(parts))
    assert sorted(parts) == want_cands
    assert words.tolist() == want_words


def test_a_memo_that_disagrees_is_refused() -> None:
    strings = [b"ab", b"abc", b"abd", b"b"]
    trie = _memo_trie(strings, 0, 0)
    memo = trie._subtree_memo()
    assert memo is not None
    table = np.zeros((3, 256), dtype=np.int32)
    table[1, [ord("a"), ord("b"), ord("c"), ord("d")]] = 1
    pending = np.zeros(3, dtype=bool)
    words = np.zeros(1, dtype=np.int32)
    bad_size = memo.size.copy()
    bad_size[0] = 99  # a subtree past the nodes
    bad_depth = memo.depth.copy()
    bad_depth[-1] = 200  # deeper than the memo's deepest (b"b": walked, last)
    for bad in (
        memo._replace(size=bad_size),
        memo._replace(depth=bad_depth),
        memo._replace(sel=np.full(memo.sel.size, 99, dtype=np.int32)),  # past the sets
    ):
        trie._memo = bad
        with _share(1 << 40), pytest.raises(ValueError, match="out of order or range"):
            classify_walk(trie, table, 1, pending, 2, trie, words)
    trie._memo = memo._replace(str=memo.str[:-1])  # lengths disagree
    with _share(1 << 40), pytest.raises(ValueError, match="memo lengths disagree"):
        classify_walk(trie, table, 1, pending, 2, trie, words)
