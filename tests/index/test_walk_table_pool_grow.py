"""The lazy walk tables' map pool grows a map too short in place (issue #31).

``cfg_program._RowPool`` hands out the map of its free list that was touched most; where that
map is shorter than the tables asked for it is grown in place (``mremap``, Linux), so the
pages an earlier grammar touched serve the new tables (a fresh map faulted a page per 4 KiB
written).  Here: the grown map is the pooled one, its new room is readable and writable
(a shared anonymous map would raise SIGBUS there), the tables on it work, and the pool keeps
counting the bytes an earlier use touched.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program


@pytest.fixture
def pool() -> cfg_program._RowPool:
    return cfg_program._RowPool()


def test_a_short_map_grows_in_place(pool: cfg_program._RowPool) -> None:
    if not cfg_program._MAP_GROWS:
        pytest.skip("maps grow in place on Linux only")
    small = cfg_program._POOL_MAP_BYTES // 1024  # rows of 1 KiB filling the least map
    rows, cell = pool.take(small)
    first = pool._free
    assert not first
    rows[:] = 7
    cell[0] = small
    del rows
    gc.collect()
    assert len(pool._free) == 1
    held = pool._free[0][0]
    big = 3 * small
    rows2, cell2 = pool.take(big)
    assert not pool._free  # the pooled map was taken, not a fresh one
    assert len(held) >= big * 1024
    assert cell2[1] == cfg_program._POOL_MAP_BYTES  # the bytes touched before
    assert int(rows2[small - 1, 0]) == 7  # (not cleared: the old pages moved along)
    rows2[big - 1] = 5  # the new room is writable (no SIGBUS)
    assert int(rows2[big - 1, 255]) == 5
    cell2[0] = 1  # this use touched less than the last one: the pool keeps the larger count
    del rows2
    gc.collect()
    assert len(pool._free) == 1
    assert pool._free[0][1] == cfg_program._POOL_MAP_BYTES


def test_tables_on_grown_maps_match_fresh_ones() -> None:
    rng = np.random.default_rng(5)

    def build(n_states: int) -> tuple[np.ndarray, np.ndarray]:
        tables = cfg_program._LazyWalkTables(n_states, 34)
        todo = rng.permutation(np.arange(1, n_states))[: n_states // 2]
        for chunk in np.array_split(todo, 5):
            rows = rng.integers(0, n_states, size=(chunk.size, 256)).astype(np.int32)
            rows[rng.random(rows.shape) < 0.4] = 0
            tables.write(chunk.astype(np.int64), rows, rng.random(rows.shape) < 0.2)
        lex, cut = tables.walk_tables()
        return lex.copy(), cut.copy()

    state = rng.bit_generator.state
    small = build(600)  # maps of the least size, given back to the pool
    gc.collect()
    big_pooled = build(9000)  # longer than those: grown in place where the platform can
    rng.bit_generator.state = state
    build(600)
    fresh_pool = cfg_program._RowPool()
    old, cfg_program._ROW_POOL = cfg_program._ROW_POOL, fresh_pool
    try:
        big_fresh = build(9000)
    finally:
        cfg_program._ROW_POOL = old
    assert small[0].shape[1] == 256
    assert np.array_equal(big_pooled[0], big_fresh[0])
    assert np.array_equal(big_pooled[1], big_fresh[1])
