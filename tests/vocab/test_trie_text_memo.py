"""The text memo of the compiled classification walks (``_trie_walk.c``'s ``text_memo`` and
``memo_walk``'s text regions; walk36, #31).

A walk arriving at a character boundary in a state that leads every text byte
(``trie._TEXT_BYTES``) below the node back to itself, and every well-formed UTF-8 character
whose lead byte lies below it back to itself through live states (a string body's state),
takes the strings below as ranges and walks only the *breaks* (a byte neither text nor
well-formed UTF-8 where it stands, or a string ending inside a character) from their
parents' states.  Checked here:

* the text memo's arrays (built in C) are those of a Python UTF-8 decoder run on each node's
  string from scratch;
* classifications with the memo forced on, on UTF-8 string-body tables (some with a row
  entry changed, so a region is refused or a break's character dies) over tries of text,
  characters, partial characters, quotes and stray bytes, match the numpy walk (words,
  candidates, stopped states), and so do resumable rounds on such lexers.

In the pure-Python package the kernel is absent and these tests skip.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trie_classify_walk import _check
from test_trie_subtree_memo import _memo_trie, _share
from test_walk_resumes_after_stops import SINK, _rows
from test_walk_resumes_after_stops import _reference as _resume_reference

import formcast.index.cfg_program as cfg_program
import formcast.vocab.trie as trie_module
from _native_kernel import kernel_or_skip
from formcast.bitmask import bitmask_words
from formcast.vocab.trie import TokenTrie, classify_walk_resume

KERNEL = kernel_or_skip(trie_module._KERNEL, "formcast.vocab._trie_walk")

TEXT = sorted(trie_module._TEXT_BYTES)
#: the body table's states: dead, a start (first byte), the body, after a lead byte needing
#: 1, 2, 3 more continuation bytes (E0, ED, F0, F4: their narrower second byte), the quote's
#: and backslash's targets; more states (random rows) follow
_START, _BODY, _C1, _C2, _C3, _E0, _ED, _F0, _F4, _QUOTE, _ESC = range(1, 12)
_FIXED = 12


def _decode(prefix: bytes) -> tuple[bool, int, bytes]:
    """The text memo's decoder run on a node's whole string: (its last byte breaks, the
    continuation bytes still needed after it, the partial character before the last byte)."""
    need, lo, hi, part = 0, 0x80, 0xBF, b""
    ok, before = True, b""
    for b in prefix:
        before = part if need else b""
        if need and lo <= b <= hi:
            ok, need, lo, hi = True, need - 1, 0x80, 0xBF
            part = part + bytes([b]) if need else b""
            continue
        k, lo, hi = _lead(b)
        ok = need == 0 and (k > 0 or b in trie_module._TEXT_BYTES)
        need, part = k, bytes([b]) if k else b""
    return not ok, need, before


def _lead(b: int) -> tuple[int, int, int]:
    if 0xC2 <= b <= 0xDF:
        return 1, 0x80, 0xBF
    if 0xE0 <= b <= 0xEF:
        return 2, 0xA0 if b == 0xE0 else 0x80, 0x9F if b == 0xED else 0xBF
    if 0xF0 <= b <= 0xF4:
        return 3, 0x90 if b == 0xF0 else 0x80, 0x8F if b == 0xF4 else 0xBF
    return 0, 0x80, 0xBF


def _random_strings(rng: np.random.Generator, count: int) -> list[bytes]:
    """Strings of text bytes, well-formed characters, partial characters, quotes,
    backslashes, control and stray bytes (a few sharing prefixes)."""
    pieces: list[bytes] = []
    for cp in (0xE9, 0x3B1, 0x800, 0x4E2D, 0xD7FF, 0xE000, 0xFFFD, 0x10000, 0x1F600, 0x10FFFF):
        pieces.append(chr(cp).encode())
    out: set[bytes] = set()
    while len(out) < count:
        s = b""
        for _ in range(int(rng.integers(1, 6))):
            r = rng.random()
            if r < 0.45:
                s += bytes([TEXT[int(rng.integers(len(TEXT)))]])
            elif r < 0.7:
                s += pieces[int(rng.integers(len(pieces)))]
            elif r < 0.85:
                p = pieces[int(rng.integers(len(pieces)))]
                s += p[: int(rng.integers(1, len(p) + 1))]
            elif r < 0.93:
                s += bytes([int(rng.choice([0x22, 0x5C, 0x0A, 0x80, 0xBF, 0xC0, 0xF5, 0x7F]))])
            else:  # ill-formed: a surrogate, overlong forms, past U+10FFFF
                s += [b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf0\x80", b"\xf4\x90", b"\xe4\x41"][
                    int(rng.integers(5))
                ]
        out.add(s)
    return sorted(out)


def _body_table(rng: np.random.Generator, n_states: int, changes: int) -> np.ndarray:
    """A string body's table (UTF-8 well-formed ranges), the other states random, then
    ``changes`` random entries of the body's states changed."""
    n = max(n_states, _FIXED)
    table = np.zeros((n, 256), dtype=np.int32)
    table[_QUOTE:] = rng.integers(0, n, size=(n - _QUOTE, 256))
    for s in (_START, _BODY):
        table[s, TEXT] = _BODY
        table[s, 0x22] = _QUOTE
        table[s, 0x5C] = _ESC
        table[s, 0xC2:0xE0] = _C1
        table[s, 0xE0:0xF0] = _C2
        table[s, 0xE0] = _E0
        table[s, 0xED] = _ED
        table[s, 0xF0:0xF5] = _C3
        table[s, 0xF0] = _F0
        table[s, 0xF4] = _F4
    # the start's row differs from the body's on non-text bytes (a first row: JSON's quote),
    # sometimes on a lead byte (then the whole trie is no region from the start)
    table[_START, 0x22] = _ESC
    table[_START, int(rng.choice([0x0A, 0x7F, 0x80, 0xF5]))] = int(rng.integers(0, n))
    if rng.random() < 0.2:
        table[_START, int(rng.integers(0xC2, 0xF5))] = int(rng.integers(0, n))
    table[_C1, 0x80:0xC0] = _BODY
    table[_C2, 0x80:0xC0] = _C1
    table[_C3, 0x80:0xC0] = _C2
    table[_E0, 0xA0:0xC0] = _C1
    table[_ED, 0x80:0xA0] = _C1
    table[_F0, 0x90:0xC0] = _C2
    table[_F4, 0x80:0x90] = _C2
    for _ in range(changes):  # (mostly a continuation byte of a character's state)
        s = int(rng.integers(_START, _QUOTE))
        r = rng.random()
        b = (
            int(rng.choice([0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF]))
            if r < 0.4
            else int(rng.integers(0x80, 0xC0) if r < 0.7 else rng.integers(256))
        )
        table[s, b] = int(rng.integers(0, n))
    return table


