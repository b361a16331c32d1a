"""Byte DFAs as numpy tables: subset construction, dead-state pruning, minimization.

A :class:`ByteDFA` has ``table: int32[n_states, 256]`` and ``accepting: bool[n_states]``.
State 0 is the dead state (all its transitions lead to 0); every other state is *live*: some
accepting state is reachable from it.  Hence "the automaton stays alive on bytes ``w``" is simply
``walk(s, w) != 0``.

Lifetime: per grammar; immutable after construction (the arrays are made read-only).
Construction: subset construction over byte equivalence classes, O(states x classes x NFA-set
size); minimization by partition refinement (Hopcroft) on the distinct columns, skipped above
:attr:`~formcast.limits.CompileLimits.max_minimize_states` or when its work budget runs out
(the result is then correct but not minimal).

In the compiled build (docs/native.md) the subset construction, the pruning and Hopcroft's
partition run in C (``formcast.automata._subset``, :data:`_KERNEL`): the same DFA states in
the same order, the same fuel and the same errors, the same minimal DFA with the same state
numbers; the Python code below is the fallback and the reference
(tests/automata/test_native_subset.py builds every automaton both ways).

Regular IR → DFA end to end is :func:`formcast.automata.regular.compile_dfa` (it builds the
NFA); the state-equivalence passes of the token index are in :mod:`.equivalence`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from ..columns import column_classes
from ..errors import CompileTimeoutError, LimitExceededError
from ..limits import CompileLimits, WorkBudget, check_deadline
from .nfa import NFA, FlatNFA, epsilon_closure

__all__ = ["DEAD", "ByteDFA", "describe_bytes", "nfa_to_dfa"]

# the compiled build's subset construction and Hopcroft partition (docs/native.md); absent from
# the pure-Python package, where the Python code below runs (tests set this to None for the
# reference: tests/automata/test_native_subset.py)
_KERNEL: Any
try:
    from . import _subset as _KERNEL  # type: ignore[attr-defined,no-redef]
except ImportError:  # pragma: no cover - depends on the build
    _KERNEL = None

DEAD = 0
# fuel per DFA state built: ~80 us of Python work, with one unit ~ 0.7 us (see WorkBudget)
_DFA_STATE_COST = 100
_PROJECTED_COST_PER_NFA_STATE = 50
# minimization is skipped when states x byte classes exceeds this (it costs ~10 us per unit)
_MINIMIZE_WORK = 300_000


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A deterministic automaton over bytes; state 0 is dead, ``start`` is the initial state.

    Attributes:
        table: ``int32[n_states, 256]`` transitions.
        accepting: ``bool[n_states]``.
        start: the initial state (0 when the language is empty).
    """

    table: np.ndarray
    accepting: np.ndarray
    start: int
    ref_rules: tuple[int, ...] = ()
    ref_table: np.ndarray | None = None  # int32[n_states, len(ref_rules)]: target after a ref

    @property
    def num_states(self) -> int:
        """Number of live states (the dead state is not counted)."""
        return int(self.table.shape[0]) - 1

    @property
    def is_empty(self) -> bool:
        """True when the language is empty."""
        return self.start == DEAD

    def step(self, state: int, data: bytes) -> int:
        """State after ``data`` from ``state`` (``DEAD`` if the automaton dies).  O(len(data))."""
        table = self.table
        for b in data:
            state = int(table[state, b])
            if state == DEAD:
                return DEAD
        return state

    def matches(self, data: bytes) -> bool:
        """True when ``data`` is in the language."""
        return bool(self.accepting[self.step(self.start, data)])

    def next_bytes(self, state: int) -> np.ndarray:
        """Byte values that keep the automaton alive from ``state``."""
        return np.flatnonzero(self.table[state] != DEAD)


