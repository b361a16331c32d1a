"""``window_table`` (a counted rule's unrolled window) against its definition, cell by cell.

State ``(q, i)`` is ``i * n + q``: the item DFA at ``q`` after ``i`` iterations completed since
the token began.  On byte ``b`` it moves to ``(table[q, b], i)`` when that is live; an accepting
``q`` whose next iteration may begin (``i + 1 < m``) moves to ``(table[start, b], i + 1)`` on
the bytes that begin one; everything else is dead (0), and so is every ``(0, i)``.  The split
flags are the item's call flags, plus the follow bytes at accepting states from the level where
``need`` is met (an iteration ending at level ``i`` completes ``i + 1``).  Random items, every
``need`` and a few level counts, including the single self-restarting level (``m = -1``).
"""

from __future__ import annotations

import numpy as np
import pytest

from formcast.automata.counted import window_table


def _item(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = int(rng.integers(3, 7))
    table = rng.integers(1, n, size=(n, 256)).astype(np.int32)
    table[rng.random((n, 256)) < 0.6] = 0
    table[0] = 0
    accepting = rng.random(n) < 0.5
    accepting[:2] = False  # 0 dead, 1 the start (an item consumes a byte)
    accepting[int(rng.integers(2, n))] = True
    # deterministic windows: an accepting state does not go on with a byte that begins the
    # next iteration
    table[np.ix_(accepting, table[1] != 0)] = 0
    call_split = rng.random((n, 256)) < 0.05
    exit_split = rng.random(256) < 0.1
    return table, accepting, call_split, exit_split


def _reference(table, accepting, start, call_split, exit_split, need, m):  # type: ignore[no-untyped-def]
    n = table.shape[0]
    single = m < 0
    levels = 1 if single else m
    out = np.zeros((levels * n, 256), dtype=np.int64)
    split = np.zeros((levels * n, 256), dtype=bool)
    for i in range(levels):
        for q in range(1, n):
            row = i * n + q
            for b in range(256):
                t = int(table[q, b])
                if t:
                    out[row, b] = t + i * n
                restarts = accepting[q] and table[start, b] and (single or i + 1 < m)
                if restarts:
                    out[row, b] = int(table[start, b]) + (i if single else i + 1) * n
                split[row, b] = bool(call_split[q, b])
                met = need == 0 if single else i + 1 >= need
                if accepting[q] and met and exit_split[b]:
                    split[row, b] = True
    return out, split


@pytest.mark.parametrize("seed", range(12))
def test_window_table_matches_its_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    item = _item(rng)
    windows = ((0, -1), (2, -1), (0, 1), (0, 2), (2, 2), (0, 4), (1, 3), (3, 5), (5, 5), (6, 5))
    for need, m in windows:
        got = window_table(item[0], item[1], 1, item[2], item[3], need, m)
        assert got is not None
        ref = _reference(item[0], item[1], 1, item[2], item[3], need, m)
        assert got[0].dtype == np.int32
        assert np.array_equal(got[0], ref[0]), (need, m)
        assert np.array_equal(got[1], ref[1]), (need, m)


def test_overlapping_iterations_have_no_deterministic_window() -> None:
    rng = np.random.default_rng(0)
    table, accepting, call_split, exit_split = _item(rng)
    q = int(np.flatnonzero(accepting)[0])
    b = int(np.flatnonzero(table[1])[0])
    table[q, b] = 1  # an accepting state goes on with a byte that begins an iteration
    assert window_table(table, accepting, 1, call_split, exit_split, 0, 3) is None
    assert window_table(table, accepting, 1, call_split, exit_split, 0, -1) is None
