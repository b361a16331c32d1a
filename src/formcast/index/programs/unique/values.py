"""Run-time ``uniqueItems`` on items of any type (:class:`ValueUniqueProgram`, ``kind="value"``).


A ``kind="value"`` mark (numbers, booleans, null, objects, arrays, mixed items) is checked on
the items' JSON values.  The state is ``(parser state, lexical mode, track or None)``; the
track follows the JSON text from the outermost open unique array: its containers, and per open
unique array (a *level*) the values of its items, the text of the current one and where the
item stands.  See docs/json_schema.md (Run-time uniqueItems) for the soundness argument.

Lifetime: one program per compiled grammar, shared by its requests (see
:class:`ValueUniqueProgram`).
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import numpy as np

from ....automata.pda import Frame, ParserState
from ....bitmask import bitmask_to_ids, bool_to_bitmask
from ....cache import LruCache
from ....columns import column_classes
from ....ir.marks import COUNT_CAP, UniqueItemsMark
from ....vocab.vocabulary import Vocabulary
from ...cfg_program import CfgProgram
from ...context import ContextSlot
from ...program import LimitStop
from ..checked import CheckedProgram
from .lexer import (
    _BRACKET,
    _WS,
    ESC,
    IN,
    OUT,
    _packed,
    _tables,
    nearest_marked,
    refuse_simulated,
    token_bytes,
)

__all__ = ["ValueUniqueProgram"]

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
        tb = token_bytes(vocab)
        n = tb.lens.size
        nonempty = tb.lens > 0
        quotes = tb.count(b'"')
        first = np.zeros(n, dtype=np.int64)
        first[nonempty] = tb.buf[tb.starts[nonempty]]

        def mask(of: np.ndarray) -> np.ndarray:
            out = np.zeros(size, dtype=bool)
            out[:n] = nonempty & of
            return _packed(out, size)

        # without a quote a token read from inside a string (or after a backslash) stays
        # there: no structural bracket; the tokens with one are read byte by byte
        flat_in = np.ones(n, dtype=bool)
        flat_esc = np.ones(n, dtype=bool)
        for tid in np.flatnonzero(quotes > 0).tolist():
            data = tb.tokens[tid]
            flat_in[tid] = fin = not _structural_bracket(IN, data)
            # (after a backslash the first byte is escaped: else as from inside the string)
            esc = fin if data[0] not in (0x22, 0x5C) else not _structural_bracket(ESC, data)
            flat_esc[tid] = esc
        self.plain = mask((quotes == 0) & (tb.count(b"\\") == 0))
        self.ascii = mask(tb.count(_FREE_ASCII) == tb.lens)
        self.noquote = mask(quotes == 0)
        self.flat = mask(tb.count(b"[]{}") == 0)
        self.flat_in = mask(flat_in)
        self.flat_esc = mask(flat_esc)
        self.noquote_esc = mask(quotes - (first == 0x22) == 0)
        self.number = mask(tb.count(b"0123456789-+.eE") == tb.lens)


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


#: the byte-class tables of a vocabulary (one entry per vocabulary context)
PLAIN_TABLES: ContextSlot[None, _VocabPlain] = ContextSlot(
    "json_plain_tables", lambda vocab, _: _VocabPlain(vocab)
)


class ValueUniqueProgram(CheckedProgram[_VState]):
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

    _stat = "unique_items_simulated"

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
        self._plain = PLAIN_TABLES.of(cfg.vocab, None)
        self._end_np = self._lex.end_np
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
        return nearest_marked(self._near, self._start, self._lock, frame)

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
        out, simulated = refuse_simulated(words, slow_words, state, self._run, self.vocab)
        self.simulated += simulated
        return out

    def expected(self, state: _VState) -> tuple[str, tuple[int, ...]]:
        desc, nxt = self.cfg.expected(state[0])
        if state[2] is not None:
            desc += " (in an array whose items must be distinct: uniqueItems)"
        return desc, nxt

    def forced_bytes(self, state: _VState) -> bytes:
        return self.cfg.forced_bytes(state[0])  # (the grammar's, not re-run through the check)

    def cache_info(self) -> dict[str, int]:
        info = super().cache_info()
        info["unique_items_searched"] = self.searched
        return info
