"""State equivalence on byte tables: which states of an automaton no short string tells apart.

* :func:`bounded_equivalence` / :func:`equivalence_classes` — the classes of states that no
  string of at most ``depth`` bytes distinguishes (Moore refinement, vectorized with numpy,
  restricted each round to the blocks whose successors moved).  The token index merges the
  states of one class: they share their token mask.  In the compiled build (docs/native.md)
  the refinement runs in C (``formcast.automata._moore``: the same rounds, partitions, block
  numbers and fuel); the numpy code is the fallback and the reference.

The groups of equal columns (byte classes) come from :mod:`formcast.columns`, shared with the
vocabulary trie.

Lifetime: pure functions over read-only tables (the hashing weights are
:func:`formcast.columns.hash_weights`'s).  Costs: O(states x byte classes) per
refinement round, capped by a work budget and the compile's fuel (stopping early is always
correct: it returns the identity partition).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..columns import column_classes, hash_weights
from ..limits import WorkBudget

__all__ = ["bounded_equivalence", "class_level", "equivalence_classes", "grown_classes"]

# the compiled build's refinement (docs/native.md); absent from the pure-Python package, where
# the numpy code below runs (tests set this to None for the reference)
_KERNEL: Any
try:
    from . import _moore as _KERNEL  # type: ignore[attr-defined,no-redef]
except ImportError:  # pragma: no cover - depends on the build
    _KERNEL = None


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
    without shared walks; this step never fails a compile.

    In the compiled build the refinement runs in C (:func:`_native_classes`, the same
    partition with the same numbers, the same fuel charged); the numpy code is the
    fallback."""
    if _KERNEL is not None and _native_takes(table, labels):
        return _native_classes(table, labels, depth, budget, work)
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


def grown_classes(
    n_cls: int,
    class_rows: list[list[int]],
    class_flags: list[bytes],
    codes: list[list[int]],
    flags: list[bytes],
) -> tuple[list[int], list[int]] | None:
    """The classes of new states added to a region of stable classes (the token index's
    ``_LazyExitSplitClassifier._grown_region``): ``(class per new state, the first new state
    of each new class)``, new classes numbered from ``n_cls`` in the order of their
    first state; None where the region's classes are not pairwise distinct (not
    converged).  ``class_rows[c]``: class ``c``'s successor classes (one per column; class
    0: the dead state's, alone in its class, its label its own), ``class_flags[c]``: its
    split flags (bytes, one per column); ``codes[i]``: new state ``i``'s successors, a class
    below ``n_cls`` or ``n_cls + j`` for new state ``j``; ``flags[i]``: its split flags.

    Exact: the coarsest partition of the classes and the new states that the labels (split
    flags; the dead state apart) and the moves respect, as a refinement of the whole
    region from the split labels converges to.  The classes stay apart (stable and
    converged: no two alike), so a new state is alike to at most one class: the pairs
    (new state, class) with equal flags and equal moves into the classes where the state
    moves into one, less, until none changes, the pairs a move of the state into a new
    state breaks (the greatest such relation, i.e. bisimilarity between the new states
    and the classes); the new states alike to no class are split among themselves by a
    Moore refinement on those moves (their moves into classes, and into new states with a
    class, fixed).  Compiled in the native build (plain loops over lists).  O(new states x
    classes x columns) at worst."""
    k = len(codes)
    by_flags: dict[bytes, list[int]] = {}
    for c in range(1, n_cls):  # (class 0: the dead state, alike to nothing else)
        by_flags.setdefault(class_flags[c], []).append(c)
    cand: list[list[int]] = []
    for i in range(k):
        code = codes[i]
        old_cols = [j for j, t in enumerate(code) if t < n_cls]
        alike: list[int] = []
        for c in by_flags.get(flags[i], []):
            row = class_rows[c]
            for j in old_cols:
                if row[j] != code[j]:
                    break
            else:
                alike.append(c)
        cand.append(alike)
    # the greatest relation: drop (i, c) where i moves into new state m and c into a class
    # m is not (still) alike to
    new_cols = [[(j, t - n_cls) for j, t in enumerate(code) if t >= n_cls] for code in codes]
    changed = True
    while changed:
        changed = False
        for i in range(k):
            keep = [c for c in cand[i] if all(class_rows[c][j] in cand[m] for j, m in new_cols[i])]
            if len(keep) != len(cand[i]):
                cand[i] = keep
                changed = True
    if any(len(c) > 1 for c in cand):
        return None
    match = [c[0] if c else -1 for c in cand]
    # the others: a Moore refinement among themselves (moves into matched states fixed)
    alone = [i for i in range(k) if match[i] < 0]
    # a move into a class, or a new state alike to one: that class; else -1 (then refined)
    moved = [t if t < n_cls else match[t - n_cls] for code in codes for t in code]
    width = len(codes[0]) if codes else 0
    # the moves of each unmatched state into unmatched ones, in column order
    inner = {i: [t - n_cls for t in codes[i] if t >= n_cls and match[t - n_cls] < 0] for i in alone}
    first: dict[object, int] = {}
    block = {
        i: first.setdefault((flags[i], tuple(moved[i * width : (i + 1) * width])), len(first))
        for i in alone
    }
    count = len(first)
    while True:
        first = {}
        block = {
            i: first.setdefault((block[i], tuple([block[m] for m in inner[i]])), len(first))
            for i in alone
        }
        if len(first) == count:
            break
        count = len(first)
    new_part: list[int] = []
    new_rep: list[int] = []
    number: dict[int, int] = {}
    for i in range(k):
        c = match[i]
        if c < 0:
            c = number.get(block[i], -1)
            if c < 0:
                c = number[block[i]] = n_cls + len(new_rep)
                new_rep.append(i)
        new_part.append(c)
    return new_part, new_rep


