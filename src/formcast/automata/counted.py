"""Counted rules seen through one token: the *window* automaton.

A counted rule repeats its item ``lo`` to ``hi`` times with the count kept in the parser frame
(see :mod:`formcast.automata.pda`), so its DFA is one iteration.  A token, though, may cross
several iterations.  The window automaton unrolls the item ``m`` times — states ``(q, i)``,
``i`` = iterations completed since the token began — where ``m`` is the number of iterations
the frame still allows, clipped to one more than the longest token (a token cannot complete
more iterations than it has bytes, because the item always consumes a byte).  Walking the
vocabulary through it classifies every token from a counted stack top exactly:

* alive at the end: every byte stays inside the rule's iterations, allowed whatever the stack;
* died after an iteration end where the rule may return (``need`` met), or after a call:
  a candidate, verified by the parser;
* died otherwise: rejected.

When an iteration end can also go on inside the item (an accepting state's bytes overlap the
item's first bytes: ``(\\w+-?){0,100}``), the unrolled window is not deterministic;
:func:`subset_window` then determinizes it from one entry, by subset construction over
``(state, level)`` pairs pruned to the pairs that can still make a difference within a token.

Every window is built column by column from the same column of its inputs, so it may be built
on the inputs' byte classes (:func:`narrow_item`: one column per class, a JSON string item's
22 instead of 256) and walked so (``TokenTrie.walk_pairs``' narrow tables): 10-80x less memory
than the 256-column window, none of it touched at full width.

Lifetime: pure functions; the caller caches the tables (they are per (rule, need, left)).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..columns import column_classes
from .dfa import DEAD

__all__ = [
    "NarrowItem",
    "countdown_window",
    "iterations_overlap",
    "narrow_item",
    "subset_window",
    "window_column_classes",
    "window_table",
]


def window_table(
    table: np.ndarray,
    accepting: np.ndarray,
    start: int,
    call_split: np.ndarray,
    exit_split: np.ndarray,
    need: int,
    iterations: int,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(``int32[m*n, k]`` transitions, ``bool[m*n, k]`` split flags) of the window, or None
    when an accepting state's own bytes overlap the item's first bytes (not deterministic).

    Args:
        table, accepting, start: the item DFA (``n`` states, state 0 dead), ``k`` columns:
            one per byte (256), or one per byte class (the inputs' columns of a class:
            :func:`window_column_classes`; every output column is built from the inputs'
            same column alone, so the window's columns are those of the classes).
        call_split: ``bool[n, k]``: bytes that may start a callee at each state.
        exit_split: ``bool[k]``: bytes that may follow the counted rule.
        need: iterations still required (the current one included); 0 when met.
        iterations: ``m``, iterations that may begin within the token (the current included);
            -1 for a single level that restarts into itself, when neither bound is within a
            token's reach (the rule may return there iff ``need`` is 0).

    State ``(q, i)`` is ``i * n + q``; ``(0, i)`` is dead and mapped to 0.  O(m * n * k).
    """
    n = table.shape[0]
    acc = np.asarray(accepting, dtype=bool)
    live = table != DEAD
    restart_live = live[start]
    if iterations < 0:  # one level that restarts into itself: no bound within reach
        if bool((live[acc] & restart_live[None, :]).any()):
            return None
        own1 = np.where(live, table, 0).astype(np.int32)
        own1[acc] = np.where(restart_live[None, :], table[start][None, :], own1[acc])
        own1[DEAD] = 0
        split1 = call_split.copy()
        if need == 0:
            split1[acc] |= exit_split[None, :]
        split1[DEAD] = False
        return own1, split1
    m = iterations
    if bool((live[acc] & restart_live[None, :]).any()) and m > 1:
        return None
    offsets = np.arange(m, dtype=np.int32)[:, None, None] * np.int32(n)  # (m, 1, 1)
    own = np.add(table.astype(np.int32)[None, :, :], offsets)  # (m, n, k)
    own *= live[None, :, :]  # dead stays dead
    if m > 1 and acc.any():
        # an accepting state may also begin the next iteration (level i + 1) if one is
        # allowed (its own moves on those bytes are dead: the overlap was excluded above)
        nxt = np.where(restart_live, table[start], 0).astype(np.int32)  # (k,)
        restart = nxt[None, None, :] + offsets[1:]  # (m - 1, 1, k)
        own[:-1, acc] = np.where(restart_live, restart, own[:-1, acc])
    own[:, DEAD, :] = 0
    out = own.reshape(m * n, table.shape[1])
    split = np.repeat(call_split[None, :, :], m, axis=0)
    # an iteration that ends at level i completes i + 1 iterations: the rule may return there
    # once ``need`` is met (need <= i + 1)
    first_exit = max(need - 1, 0)
    if first_exit < m:
        split[first_exit:, acc] |= exit_split[None, None, :]
    split[:, DEAD, :] = False
    return out, split.reshape(m * n, table.shape[1])