def _byte_classes(nfa: NFA) -> tuple[np.ndarray, list[int]]:
    """Partition 0..255 by every range boundary in the NFA; returns (class_of_byte, reps)."""
    cuts = np.zeros(257, dtype=bool)
    cuts[0] = True
    for edges in nfa.edges:
        for lo, hi, _ in edges:
            cuts[lo] = True
            cuts[hi + 1] = True
    class_of = np.cumsum(cuts[:256]) - 1
    reps = [int(b) for b in np.flatnonzero(cuts[:256])]
    return class_of.astype(np.int32), reps


# (first symbol, last symbol, targets): a run of byte classes (or one rule reference)
_Segment = tuple[int, int, frozenset[int]]
_NO_STATES: frozenset[int] = frozenset()


def _disjoint(raw: list[_Segment]) -> list[_Segment]:
    """Overlapping symbol intervals → disjoint sorted ones, each with the union of the targets
    of the intervals covering it (adjacent ones with equal targets joined).  A sweep over the
    interval ends: O(I log I + S x A) for I intervals, S segments, A overlapping at a point."""
    if len(raw) <= 1:
        return raw
    raw.sort(key=lambda seg: seg[0])
    if all(raw[k][1] < raw[k + 1][0] for k in range(len(raw) - 1)):
        return raw
    points = sorted({p for lo, hi, _ in raw for p in (lo, hi + 1)})
    out: list[_Segment] = []
    active: list[_Segment] = []
    k = 0
    for a, b in pairwise(points):
        while k < len(raw) and raw[k][0] <= a:
            active.append(raw[k])
            k += 1
        active = [seg for seg in active if seg[1] >= a]
        if not active:
            continue
        tg = active[0][2] if len(active) == 1 else frozenset().union(*(x[2] for x in active))
        if out and out[-1][1] == a - 1 and out[-1][2] == tg:
            out[-1] = (out[-1][0], b - 1, tg)
        else:
            out.append((a, b - 1, tg))
    return out


def _width(segs: list[_Segment]) -> int:
    """Number of symbols the segments cover."""
    return sum(hi - lo + 1 for lo, hi, _ in segs)


def nfa_to_dfa(
    nfa: NFA | FlatNFA,
    limits: CompileLimits | None = None,
    *,
    minimize: bool = True,
    budget: WorkBudget | None = None,
) -> ByteDFA:
    """Subset construction, pruning of states that cannot reach acceptance, minimization.

    ``minimize=False`` skips Hopcroft (the token index merges states with equal masks anyway,
    see :func:`~formcast.automata.equivalence.bounded_equivalence`); the result is then
    correct but possibly larger.  ``nfa``: either form (a :class:`FlatNFA` is what the Thompson
    construction makes; the Python path reads it as an :class:`NFA`).
    """
    limits = limits or CompileLimits()
    budget = budget or limits.budget()
    n_nfa = nfa.n if isinstance(nfa, FlatNFA) else len(nfa.eps)
    # subset construction builds roughly one DFA state per NFA state on repeat chains
    budget.check_projected(n_nfa * _PROJECTED_COST_PER_NFA_STATE)
    if _KERNEL is not None:
        built = _native_live_table(nfa, limits, budget)
        if built is None:
            return _empty_dfa()
        small, acc_arr, class_of, ref_rules = built
    else:
        subsets = _SubsetConstruction(nfa.to_lists() if isinstance(nfa, FlatNFA) else nfa)
        sets, trans = subsets.determinize(limits, budget)
        accepting = [nfa.accept in s for s in sets]
        live = _live_states(trans, accepting)
        if not live[0]:
            return _empty_dfa()
        small, acc_arr = _live_table(trans, accepting, live, subsets.n_symbols)
        class_of, ref_rules = subsets.class_of, subsets.ref_rules
    start = 1
    if minimize:
        small, acc_arr, start = _minimize(small, acc_arr, 1, limits)
    m, k = small.shape
    n_classes = k - len(ref_rules)
    if _KERNEL is not None and hasattr(_KERNEL, "widen"):
        # the same two tables in one C pass (``np.take`` along the columns cost ~10 us on a
        # small automaton: most of this function's numpy time); ``small`` and ``class_of`` are
        # C-contiguous int32 here (the kernel's output or ``_minimize_native``'s gather; the
        # kernel checks the buffers).  A kernel without ``widen`` (a test's stand-in) takes
        # the numpy path
        wide, refs = _KERNEL.widen(small, k, n_classes, class_of)
        table = np.frombuffer(wide, dtype=np.int32).reshape(m, 256)
        ref_table = np.frombuffer(refs, dtype=np.int32).reshape(m, k - n_classes)
    else:
        # (class_of < n_classes: the byte columns; ``take`` gathers into a C-ordered table in
        # one pass, where slicing then fancy indexing made an F-ordered one and copied it)
        table = np.take(small, class_of, axis=1)
        ref_table = np.ascontiguousarray(small[:, n_classes:])
    table.setflags(write=False)
    acc_arr.setflags(write=False)
    ref_table.setflags(write=False)
    return ByteDFA(
        table=table,
        accepting=acc_arr,
        start=start,
        ref_rules=tuple(ref_rules),
        ref_table=ref_table if ref_rules else None,
    )