def class_level(
    succ: dict[int, list[int]], frontier: list[int], seen: set[int], width: int
) -> list[int]:
    """One level of the breadth-first numbering of a region's classes (the token index's
    ``_reachable_classes``): the classes ``frontier``'s successors meet first, not in
    ``seen`` (added to it), in the order met (frontier order, then column order).
    ``succ[c]``: class ``c``'s successors, all ``width`` of them (replaced here by its distinct
    ones, in the same order) or already distinct.  Compiled in the native build (a plain loop
    over lists).  O(the frontier's successors)."""
    level: list[int] = []
    for c in frontier:
        row = succ[c]
        if len(row) == width:  # (a whole row as filled, or one of distinct classes)
            row = list(dict.fromkeys(row))
            succ[c] = row
        for t in row:
            if t not in seen:
                seen.add(t)
                level.append(t)
    return level


def _native_takes(table: np.ndarray, labels: np.ndarray) -> bool:
    """Whether the compiled refinement applies: a non-empty ``int32[n, c]`` table (``c >= 1``)
    with one label per state."""
    return (
        table.dtype == np.int32
        and table.ndim == 2
        and 0 < table.shape[0] < 2**31 - 1
        and table.shape[1] > 0
        and labels.shape == (table.shape[0],)
    )


def _native_classes(
    table: np.ndarray, labels: np.ndarray, depth: int, budget: int, work: WorkBudget | None
) -> tuple[np.ndarray, bool]:
    """:func:`equivalence_classes` with the refinement in C (``formcast.automata._moore``):
    the same rounds over the same touched blocks, so the same partition with the same block
    numbers, the same ``stable`` and the same fuel.  The fuel of the rounds run is charged at
    once, after them: the kernel stops before it would pass the limit or the deadline's
    reserve, exactly where the numpy path stops, so :meth:`WorkBudget.spend` (whose checks
    cannot fail there) is not called round by round."""
    n = table.shape[0]
    part = _label_blocks(labels)
    n_blocks = int(part.max()) + 1
    if n_blocks == n:
        return part, True
    first = column_classes(table)[1]
    k = first.size
    cols = np.ascontiguousarray(table[:, first])  # the distinct columns
    fuel, threshold = 0, float("inf")
    if work is not None:
        fuel = max(min(work.limit - work.used, _CLAMP), -1)
        if work.deadline is not None:
            threshold = work.deadline - _DEADLINE_RESERVE
    status, charged = _KERNEL.refine(
        cols,
        k,
        part,
        n_blocks,
        max(min(depth, _CLAMP), 0),
        max(min(budget, _CLAMP), -1),
        hash_weights(k + 1, _ROW_SEED),
        work is not None,
        fuel,
        threshold,
    )
    if work is not None:
        work.used += int(charged)
    if status == 1:
        return np.arange(n, dtype=np.int64), True
    return part, status == 0


def _label_blocks(labels: np.ndarray) -> np.ndarray:
    """``np.unique(labels, return_inverse=True)[1]`` as int64: each state's rank among the
    distinct labels; for integer labels of a small range by counting (O(n), no sort)."""
    small = labels.dtype.kind == "i" or (labels.dtype.kind == "u" and labels.dtype.itemsize < 8)
    if small and labels.ndim == 1 and labels.size > 0:
        lo, hi = int(labels.min()), int(labels.max())
        if hi - lo <= 4 * labels.size:
            shifted = labels.astype(np.int64) - lo
            present = np.bincount(shifted, minlength=hi - lo + 1) > 0
            rank = np.cumsum(present, dtype=np.int64) - 1
            out: np.ndarray = rank[shifted]
            return out
    _, inverse = np.unique(labels, return_inverse=True)
    return np.ascontiguousarray(inverse.reshape(-1), dtype=np.int64)


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
    weights = hash_weights(k + 1, _ROW_SEED)
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
# the seed of the row hashes of a refinement round
_ROW_SEED = 0xB10C
# made at import (a 1,024-weight table; more are drawn on demand): a process's first random
# generator costs 0.1-30 ms (numpy.random's set-up), which otherwise lands in the first
# region search of the first grammar's masks
hash_weights(1024, _ROW_SEED)
# bounds of the integers handed to the compiled refinement (int64 there)
_CLAMP = 1 << 62
