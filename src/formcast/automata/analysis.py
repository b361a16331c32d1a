"""Byte-level analyses of a grammar's rule automata: nullable rules, FIRST / FOLLOW, splits.

A :class:`GrammarAnalysis` holds, per rule, whether it can finish without a byte (nullable),
the bytes it may start with (FIRST), the bytes that may follow it anywhere in the grammar
(FOLLOW) and the bytes that may restart a counted rule's next iteration.  It is computed once
per compiled grammar, on first use (:attr:`~formcast.automata.rules.GrammarAutomaton.analysis`
memoizes it), and read by the expanded lexer (:mod:`.lexer`) and the token index
(:func:`split_bytes`, :func:`counted_splits`).  FIRST / FOLLOW are over-approximations where a
callee is nullable (then every byte is assumed possible).

The functions here read the automaton through :class:`RuleAutomata` (what
:class:`~formcast.automata.rules.GrammarAutomaton` provides), so this module sits below
:mod:`.rules`.

Lifetime: a :class:`GrammarAnalysis` is immutable (read-only arrays) and lives as long as its
automaton; :func:`split_bytes` / :func:`counted_splits` results are fresh per call.  Costs:
O(rules x states x 256) fixpoints, checked against the compile's deadline; no fuel.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

import numpy as np

from .._native import interpreted_class
from ..limits import check_deadline
from .dfa import DEAD, ByteDFA

__all__ = [
    "GrammarAnalysis",
    "RuleAutomata",
    "counted_splits",
    "epsilon_reach",
    "nullable_rules",
    "restart_bytes",
    "split_bytes",
]


class RuleAutomata(Protocol):
    """What the analyses read from a grammar's rule automata (see ``GrammarAutomaton``)."""

    @property
    def dfas(self) -> tuple[ByteDFA, ...]: ...

    @property
    def refs(self) -> tuple[tuple[tuple[tuple[int, int], ...], ...], ...]: ...

    @property
    def counts(self) -> tuple[tuple[int, int | None] | None, ...]: ...

    def count_of(self, rule: int) -> tuple[int, int | None] | None: ...


class AnalysedAutomata(RuleAutomata, Protocol):
    """Rule automata with their memoized :class:`GrammarAnalysis`."""

    @property
    def analysis(self) -> GrammarAnalysis: ...


def epsilon_reach(auto: RuleAutomata, r: int, nullable: list[bool]) -> tuple[set[int], bool]:
    """Rules callable from rule r's start without consuming bytes, and whether r is nullable
    (given the nullable rules).  O(states of r)."""
    dfa = auto.dfas[r]
    calls: set[int] = set()
    seen = {dfa.start}
    todo = [dfa.start]
    count = auto.count_of(r)
    can_accept = count is not None and count[0] == 0  # zero iterations
    while todo:
        s = todo.pop()
        if dfa.accepting[s]:
            can_accept = True
        for callee, ret in auto.refs[r][s]:
            calls.add(callee)
            if nullable[callee] and ret not in seen:
                seen.add(ret)
                todo.append(ret)
    return calls, can_accept


def nullable_rules(auto: RuleAutomata) -> list[bool]:
    """Per rule: it can finish without consuming a byte (least fixpoint over
    :func:`epsilon_reach`).  O(rules x states x rounds)."""
    n_rules = len(auto.dfas)
    nullable = [False] * n_rules
    changed = True
    while changed:
        changed = False
        for r in range(n_rules):
            if not nullable[r] and epsilon_reach(auto, r, nullable)[1]:
                nullable[r] = True
                changed = True
    return nullable


def restart_bytes(auto: RuleAutomata, first: list[np.ndarray]) -> list[np.ndarray]:
    """Per rule, the bytes that may follow the end of an iteration *within* the rule: the
    first bytes of a counted rule that can iterate again (none for ordinary rules)."""
    none = np.zeros(256, dtype=bool)
    out = []
    for r in range(len(auto.dfas)):
        count = auto.count_of(r)
        out.append(first[r] if count is not None and count[1] != 1 else none)
    return out


