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

from dataclasses import dataclass
from itertools import accumulate, chain

import numpy as np

from ..columns import column_classes
from ..limits import WorkBudget, check_deadline
from .dfa import DEAD
from .nfa import epsilon_closure
from .rules import GrammarAutomaton

__all__ = ["ExpandedLexer", "build_expanded_lexer"]


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
