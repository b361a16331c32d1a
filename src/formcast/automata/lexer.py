"""The call-expanded lexer: every rule DFA of a grammar joined by its call edges, determinized.

Walking a token through :class:`ExpandedLexer` follows calls into callees exactly, so a token
that stays alive is allowed whatever the parser stack holds; only tokens that pass a plausible
*return* (FOLLOW filtered, from the automaton's memoized
:class:`~formcast.automata.analysis.GrammarAnalysis`) depend on the stack.

Lifetime: per compiled grammar (built by the token index, :mod:`formcast.index.cfg_program`);
immutable.  Cost: subset construction over byte classes, capped at ``max_states`` lexer states
(None beyond) and charged to the compile's fuel.
"""

from __future__ import annotations

import mmap
import weakref
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate, chain
from typing import ClassVar

import numpy as np

from .._native import interpreted_class
from ..cache import LruCache
from ..columns import column_classes
from ..limits import WorkBudget, check_deadline
from .dfa import DEAD
from .nfa import epsilon_closure
from .rules import GrammarAutomaton

__all__ = ["ExpandedLexer", "LazyExpandedLexer", "LexerStateCapError", "build_expanded_lexer"]


@dataclass(frozen=True, eq=False)
class ExpandedLexer:
    """All rules' byte DFAs joined by call edges and determinized (returns are not followed).

    Attributes:
        table: ``int32[n, 256]`` (state 0 dead).
        split: ``bool[n, 256]``: some member may *return* here and continue with that byte.
        offsets: per rule, the lexer state of its state 0 (rule position ``(r, q)`` is lexer
            state ``offsets[r] + q``, see :meth:`entry`).
    """

    table: np.ndarray
    split: np.ndarray
    offsets: np.ndarray

    def entry(self, rule: int, state: int) -> int:
        """The lexer state of rule position ``(rule, state)`` (``state`` live).  O(1)."""
        return int(self.offsets[rule]) + state


#: lexer rows built per vectorized batch (bounds the batch's gathered successor rows)
_BATCH_ROWS = 256


class _TooLarge(Exception):
    """The expanded lexer outgrew its state cap."""


