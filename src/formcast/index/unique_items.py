"""Run-time ``uniqueItems``: the program a matcher runs when a grammar carries marks.

A grammar cannot remember an unbounded set of values, but a matcher can.  The JSON Schema
front-end emits an array whose items must be distinct as an ordinary array rule, *marked*
(:class:`~formcast.ir.marks.UniqueItemsMark`; the rule is never inlined), and this program
wraps the grammar's :class:`~formcast.index.cfg_program.CfgProgram` to check the items:

* **Which stacks.**  The parser's state is a set of stacks; a stack whose nearest marked frame
  has consumed its ``[`` is *inside* that unique array.  The check applies to those stacks
  only: under ``anyOf``/``oneOf`` a branch without ``uniqueItems`` keeps its stacks, so a
  token is allowed when *some* branch allows it (exact union semantics, nothing to refuse).
  All the stacks inside unique arrays are inside the same JSON array (JSON's lexical
  structure is a function of the bytes, and marked items are strings, so nothing nests in
  them).
* **Equal items.**  Items are JSON strings; their decoded values (``"\\u0041"`` equals
  ``"A"``) are collected per array.  A closing quote that completes a value already used
  removes the stacks inside the array (the others go on).
* **No dead ends.**  After every token, each marked group of stacks must still have a
  completion: in an item, the strings that extend its decoded prefix (counted exactly on the
  item's automaton, :func:`~formcast.ir.marks.state_counts`, or by its length bounds) must
  outnumber the used values that extend it; after a ``,`` some unused value must remain.
  Both are exact, so the allowed set never leads where no valid document exists.
* **Fast path.**  Only *suspect* tokens are simulated byte by byte: those with a structural
  quote (they can complete an item), a ``[`` (they can open a unique array), a ``,`` when no
  value is left, and -- where the item's remaining language is small enough to run out
  within one token -- the tokens that extend the prefix of a used value.  Every other
  token's fate is the grammar's cached mask.

States are ``(parser state, lexical mode, open array)`` tuples of immutable values, so
``rollback``, ``fork`` and ``validate_tokens`` of the matcher stay exact.  Lifetime: one
program per compiled grammar (built by the compiler from the grammar IR's marks,
:func:`unique_items_program`: it *is* the compiled grammar's ``program``), shared by its
requests; the per-vocabulary lexical tables are built once per process (about 0.3 s for 50k
tokens).  Costs: a mask outside a unique array costs the grammar's plus a simulation of its
allowed ``[`` tokens; inside one, a simulation of the allowed quote tokens (see
benchmarks/unique_items_bench.py).
"""

from __future__ import annotations

import bisect
import json
import threading
import weakref
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import numpy as np

from ..automata.pda import Frame, ParserState
from ..bitmask import bitmask_to_ids, bool_to_bitmask
from ..cache import LruCache
from ..columns import column_classes
from ..ir.marks import COUNT_CAP, UniqueItemsMark, length_count, state_counts
from ..vocab.vocabulary import Vocabulary
from .cfg_program import CfgProgram
from .program import LimitStop

__all__ = ["UniqueItemsProgram", "ValueUniqueProgram", "unique_items_program"]

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


class _VocabTables:
    """Lexical facts about every token of a vocabulary, per starting mode (read-only).

    ``end[m][t]``: the mode after token ``t`` read from mode ``m``; ``words[m][flag]``: bitmask
    of the tokens whose reading from ``m`` has that flag; ``partial_in``: tokens that, read
    from a clean position inside a string, end inside a character or an escape; ``ws_only``;
    ``decoded``: decoded text of the tokens that, read from a clean position inside a string,
    stay inside it and end clean (text -> ids).  Built once per vocabulary: O(V).
    """

    def __init__(self, vocab: Vocabulary) -> None:
        size = vocab.vocab_size
        self.close_in: dict[int, tuple[str, int]] = {}
        self.reopen_in: dict[int, str] = {}
        self.open_out: dict[int, tuple[bool, str]] = {}
        ends = [np.zeros(size, dtype=np.int8) for _ in range(3)]
        flags = [np.zeros(size, dtype=np.uint8) for _ in range(3)]
        partial = np.zeros(size, dtype=bool)
        ws_only = np.zeros(size, dtype=bool)
        decoded: dict[str, list[int]] = {}
        for tid in range(min(size, len(vocab.tokens))):
            data = vocab.token_bytes(tid)
            if not data:
                continue
            if _SPECIAL.isdisjoint(data):
                ends[OUT][tid], ends[IN][tid], ends[ESC][tid] = OUT, IN, IN
                ws_only[tid] = _WS.issuperset(data)
                if data[-1] >= 0x80 and _utf8_incomplete(data):
                    partial[tid] = True
                    continue
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                decoded.setdefault(text, []).append(tid)
                continue
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
                    decoded.setdefault(text, []).append(tid)
            elif ends[IN][tid] == ESC:
                partial[tid] = True
        self.end = [e.tolist() for e in ends]
        self.flags = [f.tolist() for f in flags]
        self.words = [
            {flag: _packed(f & flag != 0, size) for flag in (_QUOTE, _BRACKET, _COMMA)}
            for f in flags
        ]
        self.partial_in = _packed(partial, size)
        self.ws_only = ws_only.tolist()
        self.decoded = decoded
        self.max_len = vocab.trie.max_len

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


_TABLES: LruCache[str, _VocabTables] = LruCache(4)
_TABLES_LOCK = threading.Lock()


def _tables(vocab: Vocabulary) -> _VocabTables:
    found, got = _TABLES.get(vocab.fingerprint)
    if found and got is not None:
        return got
    with _TABLES_LOCK:
        found, got = _TABLES.get(vocab.fingerprint)
        if found and got is not None:
            return got
        built = _VocabTables(vocab)
        _TABLES.put(vocab.fingerprint, built)
        return built


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


# -- the open array ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Open:
    """The unique array being written (immutable: a step makes a new one).

    ``used``/``order``: the decoded values of its items (a set, and sorted for prefix
    counts), plus ``extra``: values added by a step not yet merged into them (a simulated
    token adds its items there, so a mask never copies the set; an accepted token merges
    them, once per item); ``in_string``: inside an item; ``need_item``: after a ``,``;
    ``text``/``pend``: the current item's decoded characters and the raw bytes of a partial
    one; ``qs``: per mark, its item automaton's state after ``text`` (-1: dead or not a
    canonical mark)."""

    used: frozenset[str]
    order: tuple[str, ...]
    in_string: bool
    need_item: bool
    text: str
    pend: bytes
    qs: tuple[int, ...]
    extra: tuple[str, ...] = ()

    def has(self, value: str) -> bool:
        return value in self.used or value in self.extra

    @property
    def count(self) -> int:
        return len(self.used) + len(self.extra)

    def settled(self) -> _Open:
        """The same array with ``extra`` merged into ``used`` and ``order``.  O(items)."""
        if not self.extra:
            return self
        order = tuple(sorted((*self.order, *self.extra)))
        used = self.used.union(self.extra)
        return _Open(used, order, self.in_string, self.need_item, self.text, self.pend, self.qs)