def _frozen(arrays: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    for a in arrays:
        a.setflags(write=False)
    return tuple(arrays)


@interpreted_class
@dataclass(frozen=True, eq=False, slots=True)
class GrammarAnalysis:
    """Per-rule byte sets of a grammar (see the module docstring); arrays are ``bool[256]``,
    read-only.

    Attributes:
        nullable: per rule, it can finish without a byte.
        first: per rule, the bytes it may start with (all bytes past a nullable callee).
        follow: per rule, the bytes that may follow a call to it.
        restart: per rule, the bytes that may start another iteration of a counted rule.
    """

    nullable: tuple[bool, ...]
    first: tuple[np.ndarray, ...]
    follow: tuple[np.ndarray, ...]
    restart: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, auto: RuleAutomata) -> GrammarAnalysis:
        """Compute the analysis (prefer the memoized ``auto.analysis``).  The fixpoints run
        on byte sets as 256-bit Python ints (an OR of two is tens of nanoseconds, a numpy
        ``bool[256]`` operation a microsecond or two: the analysis was half of a median
        JSON schema's program set-up), converted to the arrays once at the end.
        O(rules x states) to read the automata, plus O(rules x call sites x rounds) int ops."""
        n_rules = len(auto.dfas)
        all_bytes = _ALL_BYTES
        nullable = nullable_rules(auto)
        dfas = auto.dfas
        refs = auto.refs
        # the bytes each rule's start (resp. each call site's return state) moves on
        # (``np.array`` of the rows: one C call, where ``np.stack``'s Python-level checks cost
        # ~10 us; the same int[rules, 256] table)
        first_moves = _row_bits(
            np.array([d.table[d.start] for d in dfas]) if n_rules else np.zeros((0, 256))
        )
        first = [0] * n_rules
        changed = True
        while changed:
            changed = False
            for r in range(n_rules):
                check_deadline()
                new = first[r] | first_moves[r]
                for callee, _ in refs[r][dfas[r].start]:
                    new |= all_bytes if nullable[callee] else first[callee]
                if new != first[r]:
                    first[r] = new
                    changed = True
        # counted rules that can iterate again restart with their FIRST bytes
        counts = [auto.count_of(r) for r in range(n_rules)]
        iterates = [c is not None and c[1] != 1 for c in counts]
        restart = [first[r] if iterates[r] else 0 for r in range(n_rules)]
        # FOLLOW(callee) is, over its call sites (caller, return state), the bytes that may
        # come next at the return state (its moves, the FIRST of the rules it calls, and at
        # an accepting one the caller's restart bytes) -- fixed, computed once per distinct
        # site -- plus FOLLOW(caller) where the return state accepts: a fixpoint over rules
        follow = [0] * n_rules
        flows_from: list[set[int]] = [set() for _ in range(n_rules)]
        check_deadline()
        callers, callees, rets, moves, accepting = _all_call_sites(dfas, refs)
        for i, caller in enumerate(callers):
            callee, ret = callees[i], rets[i]
            after = moves[i]
            for c2, _ in refs[caller][ret]:
                after |= all_bytes if nullable[c2] else first[c2]
            if accepting[i]:
                after |= restart[caller]
                flows_from[callee].add(caller)
            follow[callee] |= after
        changed = True
        while changed:
            changed = False
            for callee in range(n_rules):
                for caller in flows_from[callee]:
                    new = follow[callee] | follow[caller]
                    if new != follow[callee]:
                        follow[callee] = new
                        changed = True
        first_arr = _bit_rows(first)
        follow_arr = _bit_rows(follow)
        # restart aliases FIRST's arrays and one shared empty set (all read-only alike)
        none = np.zeros(256, dtype=bool)
        none.setflags(write=False)
        restart_arr = [first_arr[r] if iterates[r] else none for r in range(n_rules)]
        return cls(tuple(nullable), tuple(first_arr), tuple(follow_arr), tuple(restart_arr))


#: every byte, as a 256-bit set (bit ``b`` is byte ``b``)
_ALL_BYTES = (1 << 256) - 1


#: grammars of at most this many rule states have their call sites read from ``refs`` (a
#: Python pass over the states that call, no fixed cost), larger ones from the ``ref_table``
#: arrays (a dozen numpy passes, ~30 us fixed, less work per state): the same lists either way
_REFS_SITES_MAX_STATES = 2_048