def build_expanded_lexer(
    auto: GrammarAutomaton, max_states: int = 30_000, *, budget: WorkBudget | None = None
) -> ExpandedLexer | None:
    """Determinize the call-expanded automaton; None if it exceeds ``max_states``.

    Walking a token through it follows calls into callees exactly, so a token that stays alive
    is allowed whatever the stack holds; only tokens that pass a plausible *return* (FOLLOW
    filtered) depend on the stack.  Cost: subset construction over byte classes.
    """
    analysis = auto.analysis
    follow, restart = analysis.follow, analysis.restart
    offsets = np.cumsum([0] + [d.table.shape[0] for d in auto.dfas])
    n_global = int(offsets[-1])
    if budget is not None:  # the global tables and their byte classes (measured: ~20 units/state)
        budget.spend(20 * n_global + 20 * len(auto.dfas))
    # global tables: next global id per byte (0 = dead), accepting, follow per global state
    gtable = np.zeros((n_global, 256), dtype=np.int64)
    gsplit = np.zeros((n_global, 256), dtype=bool)
    calls: list[list[int]] = [[] for _ in range(n_global)]
    for r, dfa in enumerate(auto.dfas):
        check_deadline()
        off = int(offsets[r])
        t = dfa.table.astype(np.int64)
        gtable[off : off + t.shape[0]] = np.where(t != DEAD, t + off, 0)
        gtable[off] = 0
        acc = np.asarray(dfa.accepting, dtype=bool)
        gsplit[off : off + t.shape[0]] = acc[:, None] & (follow[r] | restart[r])[None, :]
        count = auto.count_of(r)
        if count is not None and count[0] == 0:  # zero iterations: the call may return at once
            gsplit[off + dfa.start] |= follow[r]
        for q, lst in enumerate(auto.refs[r]):
            for callee, _ in lst:
                calls[off + q].append(int(offsets[callee]) + auto.dfas[callee].start)
    # byte classes: identical columns everywhere (a rule's split rows are its accepting flag
    # times one byte vector, so those vectors stand for them)
    check_deadline()
    split_vectors = [(follow[r] | restart[r]).astype(np.int64) for r in range(len(auto.dfas))]
    split_vectors.extend(follow[r].astype(np.int64) for r in range(len(auto.dfas)))
    cols = np.concatenate([gtable, np.stack(split_vectors)], axis=0)
    cls_of_byte, first = column_classes(cols)
    check_deadline()
    reps = first.tolist()

    closure_cache: dict[int, frozenset[int]] = {}

    def closure1(g: int) -> frozenset[int]:
        hit = closure_cache.get(g)
        if hit is None:  # calls are the lexer's epsilon moves
            hit = closure_cache[g] = epsilon_closure(calls, (g,))
        return hit

    if auto.num_states >= max_states:
        return None
    # lexer state g (< n_global) is the closure of global state g: a state without calls is
    # its own closure, so its row is its global row (vectorized); states with calls and the
    # unions met while determinizing are appended after n_global (Python, per byte class)
    # (a union of two or more live states is never a singleton: only call closures are keyed)
    ids: dict[frozenset[int], int] = {frozenset(): 0}
    sets: list[frozenset[int]] = []
    check_deadline()
    with_calls = [g for g in range(n_global) if calls[g]]
    for g in with_calls:
        ids.setdefault(closure1(g), g)
    reps_arr = np.asarray(reps, dtype=np.int64)
    n_cls = len(reps)
    g_succ = gtable[:, reps_arr]  # per global state and byte class: successor (0: dead)
    g_split = gsplit[:, reps_arr]

    def set_id(target: frozenset[int]) -> int:
        j = ids.get(target)
        if j is None:
            j = n_global + len(sets)
            if j >= max_states:
                raise _TooLarge
            ids[target] = j
            sets.append(target)
        return j

    multi: dict[tuple[int, ...], int] = {}  # successors of several members -> lexer state
    rows: list[np.ndarray] = []
    split_rows: list[np.ndarray] = []

    def union_rows(batch: list[list[int]]) -> None:
        # the rows of lexer states with these members, in order: vectorized over the batch
        # and the byte classes (where at most one member lives on, the successor is that
        # member's: lexer state v is closure1(v)); only the classes where several live on are
        # determinized in Python, row by row and class by class as they come, so new states
        # are numbered in the order a one-row-at-a-time construction would number them
        lens = [len(m) for m in batch]
        starts = [0, *accumulate(lens[:-1])]
        flat = np.fromiter(chain.from_iterable(batch), dtype=np.int64, count=sum(lens))
        succ = g_succ[flat]
        block = np.maximum.reduceat(succ, starts, axis=0)
        live = np.add.reduceat((succ != 0).view(np.int8), starts, axis=0, dtype=np.int64)
        split_block = np.logical_or.reduceat(g_split[flat], starts, axis=0)
        cells = np.argwhere(live >= 2)  # (row, class), rows in order, classes ascending
        bounds = np.searchsorted(cells[:, 0], np.arange(len(batch) + 1)).tolist()
        cell_class = cells[:, 1].tolist()
        for b in range(len(batch)):
            if budget is not None:
                budget.spend(n_cls)
            row = block[b]
            for c in cell_class[bounds[b] : bounds[b + 1]]:
                tup = tuple(succ[starts[b] : starts[b] + lens[b], c].tolist())
                j = multi.get(tup)
                if j is None:
                    live_ids = {v for v in tup if v}
                    j = set_id(frozenset().union(*(closure1(v) for v in live_ids)))
                    multi[tup] = j
                row[c] = j
            rows.append(row)
            split_rows.append(split_block[b])

    if budget is not None:
        budget.spend(n_global * n_cls // 16 + 1)
    try:
        for lo in range(0, len(with_calls), _BATCH_ROWS):
            union_rows([sorted(closure1(g)) for g in with_calls[lo : lo + _BATCH_ROWS]])
        i = 0
        while i < len(sets):  # states found while building rows join the end of ``sets``
            hi = min(len(sets), i + _BATCH_ROWS)
            union_rows([sorted(sets[k]) for k in range(i, hi)])
            i = hi
    except _TooLarge:
        return None
    table = np.empty((n_global + len(sets), 256), dtype=np.int32)
    split = np.empty((n_global + len(sets), 256), dtype=bool)
    table[:n_global] = gtable
    split[:n_global] = gsplit
    if rows:
        small = np.asarray(rows, dtype=np.int32)[:, cls_of_byte]
        ssmall = np.asarray(split_rows, dtype=bool)[:, cls_of_byte]
        k = len(with_calls)
        if k:
            table[with_calls] = small[:k]
            split[with_calls] = ssmall[:k]
        table[n_global:] = small[k:]
        split[n_global:] = ssmall[k:]
    table[0] = 0
    split[0] = False
    return ExpandedLexer(table=table, split=split, offsets=offsets.astype(np.int64))


#: :meth:`LazyExpandedLexer.ensure` builds the unbuilt successors of the rows it was asked
#: for this many levels ahead, at most this many rows per call (0: none, nor chain levels),
#: and none within this margin of the state cap (speculative rows must not bring the
#: per-rule fallback nearer).  0 since exit37 (session 23; was 48 since session 17, when a
#: walk stopped by a sentinel was walked again over the whole vocabulary): a stopped walk now
#: resumes from its stops (``classify_walk_resume``), and the rows built ahead cost more than
#: the stops they spare -- MaskBench 100 schemas, compiled, in-process ABBA 4 rounds, per-mask
#: minimum (benchmarks/ab_switch.py maskbench): TBM sum 0.967 (seed 3) and 0.956 (seed 2) of
#: 48's, p99 0.98 / 0.90; grammar_bench cold steps json, json_gbnf, c_lang, c1_arith within
#: noise; compile + first mask sum 0.989, median per schema 1.011
_AHEAD_LEVELS = 3
_AHEAD_ROWS = 0
_AHEAD_MARGIN = 1_024
#: batches of at most this many rows are built by loops
#: (:meth:`LazyExpandedLexer._union_rows_small`), larger ones by numpy calls
_SCALAR_ROWS = 4
#: past :data:`_AHEAD_LEVELS`, :meth:`LazyExpandedLexer.ensure` goes on along a chain while a
#: level has at most this many rows to build (the rows of an unrolled bounded repetition,
#: one a level, are walked through by the whitespace and digit tokens: each stop of such a
#: walk cost a round trip of ~100-150 us, compiled)
_CHAIN_ROWS = 2


#: lexers of at least this many rule states build the rows of a rule's states without calls
#: when a row first meets the rule; smaller ones at construction.  (Measured on MaskBench, the
#: later masks of the large ones cost more lazily not for the rows themselves, a gather per
#: rule, but because a refinement of the lexer built so far (the token index's, on its first
#: wide start) sees the rows of rules not met yet as sentinels, each a class of its own, so
#: fewer walks are shared.)
#: Was 8,192 until session 18: writing every rule's rows at construction was most of the
#: program set-up of the larger grammars, and their first masks meet a few of their rules
#: (MaskBench seed 5, 143 schemas, compiled build, thread CPU, set-up + first mask paired per
#: schema in one process: 1,024 against 8,192 p90 4.0 against 7.0 ms, p99 10.8 against 17.3
#: ms, mean 1.96 against 2.88 ms, p50 equal; 512 measured even with 1,024)
_LAZY_ROWS_FROM = 1_024

#: arrays from this size on are private anonymous maps (see :func:`_fresh`)
_FRESH_MAP_BYTES = 1 << 20
#: whether ``mmap`` takes ``MAP_PRIVATE`` (Unix): elsewhere :func:`_fresh` maps the default way
_PRIVATE_MAPS = hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MAP_ANONYMOUS")


def _fresh(rows: int, dtype: type[np.generic] | np.dtype[np.generic]) -> np.ndarray:
    """``dtype[rows, 256]`` zeros whose pages are touched only when written: a private
    anonymous memory map (the kernel's zero pages) past :data:`_FRESH_MAP_BYTES`, where
    ``np.zeros`` may get recycled heap memory that it clears page by page.  The map lives
    as long as the array (the array holds it)."""
    dt = np.dtype(dtype)
    size = rows * 256 * dt.itemsize
    if size < _FRESH_MAP_BYTES:
        return np.zeros((rows, 256), dtype=dt)
    # (``mmap.mmap(-1, size)`` alone is a *shared* anonymous map: shmem pages, whose first
    # write costs ~1.4x a private page's fault, measured ~2.7 against ~1.9 us per 4 KiB page;
    # the rows a rule's first meeting writes are most of those faults)
    if _PRIVATE_MAPS:
        mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:
        mm = mmap.mmap(-1, size)
    return np.frombuffer(mm, dtype=dt).reshape(rows, 256)


class LexerStateCapError(Exception):
    """A :class:`LazyExpandedLexer` would outgrow its ``max_states`` cap.  Internal: the token
    index catches it and classifies on the per-rule automata from then on (same masks)."""


@interpreted_class  # serialized: re-created by object.__new__ (formcast.index.serialize)
class LazyExpandedLexer:
    """:class:`ExpandedLexer` whose rows are built when a walk first needs them.

    The states are those of the eager construction (lexer state ``g < offsets[-1]`` is the
    closure of global rule position ``g``; later states are unions met while building rows,
    a union equal to the closure of a rule position being that position), numbered in the
    order they are first *referenced* by a built row.  A row not built yet (``built[s]``
    False) holds zeros, or a sentinel (every byte leads back to the state itself, no split
    flag) for a union state: callers read the rows of built states only, and build a row
    (:meth:`ensure`) before walking it.  Construction makes the byte classes (the common
    refinement of the rule tables' column classes, cached across compiles per table:
    :data:`_TABLE_CLASSES`) and allocates the tables as untouched zero pages; below
    :data:`_LAZY_ROWS_FROM` rule states it also writes the rows of every state without calls
    (:func:`_global_rows`: one vectorized pass over all rules), and larger lexers write a
    rule's when a row first meets it.  The rule DFAs' rows per byte class (for unions),
    their call lists and closures are read when a row first needs them.

    Attributes:
        table: ``int32[capacity, 256]``: rows of built states, zeros (or sentinels) for the
            others.  Rows change in place when built; the array is replaced (twice the
            capacity) when it is full, so a caller keeping derived tables compares
            :attr:`capacity`.
        split: ``bool[capacity, 256]`` as :attr:`ExpandedLexer.split` (False where unbuilt).
        built: ``bool[capacity]``.
        size: the states numbered so far (every rule position, then the unions).
        offsets: as :attr:`ExpandedLexer.offsets`.
        classes: ``(class of each byte, a byte of each class)``: columns of one class are
            equal in :attr:`table` and :attr:`split` whatever rows get built (the column
            classes of the eager build's global table).

    Lifetime: per compiled grammar; grows monotonically (bounded by ``max_states``, past which
    :meth:`ensure` raises :class:`LexerStateCapError`).  Not thread-safe: callers serialize
    :meth:`ensure` and their walks of the tables (the token index holds a lock).
    Costs: construction O(rules x 256) for the byte classes (plus O(states x 256) in C for
    a rule table not met before), and below :data:`_LAZY_ROWS_FROM` states O(rule states x
    256) numpy writes (no Python work per state or rule); :meth:`ensure` O(members x byte
    classes) per row, numpy-batched, plus O(rule states x byte classes) once per rule met
    and the closures met (O(states and call edges reached) each, cached).
    """

    #: helpers rebuilt from ``auto`` on first use after a load (see :mod:`formcast.index.serialize`)
    _serialize_omit: ClassVar[frozenset[str]] = frozenset({"_helpers"})

    __slots__ = (
        "_helpers",
        "auto",
        "built",
        "classes",
        "ids",
        "max_states",
        "offsets",
        "sets",
        "size",
        "split",
        "table",
    )

    def __init__(self, auto: GrammarAutomaton, max_states: int = 30_000) -> None:
        self.auto = auto
        self.max_states = max_states
        self.offsets = np.cumsum([0] + [d.table.shape[0] for d in auto.dfas]).astype(np.int64)
        n_global = int(self.offsets[-1])
        cap = n_global + max(16, n_global // 8)
        # untouched zero pages: a row's memory is used when the row is built
        self.table = _fresh(cap, np.int32)
        self.split = _fresh(cap, np.bool_)
        self.built = np.zeros(cap, dtype=bool)
        self.built[DEAD] = True  # (its row: zeros)
        self.size = n_global
        small = n_global < _LAZY_ROWS_FROM
        if small:  # every rule's rows now: one pass over all rules, written in place
            _global_rows(auto, self.offsets, self.table[:n_global], self.split[:n_global])
            helpers = _LexerHelpers(auto, self.offsets, plain_built=True)
            helpers.fill(self.table[:n_global], self.split[:n_global])
            # a state with calls is its closure: its row is built when a walk needs it
            calls = helpers.call_states
            self.table[calls] = 0
            self.split[calls] = False
            self.built[:n_global] = True
            self.built[calls] = False
        else:
            helpers = _LexerHelpers(auto, self.offsets)
        # None after a load (``_serialize_omit``): rebuilt by ``_build_helpers`` on first use;
        # typed Optional so that mypyc's compiled methods accept the loaded None
        self._helpers: _LexerHelpers | None = helpers
        #: member tuple -> lexer state, for the unions (states past ``offsets[-1]``)
        self.ids: dict[tuple[int, ...], int] = {}
        #: per union state (``s - offsets[-1]``), its members
        self.sets: list[tuple[int, ...]] = []
        self.classes = (helpers.cls_of_byte, helpers.first)

    @property
    def capacity(self) -> int:
        return int(self.table.shape[0])

    def entry(self, rule: int, state: int) -> int:
        """The lexer state of rule position ``(rule, state)`` (``state`` live).  O(1)."""
        return int(self.offsets[rule]) + state

    def _build_helpers(self) -> _LexerHelpers:
        """The global tables, byte classes and call closures (from ``auto``): built at
        construction and again on first use after a load."""
        helpers = self._helpers
        if helpers is None:
            # (rule rows read per rule as met: those built before stay as they are)
            helpers = _LexerHelpers(self.auto, self.offsets)
            self._helpers = helpers
        return helpers

    def ensure(self, states: np.ndarray | list[int]) -> bool:
        """Build the rows of ``states`` (lexer states below :attr:`size`) not built yet;
        True when some row was built.  New states referenced by the rows get sentinels (the
        arrays are replaced by larger ones when full).  Raises :class:`LexerStateCapError`
        past ``max_states`` (rows built before it stay: the tables remain consistent).

        Then, where :data:`_AHEAD_ROWS` allows (0 by default: none, nor chains), ahead of
        the walks, the unbuilt successors of the rows built, level by level
        (:data:`_AHEAD_LEVELS` levels, at most :data:`_AHEAD_ROWS` rows in all, none past
        ``max_states - _AHEAD_MARGIN`` states): rows a walk would stop on otherwise (a stop
        costs an :meth:`ensure` call and a resumed walk; before resumable walks, a walk
        over the whole vocabulary again).  Past those levels, a *chain* goes on (a run of
        states each met from the one before, as the unrolled bounded repetitions of the
        lexer make, e.g. bounded whitespace or digits): while the rows built at the last level have
        1 to :data:`_CHAIN_ROWS` unbuilt successors not met before, those are built (the
        next level reads the successors of the rows just built only), within the same
        budget; a walk through a chain stopped once per :data:`_AHEAD_LEVELS` + 1 rows
        before (a stop, an :meth:`ensure` call and a resumed walk each: ~100-150 us
        compiled).  Only for a walk that went past the rows built ahead: an :meth:`ensure`
        goes down a chain when asked for a state where the chain went on after an earlier
        call's levels (kept in ``_LexerHelpers.chain_ends``); a first row of a chain is not
        followed by its whole chain (the first masks of most grammars walk a few rows of
        it).  Which rows are built changes no walk's result."""
        # (the callers' int64 arrays read by ``tolist``: no ``np.asarray`` dispatch; one
        # state, most stops, needs no set nor sort)
        listed = states.tolist() if isinstance(states, np.ndarray) else states
        built = self.built
        todo = [int(s) for s in listed if not built[s]]
        if not todo:
            return False
        if len(todo) > 1:
            todo = sorted(set(todo))
        self._build(todo)
        budget = _AHEAD_ROWS
        if budget <= 0 and _AHEAD_LEVELS > 0:  # (the default: no levels, nor chains)
            return True
        h = self._build_helpers()
        ends = h.chain_ends
        down = not ends.isdisjoint(todo)  # a walk went past the rows built ahead
        frontier: list[int] = todo
        seen = set(todo)
        last: list[int] = todo  # the rows built at the last level
        for _ in range(_AHEAD_LEVELS):
            if budget <= 0 or self.size + 256 > self.max_states - _AHEAD_MARGIN:
                return True
            # (a set, sorted: np.unique's order; each row's successors read once per lexer:
            # the levels of most calls go through rows built long before)
            met_all: set[int] = set()
            for q in frontier:
                met_all.update(self._successors(h, q))
            met = [s for s in sorted(met_all) if s not in seen]
            if not met:
                return True
            seen.update(met)
            frontier = met  # built or not: walks go through both
            # (a loop over the few states met: no mask, index and slice on tiny arrays)
            built = self.built
            last = [q for q in met if not built[q]][:budget]
            if last:
                try:
                    self._build(last)
                except LexerStateCapError:  # a speculative row: the walk needing it will say
                    return True
                budget -= len(last)
        self._chain(last, seen, budget, down, ends)
        return True

    def _successors(self, h: _LexerHelpers, q: int) -> list[int]:
        """The distinct states row ``q`` leads to (read on one column per byte class:
        columns of a class are equal in every row, built or not), for :meth:`ensure`'s
        levels and :meth:`_chain`.  A built row never changes, so its list is kept in
        ``h.succ`` (read-only for callers); an unbuilt row's (zeros or a sentinel: it
        changes when built) would be read afresh (the levels read built rows only: a level
        stops where its budget left a state unbuilt).  O(byte classes) the first time, O(1)
        after."""
        hit = h.succ.get(q)
        if hit is not None:
            return hit
        out = list(set(self.table[q].take(self.classes[1]).tolist()))  # (basic index: no fancy)
        if self.built[q]:
            h.succ[q] = out
        return out

    def _chain(
        self, last: list[int], seen: set[int], budget: int, down: bool, ends: set[int]
    ) -> None:
        """:meth:`ensure`'s chain levels: from the rows ``last`` built at its last level,
        while they have 1 to :data:`_CHAIN_ROWS` unbuilt successors not in ``seen``, build
        those where ``down`` (and the budget and the margin below ``max_states`` allow);
        where the chain goes on unbuilt, its next states are added to ``ends``.  ``seen``
        grows by every successor read.  O(rows x byte classes) per level, plus builds."""
        h = self._build_helpers()
        built = self.built
        while 0 < len(last) <= _CHAIN_ROWS:
            met: set[int] = set()
            for q in last:
                met.update(self._successors(h, q))
            met.difference_update(seen)
            seen.update(met)
            nxt = [q for q in sorted(met) if not built[q]]
            if not 0 < len(nxt) <= _CHAIN_ROWS:
                return
            if not down or len(nxt) > budget or self.size + 256 > self.max_states - _AHEAD_MARGIN:
                ends.update(nxt)
                return
            try:
                self._build(nxt)
            except LexerStateCapError:
                return
            built = self.built
            budget -= len(nxt)
            last = nxt

    def _build(self, todo: list[int]) -> None:
        """Build the rows of ``todo`` (sorted, distinct, unbuilt states)."""
        h = self._build_helpers()
        n_global = h.offs[-1]  # (a list's int: no numpy scalar)
        batch = [
            list(h.closure(s)) if s < n_global else list(self.sets[s - n_global]) for s in todo
        ]
        cmap = h.cls_of_byte
        if len(todo) <= _SCALAR_ROWS:
            rows, splits = self._union_rows_small(h, batch)
            # row by row, by basic indexing and ``take`` straight into the row (no temporary,
            # no cast: the rows are int32 as the table): a fancy-indexed write of one row
            # costs ~3 us (the tables may have grown: read them after); the ndarray method,
            # not ``np.take`` (whose dispatching wrapper costs ~2-3 us a call)
            table = self.table
            split = self.split
            built = self.built
            for s, row, sp in zip(todo, rows, splits, strict=True):
                row.take(cmap, out=table[s], mode="clip")  # (classes of ``row``: in range)
                sp.take(cmap, out=split[s], mode="clip")
                built[s] = True
            return
        block, split_block = self._union_rows(h, batch)
        idx = np.asarray(todo, dtype=np.int64)
        self.table[idx] = block[:, cmap]  # (state numbers: below ``max_states``, int32)
        self.split[idx] = split_block[:, cmap]
        self.built[idx] = True

    def _plain_rows(self, h: _LexerHelpers, r: int) -> None:
        """Build the rows of rule ``r``'s states without calls (its DFA's rows, shifted),
        when a row first meets the rule: the states a walk from a state of ``r`` reaches
        within ``r`` are built, as the rule positions the token index digests (its walks
        shared across grammars) need.  O(rule states x 256), once per rule: a rule none of
        whose rows is built is written whole from its per-class rows (``h.g_succ``, written
        first by :meth:`_LexerHelpers.rows` or ``rows_of``: one ``take`` through the byte
        classes, columns of a class being equal in the DFA's table), else from the DFA's
        table by a gather through the shift of its states; the split flags as the accepting
        rows' byte vector.  A few numpy calls per rule (ndarray methods and ufuncs: the
        dispatching wrappers cost ~2-3 us each beyond their work; the page faults of the
        rows written are most of the rest)."""
        if h.plain_done[r]:
            return
        h.plain_done[r] = True
        auto = self.auto
        dfa = auto.dfas[r]
        off = h.offs[r]
        n = int(dfa.table.shape[0])
        analysis = auto.analysis
        vec = np.logical_or(analysis.follow[r], analysis.restart[r])
        acc = np.asarray(dfa.accepting, dtype=bool)
        count = auto.count_of(r)
        zero_start = count is not None and count[0] == 0
        built = self.built[off : off + n]
        plain = h.plain_mask(r)
        if not np.logical_or.reduce(built[1:]):  # the whole rule, unbuilt: slices
            dest = self.table[off : off + n]
            if h.filled[r]:  # (its per-class rows: shifted, dead 0, the dead row 0)
                h.g_succ[off : off + n].take(h.cls_of_byte, axis=1, out=dest, mode="clip")
            else:
                shift = np.arange(off, off + n, dtype=np.int32)
                shift[DEAD] = 0
                shift.take(dfa.table, out=dest, mode="clip")
                dest[DEAD] = 0
            sp = self.split[off : off + n]
            sp[acc] = vec
            if zero_start:  # zero iterations: the call may return at once
                sp[dfa.start] |= analysis.follow[r]
            if plain is None:
                built[:] = True
                return
            # the states with calls stay unbuilt: their rows back to zeros (as they were:
            # a global state's unbuilt row is never written), the same rows as by the
            # gather below, without its temporaries (most of a rule's first meeting)
            calls = ~plain
            dest[calls] = 0
            sp[calls] = False
            built[:] = plain
            return
        todo = ~built if plain is None else plain & ~built
        qs = todo.nonzero()[0]
        if not qs.size:
            return
        shift = np.arange(off, off + n, dtype=np.int32)
        shift[DEAD] = 0
        rows = shift.take(dfa.table[qs], mode="clip")
        rows[qs == DEAD] = 0
        sp_rows = np.zeros((qs.size, 256), dtype=bool)
        sp_rows[acc[qs]] = vec
        if zero_start:
            sp_rows[qs == dfa.start] |= analysis.follow[r]
        idx = qs + off
        self.table[idx] = rows
        self.split[idx] = sp_rows
        self.built[idx] = True

    def _state_of(self, h: _LexerHelpers, members: tuple[int, ...], live: set[int]) -> int:
        """The lexer state of a set of live global states (the union of the closures of
        ``live``), numbered (with a sentinel row) when new."""
        j = self.ids.get(members)
        if j is not None:
            return j
        j = h.closure_owner(members, live)
        if j is not None:  # the closure of a global state with calls: that state
            self.ids[members] = j
            return j
        j = self.size
        if j >= self.max_states:
            raise LexerStateCapError
        if j >= self.capacity:
            self._grow()
        self.size = j + 1
        # (its split row stays as it is: rows from ``size`` on were never written, so zeros,
        # and writing them again cost ~1 us a new state)
        self.table[j] = j
        self.ids[members] = j
        self.sets.append(members)
        return j

    def _grow(self) -> None:
        cap = min(2 * self.capacity, max(self.max_states, self.capacity + 1))
        for name in ("table", "split"):
            old = getattr(self, name)
            new = _fresh(cap, old.dtype)
            new[: old.shape[0]] = old  # (pages of unbuilt rows: zeros, stay shared)
            setattr(self, name, new)
        built = np.zeros(cap, dtype=bool)
        built[: self.built.size] = self.built
        self.built = built

    def _union_rows(
        self, h: _LexerHelpers, batch: list[list[int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows (per byte class) of the lexer states with these sorted members, and their
        split flags (``int32[len(batch), classes]``, ``bool[len(batch), classes]``, fresh
        arrays): as :func:`build_expanded_lexer`'s batches (successors where one member
        lives on are that member, the rest determinized class by class)."""
        lens = [len(m) for m in batch]
        starts = [0, *accumulate(lens[:-1])]
        flat = np.fromiter(chain.from_iterable(batch), dtype=np.int64, count=sum(lens))
        for r in h.rows(flat):
            self._plain_rows(h, r)  # (a no-op for a rule built already)
        succ = h.g_succ[flat]
        block = np.maximum.reduceat(succ, starts, axis=0)
        live = np.add.reduceat((succ != 0).view(np.int8), starts, axis=0, dtype=np.int64)
        split_block = np.logical_or.reduceat(h.g_split[flat], starts, axis=0)
        cell_row, cell_cls = np.nonzero(live >= 2)  # (row, class): rows in order, classes ascending
        bounds = np.searchsorted(cell_row, np.arange(len(batch) + 1)).tolist()
        cell_class = cell_cls.tolist()
        for b in range(len(batch) if cell_class else 0):
            row = block[b]
            for c in cell_class[bounds[b] : bounds[b + 1]]:
                tup = tuple(succ[starts[b] : starts[b] + lens[b], c].tolist())
                row[c] = self._union_state(h, tup)
        return block, split_block

    def _union_state(self, h: _LexerHelpers, tup: tuple[int, ...]) -> int:
        """The lexer state where the members' successors ``tup`` (one per member, 0: dead;
        two or more live) go together: memoized by ``tup`` in ``h.multi``, else made (the
        union of the live successors' closures).  Mutates ``h.multi`` and, for a new state,
        the lexer's tables."""
        j = h.multi.get(tup)
        if j is None:
            live_ids = {v for v in tup if v}
            members = tuple(sorted(frozenset().union(*(h.closure(v) for v in live_ids))))
            j = self._state_of(h, members, live_ids)
            h.multi[tup] = j
        return j

    def _union_rows_small(
        self, h: _LexerHelpers, batch: list[list[int]]
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """:meth:`_union_rows` for a few rows (at most :data:`_SCALAR_ROWS`), one array each
        (``int32[classes]``, ``bool[classes]``; a one-member row's are views of ``h.g_succ``
        and ``h.g_split``, to be read before those change): the same rows, and the same new
        states numbered in the same order (row by row, classes ascending), by loops over the
        members' per-class rows (as lists) instead of a dozen numpy calls on tiny arrays,
        whose fixed cost was most of a one-state :meth:`ensure` (a few members' rows are read
        one by one: a fancy index costs ~3 us, a row ~0.1); a two-member row (most rows: a
        state and one callee's start) by three numpy calls on the two rows, which cost less
        than its loop (~6 us, with the lists and the arrays made of them), and a loop over
        the classes where both live on; the split flags of 3+ members by ufuncs on their
        rows (no lists, no ``np.array`` of one: ~3 us), 5+ members' rows gathered by
        ``take`` (a fancy index by a list costs ~3 us more).  O(members x byte classes)
        steps per row."""
        if h.unfilled:
            for r in h.rows_of(batch):
                self._plain_rows(h, r)  # (a no-op for a rule built already)
        g_succ = h.g_succ
        g_split = h.g_split
        rows: list[np.ndarray] = []
        splits: list[np.ndarray] = []
        for members in batch:
            if len(members) == 1:  # (its rule's row as it is: no round trip through a list)
                rows.append(g_succ[members[0]])
                splits.append(g_split[members[0]])
                continue
            if len(members) == 2:  # (most rows: a state and one callee's start)
                a = g_succ[members[0]]
                b = g_succ[members[1]]
                pair = np.maximum(a, b)  # (where one lives on: that one's successor)
                # classes where both live on, ascending: their unions made in this order
                for c in np.logical_and(a, b).nonzero()[0].tolist():
                    pair[c] = self._union_state(h, (int(a[c]), int(b[c])))
                rows.append(pair)
                splits.append(np.logical_or(g_split[members[0]], g_split[members[1]]))
                continue
            # the successors, and the split flags (any member's) by ufuncs on the members'
            # rows (no lists)
            succ: list[list[int]]
            m_split: np.ndarray
            if len(members) <= _SCALAR_ROWS:
                succ = [g_succ[g].tolist() for g in members]
                m_split = np.logical_or(g_split[members[0]], g_split[members[1]])
                for g in members[2:]:
                    np.logical_or(m_split, g_split[g], out=m_split)
            else:  # (``take``, not a fancy index: ~3 us less)
                succ = g_succ.take(members, axis=0).tolist()
                m_split = np.logical_or.reduce(g_split.take(members, axis=0), axis=0)
            row: list[int] = []
            for c in range(len(succ[0])):
                best = 0
                live = 0
                for m_row in succ:
                    v = m_row[c]
                    if v:
                        live += 1
                        if v > best:
                            best = v
                if live >= 2:
                    best = self._union_state(h, tuple([m_row[c] for m_row in succ]))
                row.append(best)
            rows.append(np.array(row, dtype=np.int32))  # (state numbers: below max_states)
            splits.append(m_split)
        return rows, splits

    def nbytes(self) -> int:
        return int(self.table.nbytes + self.split.nbytes + self.built.nbytes)


#: the call targets of a state without calls (shared, never mutated)
_NO_CALLS: list[int] = []


def _global_rows(
    auto: GrammarAutomaton,
    offsets: np.ndarray,
    table: np.ndarray | None = None,
    split: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every rule's rows as one global table (rule ``r``'s rows: its DFA's shifted by
    ``offsets[r]``, dead 0, its dead row all dead) and its split flags (an accepting state's:
    the rule's FOLLOW | restart bytes; a zero-iteration counted rule's start: FOLLOW too),
    written into ``table`` and ``split`` (``[offsets[-1], 256]``, zeros) when given.  The
    rows a lexer state without calls has (:meth:`LazyExpandedLexer._plain_rows`), for all
    rules at once: a few numpy passes over the concatenated DFA tables, no Python work per
    rule beyond listing them.  O(global states x 256)."""
    dfas = auto.dfas
    n_global = int(offsets[-1])
    analysis = auto.analysis
    sizes = np.diff(offsets)
    parts = [d.table for d in dfas]
    if table is None:
        g_table = np.concatenate(parts, axis=0, dtype=np.int32)
    else:
        g_table = np.concatenate(parts, axis=0, out=table, casting="same_kind")
    shift = np.repeat(offsets[:-1].astype(np.int32), sizes)[:, None]
    np.add(g_table, shift, out=g_table, where=g_table != DEAD)
    g_table[offsets[:-1]] = 0  # (each rule's dead row: all dead already)
    check_deadline()
    g_split = np.zeros((n_global, 256), dtype=bool) if split is None else split
    acc = np.flatnonzero(np.concatenate([d.accepting for d in dfas]))
    if acc.size:
        vec = np.asarray(analysis.follow) | np.asarray(analysis.restart)
        rule_of = np.searchsorted(offsets, acc, side="right") - 1
        g_split[acc] = vec[rule_of]
    for r, count in enumerate(auto.counts):
        if count is not None and count[0] == 0:  # zero iterations: the call may return at once
            g_split[int(offsets[r]) + dfas[r].start] |= analysis.follow[r]
    return g_table, g_split


#: rule DFA tables whose column classes :data:`_TABLE_CLASSES` keeps
_TABLE_CLASSES_KEPT = 2_048

#: The column classes of rule DFA tables (class of each byte, int32[256]), shared by the
#: lexers of every compile in the process: the rule DFAs of common JSON pieces (strings,
#: numbers, whitespace, keys) are the very same table objects from one compile to the next
#: (:data:`formcast.automata.rules.RULE_DFA_CACHE`), so a lexer's byte classes cost one
#: lookup per rule rather than a pass over every rule state.  Keyed by the table's ``id``;
#: an entry holds a weak reference to its table and is used only while that reference is
#: the very table asked about (an id reused by a later table replaces the entry), and only
#: read-only tables are kept (a ``ByteDFA``'s are: :func:`formcast.automata.dfa`), so an
#: entry always describes its table's content.  Vocabulary-free (a lexer knows no tokens).
#: Lifetime: the process; bounded to :data:`_TABLE_CLASSES_KEPT` entries (~1.1 KiB each),
#: least recently used first.  Thread-safe (an entry is one tuple, swapped whole).
_TABLE_CLASSES: LruCache[int, list[tuple[weakref.ref[np.ndarray], np.ndarray]]] = LruCache(
    _TABLE_CLASSES_KEPT
)


def _table_classes(table: np.ndarray) -> np.ndarray:
    """Class of each byte (int32[256]) under the column classes of a rule DFA's ``table``
    (its rows past the dead state): from :data:`_TABLE_CLASSES` for a read-only table seen
    before, else :func:`~formcast.columns.column_classes` (O(states x 256), in C in the
    compiled build)."""
    keep = not table.flags.writeable
    found, slot = _TABLE_CLASSES.get(id(table)) if keep else (False, None)
    if slot is not None:
        ref, cls = slot[0]
        if ref() is table:
            return cls
    if table.shape[0] > 1:
        cls = column_classes(table[1:])[0].astype(np.int32)
    else:  # (the empty language: no live state)
        cls = np.zeros(256, dtype=np.int32)
    if keep:
        cls.setflags(write=False)
        pair = (weakref.ref(table), cls)
        if slot is not None:
            slot[0] = pair  # (an id reused: the entry is this table's now)
        elif not found:
            _TABLE_CLASSES.put(id(table), [pair])
    return cls


def _lexer_classes(auto: GrammarAutomaton, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(class of each byte, least byte of each class)``: the column classes of the global
    table (rule ``r``'s rows: its DFA's shifted by ``offsets[r]``, dead 0) and the split
    ``vectors`` stacked, as the eager build's (:func:`build_expanded_lexer`), numbered by
    least byte.  Shifting a rule's rows keeps their column equalities, so these are the
    common refinement of every rule table's column classes (:func:`_table_classes`, cached
    across compiles) and the vectors': :func:`~formcast.columns.column_classes` on one row
    per distinct rule table and per vector.  O(rules x 256) once the tables are known."""
    seen: set[int] = set()
    rows: list[np.ndarray] = []
    for d in auto.dfas:
        t = d.table
        if id(t) not in seen:
            seen.add(id(t))
            rows.append(_table_classes(t))
    stack = np.empty((len(rows) + vectors.shape[0], 256), dtype=np.int32)
    if rows:
        stack[: len(rows)] = rows
    stack[len(rows) :] = vectors
    check_deadline()
    cls, first = column_classes(stack)
    return _by_least_byte(cls, first)


def _by_least_byte(cls_of_byte: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte classes renumbered in the order of their least bytes (``first`` ascending): a
    numbering of the partition alone, whichever way it was found.  O(256)."""
    order = np.argsort(first, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size, dtype=np.int64)
    return rank[cls_of_byte], np.asarray(first, dtype=np.int64)[order]


class _LexerHelpers:
    """What :meth:`LazyExpandedLexer.ensure` reads: the rule DFAs' rows as one global table
    on one column per byte class (and its split flags), the byte classes, the call closures,
    and the successor tuples met so far.  Derived from the grammar automaton alone (rebuilt
    after a load).

    Lifetime: per lexer (not persisted).  Mutation: the call lists of a rule are read from
    ``auto`` when a closure first meets one of its states, closures are cached on first use.
    Cost at construction: O(rules x 256) for the byte classes (:func:`_lexer_classes`) and
    O(states of rules with calls) for :attr:`call_states`; the per-class rows of a rule are
    written when a member of it is first determinized (:meth:`rows`); then O(states and call
    edges reached) per closure."""

    __slots__ = (
        "auto",
        "call_states",
        "calls",
        "chain_ends",
        "closure_cache",
        "cls_of_byte",
        "entries",
        "filled",
        "first",
        "g_split",
        "g_succ",
        "multi",
        "offs",
        "plain_done",
        "reps",
        "rule_calls",
        "rule_of",
        "starts",
        "succ",
        "unfilled",
    )

    def __init__(
        self,
        auto: GrammarAutomaton,
        offsets: np.ndarray,
        plain_built: bool = False,
    ) -> None:
        analysis = auto.analysis
        follow = np.asarray(analysis.follow, dtype=bool).reshape(-1, 256)
        restart = np.asarray(analysis.restart, dtype=bool).reshape(-1, 256)
        n_global = int(offsets[-1])
        n_rules = len(auto.dfas)
        vectors = np.concatenate([follow | restart, follow])
        self.rule_of = np.repeat(
            np.arange(n_rules, dtype=np.int64), np.diff(offsets).astype(np.int64)
        )
        self.auto = auto
        self.offs: list[int] = offsets.tolist()
        #: per global state with calls, its call targets (callee starts); a rule's are read
        #: from ``auto.refs`` when a closure first meets one of its states (``rule_calls[r]``).
        #: A dict: no object per global state at construction (a list per state was most of
        #: a large grammar's construction, through the garbage collections it set off)
        self.calls: dict[int, list[int]] = {}
        self.rule_calls = [False] * n_rules
        #: per rule, the global state of its start (what a call to it enters)
        self.entries = [o + d.start for o, d in zip(self.offs, auto.dfas, strict=False)]
        #: the global states of rule starts (the only call targets)
        self.starts = set(self.entries)
        self.closure_cache: dict[int, frozenset[int]] = {}
        self.multi: dict[tuple[int, ...], int] = {}
        #: per built lexer state met by :meth:`LazyExpandedLexer.ensure`'s levels, the
        #: distinct states its row leads to (``LazyExpandedLexer._successors``: a memo of
        #: the lexer's built rows, which never change; grows by one list per row read)
        self.succ: dict[int, list[int]] = {}
        #: the unbuilt states where a chain went on past the rows :meth:`LazyExpandedLexer.
        #: ensure` built ahead (see there): a walk asking for one goes down the chain
        self.chain_ends: set[int] = set()
        #: the global states with calls (sorted), with ``plain_built`` (else empty)
        self.call_states = np.zeros(0, dtype=np.int64)
        self.cls_of_byte, self.first = _lexer_classes(auto, vectors)
        self.reps = np.asarray(self.first, dtype=np.int64)
        # the global rows on one column per byte class, a rule's written when a member of it
        # is first determinized (:meth:`rows`; zeros, untouched pages, until then)
        # (int32 as the lexer table: half the pages a rule's first meeting touches)
        self.g_succ = np.zeros((n_global, self.reps.size), dtype=np.int32)
        self.g_split = np.zeros((n_global, self.reps.size), dtype=bool)
        self.filled = np.zeros(n_rules, dtype=bool)
        #: the rules whose rows :meth:`rows` has not written yet (0 once all are: no look-up)
        self.unfilled = n_rules
        #: per rule: its rows without calls are built (``LazyExpandedLexer._plain_rows``)
        self.plain_done = np.full(n_rules, plain_built, dtype=bool)
        if plain_built:
            self.call_states = self._call_states()

    def _call_states(self) -> np.ndarray:
        """The global states with calls, sorted (int64).  O(states of rules with calls x
        callees)."""
        found: list[np.ndarray] = []
        for off, d in zip(self.offs, self.auto.dfas, strict=False):
            refs = d.ref_table
            if refs is not None and refs.size:
                has: np.ndarray = np.asarray(refs.any(axis=1))  # (DEAD: 0, no call)
                has[DEAD] = False
                found.append(np.flatnonzero(has) + off)
        if not found:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(found).astype(np.int64, copy=False)

    def fill(self, g_table: np.ndarray, g_split: np.ndarray) -> None:
        """Write every rule's :attr:`g_succ` and :attr:`g_split` rows from the global table
        and split flags of :func:`_global_rows` (one gather each: no Python work per rule).
        O(global states x byte classes)."""
        self.g_succ = np.take(g_table, self.reps, axis=1).astype(np.int32, copy=False)
        self.g_split = np.take(g_split, self.reps, axis=1)
        self.filled[:] = True
        self.unfilled = 0

    def rows(self, flat: np.ndarray) -> list[int]:
        """Write the :attr:`g_succ` and :attr:`g_split` rows of the rules of the global
        states ``flat`` not written yet: O(rule states x byte classes) per rule, once.
        Returns those rules.  Nothing to look up once every rule is written (a small
        lexer's, at construction: :meth:`fill`)."""
        if not self.unfilled:
            return []
        need = np.unique(self.rule_of[flat])
        need = need[~self.filled[need]]
        if not need.size:
            return []
        return self._write_rules(need.tolist())

    def _write_rules(self, rules: list[int]) -> list[int]:
        """Write the :attr:`g_succ` and :attr:`g_split` rows of ``rules`` (ascending, not
        written yet), mark them filled; returns ``rules``.  Per rule a handful of numpy calls
        (ndarray methods and ufuncs: the dispatching wrappers ``np.take``, ``np.flatnonzero``,
        ``ndarray.any`` cost ~2-3 us each beyond their work) over O(rule states x byte
        classes)."""
        auto = self.auto
        analysis = auto.analysis
        reps = self.reps
        filled = self.filled
        for r in rules:
            dfa = auto.dfas[r]
            off = self.offs[r]
            t = dfa.table.take(reps, axis=1)  # (int32 as ``g_succ``)
            n = int(t.shape[0])
            dest = self.g_succ[off : off + n]
            # (a rule's rows are zeros until written, once: the dead successors stay 0)
            np.add(t, off, out=dest, where=t != DEAD)
            dest[0] = 0
            sp = self.g_split[off : off + n]
            vec = np.logical_or(analysis.follow[r], analysis.restart[r]).take(reps)
            sp[np.asarray(dfa.accepting, dtype=bool)] = vec
            count = auto.count_of(r)
            if count is not None and count[0] == 0:
                sp[dfa.start] |= analysis.follow[r].take(reps)
            filled[r] = True
        self.unfilled -= len(rules)
        return rules

    def rows_of(self, batch: list[list[int]]) -> list[int]:
        """:meth:`rows` for the members of a few rows (lists of global states): the same
        rules written and returned (ascending), found by bisection on :attr:`offs` and
        looked up in :attr:`filled` one by one instead of numpy calls on a tiny array (whose
        fixed cost was a good part of a one-row :meth:`LazyExpandedLexer.ensure`).  O(members
        x log rules) plus :meth:`rows`' writes for the rules found."""
        if not self.unfilled:
            return []
        offs = self.offs
        filled = self.filled
        need: set[int] = set()
        for members in batch:
            for g in members:
                r = bisect_right(offs, g) - 1
                if not filled[r]:
                    need.add(r)
        if not need:
            return []
        return self._write_rules(sorted(need))

    def plain_mask(self, r: int) -> np.ndarray | None:
        """Per state of rule ``r``: it has no calls (its own closure; the dead state
        included), or None when no state of ``r`` has calls.  O(rule states x callees)."""
        dfa = self.auto.dfas[r]
        if dfa.ref_table is None:
            return None
        has = np.logical_or.reduce(dfa.ref_table != DEAD, axis=1)  # (no ``any`` wrapper)
        has[DEAD] = False
        if not has.nonzero()[0].size:
            return None
        out: np.ndarray = ~has
        return out

    def _calls_of(self, g: int) -> list[int]:
        """The call targets of global state ``g`` (its rule's read on first use)."""
        r = bisect_right(self.offs, g) - 1
        if not self.rule_calls[r]:
            self.rule_calls[r] = True
            auto = self.auto
            if auto.dfas[r].ref_table is not None:  # (else no state of ``r`` calls)
                off = self.offs[r]
                refs = auto.refs[r]
                calls = self.calls
                entries = self.entries
                for q in np.asarray(auto.boundary[r]).nonzero()[0].tolist():
                    lst = refs[q]
                    if lst:
                        calls[off + q] = [entries[callee] for callee, _ in lst]
        return self.calls.get(g, _NO_CALLS)

    def closure(self, g: int) -> frozenset[int]:
        """The global states reachable from ``g`` by calls (the lexer's epsilon moves), ``g``
        included; cached.  O(states and call edges reached) on first use."""
        hit = self.closure_cache.get(g)
        if hit is None:
            seen = {g}
            stack = [g]
            while stack:
                for t in self._calls_of(stack.pop()):
                    if t not in seen:
                        seen.add(t)
                        stack.append(t)
            hit = self.closure_cache[g] = frozenset(seen)
        return hit

    def closure_owner(self, members: tuple[int, ...], live: set[int]) -> int | None:
        """The least global state with calls whose closure is ``members`` (sorted, the union
        of the closures of ``live``), else None: the eager build's state for that set.

        Such a state ``g`` lies in ``members``, so its closure is within some ``closure(v)``,
        ``v`` live, which then equals ``members``; ``g`` other than ``v`` reaches ``v``, so
        ``v`` is a call target (a rule start) and ``g < v`` is checked.  O(live) without a
        rule start among them, else closures of the members below ``v`` (cached)."""
        n = len(members)
        owner = next((v for v in sorted(live) if len(self.closure(v)) == n), None)
        if owner is None or not self._calls_of(owner):
            return None
        if owner in self.starts:
            for g in members:
                if g >= owner:
                    break
                if self._calls_of(g) and len(self.closure(g)) == n:
                    return g
        return owner