class _Mark:
    """A mark's run-time tables: item counts per automaton state, and the most a token can
    take the prefix (see :meth:`UniqueItemsProgram._narrow`)."""

    __slots__ = ("canonical", "counts", "domain", "hi", "lo", "los", "minreach", "trans")

    def __init__(self, mark: UniqueItemsMark, reach: int) -> None:
        self.canonical = mark.canonical
        self.lo, self.hi = mark.min_len, mark.max_len
        self.trans = [list(row) for row in mark.trans]
        self.los = [[e[0] for e in row] for row in mark.trans]
        if mark.canonical:
            self.counts = state_counts(mark.trans, mark.accept) if mark.accept else []
            self.domain = self.counts[0] if self.counts else 0
            # the smallest count within ``reach`` characters of each state
            m = list(self.counts)
            for _ in range(reach):
                nxt = [min([m[s], *(m[t] for _, _, t in self.trans[s])]) for s in range(len(m))]
                if nxt == m:
                    break
                m = nxt
            self.minreach = m
        else:
            self.counts = []
            self.domain = length_count(0, mark.min_len, mark.max_len)
            self.minreach = []

    def step(self, q: int, cp: int) -> int:
        if q < 0:
            return -1
        los = self.los[q]
        i = bisect.bisect_right(los, cp) - 1
        if i >= 0:
            lo, hi, t = self.trans[q][i]
            if lo <= cp <= hi:
                return t
        return -1

    def completions(self, q: int, n: int, pend: bytes) -> int:
        """Strings that extend the current item (``n`` characters, automaton state ``q``,
        partial character ``pend``), saturated at ``COUNT_CAP``."""
        if not self.canonical:
            if not pend:
                return length_count(n, self.lo, self.hi)
            width = sum(b - a + 1 for a, b in _consistent(pend, False))
            return min(width * length_count(n + 1, self.lo, self.hi), COUNT_CAP)
        if q < 0:
            return 0
        if not pend:
            return self.counts[q]
        total = 0
        for a, b in _consistent(pend, True):
            for lo, hi, t in self.trans[q]:
                x, y = max(a, lo), min(b, hi)
                if x <= y:
                    total = min(total + (y - x + 1) * self.counts[t], COUNT_CAP)
        return total


_State = tuple[ParserState, int, "_Open | None"]


class _Plan:
    """What a mask needs of a grammar state and lexical mode, whatever the used values: the
    grammar's mask and its suspect tokens, sorted by how they are decided (see
    :meth:`UniqueItemsProgram.token_mask`).  Cached per state."""

    __slots__ = (
        "bracket",
        "by_before",
        "close",
        "close_ids",
        "comma",
        "open",
        "open_ids",
        "quote",
        "words",
    )

    def __init__(self, words: np.ndarray, lex: _VocabTables, mode: int) -> None:
        self.words = words
        flags = lex.words[mode]
        quote = bitmask_to_ids(words & flags[_QUOTE]).tolist()
        self.bracket = bitmask_to_ids(words & flags[_BRACKET] & ~flags[_QUOTE]).tolist()
        self.comma = bitmask_to_ids(
            words & flags[_COMMA] & ~flags[_QUOTE] & ~flags[_BRACKET]
        ).tolist()
        #: quote tokens closing the item: (id, text before the quote, flags after it, the
        #: text of the item it opens next or None)
        self.close: list[tuple[int, str, int, str | None]] = []
        #: quote tokens opening an item: (id, a comma before it, text after it)
        self.open: list[tuple[int, bool, str]] = []
        #: the other quote tokens (simulated)
        self.quote: list[int] = []
        for t in quote:
            c = lex.close_in.get(t) if mode != OUT else None
            o = lex.open_out.get(t) if mode == OUT else None
            if c is not None and not c[1] & (_QUOTE | _BRACKET):
                self.close.append((t, c[0], c[1], lex.reopen_in.get(t)))
            elif o is not None:
                self.open.append((t, o[0], o[1]))
            else:
                self.quote.append(t)
        self.close_ids = [c[0] for c in self.close]
        self.open_ids = [o[0] for o in self.open]
        #: the closing tokens by their text before the quote
        self.by_before: dict[str, list[int]] = {}
        for t, before, _, _ in self.close:
            self.by_before.setdefault(before, []).append(t)