@given(st.integers(0, 2**31), st.integers(1, 80), st.integers(0, 5))
@settings(max_examples=60, deadline=None)
def test_text_memo_matches_the_decoder(seed: int, count: int, min_below: int) -> None:
    rng = np.random.default_rng(seed)
    strings = _random_strings(rng, count)
    trie = _memo_trie(strings, min_below, 0)
    memo = trie._subtree_memo()
    assert memo is not None
    assert memo.text_flag is not None
    assert memo.text_next is not None
    assert memo.text_breaks is not None
    assert memo.text_pre is not None
    assert memo.text_bytes is not None
    bits = np.unpackbits(memo.text_bytes.view(np.uint8), bitorder="little")
    assert np.flatnonzero(bits).tolist() == TEXT
    n = memo.byte.size
    path: list[int] = []
    breaks: list[int] = []
    pres: list[int] = []
    for i in range(n):
        d = int(memo.depth[i])
        del path[d - 1 :]
        path.append(int(memo.byte[i]))
        bad, need, before = _decode(bytes(path))
        assert memo.text_flag[i] == (need == 0), (i, bytes(path))
        assert memo.text_next[i] == len(breaks)
        if bad or (memo.own[i] and need):
            breaks.append(i)
            soft = 0 if bad else 1 << 31  # (only the string ends inside a character)
            pres.append(soft | len(before) << 24 | int.from_bytes(before, "little"))
    assert memo.text_next[n] == len(breaks)
    assert memo.text_breaks.tolist() == breaks
    assert memo.text_pre.tolist() == pres


