"""Run-time ``uniqueItems`` on string items (:class:`UniqueItemsProgram`, ``kind="string"`` marks).

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
:func:`~formcast.index.programs.dispatch.unique_items_program`: it *is* the compiled
grammar's ``program``), shared by its requests; the per-vocabulary lexical tables are built
once per vocabulary context (about 0.3 s for 50k tokens).  Costs: a mask outside a unique
array costs the grammar's plus a simulation of its allowed ``[`` tokens; inside one, a
simulation of the allowed quote tokens (see benchmarks/unique_items_bench.py).
"""

from __future__ import annotations

import bisect
import threading
import weakref
from dataclasses import dataclass, replace

import numpy as np

from ....automata.pda import Frame, ParserState
from ....bitmask import bitmask_to_ids
from ....ir.marks import COUNT_CAP, UniqueItemsMark, length_count, state_counts
from ...cfg_program import CfgProgram
from ...program import LimitStop
from ..checked import CheckedProgram
from .lexer import (
    _BRACKET,
    _COMMA,
    _QUOTE,
    _WS,
    ESC,
    IN,
    OUT,
    _consistent,
    _feed,
    _in_ranges,
    _lex,
    _tables,
    _VocabTables,
)

__all__ = ["UniqueItemsProgram"]


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


class UniqueItemsProgram(CheckedProgram[_State]):
    """The matcher program of a grammar with :class:`~formcast.ir.marks.UniqueItemsMark`s:
    the grammar's :class:`CfgProgram` plus the run-time ``uniqueItems`` check (see the module
    docstring).  States are ``(ParserState, lexical mode, open array or None)``."""

    _stat = "unique_items_simulated"

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
        return self.cfg.forced_bytes(state[0])  # (the grammar's, not re-run through the check)


def _settle(got: _State | LimitStop | None) -> _State | LimitStop | None:
    """A state to keep: its open array's new items merged (see :meth:`_Open.settled`)."""
    if isinstance(got, tuple) and got[2] is not None and got[2].extra:
        return got[0], got[1], got[2].settled()
    return got