class UniqueItemsProgram:
    """The matcher program of a grammar with :class:`~formcast.ir.marks.UniqueItemsMark`s:
    the grammar's :class:`CfgProgram` plus the run-time ``uniqueItems`` check (see the module
    docstring).  States are ``(ParserState, lexical mode, open array or None)``."""

    def __init__(self, cfg: CfgProgram, marks: tuple[UniqueItemsMark, ...]) -> None:
        self.cfg = cfg
        self.vocab = cfg.vocab
        self.marks = marks
        names = {name: i for i, name in enumerate(cfg.auto.names)}
        self._rule_mark: dict[int, int] = {}
        self._rule_start: dict[int, int] = {}
        for k, m in enumerate(marks):
            rid = names.get(m.rule)
            if rid is not None:  # (a mark whose array the grammar dropped as unsatisfiable)
                self._rule_mark[rid] = k
                self._rule_start[rid] = int(cfg.auto.dfas[rid].start)
        self._lex = _tables(cfg.vocab)
        self._reach = self._lex.max_len
        self._info = [_Mark(m, self._reach) for m in marks]
        self._zeros = tuple(0 for _ in marks)
        self._groups: weakref.WeakKeyDictionary[
            ParserState, tuple[frozenset[Frame], dict[int, frozenset[Frame]]]
        ] = weakref.WeakKeyDictionary()
        self._plans: weakref.WeakKeyDictionary[ParserState, dict[int, _Plan]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self.simulated = 0  # tokens checked byte by byte (a statistic)

    # -- stacks ---------------------------------------------------------------------------------
    def _mark_of(self, frame: Frame) -> int:
        """The mark whose array ``frame``'s stack is inside (-1: none)."""
        cur: Frame | None = frame
        rule_mark = self._rule_mark
        while cur is not None:
            k = rule_mark.get(cur.rule)
            if k is not None:
                return k if cur.state != self._rule_start[cur.rule] else -1
            cur = cur.parent
        return -1

    def groups(self, ps: ParserState) -> tuple[frozenset[Frame], dict[int, frozenset[Frame]]]:
        """``(stacks outside unique arrays, {mark: stacks inside its array})``.  Memoized."""
        got = self._groups.get(ps)
        if got is not None:
            return got
        plain: list[Frame] = []
        inside: dict[int, list[Frame]] = {}
        for f in ps.frames:
            k = self._mark_of(f)
            if k < 0:
                plain.append(f)
            else:
                inside.setdefault(k, []).append(f)
        got = frozenset(plain), {k: frozenset(v) for k, v in inside.items()}
        with self._lock:
            self._groups[ps] = got
        return got

    def _without(self, ps: ParserState, drop: frozenset[Frame]) -> ParserState:
        return self.cfg.pda.state_of(ps.frames - drop, ps.accepting)

    def _plan(self, ps: ParserState, mode: int) -> _Plan:
        by_mode = self._plans.get(ps)
        plan = None if by_mode is None else by_mode.get(mode)
        if plan is None:
            plan = _Plan(self.cfg.token_mask(ps), self._lex, mode)
            with self._lock:
                self._plans.setdefault(ps, {})[mode] = plan
        return plan

    # -- the open array -------------------------------------------------------------------------
    def _extend(self, opn: _Open, text: str, pend: bytes) -> _Open:
        qs = opn.qs
        added = text[len(opn.text) :]
        if added:
            qs = tuple(
                self._walk(info, q, added) if info.canonical else q
                for info, q in zip(self._info, qs)
            )
        return _Open(opn.used, opn.order, True, False, text, pend, qs, opn.extra)

    @staticmethod
    def _walk(info: _Mark, q: int, text: str) -> int:
        for ch in text:
            q = info.step(q, ord(ch))
            if q < 0:
                break
        return q

    def _prefixed(self, opn: _Open) -> list[str]:
        """The used values that extend the current item's text."""
        order, text = opn.order, opn.text
        i = bisect.bisect_left(order, text)
        j = i
        while j < len(order) and order[j].startswith(text):
            j += 1
        return [*order[i:j], *(v for v in opn.extra if v.startswith(text))]

    def _alive(self, k: int, opn: _Open) -> bool:
        """Whether the stacks inside mark ``k``'s array still have a valid completion."""
        info = self._info[k]
        u = opn.count
        if not opn.in_string:
            return not opn.need_item or info.domain > u
        n = len(opn.text)
        cnt = info.completions(opn.qs[k], n, opn.pend)
        if cnt > u:
            return True
        ext = self._prefixed(opn)
        if opn.pend:
            ranges = _consistent(opn.pend, info.canonical)
            ext = [v for v in ext if len(v) > n and _in_ranges(ord(v[n]), ranges)]
        return cnt > len(ext)

    def _narrow(self, k: int, opn: _Open) -> bool:
        """Whether one token could take mark ``k``'s current item where its completions no
        longer outnumber the used values (so the tokens extending a used value are checked)."""
        u = opn.count
        if u == 0 or not opn.in_string:
            return False
        info = self._info[k]
        if not info.canonical:
            if info.hi is None:
                return False
            deepest = min(len(opn.text) + self._reach + 1, info.hi)
            return length_count(deepest, info.lo, info.hi) <= u
        q = opn.qs[k]
        return q < 0 or info.minreach[q] <= u

    # -- stepping -------------------------------------------------------------------------------
    def _run(self, state: _State, data: bytes) -> _State | LimitStop | None:
        """The state after ``data``, byte by byte, with every check (the exact path)."""
        ps, mode, opn = state
        step = self.cfg.pda.step
        for b in data:
            nxt = step(ps, b)
            if nxt.is_dead:
                return LimitStop(nxt.error) if nxt.error else None
            ps = nxt
            one = bytes((b,))
            if opn is None:
                if mode == OUT and b == 0x5B and self.groups(ps)[1]:
                    opn = _Open(frozenset(), (), False, False, "", b"", self._zeros)
                mode = _lex(mode, one)[0]
                continue
            if opn.in_string:
                text, pend, closed = _feed(opn.text, opn.pend, one)
                if closed == -2:  # (not a string the marked stacks accept)
                    mode, opn = _lex(mode, one)[0], None
                elif closed >= 0:
                    mode = OUT
                    if opn.has(opn.text):  # a repeated value: the unique stacks end
                        for frames in self.groups(ps)[1].values():
                            ps = self._without(ps, frames)
                        if ps.is_dead:
                            return None
                        opn = None
                    else:
                        extra = (*opn.extra, opn.text)
                        opn = _Open(opn.used, opn.order, False, False, "", b"", self._zeros, extra)
                else:
                    mode = ESC if pend == b"\\" else IN
                    opn = self._extend(opn, text, pend)
            elif b == 0x22:
                mode = IN
                opn = _Open(opn.used, opn.order, True, False, "", b"", opn.qs, opn.extra)
            elif b == 0x2C:
                opn = _Open(opn.used, opn.order, False, True, "", b"", opn.qs, opn.extra)
            elif b not in _WS:  # ``]`` closed the array (or a non-string item)
                mode, opn = _lex(mode, one)[0], None
            if opn is not None and not self.groups(ps)[1]:
                opn = None
        return self._checked((ps, mode, opn))

    def _checked(self, state: _State) -> _State | None:
        """``state`` without the marked stacks that have no valid completion left."""
        ps, mode, opn = state
        if opn is None:
            return state
        _, inside = self.groups(ps)
        dead = [frames for k, frames in inside.items() if not self._alive(k, opn)]
        if not dead:
            return state
        for frames in dead:
            ps = self._without(ps, frames)
        if ps.is_dead:
            return None
        if len(dead) == len(inside):
            opn = None
        return ps, mode, opn

    def _suspect(self, state: _State, token_id: int) -> bool:
        ps, mode, opn = state
        fl = self._lex.flags[mode][token_id]
        if fl & _BRACKET:
            return True
        if opn is None:
            return False
        if fl & _QUOTE:
            return True
        _, inside = self.groups(ps)
        if opn.in_string:
            return opn.pend != b"" or any(self._narrow(k, opn) for k in inside)
        if fl & _COMMA:
            return any(self._info[k].domain <= opn.count for k in inside)
        return False

    # -- GrammarProgram protocol ----------------------------------------------------------------
    def initial_state(self) -> _State:
        return (self.cfg.initial_state(), OUT, None)

    def advance(self, state: _State, token_id: int) -> _State | LimitStop | None:
        data = self.vocab.token_bytes(token_id)
        if not data:
            return None
        if self._suspect(state, token_id):
            self.simulated += 1
            return _settle(self._run(state, data))
        ps, mode, opn = state
        nxt = self.cfg.advance(ps, token_id)
        if not isinstance(nxt, ParserState):
            return nxt
        if opn is not None:
            if opn.in_string:  # no structural quote: the item goes on
                text, pend, _ = _feed(opn.text, opn.pend, data)
                opn = self._extend(opn, text, pend)
            else:  # whitespace, commas (values remain), or a ``]``
                for b in data:
                    if b == 0x2C:
                        opn = _Open(opn.used, opn.order, False, True, "", b"", opn.qs)
                    elif b not in _WS:
                        opn = None
                        break
            if opn is not None and not self.groups(nxt)[1]:
                opn = None
        return (nxt, self._lex.end[mode][token_id], opn)

    def advance_bytes(self, state: _State, data: bytes) -> _State | LimitStop | None:
        if not data:
            return state
        return _settle(self._run(state, data))

    def is_accepting(self, state: _State) -> bool:
        return state[0].accepting

    def token_mask(self, state: _State) -> np.ndarray:
        """The grammar's mask of the state, less the suspect tokens the check refuses.

        Suspects (see the module docstring) are decided without simulation where every
        stack is inside one unique array, no character is partial and the token's quote is
        simple (:meth:`_quick`); the rest are run byte by byte (:meth:`_run`)."""
        ps, mode, opn = state
        plan = self._plan(ps, mode)
        words = plan.words
        refused: list[int] = []
        slow: list[int] = list(plan.bracket)
        if opn is not None:
            plain, inside = self.groups(ps)
            single = not plain and not ps.accepting and len(inside) == 1 and not opn.pend
            if single:
                refused, undecided = self._quick(opn, next(iter(inside)), plan)
                slow += undecided
            else:
                slow += plan.close_ids + plan.open_ids
            slow += plan.quote
            if opn.in_string:
                if opn.pend or any(self._narrow(k, opn) for k in inside):
                    slow += self._narrow_candidates(words, opn, mode)
            elif any(self._info[k].domain <= opn.count for k in inside):
                slow += plan.comma
        if slow:
            run, data = self._run, self.vocab.token_bytes
            refused += [t for t in slow if not isinstance(run(state, data(t)), tuple)]
            self.simulated += len(slow)
        if not refused:
            return words
        out: np.ndarray = words.copy()
        bits = out.view(np.uint32)
        for t in set(refused):
            bits[t >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (t & 31)))
        out.setflags(write=False)
        return out

    def _quick(self, opn: _Open, k: int, plan: _Plan) -> tuple[list[int], list[int]]:
        """Decide the simple quote tokens of ``plan`` for mark ``k``: ``(refused, undecided)``.

        Inside the item, a token closing it (its text before the quote known, nothing after
        but ``,``/``]``/whitespace) is refused iff its value was used, or a ``,`` follows
        and no value is left; between items, a token opening one (after whitespace and
        commas) iff no value is left or its prefix has no unused completion.  Both are what
        :meth:`_run` decides (the grammar already allowed the token)."""
        info = self._info[k]
        u = opn.count
        refused: list[int] = []
        if opn.in_string:
            has, text = opn.has, opn.text
            room = info.domain > u + 1
            narrow = info.canonical or info.hi is not None
            if room and not narrow:  # only repeated values are refused
                order = opn.order
                i = bisect.bisect_left(order, text)
                j = bisect.bisect_left(order, text + "\U0010ffff", i)
                if j - i <= len(plan.close):  # by the used values that extend the text
                    n, by_before = len(text), plan.by_before
                    for v in (*order[i:j], *opn.extra):
                        if v.startswith(text):
                            refused += by_before.get(v[n:], ())
                    return refused, plan.open_ids
            for t, before, after, again in plan.close:
                value = text + before
                if has(value) or (after & _COMMA and not room):
                    refused.append(t)
                elif again is not None and narrow:
                    nxt = _Open(opn.used, opn.order, True, False, "", b"", self._zeros)
                    nxt = self._extend(replace(nxt, extra=(*opn.extra, value)), again, b"")
                    if not self._alive(k, nxt):
                        refused.append(t)
            return refused, plan.open_ids
        start = _Open(opn.used, opn.order, True, False, "", b"", self._zeros, opn.extra)
        for t, _, after_text in plan.open:
            no_room = info.domain <= u
            if no_room or (u and not self._alive(k, self._extend(start, after_text, b""))):
                refused.append(t)
        return refused, plan.close_ids

    def _narrow_candidates(self, words: np.ndarray, opn: _Open, mode: int) -> list[int]:
        """Tokens (allowed by ``words``, without a structural quote read from lexical
        ``mode``) that may take the item where it runs out: those whose text extends the
        prefix of a used value, and those ending inside a character (every allowed one when
        the item is mid-character already).  ``mode`` matters after a backslash (ESC): there
        a ``"`` completes the escape ``\\"`` instead of closing the item, so it is a candidate
        (the plan's quote tokens are those with a structural quote read from ``mode``)."""
        quote = self._lex.words[mode][_QUOTE]
        if opn.pend:
            every: list[int] = bitmask_to_ids(words & ~quote).tolist()
            return every
        ids = set(bitmask_to_ids(words & self._lex.partial_in & ~quote).tolist())
        decoded = self._lex.decoded
        n = len(opn.text)
        for v in self._prefixed(opn):
            rest = v[n:]
            for j in range(1, min(len(rest), self._reach) + 1):
                got = decoded.get(rest[:j])
                if got:
                    ids.update(got)
        return [t for t in ids if (int(words[t >> 5]) >> (t & 31)) & 1]

    def expected(self, state: _State) -> tuple[str, tuple[int, ...]]:
        desc, nxt = self.cfg.expected(state[0])
        if state[2] is not None:
            desc += " (in an array whose items must be distinct: uniqueItems)"
        return desc, nxt

    def forced_bytes(self, state: _State) -> bytes:
        return self.cfg.forced_bytes(state[0])

    def cache_info(self) -> dict[str, int]:
        info = dict(self.cfg.cache_info())
        info["unique_items_simulated"] = self.simulated
        return info

    def warm_up(self, should_stop: Any) -> int:
        return self.cfg.warm_up(should_stop)

    def nbytes(self) -> int:
        return self.cfg.nbytes()


