"""Byte DFAs as numpy tables: subset construction, dead-state pruning, minimization.

A :class:`ByteDFA` has ``table: int32[n_states, 256]`` and ``accepting: bool[n_states]``.
State 0 is the dead state (all its transitions lead to 0); every other state is *live*: some
accepting state is reachable from it.  Hence "the automaton stays alive on bytes ``w``" is simply
``walk(s, w) != 0``.

Lifetime: per grammar; immutable after construction (the arrays are made read-only).
Construction: subset construction over byte equivalence classes, O(states x classes x NFA-set
size); minimization by partition refinement (Moore) vectorized with numpy, skipped above
:attr:`~formcast.limits.CompileLimits.max_minimize_states` or when its work budget runs out
(the result is then correct but not minimal).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from ..errors import LimitExceededError
from ..ir.nodes import Node
from ..limits import CompileLimits, WorkBudget, check_deadline
from .nfa import NFA, build_nfa

__all__ = [
    "DEAD",
    "ByteDFA",
    "bounded_equivalence",
    "compile_dfa",
    "describe_bytes",
    "equivalence_classes",
    "nfa_to_dfa",
]

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

    def fingerprint(self) -> str:
        import hashlib

        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.table).tobytes())
        h.update(np.ascontiguousarray(self.accepting).tobytes())
        h.update(str(self.start).encode())
        return h.hexdigest()


def compile_dfa(
    node: Node, limits: CompileLimits | None = None, budget: WorkBudget | None = None
) -> ByteDFA:
    """Regular IR → minimized byte DFA (within the compile-work ``budget``)."""
    limits = limits or CompileLimits()
    budget = budget or limits.budget()
    return nfa_to_dfa(build_nfa(node, limits, budget=budget), limits, budget=budget)


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
    nfa: NFA,
    limits: CompileLimits | None = None,
    *,
    minimize: bool = True,
    budget: WorkBudget | None = None,
) -> ByteDFA:
    """Subset construction, pruning of states that cannot reach acceptance, minimization.

    ``minimize=False`` skips Hopcroft (the token index merges states with equal masks anyway,
    see :func:`bounded_equivalence`); the result is then correct but possibly larger.
    """
    limits = limits or CompileLimits()
    budget = budget or limits.budget()
    # subset construction builds roughly one DFA state per NFA state on repeat chains
    budget.check_projected(len(nfa.eps) * _PROJECTED_COST_PER_NFA_STATE)
    class_of, reps = _byte_classes(nfa)
    n_classes = len(reps)
    ref_rules = sorted({r for refs in nfa.refs for r, _ in refs})
    ref_symbol = {r: n_classes + j for j, r in enumerate(ref_rules)}
    n_symbols = n_classes + len(ref_rules)
    # per NFA state: its moves as disjoint, sorted symbol intervals (a byte class, or
    # n_classes + j for a rule reference) with their target sets; an interval spans many
    # classes at once (a JSON string's characters are a few intervals, not 60 classes)
    class_of_l: list[int] = class_of.tolist()
    nfa_edges, nfa_refs = nfa.edges, nfa.refs
    # (segments, symbols they cover), built on first use (only states met in DFA states)
    moves_cache: dict[int, tuple[list[_Segment], int]] = {}

    def moves(s: int) -> tuple[list[_Segment], int]:
        got = moves_cache.get(s)
        if got is None:
            raw: list[_Segment] = [
                (class_of_l[lo], class_of_l[hi], frozenset((tgt,))) for lo, hi, tgt in nfa_edges[s]
            ]
            raw.extend((ref_symbol[r], ref_symbol[r], frozenset((tgt,))) for r, tgt in nfa_refs[s])
            segs = _disjoint(raw)
            got = (segs, _width(segs))
            moves_cache[s] = got
        return got

    eps = nfa.eps
    closure_cache: dict[int, frozenset[int]] = {}

    def closure(states: list[int] | set[int]) -> frozenset[int]:
        seen = set(states)
        stack = list(states)
        while stack:
            s = stack.pop()
            for t in eps[s]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)

    accept_state = nfa.accept

    def single_closure(s: int) -> frozenset[int]:
        # only states with outgoing edges (and the accepting state) are kept: pure epsilon
        # states change neither the transitions nor acceptance, and closures that differ
        # only in them are one DFA state
        r = closure_cache.get(s)
        if r is None:
            r = frozenset(
                t for t in closure([s]) if nfa_edges[t] or nfa_refs[t] or t == accept_state
            )
            closure_cache[s] = r
        return r

    start_set = single_closure(nfa.start)
    ids: dict[frozenset[int], int] = {start_set: 0}
    sets: list[frozenset[int]] = [start_set]
    # per DFA state: (first symbol, last symbol, target DFA state), sorted, disjoint
    trans: list[list[tuple[int, int, int]]] = []
    i = 0
    while i < len(sets):
        cur = sets[i]
        if len(cur) == 1:
            (only_state,) = cur
            segs, width = moves(only_state)
        else:
            raw = []
            for s in cur:
                raw.extend(moves(s)[0])
            segs = _disjoint(raw)
            width = _width(segs)
        budget.spend(_DFA_STATE_COST + len(cur) + width)
        row: list[tuple[int, int, int]] = []
        # each distinct target set's closure is computed once per row
        seen_targets: dict[frozenset[int], int] = {}
        for lo, hi, tg in segs:
            j = seen_targets.get(tg)
            if j is None:
                if len(tg) == 1:
                    (only,) = tg
                    nxt_set = closure_cache.get(only) or single_closure(only)
                else:
                    nxt_set = frozenset().union(*(single_closure(t) for t in tg))
                j = ids.get(nxt_set)
                if j is None:
                    j = len(sets)
                    if j >= limits.max_dfa_states:
                        raise LimitExceededError(
                            "max_dfa_states",
                            limits.max_dfa_states,
                            "the regular expression's automaton is too large",
                        )
                    ids[nxt_set] = j
                    sets.append(nxt_set)
                seen_targets[tg] = j
            row.append((lo, hi, j))
        trans.append(row)
        i += 1
    n = len(sets)
    accepting = [accept_state in s for s in sets]
    # liveness: reverse BFS from accepting states
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
    if not live[0]:
        return _empty_dfa()
    # renumber live states in BFS order from the start: dead=0, start=1
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
    start = 1
    if minimize:
        small, acc_arr, start = _minimize(small, acc_arr, 1, limits)
    table = np.ascontiguousarray(small[:, :n_classes][:, class_of])
    table.setflags(write=False)
    acc_arr.setflags(write=False)
    ref_table = np.ascontiguousarray(small[:, n_classes:])
    ref_table.setflags(write=False)
    return ByteDFA(
        table=table,
        accepting=acc_arr,
        start=start,
        ref_rules=tuple(ref_rules),
        ref_table=ref_table if ref_rules else None,
    )


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
    # equal columns split alike: Hopcroft runs on the distinct ones (about 3/4 of them)
    part = _hopcroft_partition(np.ascontiguousarray(table[:, column_classes(table)[1]]), accepting)
    n_blocks = int(part.max()) + 1
    if n_blocks == n:
        return table, accepting, start
    return _quotient(table, accepting, start, part, n_blocks)


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
    dq = deque([int(part[start])])
    while dq:
        for t in block_table[dq.popleft()].tolist():
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


def bounded_equivalence(
    table: np.ndarray,
    labels: np.ndarray,
    depth: int,
    *,
    budget: int = 80_000_000,
    work: WorkBudget | None = None,
) -> np.ndarray:
    """Classes of states indistinguishable by any string of at most ``depth`` bytes.

    Two states are in one class when, for every byte string ``w`` with ``len(w) <= depth``, the
    states reached by ``w`` carry the same label (e.g. dead / accepting / other).  Token masks
    depend only on strings as long as the vocabulary's longest token, so states of one class
    share their mask: the states of ``[a-z]{1,1000}`` with 128 or more letters left form one
    class.  Moore refinement for ``depth`` rounds (stops early when stable); returns the
    identity when the work done (``n_states * byte_classes`` per round) would exceed
    ``budget``.  ``work``: the compile's fuel, charged per round (see
    :func:`equivalence_classes`).
    """
    return equivalence_classes(table, labels, depth, budget=budget, work=work)[0]


def equivalence_classes(
    table: np.ndarray,
    labels: np.ndarray,
    depth: int,
    *,
    budget: int = 80_000_000,
    work: WorkBudget | None = None,
) -> tuple[np.ndarray, bool]:
    """:func:`bounded_equivalence`, and whether its classes are *stable*: each class's states
    carry one label and move, on every byte, into one class.  Stable classes (refinement
    converged within ``depth`` rounds, or the identity) are a congruence: their quotient
    automaton is well defined and behaves like the original from any state.

    ``budget`` caps the work actually done (``n_states x byte_classes`` per round): large
    automata usually converge in a few dozen rounds, far fewer than ``depth``.  Past the cap,
    or when the compile's fuel (``work``) or its deadline (within :data:`_DEADLINE_RESERVE`
    seconds) would run out, the refinement stops and the identity is returned: correct, only
    without shared walks; this step never fails a compile."""
    n = table.shape[0]
    identity = np.arange(n, dtype=np.int64)
    cols = table[:, column_classes(table)[1]].astype(np.int64)  # the distinct columns
    k = max(cols.shape[1], 1)
    _, part = np.unique(labels, return_inverse=True)
    part = part.reshape(-1).astype(np.int64)
    n_blocks = int(part.max()) + 1
    if n_blocks == n:
        return part, True
    preds = _predecessors(cols, n)
    touched = np.ones(n, dtype=bool)  # round one looks at every state
    done = 0
    for _ in range(depth):
        size = int(np.count_nonzero(touched))
        done += size * k
        if done > budget:
            return identity, True
        if work is not None:
            units = size * k // 64 + 1
            late = work.deadline is not None and (
                time.monotonic() > work.deadline - _DEADLINE_RESERVE
            )
            if late or work.used + units > work.limit:
                return identity, True
            work.spend(units)
        moved = _refine_blocks(part, cols, np.flatnonzero(touched), n_blocks)
        if moved.size == 0:
            return part, True
        n_blocks = int(part.max()) + 1
        if n_blocks == n:
            return part, True
        # only states with a successor that changed block can split next: their blocks
        affected = preds.targets[_csr_take(preds.indptr, moved)]
        touched = np.zeros(n_blocks, dtype=bool)
        touched[part[affected]] = True
        touched = touched[part]
    return part, False


class _Csr:
    """Predecessor lists in compressed rows: ``targets[indptr[t]:indptr[t + 1]]`` are the
    states with a move into ``t``."""

    __slots__ = ("indptr", "targets")

    def __init__(self, indptr: np.ndarray, targets: np.ndarray) -> None:
        self.indptr = indptr
        self.targets = targets


def _predecessors(cols: np.ndarray, n: int) -> _Csr:
    """The (deduplicated) predecessors of every state of a transition table: O(n x k)."""
    k = cols.shape[1]
    dst = cols.reshape(-1)
    src = np.repeat(np.arange(n, dtype=np.int64), k)
    pair = np.unique(dst * n + src)
    dst, src = pair // n, pair % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return _Csr(indptr, src)


def _csr_take(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions ``indptr[r]..indptr[r + 1]`` for every ``r`` in ``rows``, concatenated."""
    starts, ends = indptr[rows], indptr[rows + 1]
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return offsets + np.arange(total, dtype=np.int64)