def _native_live_table(
    nfa: NFA | FlatNFA, limits: CompileLimits, budget: WorkBudget
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]] | None:
    """What the Python path's subset construction, :func:`_live_states` and :func:`_live_table`
    make, made by the C kernel (``formcast.automata._subset.determinize``, which reads the
    NFA's lists itself): the live table over the symbols, its accepting flags, the byte classes
    and the referenced rules; None for the empty language.  The same states in the same order
    and the same fuel: the kernel adds up what :meth:`_SubsetConstruction.determinize` charges
    per state and stops where that would raise; the total is charged here (and raises as the
    Python path does).  A :class:`FlatNFA`'s lists are read as they are
    (``determinize_flat``: the same construction).  O(NFA edges + DFA states x symbols) in C."""
    threshold = math.inf if budget.deadline is None else budget.deadline
    # (a stand-in for the kernel, or a kernel built before determinize_flat, reads the lists)
    if isinstance(nfa, FlatNFA) and not hasattr(_KERNEL, "determinize_flat"):
        nfa = nfa.to_lists()
    if isinstance(nfa, FlatNFA):
        out = _KERNEL.determinize_flat(
            nfa.n,
            nfa.e_src,
            nfa.e_lo,
            nfa.e_hi,
            nfa.e_tgt,
            nfa.x_src,
            nfa.x_tgt,
            nfa.r_src,
            nfa.r_rule,
            nfa.r_tgt,
            nfa.start,
            nfa.accept,
            limits.max_dfa_states,
            _DFA_STATE_COST,
            budget.limit - budget.used,
            threshold,
        )
    else:
        out = _KERNEL.determinize(
            nfa.eps,
            nfa.edges,
            nfa.refs,
            nfa.start,
            nfa.accept,
            limits.max_dfa_states,
            _DFA_STATE_COST,
            budget.limit - budget.used,
            threshold,
        )
    (status, units, _, table, acc, m), class_bytes, ref_rules = out
    budget.spend(units)  # past the fuel or the deadline (status 1, 3), this raises
    if status == 2:
        raise LimitExceededError(
            "max_dfa_states",
            limits.max_dfa_states,
            "the regular expression's automaton is too large",
        )
    if status == 3:  # (the deadline passed in C: spend() saw it too, unless time went back)
        raise CompileTimeoutError(
            "max_compile_seconds",
            float(budget.seconds or 0.0),
            "the compile ran out of wall-clock time (raise the limit, or None)",
        )
    if status == 4:
        return None
    n_symbols = len(table) // (4 * m)
    small = np.frombuffer(table, dtype=np.int32).reshape(m, n_symbols)
    acc_arr = np.frombuffer(acc, dtype=bool)
    return small, acc_arr, np.frombuffer(class_bytes, dtype=np.int32), ref_rules