def iterations_overlap(table: np.ndarray, accepting: np.ndarray, start: int) -> bool:
    """Whether an accepting state of the item DFA (``table``, ``accepting``, ``start``) has
    live bytes that may also begin the next iteration: then no unrolled window is
    deterministic (:func:`window_table` and :func:`countdown_window` return None; see
    :func:`subset_window`).  O(item states x 256)."""
    acc = np.asarray(accepting, dtype=bool)
    live = table != DEAD
    return bool((live[acc] & live[start][None, :]).any())


def countdown_window(
    table: np.ndarray,
    accepting: np.ndarray,
    start: int,
    call_split: np.ndarray,
    exit_split: np.ndarray,
    levels: int,
    exit_below: int,
    saturate: bool,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The window of :func:`window_table` with its levels counted down, so that one table of
    ``levels`` levels serves every entry below its top: (``int32[levels*n, k]``
    transitions, ``bool[levels*n, k]`` split flags; ``k`` the inputs' columns, as for
    :func:`window_table`), or None where the item's iterations overlap
    (:func:`iterations_overlap`).

    Level ``j`` (state ``(q, j)`` is ``j * n + q``; ``(0, j)`` dead, mapped to 0) is the number
    of iterations that may still begin after the current one: an accepting state of level
    ``j >= 1`` may begin the next iteration at level ``j - 1``; at level 0 it may not, unless
    ``saturate`` (level 0 restarts into itself: an upper bound out of a token's reach).  The
    rule may return at an accepting state of a level ``j <= exit_below`` (``exit_below >=
    levels - 1``: at every level).  The rows of a level do not depend on ``levels``: the table
    of ``k`` levels is the first ``k * n`` rows of any larger one, and an entry at level ``e``
    reaches levels ``<= e`` only.

    Against :func:`window_table` (``m`` levels counted up from an entry level ``i0``, the
    return allowed from level ``need - 1`` on): level ``i`` there is level ``m - 1 - i`` here
    (``exit_below = m - need``), or, where no walk reaches the upper bound (``(cap, 2 cap)``
    entered at ``cap - need``), ``max(cap - 1 - i, 0)`` with ``saturate`` and ``exit_below =
    0``.  Either map is a bisimulation from the entry (equal moves, split flags and deaths), so
    walks classify every token alike; the table has the levels an entry needs instead of
    ``m``.  O(levels x n x k).
    """
    n = table.shape[0]
    acc = np.asarray(accepting, dtype=bool)
    live = table != DEAD
    restart_live = live[start]
    if bool((live[acc] & restart_live[None, :]).any()):
        return None
    offsets = np.arange(levels, dtype=np.int32)[:, None, None] * np.int32(n)  # (L, 1, 1)
    own = np.add(table.astype(np.int32)[None, :, :], offsets)  # (L, n, k)
    own *= live[None, :, :]  # dead stays dead
    if acc.any():
        # an accepting state may also begin the next iteration, one level down (its own
        # moves on those bytes are dead: the overlap was excluded above)
        nxt = np.where(restart_live, table[start], 0).astype(np.int32)  # (k,)
        if levels > 1:
            restart = nxt[None, None, :] + offsets[:-1]  # (L - 1, 1, k): levels 0 .. L - 2
            own[1:, acc] = np.where(restart_live, restart, own[1:, acc])
        if saturate:
            own[0, acc] = np.where(restart_live, nxt[None, :], own[0, acc])
    own[:, DEAD, :] = 0
    split = np.repeat(call_split[None, :, :], levels, axis=0)
    top = min(exit_below, levels - 1)
    if top >= 0:
        split[: top + 1, acc] |= exit_split[None, None, :]
    split[:, DEAD, :] = False
    k = table.shape[1]
    return own.reshape(levels * n, k), split.reshape(levels * n, k)


def window_column_classes(
    table: np.ndarray, start: int, call_split: np.ndarray, exit_split: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The column classes ``(class of each byte, a byte of each class)`` of the item's inputs
    (``table``, ``start``, ``call_split``, ``exit_split`` as for :func:`window_table`), which every
    window built from them shares: :func:`window_table` and :func:`subset_window` build
    each byte's column from that byte's columns of the inputs alone, so bytes with equal
    inputs get equal window columns (the partition may be finer than the window's own).
    O(item states x 256): the window itself has up to ``2 x (longest token + 1)`` times
    the rows."""
    cols = np.concatenate(
        [table, call_split, call_split[start][None, :], exit_split[None, :]], axis=0
    )
    return column_classes(cols)


class NarrowItem(NamedTuple):
    """An item automaton's inputs with one column per byte class (:func:`narrow_item`):
    every window built from them has the classes' columns.  Immutable."""

    cmap: np.ndarray  # uint8[256]: the class of each byte (the column it reads)
    reps: np.ndarray  # int64[k]: a byte of each class
    table: np.ndarray  # the item table's columns of the classes, [n, k]
    call_split: np.ndarray  # bool[n, k]
    exit_split: np.ndarray  # bool[k]


def narrow_item(
    table: np.ndarray, start: int, call_split: np.ndarray, exit_split: np.ndarray
) -> NarrowItem:
    """The inputs of :func:`window_table`, :func:`countdown_window` and :func:`subset_window`
    (256 columns) cut to one column per byte class of :func:`window_column_classes` (at most
    256 classes: ``cmap`` fits a byte).  A window built from them is the 256-column window's
    columns of the classes' bytes (``wide == narrow[:, cmap]``).  O(item states x 256)."""
    cmap, reps = window_column_classes(table, start, call_split, exit_split)
    return NarrowItem(
        np.ascontiguousarray(cmap, dtype=np.uint8),
        reps,
        np.ascontiguousarray(np.asarray(table)[:, reps]),
        np.ascontiguousarray(np.asarray(call_split)[:, reps]),
        np.ascontiguousarray(np.asarray(exit_split)[reps]),
    )


def subset_window(
    table: np.ndarray,
    accepting: np.ndarray,
    start: int,
    call_split: np.ndarray,
    exit_split: np.ndarray,
    need: int,
    iterations: int,
    entries: Sequence[tuple[int, int]],
    reach: int,
    max_states: int = 4096,
    max_work: int = 400_000,
) -> tuple[np.ndarray, np.ndarray, list[int]] | None:
    """The window of :func:`window_table` determinized from some entries: (``int32[r, k]``
    transitions, ``bool[r, k]`` split flags, the row of each entry; row 0 dead; ``k`` the
    inputs' columns, as for :func:`window_table`), or None
    past ``max_states`` subsets or ``max_work`` member visits (pairs times byte classes).

    Args:
        table, accepting, start, call_split, exit_split, need, iterations: as for
            :func:`window_table` (``iterations`` -1: one level that restarts into itself).
        entries: ``(item state, level)`` pairs where walks may begin.
        reach: the longest token in bytes (rows of subsets first met that deep are never
            used, and are left dead).
        max_states: the most subsets built.
        max_work: the most member visits (a subset's pairs, once per byte class).

    A subset holds ``(q, i)`` pairs: the item DFA at ``q`` after ``i`` iterations completed
    since the token began.  Its successor on a byte is every member's (an accepting member may
    also begin iteration ``i + 1`` when one is allowed); its split flag is any member's
    (bytes that may start a callee, at a member or at a restart; bytes that may follow the
    rule, at an accepting member whose iterations meet ``need``).  Walking it classifies a
    token as the parser's counted frame would: alive when some member survives every byte
    (allowed), rejected when it dies with no split passed.

    Pairs are pruned to those no other pair of the same state dominates (a superset of
    futures and of split flags within a token): the lowest level whose ``need`` is met
    dominates the levels above it (more iterations left, the same returns); when no walk from
    any entry can reach the upper bound, the highest level dominates the levels below it (the
    same iterations, returns no later), and levels past ``need`` are clipped to it.  Levels
    short of ``need`` below the upper bound are all kept: windows with both bounds within
    reach may grow with the token's length (``max_states``, ``max_work``).  Cost:
    O(subsets x pairs x byte classes) in Python, breadth-first to depth ``reach``; nothing
    kept.
    """
    acc = np.asarray(accepting, dtype=bool).tolist()
    met_at = max(need - 1, 0)  # an iteration ending at level i completes i + 1 of them
    single = iterations < 0  # one self-restarting level: no bound within reach
    # no walk from any entry can reach the upper bound: levels matter for ``need`` alone
    clip = single or max(level for _, level in entries) + reach < iterations
    cls_of_byte, reps = window_column_classes(table, start, call_split, exit_split)
    n_cls = int(reps.size)
    rows = np.asarray(table)[:, reps].tolist()  # per item state and byte class: successor
    calls = np.asarray(call_split)[:, reps].tolist()
    restart_to = rows[start]
    restart_calls = calls[start]
    exits = np.asarray(exit_split)[reps].tolist()

    def met(level: int) -> bool:
        return need == 0 if single else level >= met_at

    def canonical(pairs: set[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
        best: dict[int, int] = {}
        if clip:  # levels only decide ``need``: per state its highest, clipped where met
            for q, i in pairs:
                i = 0 if single else min(i, met_at)
                if best.get(q, -1) < i:
                    best[q] = i
            return tuple(sorted(best.items()))
        kept: set[tuple[int, int]] = set()
        for q, i in pairs:  # every level short of ``need``, the lowest one that meets it
            if not met(i):
                kept.add((q, i))
            elif best.get(q, iterations) > i:
                best[q] = i
        kept.update(best.items())
        return tuple(sorted(kept))

    ids: dict[tuple[tuple[int, int], ...], int] = {(): DEAD}
    subsets: list[tuple[tuple[int, int], ...]] = [()]
    entry_rows: list[int] = []
    frontier: list[int] = []
    for entry in entries:
        key = canonical({entry})
        j = ids.get(key)
        if j is None:
            j = ids[key] = len(subsets)
            subsets.append(key)
            frontier.append(j)
        entry_rows.append(j)
    if len(subsets) > max_states:
        return None
    out_rows: list[list[int]] = [[DEAD] * n_cls]
    split_rows: list[list[bool]] = [[False] * n_cls]
    depth = 0
    while frontier:
        if depth >= reach:  # subsets first met this deep end every token: dead rows
            for _ in frontier:
                out_rows.append([DEAD] * n_cls)
                split_rows.append([False] * n_cls)
            break
        nxt_frontier: list[int] = []
        for sid in frontier:  # in id order: rows are appended in id order
            max_work -= len(subsets[sid]) * n_cls
            if max_work < 0:
                return None
            row: list[int] = []
            split: list[bool] = []
            for c in range(n_cls):
                targets: set[tuple[int, int]] = set()
                passed = False
                for q, i in subsets[sid]:
                    t = rows[q][c]
                    if t != DEAD:
                        targets.add((t, i))
                    passed = passed or calls[q][c]
                    if acc[q]:
                        passed = passed or (exits[c] and met(i))
                        if single or i + 1 < iterations:  # another iteration may begin
                            passed = passed or restart_calls[c]
                            t = restart_to[c]
                            if t != DEAD:
                                targets.add((t, i if single else i + 1))
                key = canonical(targets)
                j = ids.get(key)
                if j is None:
                    j = ids[key] = len(subsets)
                    if j >= max_states:
                        return None
                    subsets.append(key)
                    nxt_frontier.append(j)
                row.append(j)
                split.append(passed)
            out_rows.append(row)
            split_rows.append(split)
        depth += 1
        frontier = nxt_frontier
    sub = np.asarray(out_rows, dtype=np.int32)[:, cls_of_byte]
    sub_split = np.asarray(split_rows, dtype=bool)[:, cls_of_byte]
    return sub, sub_split, entry_rows
