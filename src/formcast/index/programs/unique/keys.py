"""Run-time ``minProperties`` over distinct keys (:class:`DistinctKeysProgram`, ``kind="keys"``).

A validator reads a JSON object into a map: a repeated key keeps its last value, so an object's
member count is the number of its *distinct* (decoded) keys -- ``uniqueItems`` over keys.  A
grammar cannot count distinct names, so the JSON Schema front-end emits an object whose
``minProperties`` needs two or more undeclared members as an ordinary object rule without the
count, *marked* (:class:`~formcast.ir.marks.UniqueItemsMark` with ``kind="keys"``,
``min_len`` = ``minProperties``; see :mod:`formcast.frontends.jsonschema.distinct_keys`), and
this program counts the keys:

* **Which stacks.**  As for the ``uniqueItems`` programs: a stack whose nearest frame of a
  marked rule has read that rule's ``{`` is inside that object.  The marked rule reads its own
  closing ``}`` (the members are a sub-rule), so its frame stays on the stack until then.  JSON's
  lexical structure is a function of the bytes, so the object's keys are read off the text: per
  open marked object (a *level*, by its depth in the text) the set of decoded keys written.
* **The check.**  Just before a ``}`` that closes a level's object, the stacks inside it whose
  mark asks more distinct keys than were written are removed (other stacks -- a branch without
  the count -- go on).  Nothing else is refused: a repeated key is valid JSON for a validator.
* **No dead end.**  The front-end marks an object only when its undeclared names are
  inexhaustible (more than any run can write; every such name's value satisfiable) and
  ``maxProperties`` is absent.  So from any state the grammar allows, the current member can be
  finished and fresh undeclared members appended until the count is reached, inner marked
  objects first; only the ``}`` this program removes is ever missing.  The mask is therefore the
  grammar's mask less the tokens that would read such a ``}`` (simulated byte by byte: only
  tokens with a structural ``}``, and once every open level has its keys only those that also
  open an object), and equals what ``accept_token`` accepts.

States are ``(parser state, lexical mode, track or None)`` of immutable values, so
``rollback``, ``fork`` and ``validate_tokens`` of the matcher stay exact.  Lifetime: one
program per compiled grammar (:func:`~formcast.index.programs.dispatch.unique_items_program`),
shared by its requests; the per-vocabulary brace tables are built once per vocabulary context
(O(V): the :data:`BRACE_TABLES` slot of :mod:`formcast.index.context`).
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from ....automata.pda import Frame, ParserState
from ....ir.marks import UniqueItemsMark
from ....vocab.vocabulary import Vocabulary
from ...cfg_program import CfgProgram
from ...context import ContextSlot
from ...program import LimitStop
from ..checked import CheckedProgram
from .lexer import (
    ESC,
    IN,
    OUT,
    _packed,
    _tables,
    nearest_marked,
    refuse_simulated,
    token_bytes,
)

__all__ = ["BraceTrackedProgram", "DistinctKeysProgram"]


@dataclass(frozen=True, slots=True)
class _KeysTrack:
    """The JSON text from the outermost open marked object (immutable).

    ``stack``: its open containers (``o`` objects, ``a`` arrays), the marked object first;
    ``levels``: per open marked object ``(position in stack, decoded keys written, phase: 0
    before a key, 1 in one, 2 after one, raw bytes of the key being read)``; ``links``: which
    parser frames are inside which level, ``(marked rule, the marked frame's parent,
    position)``, recorded at the object's ``{``."""

    stack: str
    levels: tuple[tuple[int, frozenset[str], int, bytes], ...]
    links: tuple[tuple[int, Frame | None, int], ...]


_KState = tuple[ParserState, int, "_KeysTrack | None"]


class _BraceTables:
    """Per vocabulary and starting lexical mode, bitmasks of the tokens that read a
    structural ``{`` (``opens``) or ``}`` (``closes``) -- outside strings; with ``arrays``,
    ``[`` and ``]`` count too (the tables of a grammar whose marked values include arrays).
    Read-only; O(V), vectorized but for the tokens with a brace or bracket."""

    def __init__(self, vocab: Vocabulary, *, arrays: bool = False) -> None:
        size = vocab.vocab_size
        opens = [np.zeros(size, dtype=bool) for _ in range(3)]
        closes = [np.zeros(size, dtype=bool) for _ in range(3)]
        openers = (0x7B, 0x5B) if arrays else (0x7B,)
        closers = (0x7D, 0x5D) if arrays else (0x7D,)
        tb = token_bytes(vocab)
        for tid in np.flatnonzero(tb.count(b"{}[]" if arrays else b"{}") > 0).tolist():
            data = tb.tokens[tid]
            for start in (OUT, IN, ESC):
                mode = start
                for b in data:
                    if mode == OUT:
                        if b == 0x22:
                            mode = IN
                        elif b in openers:
                            opens[start][tid] = True
                        elif b in closers:
                            closes[start][tid] = True
                    elif mode == IN:
                        mode = OUT if b == 0x22 else ESC if b == 0x5C else IN
                    else:
                        mode = IN
        self.opens = [_packed(m, size) for m in opens]
        self.closes = [_packed(m, size) for m in closes]


