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

Lifetime: pure functions; the caller caches the tables (they are per (rule, need, left)).
"""

from __future__ import annotations

import numpy as np

from .dfa import DEAD

__all__ = ["window_table"]


def window_table(
    table: np.ndarray,
    accepting: np.ndarray,
    start: int,
    call_split: np.ndarray,
    exit_split: np.ndarray,
    need: int,
    iterations: int,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(``int32[m*n, 256]`` transitions, ``bool[m*n, 256]`` split flags) of the window, or None
    when an accepting state's own bytes overlap the item's first bytes (not deterministic).

    Args:
        table, accepting, start: the item DFA (``n`` states, state 0 dead).
        call_split: ``bool[n, 256]``: bytes that may start a callee at each state.
        exit_split: ``bool[256]``: bytes that may follow the counted rule.
        need: iterations still required (the current one included); 0 when met.
        iterations: ``m``, iterations that may begin within the token (the current included);
            -1 for a single level that restarts into itself, when neither bound is within a
            token's reach (the rule may return there iff ``need`` is 0).

    State ``(q, i)`` is ``i * n + q``; ``(0, i)`` is dead and mapped to 0.  O(m * n * 256).
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
    levels = np.arange(m, dtype=np.int64)[:, None, None] * n  # (m, 1, 1)
    own = np.where(live[None, :, :], table[None, :, :].astype(np.int64) + levels, 0)  # (m,n,256)
    # an accepting state may also begin the next iteration (level i + 1) if one is allowed
    nxt = np.where(restart_live, table[start].astype(np.int64), 0)  # (256,)
    for i in range(m - 1):
        own[i, acc] = np.where(restart_live[None, :], nxt[None, :] + (i + 1) * n, own[i, acc])
    own[:, DEAD, :] = 0
    out = own.reshape(m * n, 256).astype(np.int32)
    split = np.repeat(call_split[None, :, :], m, axis=0)
    # an iteration that ends at level i completes i + 1 iterations: the rule may return there
    # once ``need`` is met (need <= i + 1)
    first_exit = max(need - 1, 0)
    if first_exit < m:
        split[first_exit:, acc] |= exit_split[None, None, :]
    split[:, DEAD, :] = False
    return out, split.reshape(m * n, 256)
