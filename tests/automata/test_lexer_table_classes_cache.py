"""The lexer's cache of rule-table column classes (``formcast.automata.lexer._TABLE_CLASSES``)
answers only for the very table it was filled from, and its answers are the table's classes.

The cache is keyed by ``id(table)`` and holds a weak reference: an entry whose reference is dead
or points elsewhere (an id reused by a later table) must be recomputed and replaced, a writable
table must not be cached at all (its content could change), and whatever the cache holds, a
lexer's byte classes are those of the eager construction (checked on the grammars of
test_expanded_lexer_matches_simulation, twice: cold, then from the cache).
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest
from test_expanded_lexer_matches_simulation import _automata

import formcast.automata.lexer as lexer_module
from formcast.automata.lexer import LazyExpandedLexer, build_expanded_lexer
from formcast.columns import column_classes


def _table(seed: int, rows: int = 12) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, rows, size=(rows, 7), dtype=np.int32)
    table = cols[:, rng.integers(0, 7, size=256)]  # 256 columns, at most 7 distinct
    table[0] = 0
    table.setflags(write=False)
    return table


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        len(set(zip(a.tolist(), b.tolist(), strict=True)))
        == len(set(a.tolist()))
        == len(set(b.tolist()))
    )


def test_classes_are_the_tables_and_cached_per_object() -> None:
    table = _table(1)
    got = lexer_module._table_classes(table)
    assert _same_partition(got, column_classes(table[1:])[0])
    assert lexer_module._table_classes(table) is got  # the cached array
    twin = table.copy()
    twin.setflags(write=False)
    other = lexer_module._table_classes(twin)  # equal content, another object: its own entry
    assert other is not got
    assert np.array_equal(other, got)


def test_writable_tables_are_not_cached() -> None:
    table = _table(2).copy()  # writable
    before = len(lexer_module._TABLE_CLASSES)
    lexer_module._table_classes(table)
    assert len(lexer_module._TABLE_CLASSES) == before
    table[1:, 200:] = np.arange(1, table.shape[0], dtype=np.int32)[:, None] % 5  # changed
    assert _same_partition(lexer_module._table_classes(table), column_classes(table[1:])[0])


def test_a_stale_entry_is_replaced() -> None:
    """An entry under the table's id whose reference is not the table (an id reused) is
    neither believed nor kept."""
    table = _table(3)
    wrong = np.zeros(256, dtype=np.int32)  # "every byte one class": false for this table
    stranger = _table(4)
    lexer_module._TABLE_CLASSES.put(id(table), [(weakref.ref(stranger), wrong)])
    got = lexer_module._table_classes(table)
    assert _same_partition(got, column_classes(table[1:])[0])
    found, slot = lexer_module._TABLE_CLASSES.get(id(table))
    assert found
    assert slot is not None
    assert slot[0][0]() is table
    assert lexer_module._table_classes(table) is got


def test_bounded() -> None:
    keep = [_table(100 + i, rows=3) for i in range(lexer_module._TABLE_CLASSES_KEPT + 20)]
    for t in keep:
        lexer_module._table_classes(t)
    assert len(lexer_module._TABLE_CLASSES) <= lexer_module._TABLE_CLASSES_KEPT


@pytest.mark.parametrize("which", range(len(_automata())))
def test_lexer_classes_cold_and_cached_are_the_eager_partition(which: int) -> None:
    auto = _automata()[which]
    eager = build_expanded_lexer(auto)
    assert eager is not None
    cols = np.concatenate([eager.table, eager.split], axis=0)
    _, inverse = np.unique(cols, axis=1, return_inverse=True)
    for _ in range(2):  # (the first may fill the cache, the second reads it)
        cmap, first = LazyExpandedLexer(auto).classes
        assert np.array_equal(cols[:, first][:, cmap], cols)  # a class's columns are equal
        assert _same_partition(cmap, inverse.reshape(-1))
    lexer_module._TABLE_CLASSES.clear()
    cmap2, first2 = LazyExpandedLexer(auto).classes
    assert np.array_equal(cmap2, cmap)
    assert np.array_equal(first2, first)