@given(
    st.integers(0, 2**31),
    st.integers(1, 90),
    st.integers(_FIXED, 16),
    st.integers(0, 6),
    st.floats(0.0, 0.3),
    st.integers(0, 4),
)
@settings(max_examples=120, deadline=None)
def test_text_walks_match_the_numpy_walk(
    seed: int, count: int, n_states: int, changes: int, pend: float, min_below: int
) -> None:
    rng = np.random.default_rng(seed)
    strings = _random_strings(rng, count)
    table = _body_table(rng, n_states, changes)
    n = table.shape[0]
    pending = rng.random(n) < pend
    pending[[_START, _BODY]] = rng.random(2) < pend / 4  # (mostly walked on)
    sink = int(rng.choice([_QUOTE, _ESC, int(rng.integers(1, n))]))
    pending[sink] = False
    vocab = _memo_trie(strings, min_below, 0)
    drop = rng.random(vocab.num_strings + 1) < 0.3
    with _share(1 << 40):  # (the preorder walk at every reach; _check also forces the pass)
        for start in (_START, _BODY, _C1, _E0, _F0):
            _check(vocab, table, start, pending, sink, vocab, len(strings))
            _check(vocab, table, start, pending, sink, vocab, len(strings), drop=drop)


def test_a_text_region_takes_characters_and_walks_its_breaks() -> None:
    """A hand case: under "a", text and whole characters end in the body; a quote, a stray
    continuation byte and a string ending inside a character are breaks walked on their own
    (the partial character's states), the quote's subtree leaving the body."""
    strings = [
        b"a",
        b"ab",
        "aé".encode(),
        "aéb".encode(),
        "a中".encode(),
        "a中"[:2].encode()[:3],  # a + the character's lead byte
        "a中".encode()[:3],  # inside the character: a break (its partial character E4 B8)
        b'a"',
        b'a"x',
        b"a\x80",
        b"ab\\",
        "a😀c".encode(),
    ]
    vocab = _memo_trie(sorted(set(strings)), 0, 0)
    table = _body_table(np.random.default_rng(0), _FIXED, 0)
    table[_QUOTE] = 0
    table[_QUOTE, ord("x")] = _ESC
    table[_ESC] = 0
    pending = np.zeros(_FIXED, dtype=bool)
    with _share(1 << 40):
        for sink in (_QUOTE, _ESC, _C2, _BODY):
            _check(vocab, table, _START, pending, sink, vocab, len(strings))
        pending[_C2] = True  # the stopped states of the characters' middles
        _check(vocab, table, _START, pending, _QUOTE, vocab, len(strings))


def test_each_edge_of_the_well_formed_ranges_is_checked() -> None:
    """Characters at the edges of UTF-8's ranges below a text node; each edge entry of the
    body's character states changed in turn (a region must then be refused, or the
    character walked): the numpy walk's words and candidates."""
    chars = [0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x3FFFF]
    chars += [0x40000, 0xFFFFF, 0x100000, 0x10FFFF]
    strings = []
    for i, c in enumerate(chars):  # (each character under a letter of its own)
        p = chr(ord("c") + i)
        strings += [p, p + "b", p + chr(c), p + chr(c) + "b", "a" + chr(c)]
    strings = sorted({x.encode() for x in strings})
    vocab = _memo_trie(strings, 0, 0)
    base = _body_table(np.random.default_rng(0), _FIXED, 0)
    pending = np.zeros(_FIXED, dtype=bool)
    edges = [(s, b) for s in (_C1, _C2, _C3, _E0, _ED, _F0, _F4) for b in (0x80, 0x8F, 0x90)]
    edges += [(s, b) for s in (_C1, _C2, _C3, _E0, _ED, _F0, _F4) for b in (0x9F, 0xA0, 0xBF)]
    edges += [(_BODY, b) for b in (0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4)]
    with _share(1 << 40):
        _check(vocab, base, _START, pending, _ESC, vocab, len(strings))
        for state, byte in edges:
            table = base.copy()
            table[state, byte] = _ESC if table[state, byte] else _BODY
            _check(vocab, table, _START, pending, _ESC, vocab, len(strings))


