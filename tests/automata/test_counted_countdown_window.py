"""``countdown_window`` is a bisimulation of the ``window_table`` windows it replaces.

A counted stack top with a bound within a token's reach was classified on an unrolled window
counted up (``window_table``: ``(cap, 2 cap)`` entered at ``cap - need`` while iterations are
needed and the upper bound is out of reach; ``(0, cap)`` entered at ``cap - left`` once
``need`` is met; ``(need, left)`` from level 0 with both bounds within reach).  The count-down
window maps old level ``i`` to ``cap - 1 - i`` (clipped at 0, saturating, in the first case)
or ``left - 1 - i``; here, cell by cell on every state a token of at most ``cap - 1`` bytes can
reach from the entry, the map commutes with the moves (dead to dead) and keeps the split flags,
for random deterministic items, every entry, and table sizes from the entry's own level count
up (the table of ``k`` levels is a prefix of any larger one).  Overlapping items give None.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from test_counted_window_table import _item

from formcast.automata.counted import countdown_window, iterations_overlap, window_table

CAP = 7  # longest token 6 bytes


def _check(
    old: tuple[np.ndarray, np.ndarray],
    new: tuple[np.ndarray, np.ndarray],
    n: int,
    entry_level: int,
    reach_levels: range,
    level_map: Callable[[int], int],
) -> None:
    """Walk the old window breadth first from every ``(q, entry_level)`` for ``CAP - 1``
    bytes; at each state met (not the last layer), compare its row with the new one's."""
    old_t, old_s = old
    new_t, new_s = new

    def mapped(s: int) -> int:
        return 0 if s == 0 else level_map(s // n) * n + s % n

    layer = {entry_level * n + q for q in range(1, n)}
    seen: set[int] = set()
    for _ in range(CAP - 1):
        nxt: set[int] = set()
        for s in layer - seen:
            seen.add(s)
            assert s // n in reach_levels
            m = mapped(s)
            for b in range(256):
                assert mapped(int(old_t[s, b])) == int(new_t[m, b]), (s, b)
                assert bool(old_s[s, b]) == bool(new_s[m, b]), (s, b)
                if old_t[s, b]:
                    nxt.add(int(old_t[s, b]))
        layer = nxt


@pytest.mark.parametrize("seed", range(8))
def test_countdown_window_is_a_bisimulation_of_the_old_windows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    table, acc, calls, follow = _item(rng)
    n = table.shape[0]
    assert not iterations_overlap(table, acc, 1)
    far_up = window_table(table, acc, 1, calls, follow, CAP, 2 * CAP)
    met_up = window_table(table, acc, 1, calls, follow, 0, CAP)
    assert far_up is not None
    assert met_up is not None
    for need in range(1, CAP):  # far: (cap, 2 cap) entered at cap - need
        for size in (need, need + 1, 2 * CAP):
            new = countdown_window(table, acc, 1, calls, follow, size, 0, True)
            assert new is not None
            _check(far_up, new, n, CAP - need, range(2 * CAP), lambda i: max(CAP - 1 - i, 0))
    for left in range(1, CAP):  # need met: (0, cap) entered at cap - left
        for size in (left, left + 3):
            new = countdown_window(table, acc, 1, calls, follow, size, size, False)
            assert new is not None
            _check(met_up, new, n, CAP - left, range(CAP), lambda i: CAP - 1 - i)
        for need in range(1, left + 1):  # both within reach: (need, left) from level 0
            old = window_table(table, acc, 1, calls, follow, need, left)
            assert old is not None
            new = countdown_window(table, acc, 1, calls, follow, left + 1, left - need, False)
            assert new is not None
            _check(old, new, n, 0, range(left), lambda i, left=left: left - 1 - i)


def test_overlapping_items_have_no_countdown_window() -> None:
    rng = np.random.default_rng(0)
    table, acc, calls, follow = _item(rng)
    q = int(np.flatnonzero(acc)[0])
    table[q, int(np.flatnonzero(table[1])[0])] = 1
    assert iterations_overlap(table, acc, 1)
    assert countdown_window(table, acc, 1, calls, follow, 4, 0, True) is None
    assert countdown_window(table, acc, 1, calls, follow, 1, 1, False) is None