#: the brace tables of a vocabulary (one entry per vocabulary context)
BRACE_TABLES: ContextSlot[None, _BraceTables] = ContextSlot(
    "json_brace_tables", lambda vocab, _: _BraceTables(vocab)
)


def _braces(vocab: Vocabulary) -> _BraceTables:
    return BRACE_TABLES.of(vocab, None)


def _decoded_key(raw: bytes) -> str:
    """The decoded value of a key's string body ``raw`` (the grammar only lets valid JSON
    string bodies through; anything else is kept raw, still a distinct name)."""
    try:
        got = json.loads(b'"' + raw + b'"')
    except ValueError:
        return "\x00raw:" + raw.hex()
    return got if isinstance(got, str) else "\x00raw:" + raw.hex()


_TrackT = TypeVar("_TrackT")


class BraceTrackedProgram(CheckedProgram[tuple[ParserState, int, _TrackT | None]]):
    """The program-protocol methods shared by the run-time programs that follow marked objects
    by their braces (:class:`DistinctKeysProgram`, :class:`~formcast.index.programs.oneof.
    OneOfProgram`; the rest: :class:`~formcast.index.programs.checked.CheckedProgram`): states
    ``(ParserState, lexical mode, track or None)``; a token that cannot open or close a marked
    object is the grammar's step, any other is simulated byte by byte (``_run``, the
    subclass's).  Subclasses set ``cfg``, ``vocab``, ``_lex``, ``_braces`` and ``simulated``,
    name their statistic (``_stat``) and what :meth:`expected` adds (``_note``), and say when
    only tokens that open an object can be refused
    (:meth:`_opens_only`).  Stateless itself: lifetime and thread-safety are the subclass's."""

    _note: ClassVar[str]
    _lex: Any
    _braces: _BraceTables

    def _opens_only(self, tr: _TrackT | None) -> bool:
        """Whether no open level can be refused its ``}``: then only a token that opens an
        object (a new level) needs simulating in :meth:`token_mask`."""
        return tr is None

    def initial_state(self) -> tuple[ParserState, int, _TrackT | None]:
        return (self.cfg.initial_state(), OUT, None)

    def advance(
        self, state: tuple[ParserState, int, _TrackT | None], token_id: int
    ) -> tuple[ParserState, int, _TrackT | None] | LimitStop | None:
        data = self.vocab.token_bytes(token_id)
        if not data:
            return None
        ps, mode, tr = state
        if tr is None and not self._bit(self._braces.opens[mode], token_id):
            nxt = self.cfg.advance(ps, token_id)
            if not isinstance(nxt, ParserState):
                return nxt
            return (nxt, self._lex.end[mode][token_id], None)
        self.simulated += 1
        return self._run(state, data)

    def token_mask(self, state: tuple[ParserState, int, _TrackT | None]) -> np.ndarray:
        """The grammar's mask of the state, less the tokens the check refuses: the allowed
        tokens that read a structural ``}`` (and, where :meth:`_opens_only`, a ``{`` before
        it) are simulated byte by byte; the others cannot be refused by the check."""
        ps, mode, tr = state
        words = self.cfg.token_mask(ps)
        slow_words = words & self._braces.closes[mode]
        if self._opens_only(tr):
            slow_words = slow_words & self._braces.opens[mode]
        out, simulated = refuse_simulated(words, slow_words, state, self._run, self.vocab)
        self.simulated += simulated
        return out

    def expected(
        self, state: tuple[ParserState, int, _TrackT | None]
    ) -> tuple[str, tuple[int, ...]]:
        desc, nxt = self.cfg.expected(state[0])
        if state[2] is not None:
            desc += self._note
        return desc, nxt