def _all_call_sites(
    dfas: tuple[ByteDFA, ...],
    refs: tuple[tuple[tuple[tuple[int, int], ...], ...], ...] | None = None,
) -> tuple[list[int], list[int], list[int], list[int], list[bool]]:
    """The distinct ``(caller, callee, return state)`` triples of every rule DFA's calls,
    sorted, as parallel lists with, per triple, the bytes the return state moves on (a
    256-bit int, :func:`_row_bits`) and whether it accepts: what ``refs`` lists state by state
    (:func:`~formcast.automata.rules.compile_grammar_automaton` derives them from
    ``ref_table``, the dead state's row left out).  Read from ``refs`` itself when given and
    the grammar is small (:data:`_REFS_SITES_MAX_STATES`; :func:`_call_sites_from_refs`),
    else from the rules' ``ref_table`` arrays in a few numpy passes over all rules at once (a
    pass per rule was most of the analysis of a large grammar); then one row gather per
    calling rule.  O(states x callees) in numpy, O(sites) in Python."""
    if refs is not None and sum(d.table.shape[0] for d in dfas) <= _REFS_SITES_MAX_STATES:
        return _call_sites_from_refs(dfas, refs)
    flat: list[np.ndarray] = []
    who: list[int] = []
    width: list[int] = []
    names: list[int] = []
    for r, d in enumerate(dfas):
        rt = d.ref_table
        if rt is None or rt.shape[0] <= 1 or not rt.shape[1]:
            continue
        flat.append(rt[1:].reshape(-1))
        who.append(r)
        width.append(int(rt.shape[1]))
        names.extend(d.ref_rules)
    if not flat:
        return [], [], [], [], []
    cells = np.concatenate(flat) if len(flat) > 1 else flat[0]
    hit = np.flatnonzero(cells != DEAD)
    if not hit.size:
        return [], [], [], [], []
    sizes = np.fromiter((a.size for a in flat), dtype=np.int64, count=len(flat))
    starts = np.cumsum(sizes) - sizes
    block = np.searchsorted(starts, hit, side="right") - 1  # the calling rule's block
    widths = np.asarray(width, dtype=np.int64)
    col_base = np.cumsum(widths) - widths  # each block's first entry in ``names``
    callee = np.asarray(names, dtype=np.int64)[
        col_base[block] + (hit - starts[block]) % widths[block]
    ]
    ret = cells[hit].astype(np.int64)
    n_rules, n_states = len(dfas), int(ret.max()) + 1
    caller = np.asarray(who, dtype=np.int64)[block]
    key = np.unique((caller * n_rules + callee) * n_states + ret)  # sorted, distinct
    ret = key % n_states
    callee = key // n_states % n_rules
    caller = key // n_states // n_rules
    # per calling rule (a run of ``caller``), its return states' rows and accepting flags
    bounds = [0, *(np.flatnonzero(np.diff(caller)) + 1).tolist(), int(key.size)]
    gathered: list[np.ndarray] = []
    acc: list[np.ndarray] = []
    for lo, hi in pairwise(bounds):
        d = dfas[int(caller[lo])]
        part = ret[lo:hi]
        gathered.append(d.table[part])
        acc.append(np.asarray(d.accepting, dtype=bool)[part])
    moves = _row_bits(np.concatenate(gathered) if len(gathered) > 1 else gathered[0])
    accepting: list[bool] = (np.concatenate(acc) if len(acc) > 1 else acc[0]).tolist()
    return caller.tolist(), callee.tolist(), ret.tolist(), moves, accepting


