"""The JSON lexer of the run-time ``uniqueItems`` programs: lexical modes, per-vocabulary tables.

JSON's lexical structure (outside a string, inside one, just after a backslash) is a function of
the bytes, so the programs read it off a token without the grammar: :func:`_lex` reads a token
from a mode, :class:`_VocabTables` holds that reading for every token of a vocabulary (built once
per vocabulary context -- :data:`LEXICAL_TABLES`, :mod:`formcast.index.context` -- O(V), about
0.3 s for 50k tokens; read-only, shared by threads), and
:func:`_feed` decodes a string body (escapes, UTF-8) into code points.  :func:`_consistent` says
which code points a partial character can still become.

Used by :mod:`.strings` (string items) and :mod:`.values` (items of any type).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ....bitmask import bitmask_to_ids, bool_to_bitmask
from ....vocab.vocabulary import Vocabulary
from ...context import ContextSlot

if TYPE_CHECKING:
    from ....automata.pda import Frame

# lexical modes of JSON text: outside strings, inside one, just after a backslash in one
OUT, IN, ESC = 0, 1, 2
_QUOTE, _BRACKET, _COMMA = 1, 2, 4
_WS = frozenset(b" \t\n\r")
_SPECIAL = frozenset(b'"\\[,')
_SHORT_ESCAPES = {
    ord('"'): '"',
    ord("\\"): "\\",
    ord("/"): "/",
    ord("b"): "\b",
    ord("f"): "\f",
    ord("n"): "\n",
    ord("r"): "\r",
    ord("t"): "\t",
}


def _lex(mode: int, data: bytes) -> tuple[int, int]:
    """``(end mode, flags)`` of ``data`` read from lexical ``mode``: flags tell whether a
    structural quote, ``[`` (outside strings) or ``,`` (outside strings) occurred."""
    flags = 0
    for b in data:
        if mode == OUT:
            if b == 0x22:
                mode, flags = IN, flags | _QUOTE
            elif b == 0x5B:
                flags |= _BRACKET
            elif b == 0x2C:
                flags |= _COMMA
        elif mode == IN:
            if b == 0x22:
                mode, flags = OUT, flags | _QUOTE
            elif b == 0x5C:
                mode = ESC
        else:
            mode = IN
    return mode, flags


def _utf8_incomplete(data: bytes) -> bool:
    """True when ``data`` ends inside a UTF-8 sequence."""
    n = len(data)
    for k in range(1, min(4, n) + 1):
        b = data[n - k]
        if b < 0x80:
            return False
        if b >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return k < need
    return False


class _TokenBytes:
    """A vocabulary's token bytes laid end to end (special tokens and ids past the tokenizer
    empty): ``buf`` (uint8), each token's ``starts``/``ends`` offsets and ``lens`` (int64, one
    per id of ``tokens``, the first ``min(vocab_size, len(tokens))`` ids).  O(total bytes),
    vectorized; the per-vocabulary tables read their byte classes off it."""

    def __init__(self, vocab: Vocabulary) -> None:
        n = min(vocab.vocab_size, len(vocab.tokens))
        toks = list(vocab.tokens[:n])
        for sid in vocab.special_token_ids:
            if 0 <= sid < n:
                toks[sid] = b""
        self.tokens = toks
        self.lens = np.fromiter(map(len, toks), dtype=np.int64, count=n)
        self.ends = np.cumsum(self.lens)
        self.starts = self.ends - self.lens
        self.buf = np.frombuffer(b"".join(toks), dtype=np.uint8)

    def nbytes(self) -> int:
        """About how many bytes it holds (the token list's slots and the arrays)."""
        return 8 * len(self.tokens) + 3 * self.lens.nbytes + self.buf.nbytes + 400

    def count(self, byteset: bytes) -> np.ndarray:
        """Per token, how many of its bytes are in ``byteset`` (int64)."""
        lut = np.zeros(256, dtype=bool)
        lut[list(byteset)] = True
        acc = np.zeros(self.buf.size + 1, dtype=np.int32)
        np.cumsum(lut[self.buf], out=acc[1:])
        out: np.ndarray = (acc[self.ends] - acc[self.starts]).astype(np.int64)
        return out

    def utf8_incomplete(self, among: np.ndarray) -> np.ndarray:
        """Per token (bool), whether it ends inside a UTF-8 sequence (:func:`_utf8_incomplete`,
        vectorized), for the tokens where ``among`` is set (False elsewhere)."""
        out = np.zeros(self.lens.size, dtype=bool)
        open_ = among & (self.lens > 0)
        for k in range(1, 5):
            live = np.flatnonzero(open_ & (self.lens >= k))
            if not live.size:
                break
            b = self.buf[self.ends[live] - k]
            ascii_ = b < 0x80
            lead = b >= 0xC0
            need = np.where(b < 0xE0, 2, np.where(b < 0xF0, 3, 4))
            out[live[lead]] = k < need[lead]
            open_[live[ascii_ | lead]] = False
        return out


class _Decoded:
    """``text -> ids`` (ascending) of the tokens that, read from a clean position inside a
    string, stay inside it and end clean, by their decoded text (:attr:`_VocabTables.decoded`).

    The tokens with an escape or a ``[``/``,`` are few and decoded at once (``escaped``); the
    plain ones (none of ``"\\[,``: their text is their UTF-8 decoding) are found by their
    bytes, in a bytes -> ids map built on first use (C-speed dict of the vocabulary).
    Read-only once built; thread-safe."""

    def __init__(self, tokens: list[bytes], escaped: dict[str, list[int]]) -> None:
        self._tokens = tokens
        self.escaped = escaped
        self._by_bytes: dict[bytes, int] | None = None
        self._dups: dict[bytes, list[int]] = {}
        self._lock = threading.Lock()

    def _index(self) -> dict[bytes, int]:
        got = self._by_bytes
        if got is None:
            with self._lock:
                got = self._by_bytes
                if got is None:
                    toks = self._tokens
                    first = dict(zip(reversed(toks), range(len(toks) - 1, -1, -1)))
                    distinct = len(first) - (b"" in first)
                    if distinct != len(toks) - toks.count(b""):  # some bytes repeat
                        dups: dict[bytes, list[int]] = {}
                        for tid, data in enumerate(toks):
                            if data and first[data] != tid:
                                dups.setdefault(data, [first[data]]).append(tid)
                        self._dups = dups
                    first.pop(b"", None)
                    self._by_bytes = got = first
        return got

    def get(self, text: str) -> list[int] | None:
        esc = self.escaped.get(text)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            return esc
        if not data or not _SPECIAL.isdisjoint(data):
            return esc
        tid = self._index().get(data)
        if tid is None:
            return esc
        plain = self._dups.get(data) or [tid]
        return sorted(plain + esc) if esc else plain

    def nbytes(self) -> int:
        """About how many bytes it holds (the bytes map counted once built)."""
        n = 64 + 120 * len(self.escaped)
        if self._by_bytes is not None:
            n += 100 * len(self._by_bytes)
        return n


class _VocabTables:
    """Lexical facts about every token of a vocabulary, per starting mode (read-only).

    ``end[m][t]``: the mode after token ``t`` read from mode ``m`` (``end_np``: the same as
    int8 arrays); ``flags[m][t]``; ``words[m][flag]``: bitmask of the tokens whose reading
    from ``m`` has that flag; ``partial_in``: tokens that, read from a clean position inside
    a string, end inside a character or an escape; ``ws_only``; ``decoded``: decoded text of
    the tokens that, read from a clean position inside a string, stay inside it and end clean
    (text -> ids, :class:`_Decoded`).  Built once per vocabulary: vectorized over the token
    bytes, byte by byte in Python only for the tokens with a ``"``, ``\\``, ``[`` or ``,``
    (a few thousand of 128k); the plain tokens' texts are looked up by their bytes on demand.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        size = vocab.vocab_size
        tb = token_bytes(vocab)
        n = tb.lens.size
        self.close_in: dict[int, tuple[str, int]] = {}
        self.reopen_in: dict[int, str] = {}
        self.open_out: dict[int, tuple[bool, str]] = {}
        # the plain tokens (none of "\[,): OUT stays OUT, IN and ESC go to IN, no flag
        special = tb.count(bytes(_SPECIAL)) > 0
        nonempty = tb.lens > 0
        plain = nonempty & ~special
        ends = [np.zeros(size, dtype=np.int8) for _ in range(3)]
        ends[IN][:n][plain] = IN
        ends[ESC][:n][plain] = IN
        flags = [np.zeros(size, dtype=np.uint8) for _ in range(3)]
        ws_only = np.zeros(size, dtype=bool)
        ws_only[:n] = plain & (tb.count(bytes(_WS)) == tb.lens)
        partial = np.zeros(size, dtype=bool)
        partial[:n] = tb.utf8_incomplete(plain)
        escaped: dict[str, list[int]] = {}
        for tid in np.flatnonzero(special).tolist():
            data = tb.tokens[tid]
            for m in (OUT, IN, ESC):
                ends[m][tid], flags[m][tid] = _lex(m, data)
            self._summarize(tid, data, flags)
            if ends[IN][tid] == IN and not flags[IN][tid] & _QUOTE:
                # escapes inside: decoded when the token ends clean
                _, pend, i = _feed("", b"", data)
                if i == -2:
                    continue
                if pend:
                    partial[tid] = True
                else:
                    try:
                        text = json.loads(b'"' + data + b'"')
                    except ValueError:
                        continue
                    escaped.setdefault(text, []).append(tid)
            elif ends[IN][tid] == ESC:
                partial[tid] = True
        for e in ends:
            e.setflags(write=False)
        self.end_np = ends
        self.end = [e.tolist() for e in ends]
        self.flags = [f.tolist() for f in flags]
        self.words = [
            {flag: _packed(f & flag != 0, size) for flag in (_QUOTE, _BRACKET, _COMMA)}
            for f in flags
        ]
        self.partial_in = _packed(partial, size)
        self.ws_only = ws_only.tolist()
        self.decoded = _Decoded(tb.tokens, escaped)
        self.max_len = vocab.trie.max_len

    def nbytes(self) -> int:
        """About how many bytes the tables hold (arithmetic, not a walk of the lists: the
        context's byte bound weighs them with this)."""
        size = len(self.ws_only)
        lists = 7 * (56 + 8 * size)  # end, flags, ws_only: slots of small cached ints
        arrays = 3 * size + sum(w.nbytes for d in self.words for w in d.values())
        dicts = 200 * (len(self.close_in) + len(self.reopen_in) + len(self.open_out))
        return lists + arrays + self.partial_in.nbytes + dicts + self.decoded.nbytes()

    def _summarize(self, tid: int, data: bytes, flags: list[np.ndarray]) -> None:
        """The quote tokens a mask can decide without simulating them (see
        :meth:`UniqueItemsProgram._quick`): ``close_in[t] = (text before the closing quote,
        flags of the rest)`` read from a clean position inside a string; ``open_out[t] =
        (a comma before the opening quote, the text after it)`` read between items, for a
        token of whitespace and commas, one quote, then text that ends clean."""
        if flags[IN][tid] & _QUOTE:
            text, _, i = _feed("", b"", data)
            if i >= 0:
                rest = data[i + 1 :]
                after = _lex(OUT, rest)[1]
                again = _opening(rest) if after & _QUOTE else None
                if again is not None:
                    self.reopen_in[tid] = again[1]
                    after &= ~_QUOTE
                self.close_in[tid] = (text, after)
        if flags[OUT][tid] & _QUOTE:
            got = _opening(data)
            if got is not None:
                self.open_out[tid] = got


def _opening(data: bytes) -> tuple[bool, str] | None:
    """``data`` read between items as whitespace and commas, one quote, then string text
    that ends clean: ``(a comma before the quote, the text)``; None for anything else."""
    j = data.find(0x22)
    before = data[:j]
    if j < 0 or not all(b in _WS or b == 0x2C for b in before):
        return None
    text, pend, i = _feed("", b"", data[j + 1 :])
    if i != -1 or pend:
        return None
    return 0x2C in before, text


def _packed(allowed: np.ndarray, size: int) -> np.ndarray:
    words = bool_to_bitmask(allowed, size)
    words.setflags(write=False)
    return words


#: the token bytes of a vocabulary laid end to end (one entry per vocabulary context)
TOKEN_BYTES: ContextSlot[None, _TokenBytes] = ContextSlot(
    "json_token_bytes", lambda vocab, _: _TokenBytes(vocab), weight=_TokenBytes.nbytes
)


def token_bytes(vocab: Vocabulary) -> _TokenBytes:
    """``vocab``'s :class:`_TokenBytes` (built once per vocabulary context)."""
    return TOKEN_BYTES.of(vocab, None)


#: the lexical tables of a vocabulary (one entry per vocabulary context)
LEXICAL_TABLES: ContextSlot[None, _VocabTables] = ContextSlot(
    "json_lexical_tables", lambda vocab, _: _VocabTables(vocab), weight=_VocabTables.nbytes
)


def _tables(vocab: Vocabulary) -> _VocabTables:
    return LEXICAL_TABLES.of(vocab, None)


# -- decoding the current item ----------------------------------------------------------------
def _feed(text: str, pend: bytes, data: bytes) -> tuple[str, bytes, int]:
    """Decode string-body ``data`` after ``text`` (and the raw bytes ``pend`` of a partial
    character): ``(text, pend, i)`` with ``i`` the index of a closing quote in ``data``
    (``-1``: none; the bytes after it are not read; ``-2``: ``data`` is not a string body
    there, which the grammar never allows)."""
    for i, b in enumerate(data):
        if not pend:
            if b == 0x22:
                return text, b"", i
            if b == 0x5C:
                pend = b"\\"
            elif b < 0x80:
                text += chr(b)
            else:
                pend = bytes((b,))
            continue
        pend += bytes((b,))
        if pend[0] == 0x5C:
            if len(pend) == 2:
                if b != 0x75:  # a short escape
                    text += _SHORT_ESCAPES.get(b, chr(b))
                    pend = b""
                continue
            if chr(b) not in "0123456789abcdefABCDEF" and len(pend) not in (7, 8):
                return text, pend, -2
            if len(pend) == 6:
                cp = int(pend[2:6], 16)
                if not 0xD800 <= cp <= 0xDBFF:  # else: wait for the low surrogate
                    text += chr(cp)
                    pend = b""
            elif len(pend) == 12:
                if pend[6:8] != b"\\u":
                    return text, pend, -2
                hi, lo = int(pend[2:6], 16), int(pend[8:12], 16)
                text += chr(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                pend = b""
            continue
        lead = pend[0]
        need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        if lead < 0xC0 or not 0x80 <= b < 0xC0:
            return text, pend, -2
        if len(pend) == need:
            try:
                text += pend.decode("utf-8")
            except UnicodeDecodeError:
                return text, pend, -2
            pend = b""
    if pend and pend[0] >= 0x80 and not 0xC0 <= pend[0] < 0xF8:
        return text, pend, -2
    return text, pend, -1


_SCALAR_RANGES = ((0, 0xD7FF), (0xE000, 0x10FFFF))


def _clip(ranges: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    out = []
    for a, b in ranges:
        a, b = max(a, lo), min(b, hi)
        if a <= b:
            out.append((a, b))
    return out


def _scalars(lo: int, hi: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in _SCALAR_RANGES:
        out += _clip([(a, b)], lo, hi)
    return out


def _consistent(pend: bytes, canonical: bool) -> list[tuple[int, int]]:
    """The code points a partial character's raw bytes ``pend`` can still become, as disjoint
    ranges: under the canonical escaping (one spelling per character) or any JSON escape."""
    if pend[0] != 0x5C:  # UTF-8: the code points whose encoding starts with these bytes
        lead = pend[0]
        need, bits, first = (
            (2, lead & 0x1F, 0x80)
            if lead < 0xE0
            else (3, lead & 0x0F, 0x800)
            if lead < 0xF0
            else (4, lead & 0x07, 0x10000)
        )
        for b in pend[1:]:
            bits = (bits << 6) | (b & 0x3F)
        rest = 6 * (need - len(pend))
        lo, hi = bits << rest, (bits << rest) | ((1 << rest) - 1)
        top = (0x7FF, 0xFFFF, 0x10FFFF)[need - 2]
        return _scalars(max(lo, first), min(hi, top))
    hexes = pend[2:].decode("ascii", "replace").lower()
    if canonical:
        # \" \\ \b \f \n \r \t, and \u00XX (lower-case) for the other controls
        controls = [c for c in range(0x20) if c not in (8, 9, 10, 12, 13)]
        if len(pend) == 1:
            return [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
        pool = [c for c in controls if f"{c:04x}".startswith(hexes)]
        return [(c, c) for c in pool]
    if len(pend) == 1:
        return list(_SCALAR_RANGES)
    if len(hexes) <= 4:  # \u + up to 4 hex digits (no low surrogate yet)
        k = len(hexes)
        base = int(hexes, 16) << (4 * (4 - k)) if k else 0
        lo, hi = base, base | ((1 << (4 * (4 - k))) - 1)
        out = _clip([(0, 0xD7FF), (0xE000, 0xFFFF)], lo, hi)
        hs = _clip([(0xD800, 0xDBFF)], lo, hi)  # a high surrogate: an astral character
        for a, b in hs:
            out.append((0x10000 + ((a - 0xD800) << 10), 0x10000 + ((b - 0xD800) << 10) + 0x3FF))
        return out
    # a high surrogate, then (part of) its low surrogate: \uD83D\uDE0
    high = int(hexes[:4], 16)
    low_hex = pend[8:].decode("ascii", "replace").lower()
    k = len(low_hex)
    base = int(low_hex, 16) << (4 * (4 - k)) if k else 0
    lows = _clip([(0xDC00, 0xDFFF)], base, base | ((1 << (4 * (4 - k))) - 1))
    astral = 0x10000 + ((high - 0xD800) << 10)
    return [(astral + a - 0xDC00, astral + b - 0xDC00) for a, b in lows]


def _in_ranges(cp: int, ranges: list[tuple[int, int]]) -> bool:
    return any(a <= cp <= b for a, b in ranges)


def refuse_simulated(
    words: np.ndarray,
    slow_words: np.ndarray,
    state: Any,
    run: Callable[[Any, bytes], object],
    vocab: Vocabulary,
) -> tuple[np.ndarray, int]:
    """``words`` less the tokens of ``slow_words`` that ``run(state, token bytes)`` refuses.

    The run-time programs' shared last step of ``token_mask``: each token in ``slow_words`` (a
    packed bitmask, a subset of ``words``) is simulated byte by byte; one whose run does not end
    in a state (a tuple) is cleared.  Stop tokens are never simulated away.  Returns the mask
    (``words`` itself when nothing is refused, else a read-only copy) and how many tokens were
    simulated.  Cost: one ``run`` per token in ``slow_words``; mutates nothing.
    """
    slow = bitmask_to_ids(slow_words).tolist()
    if not slow:
        return words, 0
    data = vocab.token_bytes
    stops = set(vocab.stop_token_ids)
    refused = [t for t in slow if t not in stops and not isinstance(run(state, data(t)), tuple)]
    if not refused:
        return words, len(slow)
    out: np.ndarray = words.copy()
    bits = out.view(np.uint32)
    for t in refused:
        bits[t >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (t & 31)))
    out.setflags(write=False)
    return out, len(slow)


_NOT_LINKED = object()


def nearest_marked(
    near: weakref.WeakKeyDictionary[Frame, Any],
    starts: dict[int, int],
    lock: threading.Lock,
    frame: Frame,
) -> Any:
    """``(rule, parent)`` of the nearest marked frame at or below ``frame`` that has left its
    start state (read its ``[`` or ``{``), None when there is none: the run-time programs' link
    from a parser stack to the marked container it is inside.  ``starts``: marked rule -> its
    start state.  Memoized in ``near`` (per frame, weakly: frames are shared by the stacks of
    one request), written under ``lock``; cost: the frames walked down to a memoized one."""
    got = near.get(frame, _NOT_LINKED)
    if got is not _NOT_LINKED:
        return got
    chain: list[Frame] = []
    cur: Frame | None = frame
    found: Any = None
    while cur is not None:
        hit = near.get(cur, _NOT_LINKED)
        if hit is not _NOT_LINKED:
            found = hit
            break
        chain.append(cur)
        start = starts.get(cur.rule)
        if start is not None and cur.state != start:
            found = (cur.rule, cur.parent)
            break
        cur = cur.parent
    with lock:
        for f in chain:
            near[f] = found
    return found