class DistinctKeysProgram(BraceTrackedProgram["_KeysTrack"]):
    """The matcher program of a grammar with ``kind="keys"`` marks: the grammar's
    :class:`CfgProgram` plus the run-time count of distinct keys (see the module docstring).
    States are ``(ParserState, lexical mode, track or None)``.  Lifetime: one per compiled
    grammar, shared by its requests (thread-safe: memo tables under a lock)."""

    _stat = "distinct_keys_simulated"
    _note = " (in an object that needs more distinct keys: minProperties)"

    def __init__(self, cfg: CfgProgram, marks: tuple[UniqueItemsMark, ...]) -> None:
        self.cfg = cfg
        self.vocab = cfg.vocab
        self.marks = marks
        names = {name: i for i, name in enumerate(cfg.auto.names)}
        self._start: dict[int, int] = {}
        self._min: dict[int, int] = {}
        for m in marks:
            rid = names.get(m.rule)
            if rid is not None:  # (a mark whose object the grammar dropped as unsatisfiable)
                self._start[rid] = int(cfg.auto.dfas[rid].start)
                self._min[rid] = m.min_len
        self._lex = _tables(cfg.vocab)
        self._braces = _braces(cfg.vocab)
        self._near: weakref.WeakKeyDictionary[Frame, Any] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self.simulated = 0  # tokens checked byte by byte (a statistic)

    # -- stacks ---------------------------------------------------------------------------------
    def _nearest(self, frame: Frame) -> Any:
        """``(rule, parent)`` of the nearest marked frame at or below ``frame`` that has read
        its ``{`` (None: none).  Memoized per frame."""
        return nearest_marked(self._near, self._start, self._lock, frame)

    def _register(
        self,
        ps: ParserState,
        pos: int,
        links: tuple[tuple[int, Frame | None, int], ...],
        levels: list[list[Any]],
    ) -> tuple[tuple[tuple[int, Frame | None, int], ...], list[list[Any]]]:
        """After a ``{`` at ``pos``: the stacks whose nearest marked frame is new are inside a
        new level (this object)."""
        known = {(r, p) for r, p, _ in links}
        new: list[tuple[int, Frame | None, int]] = []
        for f in ps.frames:
            key = self._nearest(f)
            if key is not None and key not in known:
                known.add(key)
                new.append((key[0], key[1], pos))
        if not new:
            return links, levels
        return (*links, *new), [*levels, [pos, frozenset(), 0, b""]]

    def _closing(
        self, ps: ParserState, lv: list[Any], links: tuple[tuple[int, Frame | None, int], ...]
    ) -> ParserState:
        """Before the ``}`` of level ``lv``: without the stacks whose mark asks more keys."""
        short = {(r, p) for r, p, pos in links if pos == lv[0] and self._min[r] > len(lv[1])}
        if not short:
            return ps
        drop = frozenset(f for f in ps.frames if self._nearest(f) in short)
        if not drop:
            return ps
        return self.cfg.pda.state_of(ps.frames - drop, ps.accepting)

    # -- stepping -------------------------------------------------------------------------------
    def _run(self, state: _KState, data: bytes) -> _KState | LimitStop | None:
        """The state after ``data``, byte by byte, with the check (the exact path)."""
        ps, mode, tr = state
        step = self.cfg.pda.step
        links: tuple[tuple[int, Frame | None, int], ...]
        if tr is None:
            stack, links = "", ()
            levels: list[list[Any]] = []
        else:
            stack, links = tr.stack, tr.links
            levels = [list(lv) for lv in tr.levels]
        for b in data:
            if mode == OUT and b == 0x7D and levels and levels[-1][0] == len(stack) - 1:
                ps = self._closing(ps, levels[-1], links)  # (its frames go with the ``}``)
                if ps.is_dead:
                    return None
            nxt = step(ps, b)
            if nxt.is_dead:
                return LimitStop(nxt.error) if nxt.error else None
            ps = nxt
            if mode != OUT:
                lv = levels[-1] if levels else None
                if lv is not None and (lv[0] != len(stack) - 1 or lv[2] != 1):
                    lv = None
                if mode == ESC:
                    mode = IN
                elif b == 0x5C:
                    mode = ESC
                elif b == 0x22:
                    mode = OUT
                    if lv is not None:  # a key ends
                        lv[1] = lv[1] | {_decoded_key(lv[3])}
                        lv[2], lv[3] = 2, b""
                    continue
                if lv is not None:
                    lv[3] += bytes((b,))
                continue
            if b == 0x22:
                mode = IN
                if levels and levels[-1][0] == len(stack) - 1 and levels[-1][2] == 0:
                    levels[-1][2], levels[-1][3] = 1, b""
            elif b == 0x7B or b == 0x5B:
                if not stack and b == 0x5B:
                    continue  # (outside every marked object: nothing to track)
                stack += "o" if b == 0x7B else "a"
                if b == 0x7B:
                    links, levels = self._register(ps, len(stack) - 1, links, levels)
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
            elif b == 0x2C and levels and levels[-1][0] == len(stack) - 1:
                levels[-1][2] = 0
        if not stack:
            return (ps, mode, None)
        lvs = tuple((int(x[0]), x[1], int(x[2]), bytes(x[3])) for x in levels)
        return (ps, mode, _KeysTrack(stack, lvs, links))

    # -- the program protocol (the rest: BraceTrackedProgram) ---------------------------------
    def _opens_only(self, tr: _KeysTrack | None) -> bool:
        # no open level can be refused its ``}`` once every level has its keys (counts only
        # grow): only a token that opens an object, which may be a new level, can close one
        # too early
        return tr is None or self._satisfied(tr)

    def _satisfied(self, tr: _KeysTrack) -> bool:
        """Whether every open level already has the distinct keys its marks ask."""
        need: dict[int, int] = {}
        for r, _, pos in tr.links:
            need[pos] = max(need.get(pos, 0), self._min[r])
        return all(len(keys) >= need.get(pos, 0) for pos, keys, _, _ in tr.levels)