def _settle(got: _State | LimitStop | None) -> _State | LimitStop | None:
    """A state to keep: its open array's new items merged (see :meth:`_Open.settled`)."""
    if isinstance(got, tuple) and got[2] is not None and got[2].extra:
        return got[0], got[1], got[2].settled()
    return got


def unique_items_program(
    cfg: CfgProgram, marks: tuple[UniqueItemsMark, ...]
) -> UniqueItemsProgram | ValueUniqueProgram:
    """The program of a grammar whose IR carries ``uniqueItems`` marks: ``cfg`` wrapped in
    the run-time check -- :class:`ValueUniqueProgram` when some mark's items are of any type
    (``kind="value"``), else the exact string program :class:`UniqueItemsProgram`.  Built by
    the compiler (and when a serialized grammar is loaded), once per compiled grammar, and
    shared by its matchers.  Cost: the per-vocabulary lexical tables on the first call in a
    process (about 0.3 s for 50k tokens), then O(marks)."""
    if any(m.kind == "value" for m in marks):
        return ValueUniqueProgram(cfg, tuple(marks))
    return UniqueItemsProgram(cfg, tuple(marks))


# == items of any type: the general program ===================================================
#
# A ``kind="value"`` mark (numbers, booleans, null, objects, arrays, mixed items) is checked on
# the items' JSON values.  The state is ``(parser state, lexical mode, track or None)``; the
# track follows the JSON text from the outermost open unique array: its containers, and per open
# unique array (a *level*) the values of its items, the text of the current one and where the
# item stands.  See docs/json_schema.md (Run-time uniqueItems) for the soundness argument.

_NUM_LEAD = frozenset(b"-0123456789")
_NUM_FIRST = frozenset(bytes((b,)) for b in _NUM_LEAD)
_LITERALS = frozenset((b"true", b"false", b"null"))
_ENDS_NUMBER = frozenset(b",]") | _WS
#: the completion search tries closing bytes first (short witnesses), whitespace late
_ORDER = bytes(
    dict.fromkeys(
        b"\"}],:0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-.+_!#$%&'()*/;<=>?@"
        b"[\\^`{|~ \n\t\r" + bytes(range(0x80, 0x100)) + bytes(range(0x80))
    )
)
_OPEN_BUDGET = 400  # grammar nodes one capacity search may visit (cached per state)
_BIG = 1 << 40  # more distinct items than any run can write: a capacity this large is plenty
_SEARCH_BUDGET = 3000  # program nodes one completion search may visit
_SEARCH_DEPTH = 96  # bytes a witness may hold
_FREE_ASCII = bytes(b for b in range(0x20, 0x7F) if b not in (0x22, 0x5C))
_NOT_LINKED = object()
#: :meth:`ValueUniqueProgram._safe` walks the trie for this many candidate tokens or more
_TRIE_WALK_MIN = 256


def _value_key(text: bytes) -> Any:
    """A hashable key of the JSON value ``text``: equal iff the values are equal as JSON values
    (numbers as exact decimals, ``1`` = ``1.0`` = ``1e0``, ``-0`` = ``0``; objects by members,
    whatever their order; arrays elementwise; ``true`` is not ``1``)."""
    try:
        return _key_of(json.loads(text, parse_float=Decimal, parse_int=Decimal))
    except (ValueError, RecursionError):  # (never for the grammar's JSON)
        return ("raw", text)


def _key_of(v: Any) -> Any:
    if isinstance(v, bool):
        return ("b", v)
    if v is None:
        return ("z",)
    if isinstance(v, Decimal):
        return ("n", v)
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, list):
        return ("a", tuple(_key_of(x) for x in v))
    return ("o", frozenset((k, _key_of(x)) for k, x in v.items()))


@dataclass(frozen=True, slots=True)
class _Track:
    """The JSON text from the outermost open unique array (immutable).

    ``stack``: its open containers (``a`` arrays, ``o`` objects), the unique array first;
    ``levels``: per open unique array ``(position in stack, keys of its items' values, text of
    the current item, phase: 0 before an item, 1 in one, 2 after one)``; ``links``: which
    parser frames are inside which level, ``(marked rule, the marked frame's parent, position)``
    (recorded at the array's ``[``); ``witness``: bytes known to reach a state that is alive
    (see :meth:`ValueUniqueProgram._alive`), or None."""

    stack: str
    levels: tuple[tuple[int, frozenset[Any], bytes, int], ...]
    links: tuple[tuple[int, Frame | None, int], ...]
    witness: bytes | None = None


_VState = tuple[ParserState, int, "_Track | None"]


class _VocabPlain:
    """Per vocabulary, bitmasks of the tokens by the bytes they hold (read-only; O(V) once):
    ``plain``: no ``"`` or ``\\`` (they stay in a string body); ``ascii``: plain printable
    ASCII; ``noquote``: no ``"``; ``flat``: none of ``[]{}`` (the container stack stays);
    ``flat_in``/``flat_esc``: none of them outside strings, read from inside a string / just
    after a backslash in one; ``noquote_esc``: no ``"`` past the first byte (the escaped one);
    ``number``: only number characters ``0-9 - + . e E``."""

    def __init__(self, vocab: Vocabulary) -> None:
        size = vocab.vocab_size
        names = ("plain", "ascii", "noquote", "flat", "flat_in", "flat_esc", "noquote_esc")
        masks = {k: np.zeros(size, dtype=bool) for k in (*names, "number")}
        free = set(_FREE_ASCII)
        num = set(b"0123456789-+.eE")
        brackets = set(b"[]{}")
        for tid in range(min(size, len(vocab.tokens))):
            data = vocab.token_bytes(tid)
            if not data:
                continue
            quote = 0x22 in data
            masks["noquote"][tid] = not quote
            masks["plain"][tid] = not quote and 0x5C not in data
            masks["ascii"][tid] = free.issuperset(data)
            masks["flat"][tid] = brackets.isdisjoint(data)
            masks["flat_in"][tid] = flat_in = not _structural_bracket(IN, data)
            # (after a backslash the first byte is escaped: else as from inside the string)
            esc = flat_in if data[0] not in (0x22, 0x5C) else not _structural_bracket(ESC, data)
            masks["flat_esc"][tid] = esc
            masks["noquote_esc"][tid] = 0x22 not in data[1:]
            masks["number"][tid] = num.issuperset(data)
        self.plain = _packed(masks["plain"], size)
        self.ascii = _packed(masks["ascii"], size)
        self.noquote = _packed(masks["noquote"], size)
        self.flat = _packed(masks["flat"], size)
        self.flat_in = _packed(masks["flat_in"], size)
        self.flat_esc = _packed(masks["flat_esc"], size)
        self.noquote_esc = _packed(masks["noquote_esc"], size)
        self.number = _packed(masks["number"], size)


