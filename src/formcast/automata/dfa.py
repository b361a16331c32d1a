"""Byte DFAs as numpy tables: subset construction, dead-state pruning, minimization.

A :class:`ByteDFA` has ``table: int32[n_states, 256]`` and ``accepting: bool[n_states]``.
State 0 is the dead state (all its transitions lead to 0); every other state is *live*: some
accepting state is reachable from it.  Hence "the automaton stays alive on bytes ``w``" is simply
``walk(s, w) != 0``.

Lifetime: per grammar; immutable after construction (the arrays are made read-only).
Construction: subset construction over byte equivalence classes, O(states x classes x NFA-set
size); minimization by partition refinement (Moore) vectorized with numpy, skipped above
:attr:`~formcast.config.CompileLimits.max_minimize_states` or when its work budget runs out
(the result is then correct but not minimal).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..config import CompileLimits, WorkBudget, check_deadline
from ..errors import LimitExceededError
from ..grammar.ir import Node
from .nfa import NFA, build_nfa

__all__ = ["DEAD", "ByteDFA", "compile_dfa", "describe_bytes", "nfa_to_dfa"]

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
    # per NFA state: symbol (byte class, or n_classes + j for a rule reference) -> targets
    class_of_l: list[int] = class_of.tolist()
    cmap: list[dict[int, frozenset[int]]] = []
    for edges, refs in zip(nfa.edges, nfa.refs):
        d: dict[int, list[int]] = {}
        for lo, hi, tgt in edges:
            for c in range(class_of_l[lo], class_of_l[hi] + 1):
                d.setdefault(c, []).append(tgt)
        for r, tgt in refs:
            d.setdefault(ref_symbol[r], []).append(tgt)
        cmap.append({c: frozenset(t) for c, t in d.items()})

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
            r = frozenset(t for t in closure([s]) if cmap[t] or t == accept_state)
            closure_cache[s] = r
        return r

    start_set = single_closure(nfa.start)
    ids: dict[frozenset[int], int] = {start_set: 0}
    sets: list[frozenset[int]] = [start_set]
    trans: list[dict[int, int]] = []
    i = 0
    while i < len(sets):
        cur = sets[i]
        acc: dict[int, frozenset[int]] = {}
        for s in cur:
            for c, tgts in cmap[s].items():
                have = acc.get(c)
                acc[c] = tgts if have is None else have | tgts
        budget.spend(_DFA_STATE_COST + len(cur) + len(acc))
        row: dict[int, int] = {}
        # group classes with identical target sets to compute each closure once
        by_targets: dict[frozenset[int], list[int]] = {}
        for c, tgt_set in acc.items():
            by_targets.setdefault(tgt_set, []).append(c)
        for tg, classes in by_targets.items():
            if len(tg) == 1:
                (only,) = tg
                nxt_set = single_closure(only)
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
            for c in classes:
                row[c] = j
        trans.append(row)
        i += 1
    n = len(sets)
    accepting = [accept_state in s for s in sets]
    # liveness: reverse BFS from accepting states
    rev: list[list[int]] = [[] for _ in range(n)]
    for src, row in enumerate(trans):
        for tgt in set(row.values()):
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
        for c in sorted(trans[k]):
            t = trans[k][c]
            if live[t] and t not in new_id:
                new_id[t] = len(order) + 1
                order.append(t)
                dq2.append(t)
    m = len(order) + 1
    small = np.zeros((m, n_symbols), dtype=np.int32)
    acc_arr = np.zeros(m, dtype=bool)
    for old in order:
        r = new_id[old]
        acc_arr[r] = accepting[old]
        for c, t in trans[old].items():
            if live[t]:
                small[r, c] = new_id[t]
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
    """Hopcroft's algorithm on a class-compressed table (row 0 dead).  O(k n log n).

    Predecessor lists are kept per target state, so a splitter visits only the byte classes
    that lead into it (most lead to the dead state, which never splits)."""
    n, k = table.shape
    if n <= 2 or n > limits.max_minimize_states or n * k > _MINIMIZE_WORK:
        return table, accepting, start
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
    n_blocks = len(blocks)
    if n_blocks == n:
        return table, accepting, start
    part = np.asarray(block_of, dtype=np.int64)
    rep_of_block = np.asarray([next(iter(members)) for members in blocks], dtype=np.int64)
    block_table = part[table[rep_of_block]]
    block_acc = accepting[rep_of_block]
    dead_block = int(part[0])
    start_block = int(part[start])
    mapping = {dead_block: 0, start_block: 1}
    dq = deque([start_block])
    while dq:
        cur = dq.popleft()
        for t in block_table[cur].tolist():
            if t not in mapping:
                mapping[t] = len(mapping)
                dq.append(t)
    m = len(mapping)
    perm = np.zeros(n_blocks, dtype=np.int32)
    for blk_id, v in mapping.items():
        perm[blk_id] = v
    out = np.zeros((m, k), dtype=np.int32)
    acc = np.zeros(m, dtype=bool)
    for blk_id, v in mapping.items():
        if v == 0:
            continue
        out[v] = perm[block_table[blk_id]]
        acc[v] = block_acc[blk_id]
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
    budget: int = 40_000_000,
    work: WorkBudget | None = None,
) -> np.ndarray:
    """Classes of states indistinguishable by any string of at most ``depth`` bytes.

    Two states are in one class when, for every byte string ``w`` with ``len(w) <= depth``, the
    states reached by ``w`` carry the same label (e.g. dead / accepting / other).  Token masks
    depend only on strings as long as the vocabulary's longest token, so states of one class
    share their mask: the states of ``[a-z]{1,1000}`` with 128 or more letters left form one
    class.  Moore refinement for ``depth`` rounds (stops early when stable); returns the
    identity when ``n_states * byte_classes * depth`` exceeds ``budget``.  ``work``: the
    compile's fuel, charged per round.
    """
    n = table.shape[0]
    cols = table[:, column_classes(table)[1]]  # the distinct columns
    k = cols.shape[1]
    if n * max(k, 1) * depth > budget:
        return np.arange(n, dtype=np.int64)
    _, part = np.unique(labels, return_inverse=True)
    part = part.reshape(-1).astype(np.int64)
    n_blocks = int(part.max()) + 1
    for _ in range(depth):
        if work is not None:
            work.spend(n * k // 64 + 1)
        new_part = _refine(part, cols, n_blocks)
        new_blocks = int(new_part.max()) + 1
        part = new_part
        if new_blocks in (n_blocks, n):
            break
        n_blocks = new_blocks
    return part


def column_classes(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group the equal columns of ``table``: ``(class_of_column, first_column_of_class)``.

    Hashes each column with random 64-bit weights and checks the grouping exactly (falling
    back to a lexicographic sort on a collision): O(rows x columns).
    """
    n = table.shape[0]
    weights = np.asarray(
        np.random.default_rng(0x5EED).integers(1, 1 << 62, size=n, dtype=np.int64)
    )
    with np.errstate(over="ignore"):
        h = (table.astype(np.int64) * weights[:, None]).sum(axis=0)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not np.array_equal(table[:, first][:, inverse], table):
        _, first, inverse = np.unique(table, axis=1, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    return inverse.astype(np.int64), first.astype(np.int64)


def _refine(part: np.ndarray, cols: np.ndarray, n_blocks: int) -> np.ndarray:
    """One Moore round: new block = (block, blocks of successors), numbered densely."""
    n, k = cols.shape
    succ = part[cols]
    # exact mixed-radix key while it fits in 63 bits, else row-wise unique
    if (k + 1) * np.log2(max(n_blocks, 2)) < 62:
        key = part.copy()
        for j in range(k):
            key = key * n_blocks + succ[:, j]
        _, new_part = np.unique(key, return_inverse=True)
    else:
        sig = np.empty((n, k + 1), dtype=np.int64)
        sig[:, 0] = part
        sig[:, 1:] = succ
        # hash the rows, then check the grouping exactly (a sort of the rows on a collision)
        weights = np.random.default_rng(0xB10C).integers(1, 1 << 62, size=k + 1, dtype=np.int64)
        with np.errstate(over="ignore"):
            h = sig @ weights
        _, first, new_part = np.unique(h, return_index=True, return_inverse=True)
        new_part = new_part.reshape(-1)
        if not np.array_equal(sig[first][new_part], sig):
            _, new_part = np.unique(sig, axis=0, return_inverse=True)
    return new_part.reshape(-1).astype(np.int64)
