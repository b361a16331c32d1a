"""A byte-level pushdown automaton over a :class:`GrammarAutomaton`.

A *frame* is (rule, DFA state, parent frame): the parent is where the rule returns to.  Stacks
are persistent linked lists of interned frames, so equal stacks are the same object and pushing
or popping is O(1) with no copying.  A :class:`ParserState` is the set of *scan-ready* stacks
(the tops that can consume a byte) after the epsilon closure (calls and returns), plus whether
the input so far is a complete sentence.  Sets of stacks make the automaton exact for any
grammar without left recursion, ambiguous ones included.

* Calls whose return state is accepting with no way out are tail calls: the callee returns
  straight to the caller's parent, so right recursion (``list ::= item list | ""``) does not
  grow the stack.
* Closures are memoized per frame and byte steps per (state, byte); states are interned, so
  they are cheap dictionary keys for every cache above this layer.
* Nothing recurses in Python: 100,000 levels of nesting are 100,000 frames, not a crash.
* The token index's candidate checks (sorted byte strings walked from one state, each
  resuming after the prefix it shares with the one before) run here:
  :meth:`PushdownAutomaton.check_strings` and :meth:`~PushdownAutomaton.check_suffixes`
  (compiled with this module, a check's memo look-ups and byte compares cost half as much).

Lifetime: one per compiled grammar, shared by its requests.  Caches are bounded by
:class:`ParserLimits.max_cache_entries`; when full they are cleared (correctness never depends on
them).  *Far* frames (see ``far_count``: a counter deeper than any token reaches, as inside a
``maxLength: 1000000`` string) are request-specific: they and the states holding them are
interned weakly and never memoized, so they cost nothing once no matcher holds them, and a
long generation does not grow the shared caches.  Limits exceeded on model output never raise:
the step returns a dead state carrying an ``error`` message.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from .._native import interpreted_class
from ..limits import ParserLimits
from .dfa import DEAD
from .rules import GrammarAutomaton

__all__ = ["Frame", "ParserState", "PushdownAutomaton", "measure_shares"]

#: cache entries one row of a rule table made a Python list counts for in
#: :meth:`PushdownAutomaton.cache_entries` (~2.1 KB: a 256-element list, against the ~260
#: bytes of an entry)
_ROW_ENTRIES = 8


# (Frame and ParserState stay interpreted classes where this module is compiled with mypyc:
# far frames and states are interned weakly, and mypyc's native classes take no weak reference)
@interpreted_class
class Frame:
    """An interned stack frame: rule id, DFA state, parent (return) frame, depth.

    Frames of a counted rule also carry ``need`` (iterations still required, the current one
    included) and ``left`` (iterations still allowed, the current one included; -1 when
    unbounded); both are 0 in ordinary frames.
    """

    __slots__ = ("__weakref__", "depth", "far", "left", "need", "parent", "rule", "state")

    def __init__(
        self,
        rule: int,
        state: int,
        parent: Frame | None,
        need: int = 0,
        left: int = 0,
        *,
        far: bool = False,
    ) -> None:
        self.rule: int = rule
        self.state: int = state
        self.parent: Frame | None = parent
        self.need: int = need
        self.left: int = left
        self.depth: int = 1 if parent is None else parent.depth + 1
        # a counter of this frame or below it is out of a token's reach: request-specific
        self.far: bool = far

    def __repr__(self) -> str:
        count = f", need={self.need}, left={self.left}" if self.need or self.left else ""
        return f"Frame(rule={self.rule}, state={self.state}{count}, depth={self.depth})"


@interpreted_class
class ParserState:
    """An interned parser configuration (immutable; compare and hash by identity).

    Attributes:
        frames: the scan-ready stack tops.
        accepting: the input so far is a complete sentence.
        error: set when a run-time limit stopped the parser (the state is then dead).
    """

    __slots__ = ("__weakref__", "accepting", "dead", "error", "far", "frames", "uid")

    def __init__(
        self, frames: frozenset[Frame], accepting: bool, uid: int, error: str | None = None
    ) -> None:
        self.frames = frames
        self.accepting = accepting
        self.uid = uid
        self.error = error
        far = False
        for f in frames:  # (a loop: a generator's setup is most of a small state's cost)
            if f.far:
                far = True
                break
        self.far = far
        # :attr:`is_dead` as a plain attribute, for the hot loops (a slot read is a tenth of
        # a property call: candidate checks read it once per byte)
        self.dead: bool = not frames and not accepting

    @property
    def is_dead(self) -> bool:
        return self.dead

    def __repr__(self) -> str:
        tops = sorted((f.rule, f.state, f.depth) for f in self.frames)[:6]
        extra = f", error={self.error!r}" if self.error else ""
        return f"ParserState(#{self.uid}, tops={tops}, accepting={self.accepting}{extra})"


@interpreted_class  # (a ``dict`` subclass with ``__missing__``: an ordinary class under mypyc)
class _PerRule(dict[int, list[bool]]):
    """``rule -> list``, each list made by ``make(rule)`` on its first lookup (a plain dict
    lookup after that).  Two threads may both make a missing entry: equal lists, either kept."""

    __slots__ = ("_make", "_rules")

    def __init__(self, make: Callable[[int], list[bool]], rules: int) -> None:
        super().__init__()
        self._make, self._rules = make, rules

    def __missing__(self, rule: object) -> list[bool]:
        # (``object``: a compiled method checks an ``int`` argument's type itself, raising
        # TypeError where the interpreted one raises IndexError)
        if type(rule) is not int or not 0 <= rule < self._rules:
            raise IndexError(f"rule {rule!r} out of range")
        v = self[rule] = self._make(rule)
        return v


# (module functions, bound with functools.partial by PushdownAutomaton: a bound method in its
# own _PerRule attribute would make the automaton a reference cycle, which keeps a dropped
# grammar's DFAs, tables and states alive until a full collection)
def _accepting_of(auto: GrammarAutomaton, rule: int) -> list[bool]:
    return auto.dfas[rule].accepting.tolist()  # type: ignore[no-any-return]


def _has_bytes_of(tables: list[np.ndarray], rule: int) -> list[bool]:
    return (tables[rule] != DEAD).any(axis=1).tolist()  # type: ignore[no-any-return]


def _tail_of(auto: GrammarAutomaton, rule: int) -> list[bool]:
    return auto.tail[rule].tolist()  # type: ignore[no-any-return]


def measure_shares(data_of: list[bytes], shared: list[int]) -> list[bytes]:
    """Completes ``shared`` in place for the sorted strings ``data_of`` (per string, the
    length of the prefix it shares with the string before it; -1 where not measured yet,
    0 for the first) and returns each string past that prefix: what a candidate set's
    second check keeps for its next ones (``cfg_program._verify_strings``, its
    :class:`_Prefixes`).  Here so that the compiled build runs the byte compares as C (a
    tenth of the interpreted loop's time).  O(bytes of the unmeasured shared prefixes);
    nothing kept."""
    n = len(data_of)
    for j in range(1, n):
        if shared[j] < 0:
            data = data_of[j]
            prev = data_of[j - 1]
            limit = min(len(data), len(prev))
            k = 0
            while k < limit and data[k] == prev[k]:
                k += 1
            shared[j] = k
    if n:  # (an empty set, checked again, keeps empty lists)
        shared[0] = 0
    out: list[bytes] = []
    for j in range(n):
        k = shared[j]
        out.append(data_of[j][k:] if k else data_of[j])
    return out


class PushdownAutomaton:
    """Runs a :class:`GrammarAutomaton` byte by byte (see the module docstring)."""

    def __init__(
        self,
        auto: GrammarAutomaton,
        limits: ParserLimits | None = None,
        *,
        far_count: int | None = None,
        initial_closure: bool = True,
    ) -> None:
        """``far_count``: frames with a counter above it (and the frames above those) are
        *far*: request-specific, interned weakly, never memoized (see the module docstring).
        ``CfgProgram`` passes its count cap (the longest token + 1).  None: none are far.
        ``initial_closure=False``: :attr:`initial` is computed on first use, or set by the
        caller (a grammar loaded from disk sets the state it wrote)."""
        self.auto = auto
        self.limits = limits or ParserLimits()
        self.far_count = far_count
        self._uids = itertools.count()
        self._tables = [d.table for d in auto.dfas]
        n = len(self._tables)
        # per-rule Python lists (fast in the closure loop), each made on the rule's first use:
        # a grammar loaded from disk with its masks cached only ever closes over a few rules
        self._accepting: _PerRule = _PerRule(partial(_accepting_of, auto), n)
        self._has_bytes: _PerRule = _PerRule(partial(_has_bytes_of, self._tables), n)
        self._tail: _PerRule = _PerRule(partial(_tail_of, auto), n)
        self._starts = [d.start for d in auto.dfas]
        self._views: list[memoryview | None] = [None] * n
        self._counts = [auto.count_of(r) for r in range(len(auto.dfas))]
        self.has_counts = any(c is not None for c in self._counts)
        self._lock = threading.RLock()
        self._initial_state: ParserState | None = None
        self.cache_resets = -1  # (counts the resets: _reset_caches makes it 0)
        self._reset_caches()
        if initial_closure:
            self._initial_state = self._initial()

    @property
    def initial(self) -> ParserState:
        """The state before any input (interned; computed on first use if not yet known)."""
        s = self._initial_state
        if s is None:
            with self._lock:
                s = self._initial_state
                if s is None:
                    s = self._initial_state = self._initial()
        return s

    @initial.setter
    def initial(self, state: ParserState) -> None:
        self._initial_state = state

    def _reset_caches(self) -> None:
        # per rule, per state: the table's row as a memoryview of the rule's table (a slice of
        # :meth:`_flat`'s view), None until a step reads it: an element read is a Python int
        # (two thirds of a tuple's element read, a fifth of a numpy scalar read and its
        # int()), and a row is made in ~0.1 us where a 256-int tuple took ~1.7 us (most new
        # DFA states are read a few times: a counted run's next iteration); ~200 bytes each,
        # still counted as _ROW_ENTRIES cache entries (see cache_entries, as when rows were
        # 2 KB tuples: the caches fill and reset where they did), cleared with the caches
        self._rows: list[list[memoryview | None]] = [[None] * int(t.shape[0]) for t in self._tables]
        self._row_count = 0
        # keyed by the parent's id: the frame references its parent, so the id stays unique
        self._frames: dict[tuple[int, int, int, int, int], Frame] = {}
        # (frame, cap) -> capped frame; keyed by the frame itself (identity hash), which keeps
        # it alive, so no id is reused while its entry exists
        self._capped: dict[tuple[Frame, int], Frame] = {}
        self._states: dict[tuple[frozenset[Frame], bool], ParserState] = {}
        self._closures: dict[Frame, tuple[frozenset[Frame], bool]] = {}
        self._steps: dict[tuple[ParserState, int], ParserState] = {}
        # (state, byte) -> the step's far state with its counters capped (see step_capped)
        self._capped_steps: dict[tuple[ParserState, int], ParserState] = {}
        # far frames and states: alive only while some matcher (or a state) holds them
        self._far_frames: weakref.WeakValueDictionary[tuple[int, int, int, int, int], Frame] = (
            weakref.WeakValueDictionary()
        )
        self._far_states: weakref.WeakValueDictionary[
            tuple[frozenset[Frame], bool], ParserState
        ] = weakref.WeakValueDictionary()
        self._far_capped: weakref.WeakKeyDictionary[Frame, tuple[int, Frame]] = (
            weakref.WeakKeyDictionary()
        )
        self._far_peak = 0
        self._far_made = False  # a far frame was made since: see _maybe_reset
        self._dead = ParserState(frozenset(), False, -1)
        self.cache_resets += 1

    def _compact_far(self) -> None:
        """Dicts never shrink: once the far entries of finished requests are gone (fewer than
        an eighth of the peak), rebuild the weak tables so their slots are freed too."""
        n = len(self._far_frames)
        if n > self._far_peak:
            self._far_peak = n
        elif self._far_peak > 1024 and n < self._far_peak // 8:
            self._far_frames = weakref.WeakValueDictionary(self._far_frames)
            self._far_states = weakref.WeakValueDictionary(self._far_states)
            self._far_capped = weakref.WeakKeyDictionary(self._far_capped)
            self._far_peak = n

    def cache_entries(self) -> int:
        """Entries of the shared (strong) caches: what ``max_cache_entries`` bounds (a row
        of the tables made a Python list counts as :data:`_ROW_ENTRIES` entries)."""
        return (
            len(self._frames)
            + len(self._steps)
            + len(self._states)
            + len(self._closures)
            + len(self._capped)
            + len(self._capped_steps)
            + _ROW_ENTRIES * self._row_count
        )

    def _maybe_reset(self) -> None:
        # (once per new step: :meth:`cache_entries` written out, and no far-frame bookkeeping
        # where no far frame was ever made, which was 40 % of a new step's time)
        if self.far_count is not None and (self._far_peak or self._far_made):
            self._compact_far()
        if (
            len(self._frames)
            + len(self._steps)
            + len(self._states)
            + len(self._closures)
            + len(self._capped)
            + len(self._capped_steps)
            + _ROW_ENTRIES * self._row_count
            > self.limits.max_cache_entries
        ):
            known = self._initial_state is not None
            self._reset_caches()
            self._initial_state = self._initial() if known else None

    # -- interning ------------------------------------------------------------------------------
    def frame(
        self, rule: int, state: int, parent: Frame | None, need: int = 0, left: int = 0
    ) -> Frame:
        key = (rule, state, need, left, id(parent))
        fc = self.far_count
        far = fc is not None and (need > fc or left > fc or (parent is not None and parent.far))
        table = self._far_frames if far else self._frames
        f = table.get(key)
        if f is None:
            f = Frame(rule, state, parent, need, left, far=far)
            table[key] = f
            if far:
                self._far_made = True
        return f

    def _call(self, callee: int, ret: Frame | None) -> Frame:
        """The frame entering ``callee`` that returns to ``ret``."""
        count = self._counts[callee]
        if count is None:
            return self.frame(callee, self._starts[callee], ret)
        lo, hi = count
        return self.frame(callee, self._starts[callee], ret, lo, -1 if hi is None else hi)

    def capped(self, state: ParserState, cap: int, *, relax: bool = False) -> ParserState:
        """``state`` with every counter clipped to ``cap`` (``need``, and ``left`` unless
        unbounded).  For input shorter than ``cap`` iterations, the clipped state accepts
        exactly what ``state`` accepts, so masks can be shared across counts: a token of at
        most ``cap - 1`` bytes completes at most ``cap - 1`` iterations (each consumes a byte).

        ``relax``: a ``left`` of ``cap`` or more becomes unbounded (-1) rather than
        ``cap``, as exact for input shorter than ``cap`` (it completes at most ``cap - 1``
        iterations, so the bound is out of its reach: a ``left`` of ``cap`` still allows one
        more after them); a relaxed counter does not count down, so the states a string's
        bytes step through are the same at every byte (see :meth:`step_capped`), and a
        capped state (``left == cap``) relaxed is the state its string's steps reach.
        O(stack depth) the first time a frame is seen, O(1) after."""
        if not self.has_counts or not state.frames:
            return state
        with self._lock:
            frames = frozenset(self._cap_frame(f, cap, relax=relax) for f in state.frames)
            if frames == state.frames:
                return state
            return self._state(frames, state.accepting)

    def _cap_frame(self, fr: Frame, cap: int, *, relax: bool = False) -> Frame:
        key = -cap if relax else cap  # (caps are positive: -cap marks the relaxed clip)
        chain: list[Frame] = []
        cur: Frame | None = fr
        base: Frame | None = None
        while cur is not None:
            if cur.far:
                got = self._far_capped.get(cur)
                hit = got[1] if got is not None and got[0] == key else None
            else:
                hit = self._capped.get((cur, key))
            if hit is not None:
                base = hit
                break
            chain.append(cur)
            cur = cur.parent
        for f in reversed(chain):
            over = f.left >= cap if relax else f.left > cap
            if f.need > cap or over or base is not f.parent:
                left = (-1 if relax else cap) if over else f.left
                new = self.frame(f.rule, f.state, base, min(f.need, cap), left)
            else:
                new = f
            if f.far:
                self._far_capped[f] = (key, new)
            else:
                self._capped[(f, key)] = new
            base = new
        assert base is not None  # the chain holds fr itself
        return base

    def _state(self, frames: frozenset[Frame], accepting: bool) -> ParserState:
        key = (frames, accepting)
        s = self._states.get(key)
        if s is None and self._far_made:  # (no far frame since the reset: no far state)
            s = self._far_states.get(key)
        if s is None:
            s = ParserState(frames, accepting, next(self._uids))
            (self._far_states if s.far else self._states)[key] = s
        return s

    def state_of(self, frames: frozenset[Frame], accepting: bool) -> ParserState:
        """The interned state with these scan-ready ``frames`` (a subset of some state's: a
        run-time check keeps only the stacks it allows, see
        :mod:`formcast.index.unique_items`).  O(1) amortized."""
        if not frames and not accepting:
            return self._dead
        with self._lock:
            return self._state(frames, accepting)

    def dead(self, error: str | None = None) -> ParserState:
        """A dead state (optionally carrying the reason a limit stopped the parser)."""
        if error is None:
            return self._dead
        return ParserState(frozenset(), False, -1, error)

    # -- closure and steps ----------------------------------------------------------------------
    def _initial(self) -> ParserState:
        tops, acc, err = self._closure(self._call(0, None))
        if err:
            return self.dead(err)
        return self._state(tops, acc)

    def _closure(self, start: Frame) -> tuple[frozenset[Frame], bool, str | None]:
        memo = self._closures.get(start)
        if memo is not None:
            return memo[0], memo[1], None
        r, q = start.rule, start.state
        if not self.auto.refs[r][q] and not self._accepting[r][q]:
            # no call, no return: the frame alone (inside a lexeme: most new steps of a walk),
            # what the loop below finds, without its sets
            result = frozenset((start,)) if self._has_bytes[r][q] else frozenset()
            if not start.far:
                self._closures[start] = (result, False)
            return result, False, None
        tables_has_bytes = self._has_bytes
        accepting_of = self._accepting
        refs_of = self.auto.refs
        tail_of = self._tail
        starts = self._starts
        counts = self._counts
        tops: set[Frame] = set()
        accepting = False
        seen = {start}
        todo = [start]
        work = 0
        max_work = self.limits.max_closure_work
        max_depth = self.limits.max_stack_depth
        while todo:
            fr = todo.pop()
            work += 1
            if work > max_work:
                return frozenset(), False, f"parser limit max_closure_work={max_work} exceeded"
            r, q = fr.rule, fr.state
            if tables_has_bytes[r][q]:
                tops.add(fr)
            if accepting_of[r][q]:
                parent = fr.parent
                done = True
                if counts[r] is not None:  # an iteration ends: maybe another, maybe return
                    need, left = max(fr.need - 1, 0), fr.left - 1 if fr.left > 0 else -1
                    if left != 0:
                        again = self.frame(r, starts[r], parent, need, left)
                        if again not in seen:
                            seen.add(again)
                            todo.append(again)
                    done = need == 0
                if done:
                    if parent is None:
                        accepting = True
                    elif parent not in seen:
                        seen.add(parent)
                        todo.append(parent)
            for callee, ret in refs_of[r][q]:
                if tail_of[r][ret]:
                    ret_frame = fr.parent
                else:
                    ret_frame = self.frame(r, ret, fr.parent, fr.need, fr.left)
                child = self._call(callee, ret_frame)
                if child.depth > max_depth:
                    return frozenset(), False, f"parser limit max_stack_depth={max_depth} exceeded"
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
                if child.need == 0 and counts[callee] is not None:  # zero iterations
                    if ret_frame is None:
                        accepting = True
                    elif ret_frame not in seen:
                        seen.add(ret_frame)
                        todo.append(ret_frame)
        result = frozenset(tops)
        if not start.far:  # a far frame's closure is needed once (its request's step)
            self._closures[start] = (result, accepting)
        return result, accepting, None

    def step(self, state: ParserState, byte: int) -> ParserState:
        """The state after one byte (a dead state if the byte is not allowed).  Memoized."""
        key = (state, byte)
        nxt = self._steps.get(key)
        if nxt is not None:
            return nxt
        # nothing is made (no lock, no interning) where every top's DFA rejects the byte (the
        # dead state), or where the only top's DFA loops on its state and the state is that
        # frame's own closure (the state itself): the rejected bytes after a return and the
        # string content bytes, most of the new steps of a candidate check on a new stack
        frames = state.frames
        rows = self._rows
        row: memoryview | None = None
        for fr in frames:
            row = rows[fr.rule][fr.state]
            if row is None or row[byte] != DEAD:
                break
        else:
            if not state.far:
                self._steps[key] = self._dead
            return self._dead
        if len(frames) != 1 or state.far:
            if not state.far and self._loops_back(state, byte):
                self._steps[key] = state
                return state
            with self._lock:
                nxt = self._step(state, byte)
                self._maybe_reset()
                if not (state.far or nxt.far):  # far states are request-specific
                    self._steps[key] = nxt
            return nxt
        if row is not None and not state.accepting and row[byte] == fr.state:
            memo = self._closures.get(fr)
            if memo is not None and not memo[1] and memo[0] == frames:
                self._steps[key] = state
                return state
        with self._lock:
            nxt = self._step_one(fr, row, byte)
            self._maybe_reset()
            if not nxt.far:  # far states are request-specific
                self._steps[key] = nxt
        return nxt

    def _loops_back(self, state: ParserState, byte: int) -> bool:
        """Whether ``byte`` steps ``state`` (several stack tops, not far) to itself because
        exactly one top takes it, its DFA loops on its state there, and ``state`` is that
        top's own closure (a string's content byte where the string may also end: the
        string rule's top, whose closure holds the tops it returns to, which reject the
        byte).  Then the step is that top's closure (the other tops' DFAs reject the byte),
        the top itself, whose closure is memoized as ``state``'s stacks and acceptance: the
        step :meth:`_step` computes, without its interning and lock.  False where a top's
        row is not made yet (the step makes it).  O(tops); nothing made."""
        if len(state.frames) > self.limits.max_stacks:
            return False  # (the step's limit error)
        rows = self._rows
        one: Frame | None = None
        for fr in state.frames:
            row = rows[fr.rule][fr.state]
            if row is None:
                return False
            q = row[byte]
            if q != DEAD:
                if one is not None or q != fr.state:
                    return False
                one = fr
        if one is None:
            return False
        memo = self._closures.get(one)
        return memo is not None and memo[1] == state.accepting and memo[0] == state.frames

    def _step_one(self, fr: Frame, row: memoryview | None, byte: int) -> ParserState:
        """:meth:`_step` of a state whose one stack top ``fr`` is not far (``row``: its DFA
        row, None where not yet made), written out: most new steps (a counted whitespace or
        digit run's next iteration is a new DFA state whose closure is its frame alone).  The
        stepped frame has ``fr``'s counters and parent, so it is not far either; it, its
        closure and its state are interned as :meth:`frame`, :meth:`_closure` and
        :meth:`_state` intern them.  Call under the lock; O(1) plus a :meth:`_closure` where
        the stepped frame's is not memoized."""
        if row is None:
            row = self._row(fr)
        q2 = row[byte]
        if q2 == DEAD:
            return self._dead
        tops, acc, err = self._near_closure(fr, q2)
        if err:
            return self.dead(err)
        if not tops and not acc:
            return self._dead
        max_stacks = self.limits.max_stacks
        if len(tops) > max_stacks:
            return self.dead(f"parser limit max_stacks={max_stacks} exceeded")
        s = self._states.get((tops, acc))
        return s if s is not None else self._state(tops, acc)

    def _near_closure(self, fr: Frame, q2: int) -> tuple[frozenset[Frame], bool, str | None]:
        """:meth:`_closure` of ``fr`` moved to its rule's state ``q2``, for a top ``fr`` that
        is not far (the moved frame has ``fr``'s counters and parent, so it is not far
        either): the frame interned as :meth:`frame` interns it, without its far test.  Call
        under the lock; O(1) where the closure is memoized."""
        key = (fr.rule, q2, fr.need, fr.left, id(fr.parent))
        f2 = self._frames.get(key)
        if f2 is None:
            f2 = self._frames[key] = Frame(fr.rule, q2, fr.parent, fr.need, fr.left)
        return self._closure(f2)

    def step_memo(self) -> dict[tuple[ParserState, int], ParserState]:
        """The memo of :meth:`step`: ``(state, byte) -> state``, what :meth:`step` returns for
        a key it holds (a dict look-up is a third of a :meth:`step` call).  Read only for
        callers; the dict is replaced when the caches are cleared (any :meth:`step` may do
        it), so ask for it again after each :meth:`step`.  O(1)."""
        return self._steps

    def _row(self, fr: Frame) -> memoryview:
        """The DFA row of ``fr``'s top: a 1-d memoryview of Python ints (a slice of
        :meth:`_flat`'s view of its rule's table), made on its first read and counted in
        :meth:`cache_entries`.  Call under the lock.  O(1)."""
        rule_rows = self._rows[fr.rule]
        row = rule_rows[fr.state]
        if row is None:
            width = int(self._tables[fr.rule].shape[1])
            q = fr.state * width
            row = rule_rows[fr.state] = self._flat(fr.rule)[q : q + width]
            self._row_count += 1
        return row

    def _flat(self, rule: int) -> memoryview:
        """``rule``'s transition table as one flat memoryview of its ints (row-major), made
        on first use and kept (it and its rows hold the table's buffer, which the automaton
        holds anyway; a C-contiguous, native-order copy where it is not).  Call under the lock."""
        view = self._views[rule]
        if view is None:
            # (native byte order, cast to the dtype's one-letter format: a table read from disk
            # exports a byte-order prefixed one, "=i", which a memoryview does not index)
            source = self._tables[rule]
            table = np.ascontiguousarray(source, dtype=source.dtype.newbyteorder("="))
            raw: Any = table.data.cast("B")  # (typeshed types a cast by its literal format)
            view = self._views[rule] = raw.cast(table.dtype.char)
        return view

    def _step(self, state: ParserState, byte: int) -> ParserState:
        frames = state.frames
        if not frames:
            return self._dead
        max_stacks = self.limits.max_stacks
        if len(frames) == 1:  # most states: the closure's frozenset is the state's, no copy
            (fr,) = frames
            q2 = self._row(fr)[byte]
            if q2 == DEAD:
                return self._dead
            tops, acc, err = self._closure(self.frame(fr.rule, q2, fr.parent, fr.need, fr.left))
            if err:
                return self.dead(err)
        else:
            # (a stepped frame has its top's counters and parent, so it is far where its top
            # is: :meth:`_near_closure` for the tops that are not); the closures' union, or the
            # one closure where only one is not empty (no copy)
            parts: list[frozenset[Frame]] = []
            acc = False
            rows = self._rows
            for fr in frames:
                row = rows[fr.rule][fr.state]
                if row is None:
                    row = self._row(fr)
                q2 = row[byte]
                if q2 == DEAD:
                    continue
                if fr.far:
                    got, a, err = self._closure(
                        self.frame(fr.rule, q2, fr.parent, fr.need, fr.left)
                    )
                    if err:
                        return self.dead(err)
                else:
                    got, a, err = self._near_closure(fr, q2)
                    if err:
                        return self.dead(err)
                if got:
                    parts.append(got)
                if a:
                    acc = True
            tops = parts[0] if len(parts) == 1 else frozenset().union(*parts)
        if len(tops) > max_stacks:
            return self.dead(f"parser limit max_stacks={max_stacks} exceeded")
        if not tops and not acc:
            return self._dead
        return self._state(tops, acc)

    def step_capped(self, state: ParserState, byte: int) -> ParserState:
        """:meth:`step`, its result's counters clipped to ``far_count`` where the step made
        far frames (``need`` clipped, a ``left`` above it unbounded: :meth:`capped` with
        ``relax``); for a state that is not far (a capped one).

        For input shorter than ``far_count`` bytes the clipped state accepts what the step's
        accepts (see :meth:`capped`), so a token's remaining bytes (a token has fewer) get
        the same verdict from either: the candidate checks of a capped state's mask step
        with it, and their steps into far states (a ``maxLength: 250`` string's bytes,
        request-specific and never memoized by :meth:`step`) become shared, memoized steps
        between states that do not count down, the same at every byte and every count.
        Memoized (the states are interned); O(1) on a hit, a :meth:`step` plus an O(depth)
        clip on a miss."""
        key = (state, byte)
        nxt = self._capped_steps.get(key)
        if nxt is not None:
            return nxt
        nxt = self.step(state, byte)
        fc = self.far_count
        if not nxt.far or fc is None or state.far:
            return nxt
        nxt = self.capped(nxt, fc, relax=True)
        with self._lock:
            self._maybe_reset()
            self._capped_steps[key] = nxt
        return nxt

    def capped_step_memo(self) -> dict[tuple[ParserState, int], ParserState]:
        """The memo of :meth:`step_capped` for steps into far states (those into other
        states are :meth:`step_memo`'s); as :meth:`step_memo`: read only, ask again after
        each step.  O(1)."""
        return self._capped_steps

    def step_bytes(self, state: ParserState, data: bytes) -> ParserState:
        """The state after ``data`` (dead as soon as a byte is not allowed).  The step memo
        is read first (a byte stepped before, by a mask's candidate checks for instance, is
        a dict look-up rather than a :meth:`step` call); O(len(data)) on hits."""
        memo = self._steps
        for b in data:
            nxt = memo.get((state, b))
            if nxt is None:
                nxt = self.step(state, b)
                memo = self._steps  # (a step may replace the memo: caches cleared)
            state = nxt
            if state.dead:
                return state
        return state

    # -- candidate checks (index/cfg_program.py's _verify_strings and _verify_suffixes) -------
    def check_strings(
        self,
        state: ParserState,
        data_of: list[bytes],
        shared: list[int] | None,
        capped: bool,
    ) -> tuple[list[int], str | None]:
        """The positions in ``data_of`` (distinct byte strings, sorted) of the strings this
        automaton accepts from ``state`` stepping with :meth:`step` (:meth:`step_capped` where
        ``capped``), and the error of a limit some step hit (else None): the loop of
        ``cfg_program._verify_strings`` with the step memo read first, here so that the
        compiled build runs it as C (a candidate check's look-ups and byte compares are most of
        a warm mask's check).  The same steps in the same order, so the same verdicts and
        error.  ``shared`` (or None): per string, the length of the prefix it shares with the
        string before it, -1 where not measured yet; the ones this check measures are written
        into it (a string walked: its share; where a dead prefix skips a run by binary search,
        only where the shares are not known).  O(bytes outside shared prefixes) steps; nothing
        kept but ``shared``'s entries and the step memo's."""
        ok: list[int] = []
        err: str | None = None
        path: list[ParserState] = [state]  # path[i]: the state after i bytes (alive)
        steps = self._steps
        n = len(data_of)
        i = 0
        while i < n:
            data = data_of[i]
            k = -1 if shared is None else shared[i]
            if k < 0:  # the prefix shared with the string before (measured, kept)
                k = 0
                if i:
                    prev = data_of[i - 1]
                    limit = len(data)
                    if limit > len(prev):
                        limit = len(prev)
                    while k < limit and data[k] == prev[k]:
                        k += 1
                if shared is not None:
                    shared[i] = k
            i += 1
            # resume after the prefix shared with the last string walked, as far as its walk
            # went: a string sharing more than the path (its dead prefix) is rejected
            m = len(path)
            if k >= m:
                continue
            if k + 1 < m:
                del path[k + 1 :]
            st = path[k]
            j = k
            end = len(data)
            alive = True
            while j < end:
                b = data[j]
                j += 1
                nxt = steps.get((st, b))
                if nxt is None:
                    nxt = self.step_capped(st, b) if capped else self.step(st, b)
                    steps = self._steps
                st = nxt
                if st.dead:
                    if st.error:
                        err = st.error
                    # the run of candidates after it that start with the dead prefix (where
                    # their shared prefixes are known, each is rejected by them instead)
                    if i < n and (shared is None or shared[i] < 0):
                        dead = data[: len(path)]
                        if data_of[i].startswith(dead):
                            i = bisect_left(data_of, prefix_end(dead), i, n)
                    alive = False
                    break
                path.append(st)
            if alive:
                ok.append(i - 1)
        return ok, err

    def check_suffixes(
        self,
        state: ParserState,
        shared: list[int],
        suffixes: list[bytes],
        capped: bool,
    ) -> tuple[list[int], str | None]:
        """:meth:`check_strings` where every string's shared prefix is known (``shared``) and
        its bytes past it are ``suffixes`` (``cfg_program._verify_suffixes``' loop): the same
        steps, without byte compares, slices or binary searches (a string sharing the dead
        prefix of the last walk is rejected by its shared length alone).  Nothing kept but
        the step memo's entries."""
        ok: list[int] = []
        err: str | None = None
        path: list[ParserState] = [state]
        steps = self._steps
        i = -1
        for k, data in zip(shared, suffixes):
            i += 1
            m = len(path)
            if k >= m:
                continue
            if k + 1 < m:
                del path[k + 1 :]
            st = path[k]
            alive = True
            for b in data:
                nxt = steps.get((st, b))
                if nxt is None:
                    nxt = self.step_capped(st, b) if capped else self.step(st, b)
                    steps = self._steps
                if nxt.dead:
                    if nxt.error:
                        err = nxt.error
                    alive = False
                    break
                path.append(nxt)
                st = nxt
            if alive:
                ok.append(i)
        return ok, err

    def next_bytes(self, state: ParserState) -> np.ndarray:
        """Byte values that some stack top can consume."""
        allowed = np.zeros(256, dtype=bool)
        for fr in state.frames:
            allowed |= self._tables[fr.rule][fr.state] != DEAD
        return np.flatnonzero(allowed)

    def cache_info(self) -> dict[str, int]:
        return {
            "frames": len(self._frames),
            "states": len(self._states),
            "closures": len(self._closures),
            "steps": len(self._steps),
            "capped": len(self._capped),
            "far_frames": len(self._far_frames),
            "far_states": len(self._far_states),
            "cache_resets": self.cache_resets,
        }


def prefix_end(prefix: bytes) -> bytes:
    """The least byte string above every string that starts with ``prefix`` (for
    ``bisect_left``); ``prefix`` ends in a byte below 255 or is all 255s (then: past every
    string of its length and more, as far as a token goes)."""
    end = prefix.rstrip(b"\xff")
    if not end:
        return b"\xff" * 1024
    return end[:-1] + bytes((end[-1] + 1,))