def _structural_bracket(mode: int, data: bytes) -> bool:
    """Whether ``data`` read from lexical ``mode`` has one of ``[]{}`` outside strings."""
    for b in data:
        if mode == OUT:
            if b == 0x22:
                mode = IN
            elif b in (0x5B, 0x5D, 0x7B, 0x7D):
                return True
        elif mode == IN:
            mode = OUT if b == 0x22 else ESC if b == 0x5C else IN
        else:
            mode = IN
    return False


_PLAIN: LruCache[str, _VocabPlain] = LruCache(4)


def _plain_tables(vocab: Vocabulary) -> _VocabPlain:
    found, got = _PLAIN.get(vocab.fingerprint)
    if found and got is not None:
        return got
    with _TABLES_LOCK:
        found, got = _PLAIN.get(vocab.fingerprint)
        if found and got is not None:
            return got
        built = _VocabPlain(vocab)
        _PLAIN.put(vocab.fingerprint, built)
        return built


class ValueUniqueProgram:
    """The matcher program of a grammar with ``kind="value"`` marks: the grammar's
    :class:`CfgProgram` plus the run-time ``uniqueItems`` check on JSON values, for every mark
    of the grammar (string marks included).  States are ``(ParserState, lexical mode, track or
    None)`` of immutable values, so ``rollback``, ``fork`` and ``validate_tokens`` stay exact.

    * **Equal items.**  An item ends where its value is determined: the closing quote,
      brace or bracket, the last letter of ``true``/``false``/``null``, and for a number the
      byte after it (``,``, ``]`` or whitespace: ``1`` may go on as ``12``).  Its text is read as
      JSON (numbers as exact decimals) and, when its value was used, the stacks inside that
      array are removed at that byte (other stacks, e.g. a branch without ``uniqueItems``, go
      on): the token holding that byte is masked.
    * **No dead end.**  After every token the state must have a valid completion
      (:meth:`_alive`): some stack outside the unique arrays, or no value used yet, or a *free
      slot* ahead in the current item (a string body or number digits that loop on two
      characters: infinitely many distinct items), or a witness found by a bounded search
      that completes the item with a fresh value.  A state proven none of these is refused.
    * **Fast path.**  Outside unique arrays only ``[`` tokens are simulated; inside one, the
      tokens that cause no event and after which a free slot lies ahead are the grammar's
      mask (:meth:`_safe`, per grammar state: one walk of the vocabulary trie where many
      tokens are in question, so a string body costs milliseconds on a 128k vocabulary);
      every other token is simulated byte by byte.

    Lifetime: one per compiled grammar (:func:`unique_items_program`), shared by its requests."""

    def __init__(self, cfg: CfgProgram, marks: tuple[UniqueItemsMark, ...]) -> None:
        self.cfg = cfg
        self.vocab = cfg.vocab
        self.marks = marks
        names = {name: i for i, name in enumerate(cfg.auto.names)}
        self._start: dict[int, int] = {}
        for m in marks:
            rid = names.get(m.rule)
            if rid is not None:  # (a mark whose array the grammar dropped as unsatisfiable)
                self._start[rid] = int(cfg.auto.dfas[rid].start)
        self._lex = _tables(cfg.vocab)
        self._plain = _plain_tables(cfg.vocab)
        self._end_np = [np.asarray(e, dtype=np.int8) for e in self._lex.end]
        self._classes: tuple[list[int], list[np.ndarray], list[int]] | None = None
        self._near: weakref.WeakKeyDictionary[Frame, Any] = weakref.WeakKeyDictionary()
        self._open_memo: LruCache[tuple[int, int, str, bool], int] = LruCache(100_000)
        self._branch: weakref.WeakKeyDictionary[ParserState, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        self._safe_memo: LruCache[tuple[int, int, str, bool, int], np.ndarray] = LruCache(4_096)
        self._bytes: weakref.WeakKeyDictionary[ParserState, list[int]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self.simulated = 0  # tokens checked byte by byte (a statistic)
        self.searched = 0  # completion searches run (a statistic)

    # -- stacks ---------------------------------------------------------------------------------
    def _nearest(self, frame: Frame) -> Any:
        """``(rule, parent)`` of the nearest marked frame below ``frame`` that has read its
        ``[`` (None: none).  Memoized per frame."""
        got = self._near.get(frame, _NOT_LINKED)
        if got is not _NOT_LINKED:
            return got
        chain: list[Frame] = []
        cur: Frame | None = frame
        found: Any = None
        while cur is not None:
            hit = self._near.get(cur, _NOT_LINKED)
            if hit is not _NOT_LINKED:
                found = hit
                break
            start = self._start.get(cur.rule)
            if start is not None and cur.state != start:
                found = (cur.rule, cur.parent)
                chain.append(cur)
                break
            chain.append(cur)
            cur = cur.parent
        with self._lock:
            for f in chain:
                self._near[f] = found
        return found

    def _levels_of(
        self, ps: ParserState, links: tuple[tuple[int, Frame | None, int], ...]
    ) -> tuple[list[Frame], dict[int, list[Frame]]]:
        """``(stacks outside unique arrays, {level position: stacks inside it})``."""
        where = {(r, p): pos for r, p, pos in links}
        plain: list[Frame] = []
        inside: dict[int, list[Frame]] = {}
        for f in ps.frames:
            key = self._nearest(f)
            pos = None if key is None else where.get(key)
            if pos is None:
                plain.append(f)
            else:
                inside.setdefault(pos, []).append(f)
        return plain, inside

    # -- stepping -------------------------------------------------------------------------------
    def _run(self, state: _VState, data: bytes, check: bool = True) -> _VState | LimitStop | None:
        """The state after ``data``, byte by byte, with every check (the exact path)."""
        ps, mode, tr = state
        step = self.cfg.pda.step
        links: tuple[tuple[int, Frame | None, int], ...]
        lv: list[Any] | None
        if tr is None:
            stack, links, wit = "", (), None
            levels: list[list[Any]] = []
        else:
            stack, links, wit = tr.stack, tr.links, tr.witness
            levels = [list(lv) for lv in tr.levels]
        for b in data:
            if mode == OUT and levels and b in _ENDS_NUMBER:
                lv = levels[-1]
                if lv[0] == len(stack) - 1 and lv[3] == 1 and lv[2] and lv[2][0] in _NUM_LEAD:
                    # a number ends at the byte after it: decided before that byte is read
                    # (a ``]`` would leave the array's frames behind)
                    ps = self._complete(ps, lv, links)
                    if ps.is_dead:
                        return None
            nxt = step(ps, b)
            if nxt.is_dead:
                return LimitStop(nxt.error) if nxt.error else None
            ps = nxt
            if wit is not None:
                wit = wit[1:] if wit and wit[0] == b else None
            if not stack and not (mode == OUT and b == 0x5B):
                if mode == OUT:
                    mode = IN if b == 0x22 else OUT
                elif mode == IN:
                    mode = OUT if b == 0x22 else ESC if b == 0x5C else IN
                else:
                    mode = IN
                continue
            one = bytes((b,))
            if mode != OUT:
                for lv in levels:
                    if lv[3] == 1:
                        lv[2] += one
                if mode == ESC:
                    mode = IN
                elif b == 0x5C:
                    mode = ESC
                elif b == 0x22:
                    mode = OUT
                    lv = levels[-1] if levels else None
                    if lv is not None and lv[0] == len(stack) - 1 and lv[3] == 1:
                        ps = self._complete(ps, lv, links)  # a string item
                        if ps.is_dead:
                            return None
                continue
            top = len(stack) - 1
            lv = levels[-1] if levels and levels[-1][0] == top else None
            if lv is not None:
                if lv[3] == 1 and lv[2] and lv[2][0] in _NUM_LEAD:
                    pass  # (a number's end was handled before the step)
                elif lv[3] == 0 and b not in _WS and b != 0x5D:
                    lv[3], lv[2] = 1, b""
            for x in levels:
                if x[3] == 1:
                    x[2] += one
            if b == 0x22:
                mode = IN
            elif b == 0x5B or b == 0x7B:
                stack += "a" if b == 0x5B else "o"
                if b == 0x5B:
                    links, levels = self._register(ps, stack, links, levels)
                    if not levels:  # not a unique array after all: nothing to track
                        stack = ""
            elif b == 0x5D or b == 0x7D:
                gone = len(stack) - 1
                stack = stack[:-1]
                if levels and levels[-1][0] == gone:
                    levels.pop()
                    links = tuple(x for x in links if x[2] != gone)
                if not stack:
                    levels, links = [], ()
                    continue
                lv = levels[-1] if levels else None
                if lv is not None and lv[0] == len(stack) - 1 and lv[3] == 1:
                    ps = self._complete(ps, lv, links)  # a container item
                    if ps.is_dead:
                        return None
            elif b == 0x2C:
                if lv is not None and lv[3] == 2:
                    lv[3] = 0
            elif lv is not None and lv[3] == 1 and lv[2] in _LITERALS:
                ps = self._complete(ps, lv, links)
                if ps.is_dead:
                    return None
        got: _VState
        if not stack:
            got = (ps, mode, None)
        else:
            lvs = tuple((int(x[0]), x[1], x[2], int(x[3])) for x in levels)
            got = (ps, mode, _Track(stack, lvs, links, wit))
        return self._checked(got) if check else got

    def _register(
        self,
        ps: ParserState,
        stack: str,
        links: tuple[tuple[int, Frame | None, int], ...],
        levels: list[list[Any]],
    ) -> tuple[tuple[tuple[int, Frame | None, int], ...], list[list[Any]]]:
        """After a ``[``: the stacks whose nearest marked frame is new are inside a new level
        (this array)."""
        pos = len(stack) - 1
        known = {(r, p) for r, p, _ in links}
        new: list[tuple[int, Frame | None, int]] = []
        for f in ps.frames:
            key = self._nearest(f)
            if key is not None and key not in known:
                known.add(key)
                new.append((key[0], key[1], pos))
        if not new:
            return links, levels
        return (*links, *new), [*levels, [pos, frozenset(), b"", 0]]

    def _complete(
        self, ps: ParserState, lv: list[Any], links: tuple[tuple[int, Frame | None, int], ...]
    ) -> ParserState:
        """An item of level ``lv`` ended: its stacks die if its value was used, else the value
        joins the used ones."""
        key = _value_key(bytes(lv[2]))
        lv[3] = 2
        if key in lv[1]:
            _, inside = self._levels_of(ps, links)
            drop = inside.get(lv[0])
            if drop:
                return self.cfg.pda.state_of(ps.frames - frozenset(drop), ps.accepting)
            return ps
        lv[1] = lv[1] | {key}
        return ps

    # -- no dead end ----------------------------------------------------------------------------
    def _checked(self, state: _VState) -> _VState | None:
        ps, mode, tr = state
        if tr is None or tr.witness is not None:
            return state
        ok, wit = self._alive(ps, mode, tr)
        if not ok:
            return None
        if wit:
            return ps, mode, replace(tr, witness=wit)
        return state

    def _trivially_alive(self, ps: ParserState, mode: int, tr: _Track) -> bool:
        if ps.accepting or all(not lv[1] for lv in tr.levels):
            return True
        plain, _ = self._levels_of(ps, tr.links)
        if plain:
            return True
        last = tr.levels[-1]
        if len(tr.levels) == 1 and last[3] == 2:  # the outermost array's item just ended
            return True
        return self._open(ps, mode, tr)

    def _alive(self, ps: ParserState, mode: int, tr: _Track) -> tuple[bool, bytes | None]:
        """Whether ``(ps, mode, tr)`` has a valid completion, and a witness when a search
        found one.  Exact up to the search bound: a state the search can neither prove nor
        refute within it is refused (sound)."""
        if self._trivially_alive(ps, mode, tr):
            return True, None
        path = self._search((ps, mode, tr))
        return path is not None, path

    def _where(self, tr: _Track) -> tuple[str, bool, int]:
        """The lexical position in the innermost level's item: ``(containers above the
        level's array, inside a scalar item at the array's top, the level's phase)``."""
        last = tr.levels[-1]
        rel = tr.stack[last[0] + 1 :]
        scal = not rel and last[3] == 1 and last[2][:1] not in (b'"', b"{", b"[")
        return rel, scal, last[3]

    def _open(self, ps: ParserState, mode: int, tr: _Track) -> bool:
        """Whether more distinct items lie ahead in the innermost level's current (or next)
        item than any level has used: :meth:`_capacity_at` (a lower bound, found without
        crossing an item boundary of any array) above the most values a level holds."""
        rel, scal, phase = self._where(tr)
        if phase == 2:
            return False
        need = max(len(lv[1]) for lv in tr.levels)
        return self._capacity_at(ps, mode, rel, scal) > need

    def _open_at(self, ps: ParserState, mode: int, rel: str, scal: bool) -> bool:
        """:meth:`_capacity_at` is at least :data:`_BIG` (more items than any run writes)."""
        return self._capacity_at(ps, mode, rel, scal) >= _BIG

    def _capacity_at(self, ps: ParserState, mode: int, rel: str, scal: bool) -> int:
        """A lower bound on the distinct values of the current item's completions (see
        :meth:`_capacity_search`).  Depends on the grammar only: cached per (state, lexical
        position)."""
        key = (ps.uid, mode, rel, scal)
        found, got = self._open_memo.get(key)
        if found and got is not None:
            return got
        res = self._capacity_search(ps, mode, rel, scal)
        if not ps.far:
            self._open_memo.put(key, res)
        return res

    def _branching(self, ps: ParserState, mode: int) -> int:
        """At a string body (``mode`` IN) or number digits (OUT): the product of the widest
        branchings along the chain of states that most characters lead to (a character set
        that loops back: :data:`COUNT_CAP`).  Different characters at one position of a
        string or number are different values whatever follows, so the product bounds the
        completions' distinct values from below.  O(chain length x alphabet) dictionary work
        and one parser step per byte class (:meth:`_byte_classes`) of the alphabet, memoized."""
        got = self._branch.get(ps)
        if got is not None and got[0] == mode:
            return got[1]
        step = self.cfg.pda.step
        cmap = self._byte_classes()[0]
        alphabet = _FREE_ASCII if mode == IN else b"0123456789"
        total, cur, seen = 1, ps, {ps}
        for _ in range(64):
            groups: dict[ParserState, int] = {}
            by_class: dict[int, ParserState] = {}  # (a byte's step is its class's)
            for b in alphabet:
                hit = by_class.get(cmap[b])
                if hit is None:
                    hit = by_class[cmap[b]] = step(cur, b)
                nxt = hit
                if not nxt.is_dead:
                    groups[nxt] = groups.get(nxt, 0) + 1
            if not groups:
                break
            nxt, g = max(groups.items(), key=lambda kv: kv[1])
            if g < 2:
                break
            if nxt in seen:
                total = COUNT_CAP
                break
            total = min(total * g, COUNT_CAP)
            if total >= COUNT_CAP:
                break
            seen.add(nxt)
            cur = nxt
        if not ps.far:
            with self._lock:
                self._branch[ps] = (mode, total)
        return total

    def _next_bytes(self, ps: ParserState) -> list[int]:
        """The bytes some stack of ``ps`` may read, in :data:`_ORDER`."""
        got = self._bytes.get(ps)
        if got is None:
            can = set(self.cfg.pda.next_bytes(ps).tolist())
            got = [b for b in _ORDER if b in can]
            if not ps.far:
                with self._lock:
                    self._bytes[ps] = got
        return got

    def _capacity_search(self, ps0: ParserState, mode0: int, rel0: str, scal0: bool) -> int:
        """The largest :meth:`_branching` at a string body or number reachable from the
        position without crossing an item boundary (no ``,`` or ``]`` of an array, nor the
        item's own end), within :data:`_OPEN_BUDGET` nodes; 1 when none is found (every
        state of the grammar has a completion)."""
        step = self.cfg.pda.step
        seen = {(ps0, mode0, rel0, scal0)}
        todo = [(ps0, mode0, rel0, scal0)]
        best = 1
        while todo and len(seen) < _OPEN_BUDGET:
            ps, mode, rel, scal = todo.pop()
            if mode != ESC:
                best = max(best, self._branching(ps, mode))
                if best >= _BIG:
                    return best
            for b in self._next_bytes(ps):
                nxt = step(ps, b)
                if nxt.is_dead:
                    continue
                m, rr, sc = mode, rel, scal
                if mode == ESC:
                    m = IN
                elif mode == IN:
                    if b == 0x5C:
                        m = ESC
                    elif b == 0x22:
                        if not rel:
                            continue  # the item ends
                        m = OUT
                elif b == 0x22:
                    m = IN
                elif b == 0x2C:
                    if not rel or rel[-1] == "a":
                        continue  # never across an item boundary
                elif b == 0x5D:
                    continue
                elif b == 0x7D:
                    if len(rel) <= 1:
                        continue  # the item ends
                    rr = rel[:-1]
                elif b == 0x5B or b == 0x7B:
                    if len(rel) >= 8:
                        continue
                    rr = rel + ("a" if b == 0x5B else "o")
                elif b in _WS:
                    if not rel and scal:
                        continue  # the item ends
                elif not rel:
                    sc = True
                node = (nxt, m, rr, sc)
                if node not in seen:
                    seen.add(node)
                    todo.append(node)
        return best

    def _search(self, state: _VState) -> bytes | None:
        """A shortest-first-ish completion search: bytes from ``state`` to a state that is
        trivially alive (see :meth:`_trivially_alive`), or None when none exists within
        :data:`_SEARCH_BUDGET` nodes and :data:`_SEARCH_DEPTH` bytes."""
        self.searched += 1
        step = self.cfg.pda.step
        nodes = 0
        todo: list[tuple[_VState, bytes]] = [(state, b"")]
        seen: set[Any] = set()
        while todo:
            st, path = todo.pop()
            if len(path) >= _SEARCH_DEPTH:
                continue
            kids: list[tuple[_VState, bytes]] = []
            for b in self._next_bytes(st[0]):
                if step(st[0], b).is_dead:
                    continue
                nodes += 1
                if nodes > _SEARCH_BUDGET:
                    return None
                got = self._run(st, bytes((b,)), check=False)
                if not isinstance(got, tuple):
                    continue
                ps, mode, tr = got
                if tr is None or self._trivially_alive(ps, mode, tr):
                    return path + bytes((b,))
                key = (ps, mode, tr.stack, tr.levels)
                if key in seen:
                    continue
                seen.add(key)
                kids.append((got, path + bytes((b,))))
            todo.extend(reversed(kids))
        return None

    # -- GrammarProgram protocol ----------------------------------------------------------------
    def initial_state(self) -> _VState:
        return (self.cfg.initial_state(), OUT, None)

    def _all_empty(self, tr: _Track) -> bool:
        return all(not lv[1] for lv in tr.levels)

    def _candidates(self, mode: int, tr: _Track) -> np.ndarray | None:
        """The tokens that cannot cause an event (an item's end or start of a string or
        container item, a ``[``, a level's ``]``) from this lexical position: for them only
        liveness is in question.  None: no token (the position is between items or after
        one)."""
        rel, _, phase = self._where(tr)
        pl = self._plain
        if mode == IN:
            return pl.noquote if not rel else pl.flat_in
        if mode == ESC:
            return pl.noquote_esc if not rel else pl.flat_esc
        if mode == OUT and rel:
            return pl.flat
        item = tr.levels[-1][2]
        if mode == OUT and not rel and (phase == 0 or (phase == 1 and item[:1] in _NUM_FIRST)):
            return pl.number  # (not in a literal: its last letter ends the item)
        return None

    def _safe(self, ps: ParserState, mode: int, tr: _Track) -> np.ndarray | None:
        """The candidate tokens (see :meth:`_candidates`) the grammar allows after which a
        free slot lies ahead (:meth:`_open_at`): allowed without simulation.  Depends on the
        grammar only: cached per (state, lexical position)."""
        cand = self._candidates(mode, tr)
        if cand is None:
            return None
        rel, scal, phase = self._where(tr)
        key = (ps.uid, mode, rel, scal, phase)
        found, got = self._safe_memo.get(key)
        if found and got is not None:
            hit: np.ndarray = got
            return hit
        words = self.cfg.token_mask(ps) & cand
        size = self.vocab.vocab_size
        step = self.cfg.pda.step
        ids = words
        if mode == IN and all(step(ps, b) is ps for b in _FREE_ASCII):
            ids = words & ~self._plain.ascii  # printable ASCII without quotes: ps again
            base = words & self._plain.ascii
        else:
            base = np.zeros_like(words)
        sc = scal or (not rel and mode == OUT)
        keep = self._safe_ids(ps, mode, bitmask_to_ids(ids), rel, sc)
        if keep.size:
            allowed = np.zeros(size, dtype=bool)
            allowed[keep] = True
            out: np.ndarray = base | bool_to_bitmask(allowed, size)
        else:
            out = base.copy()
        out.setflags(write=False)
        if not ps.far:
            self._safe_memo.put(key, out)
        return out

    def _safe_ids(
        self, ps: ParserState, mode: int, ids: np.ndarray, rel: str, sc: bool
    ) -> np.ndarray:
        """The token ``ids`` the grammar allows from ``ps`` after which :meth:`_open_at` holds
        (at the token's end mode, position ``rel``, ``sc``): ``int64`` ids, ascending.

        Few ids (under :data:`_TRIE_WALK_MIN`): one parser step per token (O(ids x token
        length) steps).  Many: one walk of the vocabulary trie (:meth:`_trie_states`) gives
        every token's end state, and :meth:`_open_at` runs once per distinct (end state, end
        mode) pair, so the cost is O(trie nodes + ids) numpy plus one parser step per distinct
        (state, byte) the walk meets: milliseconds where a string body allows most of a 128k
        vocabulary, against a second where every token was stepped alone.  Both paths decide
        exactly alike."""
        end = self._lex.end[mode]
        if ids.size < _TRIE_WALK_MIN:
            keep: list[int] = []
            for t in ids.tolist():
                nxt = self.cfg.advance(ps, t)
                if isinstance(nxt, ParserState) and self._open_at(nxt, end[t], rel, sc):
                    keep.append(t)
            return np.asarray(keep, dtype=np.int64)
        trie = self.vocab.trie
        per_string, states = self._trie_states(ps)
        ids = ids.astype(np.int64, copy=False)
        uniq = trie.token_to_unique[ids]
        in_trie = uniq < trie.num_strings
        sids = np.zeros(ids.size, dtype=np.int64)
        sids[in_trie] = per_string[uniq[in_trie]]
        # a token outside the trie (a special token the grammar spells): stepped alone
        for i in np.flatnonzero(~in_trie).tolist():
            nxt = self.cfg.advance(ps, int(ids[i]))
            if isinstance(nxt, ParserState):
                sids[i] = len(states)
                states.append(nxt)
        pairs = sids * 4 + self._end_np[mode][ids]  # (end state, end mode)
        seen = np.zeros(4 * len(states), dtype=bool)
        seen[pairs] = True
        ok = np.zeros(seen.size, dtype=bool)
        for k in np.flatnonzero(seen).tolist():
            st = states[k >> 2]
            ok[k] = st is not None and self._open_at(st, k & 3, rel, sc)
        kept: np.ndarray = ids[ok[pairs]]
        return kept

    def _byte_classes(self) -> tuple[list[int], list[np.ndarray], list[int]]:
        """``(class of each byte, class of every trie node's byte level by level, one byte of
        each class)``: bytes every rule's table sends alike from every state are one class,
        for a parser step cannot tell them apart (it reads a byte through those tables only).
        O(grammar states x 256 + trie nodes) once per program."""
        got = self._classes
        if got is None:
            tables = [np.asarray(dfa.table, dtype=np.int32) for dfa in self.cfg.auto.dfas]
            cls, first = column_classes(np.concatenate(tables, axis=0))
            # classes numbered by their first byte (the order the parser meets them in)
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            cmap = rank[cls].astype(np.uint8)
            levels = [np.take(cmap, lb) for lb in self.vocab.trie.level_bytes]
            got = (cmap.tolist(), levels, first[order].tolist())
            self._classes = got
        return got

    def _trie_states(self, ps: ParserState) -> tuple[np.ndarray, list[ParserState | None]]:
        """Every distinct token string's parser state from ``ps``: ``(int32[num_strings]
        indices into the list, the list)``; index 0 (None) is dead, a parser limit included.

        The trie is walked level by level with a lazily filled table (state index, byte
        class) -> state index (:meth:`_byte_classes`): a few numpy gathers per level over
        every node while most are alive, then over the live ones only, and one (memoized)
        :meth:`PushdownAutomaton.step` per distinct (state, class) pair met.  Cost: O(trie
        nodes) numpy (about 5 ms for 128k tokens) plus those steps."""
        trie = self.vocab.trie
        step = self.cfg.pda.step
        _, node_cls, reps = self._byte_classes()
        width = len(reps)
        states: list[ParserState | None] = [None, ps]
        index: dict[ParserState, int] = {ps: 1}
        table = np.full((64, width), -1, dtype=np.int32)
        table[0, :] = 0  # dead stays dead
        per_string = np.zeros(trie.num_strings, dtype=np.int32)
        prev = np.ones(1, dtype=np.int32)  # level 0: the root, at ps
        nodes: np.ndarray | None = None  # live nodes of the level (None: every node)
        for d in range(1, trie.num_levels + 1):
            if nodes is None:
                par = np.take(prev, trie.level_parent[d])
                key = par * width + node_cls[d]
            else:
                counts = np.take(trie.level_child_count[d - 1], nodes)
                total = int(counts.sum())
                if total == 0:
                    break
                starts = np.take(trie.level_child_start[d - 1], nodes)
                nodes = np.repeat(starts - np.cumsum(counts) + counts, counts)
                nodes += np.arange(total)
                key = np.repeat(prev, counts) * width + np.take(node_cls[d], nodes)
            cur = np.take(table, key)
            unknown = cur < 0
            if unknown.any():
                mark = np.zeros(width * len(states), dtype=bool)
                mark[key[unknown]] = True
                for k in np.flatnonzero(mark).tolist():
                    src = states[k // width]
                    assert src is not None
                    nxt = step(src, reps[k % width])
                    got = 0
                    if not nxt.is_dead:
                        got = index.get(nxt, -1)
                        if got < 0:
                            got = len(states)
                            index[nxt] = got
                            states.append(nxt)
                            if got >= table.shape[0]:
                                grown = np.full((2 * got, width), -1, dtype=np.int32)
                                grown[: table.shape[0]] = table
                                table = grown
                    table[k // width, k % width] = got
                cur = np.take(table, key)
            if nodes is None:
                per_string[trie.level_end_ids[d]] = np.take(cur, trie.level_end_nodes[d])
                live = int(np.count_nonzero(cur))
                if live == 0:
                    break
                if live * 8 < cur.size:  # most died: on over the live nodes only
                    nodes = np.flatnonzero(cur)
                    cur = cur[nodes]
            else:
                alive = cur != 0
                nodes, cur = nodes[alive], cur[alive]
                ends = np.take(trie.level_end_string[d], nodes)
                has = ends >= 0
                per_string[ends[has]] = cur[has]
            prev = cur
        return per_string, states

    def _fast(self, ps: ParserState, mode: int, tr: _Track, token_id: int) -> bool:
        """Whether ``token_id`` is decided without simulation (see :meth:`token_mask`)."""
        cand = self._candidates(mode, tr)
        if cand is None or not self._bit(cand, token_id):
            return False
        if self._all_empty(tr):
            return True
        safe = self._safe(ps, mode, tr)
        return safe is not None and self._bit(safe, token_id)

    def advance(self, state: _VState, token_id: int) -> _VState | LimitStop | None:
        data = self.vocab.token_bytes(token_id)
        if not data:
            return None
        ps, mode, tr = state
        if tr is None:
            if not self._lex.flags[mode][token_id] & _BRACKET:
                nxt = self.cfg.advance(ps, token_id)
                if not isinstance(nxt, ParserState):
                    return nxt
                return (nxt, self._lex.end[mode][token_id], None)
        elif self._fast(ps, mode, tr, token_id):
            nxt = self.cfg.advance(ps, token_id)
            if not isinstance(nxt, ParserState):
                return nxt
            top = tr.levels[-1][0]
            at_top = len(tr.stack) - 1 == top
            lvs = tuple(
                (p, u, it + data, ph)
                if ph == 1
                else (p, u, data, 1)
                if ph == 0 and p == top and at_top and mode == OUT
                else (p, u, it, ph)
                for p, u, it, ph in tr.levels
            )
            wit = tr.witness
            wit = wit[len(data) :] if wit is not None and wit.startswith(data) else None
            return (nxt, self._lex.end[mode][token_id], _Track(tr.stack, lvs, tr.links, wit))
        self.simulated += 1
        return self._run(state, data)

    def _is_plain(self, t: int) -> bool:
        return self._bit(self._plain.plain, t)

    @staticmethod
    def _bit(words: np.ndarray, t: int) -> bool:
        return bool((int(words[t >> 5]) >> (t & 31)) & 1)

    def advance_bytes(self, state: _VState, data: bytes) -> _VState | LimitStop | None:
        if not data:
            return state
        return self._run(state, data)

    def is_accepting(self, state: _VState) -> bool:
        return state[0].accepting

    def token_mask(self, state: _VState) -> np.ndarray:
        """The grammar's mask of the state, less the simulated tokens the check refuses.

        Outside unique arrays only ``[`` tokens are simulated; inside one, the tokens that
        cannot cause an event and leave a free slot ahead (:meth:`_safe`, cached per grammar
        state; every such token while no value is used yet) are the grammar's; the rest are
        run byte by byte (:meth:`_run`).  Both paths decide alike (the cache is the same
        test), so the mask is exactly what ``accept_token`` accepts."""
        ps, mode, tr = state
        words = self.cfg.token_mask(ps)
        if tr is None:
            slow_words = words & self._lex.words[mode][_BRACKET]
        else:
            cand = self._candidates(mode, tr)
            if cand is None:
                slow_words = words
            elif self._all_empty(tr):
                slow_words = words & ~cand
            else:
                safe = self._safe(ps, mode, tr)
                slow_words = words if safe is None else words & ~safe
        slow = bitmask_to_ids(slow_words).tolist()
        if not slow:
            return words
        run, data = self._run, self.vocab.token_bytes
        stops = set(self.vocab.stop_token_ids)
        refused = [t for t in slow if t not in stops and not isinstance(run(state, data(t)), tuple)]
        self.simulated += len(slow)
        if not refused:
            return words
        out: np.ndarray = words.copy()
        bits = out.view(np.uint32)
        for t in refused:
            bits[t >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (t & 31)))
        out.setflags(write=False)
        return out

    def expected(self, state: _VState) -> tuple[str, tuple[int, ...]]:
        desc, nxt = self.cfg.expected(state[0])
        if state[2] is not None:
            desc += " (in an array whose items must be distinct: uniqueItems)"
        return desc, nxt

    def forced_bytes(self, state: _VState) -> bytes:
        return self.cfg.forced_bytes(state[0])

    def cache_info(self) -> dict[str, int]:
        info = dict(self.cfg.cache_info())
        info["unique_items_simulated"] = self.simulated
        info["unique_items_searched"] = self.searched
        return info

    def warm_up(self, should_stop: Any) -> int:
        return self.cfg.warm_up(should_stop)

    def nbytes(self) -> int:
        return self.cfg.nbytes()
