"""The run-time uniqueItems programs' per-vocabulary tables (vectorized over the token bytes)
against a token-by-token reference: the lexical tables, the byte-class and the brace tables,
and the decoded-text look-up, on a vocabulary of tricky bytes (quotes, escapes, brackets,
partial UTF-8, duplicates, special tokens, ids past the tokenizer)."""

from __future__ import annotations

import contextlib
import json
import random

import numpy as np

from formcast.bitmask import bool_to_bitmask
from formcast.index.programs.unique.keys import _BraceTables
from formcast.index.programs.unique.lexer import (
    _BRACKET,
    _COMMA,
    _QUOTE,
    ESC,
    IN,
    OUT,
    _feed,
    _lex,
    _utf8_incomplete,
    _VocabTables,
)
from formcast.index.programs.unique.values import _FREE_ASCII, _structural_bracket, _VocabPlain
from formcast.vocab.vocabulary import Vocabulary

_POOL = [
    b'"', b"\\", b"[", b"]", b",", b"{", b"}", b"a", b"u", b"0", b"e", b"-", b" ", b"\n",
    b"\x00", b"\xc3", b"\xa9", b"\xe2\x82", b"\xac", b"\xf0\x9f", b"\x98\x80", b"\xff", b"\x7f",
]  # fmt: skip


def _vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    toks = [b"".join(rng.choice(_POOL) for _ in range(rng.randint(1, 5))) for _ in range(6000)]
    toks += [b"\\u0041", b"A", b'\\"', b"\\ud83d\\ude00", b"[,", b"a,b"]  # (escapes, plain twins)
    toks += toks[:50]  # repeated bytes
    return Vocabulary(
        toks, stop_token_ids=[0], special_token_ids=[3, 9], vocab_size=len(toks) + 7, name="t"
    )


def _reference_decoded(vocab: Vocabulary) -> dict[str, list[int]]:
    """text -> ids of the tokens that, read from a clean position in a string, stay in it and
    end clean (token by token, as the tables were first written)."""
    out: dict[str, list[int]] = {}
    for tid in range(min(vocab.vocab_size, len(vocab.tokens))):
        data = vocab.token_bytes(tid)
        if not data:
            continue
        if not any(b in data for b in b'"\\[,'):
            if data[-1] >= 0x80 and _utf8_incomplete(data):
                continue
            with contextlib.suppress(UnicodeDecodeError):
                out.setdefault(data.decode("utf-8"), []).append(tid)
            continue
        end, flags = _lex(IN, data)
        if end == IN and not flags & _QUOTE:
            _, pend, i = _feed("", b"", data)
            if i == -2 or pend:
                continue
            with contextlib.suppress(ValueError):
                out.setdefault(json.loads(b'"' + data + b'"'), []).append(tid)
    return out


def test_lexical_tables_match_the_token_by_token_reading() -> None:
    vocab = _vocab(1)
    lex = _VocabTables(vocab)
    size = vocab.vocab_size
    for m in (OUT, IN, ESC):
        want = [(0, 0)] * size
        for tid in range(len(vocab.tokens)):
            data = vocab.token_bytes(tid)
            if data:
                want[tid] = _lex(m, data)
        assert lex.end[m] == [e for e, _ in want]
        assert lex.end_np[m].tolist() == lex.end[m]
        assert lex.flags[m] == [f for _, f in want]
        for flag in (_QUOTE, _BRACKET, _COMMA):
            bits = np.array([f & flag != 0 for _, f in want])
            assert np.array_equal(lex.words[m][flag], bool_to_bitmask(bits, size))
    ws = [bool(d) and all(b in b" \t\n\r" for b in d) for d in map(vocab.token_bytes, range(size))]
    assert lex.ws_only == ws


def test_decoded_look_up_matches_the_reference() -> None:
    vocab = _vocab(2)
    decoded = _VocabTables(vocab).decoded
    want = _reference_decoded(vocab)
    assert want  # (the vocabulary has decodable tokens)
    for text, ids in want.items():
        assert decoded.get(text) == ids, text
    assert want["A"] == decoded.get("A")
    assert len(want["A"]) >= 2
    for text in ("", "zzz", "\ud800", '"', "\\", "a\x00b", *[t + "~" for t in list(want)[:300]]):
        assert decoded.get(text) == want.get(text), text


def test_byte_class_and_brace_tables_match_the_reference() -> None:
    vocab = _vocab(3)
    size = vocab.vocab_size
    plain, braces = _VocabPlain(vocab), _BraceTables(vocab)
    toks = [vocab.token_bytes(t) for t in range(size)]

    def packed(pred: object) -> np.ndarray:
        return bool_to_bitmask(np.array([bool(d) and pred(d) for d in toks]), size)  # type: ignore[operator]

    def flat_esc(d: bytes) -> bool:
        if d[0] not in (0x22, 0x5C):
            return not _structural_bracket(IN, d)
        return not _structural_bracket(ESC, d)

    assert np.array_equal(plain.plain, packed(lambda d: b'"' not in d and b"\\" not in d))
    assert np.array_equal(plain.ascii, packed(lambda d: set(d) <= set(_FREE_ASCII)))
    assert np.array_equal(plain.noquote, packed(lambda d: b'"' not in d))
    assert np.array_equal(plain.flat, packed(lambda d: not set(d) & set(b"[]{}")))
    assert np.array_equal(plain.flat_in, packed(lambda d: not _structural_bracket(IN, d)))
    assert np.array_equal(plain.flat_esc, packed(flat_esc))
    assert np.array_equal(plain.noquote_esc, packed(lambda d: b'"' not in d[1:]))
    assert np.array_equal(plain.number, packed(lambda d: set(d) <= set(b"0123456789-+.eE")))
    for start in (OUT, IN, ESC):
        opens, closes = [], []
        for d in toks:
            mode, o, c = start, False, False
            for b in d:
                if mode == OUT:
                    mode = IN if b == 0x22 else OUT
                    o, c = o or b == 0x7B, c or b == 0x7D
                elif mode == IN:
                    mode = OUT if b == 0x22 else ESC if b == 0x5C else IN
                else:
                    mode = IN
            opens.append(o)
            closes.append(c)
        assert np.array_equal(braces.opens[start], bool_to_bitmask(np.array(opens), size))
        assert np.array_equal(braces.closes[start], bool_to_bitmask(np.array(closes), size))