def _call_sites_from_refs(
    dfas: tuple[ByteDFA, ...], refs: tuple[tuple[tuple[tuple[int, int], ...], ...], ...]
) -> tuple[list[int], list[int], list[int], list[int], list[bool]]:
    """:func:`_all_call_sites` read from ``refs`` (per rule, per state, its ``(callee, return
    state)`` calls; the dead state has none): each site as one int ``(caller * rules +
    callee) * width + return state`` (``width`` above every state number), so that a set
    keeps the distinct ones and sorting the ints sorts the triples, then one row gather per
    calling rule.  For small grammars (the numpy reader's dozen passes cost more than this
    Python pass there).  O(states + sites log sites)."""
    n_rules = len(dfas)
    width = max((d.table.shape[0] for d in dfas), default=1)
    keys: set[int] = set()
    for r, per_state in enumerate(refs):
        base = r * n_rules
        # (``filter`` skips the states without calls, most of them, in C)
        for calls in filter(None, per_state):
            for callee, ret in calls:
                keys.add((base + callee) * width + ret)
    if not keys:
        return [], [], [], [], []
    callers: list[int] = []
    callees: list[int] = []
    rets: list[int] = []
    for k in sorted(keys):
        pair, ret = divmod(k, width)
        caller, callee = divmod(pair, n_rules)
        callers.append(caller)
        callees.append(callee)
        rets.append(ret)
    gathered: list[np.ndarray] = []
    accepting: list[bool] = []
    lo, n = 0, len(rets)
    while lo < n:
        caller = callers[lo]
        hi = lo + 1
        while hi < n and callers[hi] == caller:
            hi += 1
        d = dfas[caller]
        part = rets[lo:hi]
        gathered.append(d.table[part])
        accepting.extend(np.asarray(d.accepting, dtype=bool)[part].tolist())
        lo = hi
    moves = _row_bits(np.concatenate(gathered) if len(gathered) > 1 else gathered[0])
    return callers, callees, rets, moves, accepting


def _row_bits(table_rows: np.ndarray) -> list[int]:
    """Per row of ``int[k, 256]`` transition rows: the set of bytes not leading to the dead
    state, as a 256-bit int (bit ``b`` = byte ``b``).  One numpy pass, O(k) ints."""
    if not len(table_rows):
        return []
    packed = np.packbits(np.asarray(table_rows) != DEAD, axis=1, bitorder="little")
    raw = packed.tobytes()
    return [int.from_bytes(raw[i : i + 32], "little") for i in range(0, len(raw), 32)]


def _bit_rows(sets: list[int]) -> list[np.ndarray]:
    """256-bit byte sets back to read-only ``bool[256]`` arrays (views of one block).  O(k)."""
    if not sets:
        return []
    raw = b"".join(x.to_bytes(32, "little") for x in sets)
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
    block = bits.astype(bool).reshape(len(sets), 256)
    block.setflags(write=False)
    return list(block)


def split_bytes(auto: AnalysedAutomata) -> list[np.ndarray]:
    """Per rule, ``bool[n_states, 256]``: byte ``b`` may follow a call or return at state ``q``.

    Built from FIRST and FOLLOW byte sets: at a state with calls, the first bytes of the
    callees (all bytes when a callee can be empty); at an accepting state, the bytes that can
    follow the rule anywhere in the grammar.  A token that leaves a rule at ``q`` must continue
    with such a byte, so only tokens that do need verifying.  Fresh arrays, O(states x 256).
    """
    a = auto.analysis
    nullable, first, follow, restart = a.nullable, a.first, a.follow, a.restart
    all_bytes = np.ones(256, dtype=bool)
    out: list[np.ndarray] = []
    for r in range(len(auto.dfas)):
        dfa = auto.dfas[r]
        n = dfa.table.shape[0]
        sb = np.zeros((n, 256), dtype=bool)
        # the accepting states' rows in one write, then the (few) states with calls: no
        # numpy work per plain state (this ran a row at a time over every state)
        acc = np.array(dfa.accepting, dtype=bool)
        acc[:1] = False  # (the dead state's row stays empty)
        sb[acc] = follow[r] | restart[r]
        for q, calls in enumerate(auto.refs[r]):
            if q and calls:
                row = sb[q]
                for callee, _ in calls:
                    row |= all_bytes if nullable[callee] else first[callee]
        out.append(sb)
    return out


def counted_splits(auto: AnalysedAutomata) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per counted rule: (``bool[n_states, 256]`` bytes that may start a callee at each state,
    ``bool[256]`` bytes that may follow the rule, read-only), for its window automaton
    (:func:`formcast.automata.counted.window_table`).  O(counted rules' states x 256)."""
    if not auto.counts:
        return {}
    a = auto.analysis
    nullable, first, follow = a.nullable, a.first, a.follow
    all_bytes = np.ones(256, dtype=bool)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r, count in enumerate(auto.counts):
        if count is None:
            continue
        n = auto.dfas[r].table.shape[0]
        calls = np.zeros((n, 256), dtype=bool)
        for q in range(1, n):
            for callee, _ in auto.refs[r][q]:
                calls[q] |= all_bytes if nullable[callee] else first[callee]
        out[r] = (calls, follow[r])
    return out
