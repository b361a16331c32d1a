"""Run-time exactly-one ``oneOf`` over objects (:class:`OneOfProgram`, ``kind="oneof"`` marks).

Where the schema algebra cannot build the exclusion ``Bi ∧ ¬Bj`` of overlapping object
branches, the JSON Schema front-end (:mod:`formcast.frontends.jsonschema.oneof`) emits the
objects of every branch, each inside a *marked* rule whose frame stays on the parser's stacks
while inside the object, and writes the check "exactly one branch accepts this object" into
the mark (``UniqueItemsMark.check``).  This program rebuilds the check from the mark (in
whatever process loaded the grammar) and runs it:

* **Which stacks.**  As for the distinct-keys program
  (:mod:`~formcast.index.programs.unique.keys`): a stack whose nearest marked frame has left
  its start state is inside that object; the object (a *level*) is registered at its ``{``, by
  its depth in the text, and the text from the ``{`` is kept per level.
* **The check.**  Just before the structural ``}`` that closes a level, the object's text is
  decoded (``json.loads``: a repeated key keeps its last value, as validators do) and the
  stacks inside a mark whose check fails are removed (other stacks go on).  Nothing else is
  refused.
* **No dead end.**  The front-end marks an object only when, from any prefix of each branch's
  alternative, members can be appended that set it apart from every other branch (see the
  front-end module): so only the ``}`` this program removes is ever missing, and the mask --
  the grammar's mask less the tokens that would read such a ``}`` (simulated byte by byte) --
  equals what ``accept_token`` accepts.

States are ``(parser state, lexical mode, track or None)`` of immutable values, so
``rollback``, ``fork`` and ``validate_tokens`` stay exact.  Lifetime: one program per compiled
grammar (:func:`~formcast.index.programs.dispatch.unique_items_program`), shared by its
requests; the checks' verdicts are memoized per object text (bounded).  Cost: a token with a
structural ``}`` inside a marked object is simulated; a check decodes the object's text once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...automata.pda import Frame, ParserState
from ...cache import LruCache
from ...frontends.jsonschema.oneof import ARRAY_RULE, check_of_mark
from ...ir.marks import UniqueItemsMark
from ..cfg_program import CfgProgram
from ..context import ContextSlot
from ..program import LimitStop
from .unique.keys import BraceTrackedProgram, _braces, _BraceTables
from .unique.lexer import ESC, IN, OUT, _tables, nearest_marked

__all__ = ["OneOfProgram"]

#: the verdict memo's bound on the object texts it keeps (bytes, per program)
_MEMO_BYTES = 4 << 20


def _weight(entry: tuple[bool, int]) -> int:
    return entry[1]


@dataclass(frozen=True, slots=True)
class _Track:
    """The JSON text from the outermost open marked object (immutable).  ``stack``: its open
    containers; ``levels``: per open marked object ``(position in stack, its text so far)``;
    ``links``: ``(marked rule, the marked frame's parent, position)``."""

    stack: str
    levels: tuple[tuple[int, bytes], ...]
    links: tuple[tuple[int, Frame | None, int], ...]


_State = tuple[ParserState, int, "_Track | None"]


#: the bracket tables of a vocabulary (one entry per vocabulary context)
BRACKET_TABLES: ContextSlot[None, _BraceTables] = ContextSlot(
    "json_bracket_tables", lambda vocab, _: _BraceTables(vocab, arrays=True)
)


class OneOfProgram(BraceTrackedProgram[_Track]):
    """The matcher program of a grammar with ``kind="oneof"`` marks (see the module
    docstring).  Lifetime: one per compiled grammar, shared by its requests (thread-safe)."""

    _stat = "oneof_simulated"
    _note = " (in an object that must match exactly one oneOf branch)"

    def __init__(self, cfg: CfgProgram, marks: tuple[UniqueItemsMark, ...]) -> None:
        self.cfg = cfg
        self.vocab = cfg.vocab
        self.marks = marks
        names = {name: i for i, name in enumerate(cfg.auto.names)}
        self._start: dict[int, int] = {}
        self._check: dict[int, Callable[[bytes], bool]] = {}
        decoded: dict[str, Callable[[bytes], bool]] = {}  # (marks of one group share one)
        for m in marks:
            rid = names.get(m.rule)
            if rid is None:
                continue  # (an object the grammar dropped)
            check = decoded.get(m.check)
            if check is None:
                check = decoded[m.check] = check_of_mark(m)
            self._start[rid] = int(cfg.auto.dfas[rid].start)
            self._check[rid] = check
        self._lex = _tables(cfg.vocab)
        #: some marked value is an array: ``[`` opens a level too, checked at its ``]``
        self._arrays = any(m.rule.startswith(ARRAY_RULE) for m in marks)
        self._braces = BRACKET_TABLES.of(cfg.vocab, None) if self._arrays else _braces(cfg.vocab)
        self._near: weakref.WeakKeyDictionary[Frame, Any] = weakref.WeakKeyDictionary()
        #: (rule, object text) -> (verdict, weight): at most 4096 entries and _MEMO_BYTES
        #: of texts (LruCache: lock-free reads, locked puts)
        self._verdicts: LruCache[tuple[int, bytes], tuple[bool, int]] = LruCache(
            4096, max_weight=_MEMO_BYTES, weight=_weight
        )
        self._lock = threading.Lock()
        self.simulated = 0

    def _nearest(self, frame: Frame) -> Any:
        return nearest_marked(self._near, self._start, self._lock, frame)

    def _verdict(self, rule: int, text: bytes) -> bool:
        found, hit = self._verdicts.get((rule, text))
        if found and hit is not None:
            return hit[0]
        ok = self._check[rule](text)
        self._verdicts.put((rule, text), (ok, len(text) + 64))
        return ok

    def _closing(
        self,
        ps: ParserState,
        pos: int,
        text: bytes,
        links: tuple[tuple[int, Frame | None, int], ...],
    ) -> ParserState:
        """Before the ``}`` of the level at ``pos``: without the stacks whose check fails."""
        bad = {(r, p) for r, p, q in links if q == pos and not self._verdict(r, text)}
        if not bad:
            return ps
        drop = frozenset(f for f in ps.frames if self._nearest(f) in bad)
        if not drop:
            return ps
        return self.cfg.pda.state_of(ps.frames - drop, ps.accepting)

    def _run(self, state: _State, data: bytes) -> _State | LimitStop | None:
        ps, mode, tr = state
        step = self.cfg.pda.step
        links: tuple[tuple[int, Frame | None, int], ...]
        if tr is None:
            stack, links = "", ()
            levels: list[list[Any]] = []
        else:
            stack, links = tr.stack, tr.links
            levels = [list(lv) for lv in tr.levels]
        arrays = self._arrays
        for b in data:
            if (
                mode == OUT
                and (b == 0x7D or (b == 0x5D and arrays))
                and levels
                and levels[-1][0] == len(stack) - 1
            ):
                ps = self._closing(ps, levels[-1][0], levels[-1][1] + bytes((b,)), links)
                if ps.is_dead:
                    return None
            nxt = step(ps, b)
            if nxt.is_dead:
                return LimitStop(nxt.error) if nxt.error else None
            ps = nxt
            one = bytes((b,))
            for lv in levels:
                lv[1] += one
            if mode != OUT:
                mode = IN if mode == ESC else ESC if b == 0x5C else OUT if b == 0x22 else IN
                continue
            if b == 0x22:
                mode = IN
            elif b == 0x7B or b == 0x5B:
                if not stack and b == 0x5B and not arrays:
                    continue
                stack += "o" if b == 0x7B else "a"
                if b == 0x7B or arrays:
                    links, levels = self._register(ps, len(stack) - 1, links, levels, b)
                    if not levels:
                        stack = ""
            elif (b == 0x7D or b == 0x5D) and stack:
                gone = len(stack) - 1
                stack = stack[:-1]
                if levels and levels[-1][0] == gone:
                    levels.pop()
                    links = tuple(x for x in links if x[2] != gone)
                if not stack:
                    levels, links = [], ()
        if not stack:
            return (ps, mode, None)
        lvs = tuple((int(x[0]), bytes(x[1])) for x in levels)
        return (ps, mode, _Track(stack, lvs, links))

    def _register(
        self,
        ps: ParserState,
        pos: int,
        links: tuple[tuple[int, Frame | None, int], ...],
        levels: list[list[Any]],
        opener: int = 0x7B,
    ) -> tuple[tuple[tuple[int, Frame | None, int], ...], list[list[Any]]]:
        """After a ``{`` (or, with marked arrays, a ``[``) at ``pos``: the stacks whose
        nearest marked frame is new are inside a new level (this object or array)."""
        known = {(r, p) for r, p, _ in links}
        new: list[tuple[int, Frame | None, int]] = []
        for f in ps.frames:
            key = self._nearest(f)
            if key is not None and key not in known:
                known.add(key)
                new.append((key[0], key[1], pos))
        if not new:
            return links, levels
        return (*links, *new), [*levels, [pos, bytes((opener,))]]