def _refine_blocks(
    part: np.ndarray, cols: np.ndarray, members: np.ndarray, n_blocks: int
) -> np.ndarray:
    """One Moore round over the blocks whose states are ``members`` (sorted; every state of
    those blocks): a block splits by its states' successor blocks.  Updates ``part`` in place
    (a block's part holding its lowest state keeps the block's number, the others get new
    numbers from ``n_blocks`` on) and returns the states that changed number.  States
    outside ``members`` cannot split this round: their successors kept their numbers.
    Rows are hashed with random 64-bit weights and the grouping is checked exactly (a sort of
    the rows on a collision).  O(len(members) x k)."""
    k = cols.shape[1]
    own = part[members]
    succ = part[cols[members]]
    weights = _hash_weights(k + 1, 0xB10C)
    with np.errstate(over="ignore"):
        h = succ @ weights[1:] + own * weights[0]
    _, first, group = np.unique(h, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    if not (np.array_equal(own[first][group], own) and np.array_equal(succ[first][group], succ)):
        sig = np.empty((members.size, k + 1), dtype=np.int64)
        sig[:, 0] = own
        sig[:, 1:] = succ
        _, first, group = np.unique(sig, axis=0, return_index=True, return_inverse=True)
        group = group.reshape(-1)
    n_groups = first.size
    # the group of each block's lowest member keeps the block's number (members are sorted,
    # so the first occurrence of a block is its lowest state)
    _, block_first = np.unique(own, return_index=True)
    keeps = np.zeros(n_groups, dtype=bool)
    keeps[group[block_first]] = True
    number = np.empty(n_groups, dtype=np.int64)
    number[keeps] = own[first[keeps]]
    fresh = np.flatnonzero(~keeps)
    number[fresh] = n_blocks + np.arange(fresh.size, dtype=np.int64)
    new = number[group]
    changed = new != own
    part[members] = new
    moved: np.ndarray = members[changed]
    return moved


# seconds before the compile's deadline past which the token index's equivalence pass gives up
# (it is an optimization: stopping it early never fails a compile)
_DEADLINE_RESERVE = 0.15

_WEIGHTS: dict[int, np.ndarray] = {}


def _hash_weights(size: int, seed: int) -> np.ndarray:
    """``size`` random odd 62-bit weights for row/column hashing (fixed seed; cached, so
    repeated hashing does not pay for a random generator each time)."""
    have = _WEIGHTS.get(seed)
    if have is None or have.size < size:
        grown = max(size, 2 * (have.size if have is not None else 0), 1024)
        have = np.random.default_rng(seed).integers(1, 1 << 62, size=grown, dtype=np.int64)
        have |= 1
        have.setflags(write=False)
        _WEIGHTS[seed] = have
    return have[:size]


def column_classes(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group the equal columns of ``table``: ``(class_of_column, first_column_of_class)``.

    Hashes each column with random 64-bit weights and checks the grouping exactly (falling
    back to a lexicographic sort on a collision): O(rows x columns).
    """
    n = table.shape[0]
    weights = _hash_weights(n, 0x5EED)
    with np.errstate(over="ignore"):
        h = weights @ table.astype(np.int64)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not np.array_equal(table[:, first][:, inverse], table):
        _, first, inverse = np.unique(table, axis=1, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    return inverse.astype(np.int64), first.astype(np.int64)