class _SubsetConstruction:
    """The subset construction of one NFA over its symbols: byte classes (the ranges cut at
    every edge boundary of the NFA), then one symbol per referenced rule.

    Per NFA state, its moves are disjoint sorted symbol intervals with their target sets (an
    interval spans many classes at once: a JSON string's characters are a few intervals, not
    60 classes) and its epsilon closure is kept to the states that have moves (or accept);
    both are computed on first use, for the states met in DFA states only."""

    __slots__ = (
        "accept",
        "class_of",
        "class_of_l",
        "closure_cache",
        "eps",
        "moves_cache",
        "n_classes",
        "n_symbols",
        "nfa_edges",
        "nfa_refs",
        "ref_rules",
        "ref_symbol",
        "start",
    )

    def __init__(self, nfa: NFA) -> None:
        self.class_of, reps = _byte_classes(nfa)
        n_classes = self.n_classes = len(reps)
        self.ref_rules = sorted({r for refs in nfa.refs for r, _ in refs})
        # a rule reference is the symbol n_classes + j
        self.ref_symbol = {r: n_classes + j for j, r in enumerate(self.ref_rules)}
        self.n_symbols = n_classes + len(self.ref_rules)
        self.class_of_l: list[int] = self.class_of.tolist()
        self.nfa_edges, self.nfa_refs, self.eps = nfa.edges, nfa.refs, nfa.eps
        self.start, self.accept = nfa.start, nfa.accept
        # (segments, symbols they cover) per NFA state
        self.moves_cache: dict[int, tuple[list[_Segment], int]] = {}
        self.closure_cache: dict[int, frozenset[int]] = {}

    def moves(self, s: int) -> tuple[list[_Segment], int]:
        """The moves of NFA state ``s`` as disjoint symbol intervals, and their width."""
        got = self.moves_cache.get(s)
        if got is None:
            class_of_l = self.class_of_l
            edges = self.nfa_edges[s]
            refs = self.nfa_refs[s]
            if len(edges) == 1 and not refs:  # the common case: one byte range
                lo, hi, tgt = edges[0]
                c_lo, c_hi = class_of_l[lo], class_of_l[hi]
                got = ([(c_lo, c_hi, frozenset((tgt,)))], c_hi - c_lo + 1)
            else:
                ref_symbol = self.ref_symbol
                raw: list[_Segment] = [
                    (class_of_l[lo], class_of_l[hi], frozenset((tgt,))) for lo, hi, tgt in edges
                ]
                raw.extend((ref_symbol[r], ref_symbol[r], frozenset((tgt,))) for r, tgt in refs)
                segs = _disjoint(raw)
                got = (segs, _width(segs))
            self.moves_cache[s] = got
        return got

    def single_closure(self, s: int) -> frozenset[int]:
        """The epsilon closure of ``s``, kept to the states with moves and the accepting one:
        pure epsilon states change neither the transitions nor acceptance, and closures that
        differ only in them are one DFA state."""
        r = self.closure_cache.get(s)
        if r is None:
            nfa_edges, nfa_refs, accept = self.nfa_edges, self.nfa_refs, self.accept
            if not self.eps[s]:  # no epsilon moves: the closure is the state itself
                r = frozenset((s,)) if nfa_edges[s] or nfa_refs[s] or s == accept else _NO_STATES
            else:
                r = frozenset(
                    t
                    for t in epsilon_closure(self.eps, (s,))
                    if nfa_edges[t] or nfa_refs[t] or t == accept
                )
            self.closure_cache[s] = r
        return r

    def determinize(
        self, limits: CompileLimits, budget: WorkBudget
    ) -> tuple[list[frozenset[int]], list[list[tuple[int, int, int]]]]:
        """The DFA states (NFA state sets, the start first) and, per DFA state, its moves as
        ``(first symbol, last symbol, target DFA state)``, sorted and disjoint.  Charges
        ``budget`` per state; raises ``LimitExceededError`` past ``max_dfa_states``."""
        moves, moves_cache = self.moves, self.moves_cache
        single_closure, closure_cache = self.single_closure, self.closure_cache
        max_states = limits.max_dfa_states
        start_set = single_closure(self.start)
        ids: dict[frozenset[int], int] = {start_set: 0}
        sets: list[frozenset[int]] = [start_set]
        trans: list[list[tuple[int, int, int]]] = []
        # NFA target set -> DFA state, for the whole construction: the DFA state a move leads
        # to depends only on its target set, and rows repeat target sets (each closure union
        # is computed once per construction, not once per row)
        next_of: dict[frozenset[int], int] = {}
        segs: list[_Segment]
        i = 0
        while i < len(sets):
            cur = sets[i]
            if len(cur) == 1:
                (only_state,) = cur
                got = moves_cache.get(only_state)
                if got is None:
                    got = moves(only_state)
                segs, width = got
            else:
                raw: list[_Segment] = []
                for s in cur:
                    got = moves_cache.get(s)
                    if got is None:
                        got = moves(s)
                    raw.extend(got[0])
                segs = _disjoint(raw)
                width = _width(segs)
            budget.spend(_DFA_STATE_COST + len(cur) + width)
            row: list[tuple[int, int, int]] = []
            for lo, hi, tg in segs:
                j = next_of.get(tg)
                if j is None:
                    if len(tg) == 1:
                        (only,) = tg
                        nxt_set = closure_cache.get(only)
                        if nxt_set is None:
                            nxt_set = single_closure(only)
                    else:
                        nxt_set = frozenset().union(
                            *(closure_cache.get(t) or single_closure(t) for t in tg)
                        )
                    j = ids.get(nxt_set)
                    if j is None:
                        j = len(sets)
                        if j >= max_states:
                            raise LimitExceededError(
                                "max_dfa_states",
                                max_states,
                                "the regular expression's automaton is too large",
                            )
                        ids[nxt_set] = j
                        sets.append(nxt_set)
                    next_of[tg] = j
                row.append((lo, hi, j))
            trans.append(row)
            i += 1
        return sets, trans