@given(
    st.integers(0, 2**31),
    st.integers(1, 60),
    st.integers(0, 3),
    st.floats(0.0, 0.6),
    st.floats(0.0, 0.1),
    st.booleans(),
    st.integers(0, 3),
)
@settings(max_examples=80, deadline=None)
def test_resumed_text_walks_match_the_pure_walk(
    seed: int,
    count: int,
    changes: int,
    unbuilt_share: float,
    split_share: float,
    with_exit: bool,
    small_room: int,
) -> None:
    """test_walk_resumes_after_stops' rounds on a string body's lexer, the memo's preorder
    walk forced: rows written in the walk, stops inside and outside text regions."""
    rng = np.random.default_rng(seed)
    strings = _random_strings(rng, count)
    lexer = _body_table(rng, _FIXED + 2, changes)
    n = lexer.shape[0]
    split = rng.random((n, 256)) < split_share
    split[0] = False
    built = rng.random(n) >= unbuilt_share
    built[0] = True
    start = _START
    built[start] = True
    xb = 0x22 if with_exit else None
    trie = _memo_trie(strings, int(seed % 3), 0)
    size = len(strings)
    drop = rng.random(size + 1) < 0.2
    want_words, want_cands = _resume_reference(trie, lexer, split, start, xb, drop, size)
    with (
        mock.patch.object(cfg_program, "_LAZY_IDS", None if small_room == 0 else small_room + 4),
        mock.patch.object(trie_module, "_NATIVE_WALK_MAX_REACH", 1 << 40),
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
            cands, stops, _, cnt = got
            t.wrote(cnt)
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


def test_a_text_memo_that_disagrees_is_refused() -> None:
    trie = _memo_trie([b"ab", "aé".encode(), b'a"'], 0, 0)
    memo = trie._subtree_memo()
    assert memo is not None
    assert memo.text_next is not None
    table = _body_table(np.random.default_rng(1), _FIXED, 0)
    pending = np.zeros(_FIXED, dtype=bool)
    trie._memo = memo._replace(text_next=memo.text_next[:-1])
    with _share(1 << 40), pytest.raises(ValueError, match="memo lengths disagree"):
        _check(trie, table, _START, pending, _QUOTE, trie, 3)
    bad_next = memo.text_next.copy()
    bad_next[:] = 99  # past the breaks
    trie._memo = memo._replace(text_next=bad_next)
    words = np.zeros(1, dtype=np.int32)
    with (
        _share(1 << 40),
        mock.patch.object(trie_module, "_NATIVE_WALK_MAX_REACH", 1 << 40),
        pytest.raises(ValueError, match="a node out of order or range"),
    ):
        trie_module.classify_walk(trie, table, _START, pending, _QUOTE, trie, words)


def test_llama3_text_memo_is_consistent() -> None:
    """On Llama-3's trie: breaks ascending, each node's next break index the count before
    it, pre lengths at most three; boundaries where no continuation byte is pending."""
    pytest.importorskip("tokenizers")
    from formcast.vocab.loaders import load_vocabulary

    try:
        trie: TokenTrie = load_vocabulary("llama3").trie
    except Exception as e:  # pragma: no cover - offline data missing
        pytest.skip(f"no llama3 vocabulary: {e}")
    memo = trie._subtree_memo()
    assert memo is not None
    assert memo.text_breaks is not None
    assert memo.text_next is not None
    assert memo.text_pre is not None
    assert memo.text_flag is not None
    brk = memo.text_breaks.astype(np.int64)
    assert (np.diff(brk) > 0).all()
    assert np.array_equal(memo.text_next[brk], np.arange(brk.size))
    assert int(memo.text_next[-1]) == brk.size
    assert (((memo.text_pre >> 24) & 0x7F) <= 3).all()
    # an ASCII text byte at depth 1 is a boundary and no break
    d1 = np.flatnonzero((memo.depth == 1) & np.isin(memo.byte, TEXT))
    assert memo.text_flag[d1].all()
    assert not np.isin(d1, brk).any()