def _live_states(trans: list[list[tuple[int, int, int]]], accepting: list[bool]) -> list[bool]:
    """The states from which an accepting state is reachable: a reverse BFS.  O(moves)."""
    n = len(trans)
    rev: list[list[int]] = [[] for _ in range(n)]
    for src, row in enumerate(trans):
        for tgt in {t for _, _, t in row}:
            rev[tgt].append(src)
    live = [False] * n
    dq = deque(k for k in range(n) if accepting[k])
    for k in dq:
        live[k] = True
    while dq:
        k = dq.popleft()
        for p in rev[k]:
            if not live[p]:
                live[p] = True
                dq.append(p)
    return live


def _live_table(
    trans: list[list[tuple[int, int, int]]], accepting: list[bool], live: list[bool], n_symbols: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``int32[m, n_symbols]`` table and accepting flags of the live states, renumbered in
    BFS order from the start (state 0 of ``trans``): dead 0, start 1."""
    order: list[int] = [0]
    new_id = {0: 1}
    dq2 = deque([0])
    while dq2:
        k = dq2.popleft()
        for _, _, t in trans[k]:  # in symbol order
            if live[t] and t not in new_id:
                new_id[t] = len(order) + 1
                order.append(t)
                dq2.append(t)
    m = len(order) + 1
    small = np.zeros((m, n_symbols), dtype=np.int32)
    acc_arr = np.zeros(m, dtype=bool)
    # every live transition as (row, first symbol, width, target), then one scatter
    seg_row: list[int] = []
    seg_lo: list[int] = []
    seg_width: list[int] = []
    seg_target: list[int] = []
    for old in order:
        r = new_id[old]
        acc_arr[r] = accepting[old]
        for lo, hi, t in trans[old]:
            if live[t]:
                seg_row.append(r)
                seg_lo.append(lo)
                seg_width.append(hi - lo + 1)
                seg_target.append(new_id[t])
    if seg_row:
        widths = np.asarray(seg_width, dtype=np.int64)
        starts = np.cumsum(widths) - widths
        offsets = np.arange(int(widths.sum()), dtype=np.int64) - np.repeat(starts, widths)
        small[
            np.repeat(np.asarray(seg_row, dtype=np.int64), widths),
            np.repeat(np.asarray(seg_lo, dtype=np.int64), widths) + offsets,
        ] = np.repeat(np.asarray(seg_target, dtype=np.int32), widths)
    return small, acc_arr


def _empty_dfa() -> ByteDFA:
    table = np.zeros((1, 256), dtype=np.int32)
    acc = np.zeros(1, dtype=bool)
    table.setflags(write=False)
    acc.setflags(write=False)
    return ByteDFA(table=table, accepting=acc, start=0)


def _minimize(
    table: np.ndarray, accepting: np.ndarray, start: int, limits: CompileLimits
) -> tuple[np.ndarray, np.ndarray, int]:
    """Minimal DFA of a class-compressed table (row 0 dead, every other state live): the
    coarsest partition of equivalent states (:func:`_hopcroft_partition`), its blocks numbered
    breadth-first from the start (dead 0, start 1).  (A vectorized Moore refinement was
    measured too: a dozen rounds of numpy passes cost what Hopcroft's Python loop costs.)"""
    n, k = table.shape
    if n <= 2 or n > limits.max_minimize_states or n * k > _MINIMIZE_WORK:
        return table, accepting, start
    if _KERNEL is not None:
        return _minimize_native(table, accepting, start)
    # equal columns split alike: Hopcroft runs on the distinct ones (about 3/4 of them)
    part = _hopcroft_partition(np.ascontiguousarray(table[:, column_classes(table)[1]]), accepting)
    n_blocks = int(part.max()) + 1
    if n_blocks == n:
        return table, accepting, start
    return _quotient(table, accepting, start, part, n_blocks)


def _minimize_native(
    table: np.ndarray, accepting: np.ndarray, start: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`_minimize` past its size checks with the C kernel
    (``formcast.automata._subset.hopcroft``): the same partition, its blocks already numbered
    as :func:`_quotient` numbers them, so the quotient is one gather (``_subset.quotient``,
    or numpy).  (It runs on every column: in C, equal columns cost less than finding them.)
    O(k n log n) in C."""
    n, k = table.shape
    table = np.ascontiguousarray(table, dtype=np.int32)
    part = np.empty(n, dtype=np.int64)
    acc_c = np.ascontiguousarray(accepting, dtype=bool)
    _KERNEL.hopcroft(table, k, acc_c, start, part)
    if hasattr(_KERNEL, "quotient"):
        # the gather below in one C pass (its eight numpy calls cost ~10 us per automaton);
        # a kernel without it (a test's stand-in, an older build) takes numpy
        got = _KERNEL.quotient(table, k, part, acc_c)
        if got is None:
            return table, accepting, start
        q_table, q_acc, q_blocks = got
        return (
            np.frombuffer(q_table, dtype=np.int32).reshape(q_blocks, k),
            np.frombuffer(q_acc, dtype=bool),
            1,
        )
    n_blocks = int(part.max()) + 1
    if n_blocks == n:
        return table, accepting, start
    rep_of_block = np.zeros(n_blocks, dtype=np.int64)
    rep_of_block[part[::-1]] = np.arange(n - 1, -1, -1)
    out = part[table[rep_of_block]].astype(np.int32)
    acc = accepting[rep_of_block]
    out[0] = 0
    acc[0] = False
    return out, acc, 1


def _hopcroft_partition(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Hopcroft's algorithm: block of each state.  O(k n log n).

    Predecessor lists are kept per target state, so a splitter visits only the byte classes
    that lead into it (most lead to the dead state, which never splits)."""
    n, k = table.shape
    # predecessors per target state: inv_t[t] = [(class, sources), ...]; transitions into the
    # dead state are left out (it is a block of its own, never a splitter)
    inv_t: list[list[tuple[int, list[int]]]] = [[] for _ in range(n)]
    for c in range(k):
        col = table[:, c]
        order = np.argsort(col, kind="stable")
        sorted_t = col[order]
        cuts = (np.flatnonzero(sorted_t[1:] != sorted_t[:-1]) + 1).tolist()
        bounds = [0, *cuts, n]
        targets = sorted_t[bounds[:-1]].tolist()
        order_l = order.tolist()
        for i, t in enumerate(targets):
            if t != DEAD:
                inv_t[t].append((c, order_l[bounds[i] : bounds[i + 1]]))
    acc_states = [s for s in range(1, n) if accepting[s]]
    rej_states = [s for s in range(1, n) if not accepting[s]]
    blocks: list[set[int]] = [{DEAD}] + [set(b) for b in (acc_states, rej_states) if b]
    block_of = [0] * n
    for i, b in enumerate(blocks):
        for s in b:
            block_of[s] = i
    # splitters are whole blocks, all byte classes of one block at once; the dead block is
    # left out of the work list (Hopcroft may leave out any one initial block)
    work = list(range(1, len(blocks)))
    in_work = [i > 0 for i in range(len(blocks))]
    rounds = 0
    while work:
        rounds += 1
        if not rounds & 255:
            check_deadline()
        a = work.pop()
        in_work[a] = False
        by_class: dict[int, list[int]] = {}
        for t in blocks[a]:
            for c, srcs in inv_t[t]:
                lst = by_class.get(c)
                if lst is None:
                    by_class[c] = list(srcs)
                else:
                    lst.extend(srcs)
        for c in sorted(by_class):
            touched: dict[int, list[int]] = {}
            for src in by_class[c]:
                blk = block_of[src]
                lst = touched.get(blk)
                if lst is None:
                    touched[blk] = [src]
                else:
                    lst.append(src)
            for y, members in touched.items():
                yb = blocks[y]
                if len(members) == len(yb):
                    continue
                z = len(blocks)
                zb = set(members)
                yb.difference_update(zb)
                blocks.append(zb)
                for s in zb:
                    block_of[s] = z
                if in_work[y] or len(zb) <= len(yb):
                    work.append(z)
                    in_work.append(True)
                else:
                    work.append(y)
                    in_work[y] = True
                    in_work.append(False)
    return np.asarray(block_of, dtype=np.int64)


def _quotient(
    table: np.ndarray, accepting: np.ndarray, start: int, part: np.ndarray, n_blocks: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """The automaton of the blocks of ``part``, numbered breadth-first (dead 0, start 1)."""
    k = table.shape[1]
    rep_of_block = np.zeros(n_blocks, dtype=np.int64)
    rep_of_block[part[::-1]] = np.arange(table.shape[0] - 1, -1, -1)
    block_table = part[table[rep_of_block]]
    block_acc = accepting[rep_of_block]
    mapping = {int(part[DEAD]): 0, int(part[start]): 1}
    rows: list[list[int]] = block_table.tolist()  # one conversion, not one per row
    dq = deque([int(part[start])])
    while dq:
        for t in rows[dq.popleft()]:
            if t not in mapping:
                mapping[t] = len(mapping)
                dq.append(t)
    m = len(mapping)
    perm = np.zeros(n_blocks, dtype=np.int32)
    blocks = np.fromiter(mapping.keys(), dtype=np.int64, count=m)
    perm[blocks] = np.arange(m, dtype=np.int32)
    out = np.zeros((m, k), dtype=np.int32)
    acc = np.zeros(m, dtype=bool)
    out[perm[blocks]] = perm[block_table[blocks]]
    acc[perm[blocks]] = block_acc[blocks]
    out[0] = 0
    acc[0] = False
    return out, acc, 1


def _show_byte(b: int) -> str:
    return chr(b) if 0x20 < b < 0x7F else f"\\x{b:02x}"


def describe_bytes(values: np.ndarray | list[int]) -> str:
    """Compact human-readable description of a set of byte values, e.g. ``[0-9a-f] or '"'``."""
    vals = sorted(int(v) for v in values)
    if not vals:
        return "nothing"
    parts: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        lo, hi = vals[i], vals[j]

        parts.append(_show_byte(lo) if lo == hi else f"{_show_byte(lo)}-{_show_byte(hi)}")
        i = j + 1
    return "[" + "".join(parts) + "]"
