"""The compiled build's column classes (``formcast._columns``) group columns as numpy does.

``formcast.columns.column_classes`` runs in C when the compiled build is installed
(docs/native.md); here every call is made both ways (the kernel switched off for the numpy
reference) and must give the same ``(class_of_column, first_column_of_class)``, int64, with
the same class numbers, and the same None answers for ``most``: random tables with few and
many classes and duplicate columns, int32/int64/bool/uint8, non-contiguous views, one row, no
row, many widths, ``most`` below, at and above the class count, forced hash collisions (the
numpy path decides them), tables the kernel does not take, and the tables that real JSON-schema
compiles group.  Buffers of the wrong size raise ValueError (never a read out of bounds).

In the pure-Python package the kernel is absent and these tests skip;
``tests/project/test_native_build.py`` runs this file against the compiled copy, where
``FORMCAST_EXPECT_NATIVE=1`` makes a missing kernel a failure.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import formcast.columns as columns_module
from _native_kernel import compile_real_inputs, kernel_or_skip
from formcast.columns import column_classes, hash_weights

KERNEL = kernel_or_skip(columns_module._KERNEL, "formcast._columns")

_DTYPES = (np.int32, np.int64, np.bool_, np.uint8)


def _numpy(table: np.ndarray, most: int | None) -> Any:
    columns_module._KERNEL = None
    try:
        return column_classes(table, most) if most is not None else column_classes(table)
    finally:
        columns_module._KERNEL = KERNEL


def _both(table: np.ndarray, most: int | None = None) -> Any:
    """column_classes with the kernel and without it: the same answer (returned)."""
    assert columns_module._KERNEL is KERNEL
    got = column_classes(table, most) if most is not None else column_classes(table)
    want = _numpy(table, most)
    if want is None:
        assert got is None
        return None
    assert got is not None
    assert got[0].dtype == np.int64
    assert got[1].dtype == np.int64
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()
    return got


def _with_dups(rng: np.random.Generator, n: int, c: int, k: int, values: int) -> np.ndarray:
    """n x c: c columns drawn from k random columns (runs of equal columns included)."""
    base = rng.integers(-values, values + 1, size=(n, k))
    pick = np.sort(rng.integers(0, k, size=c)) if rng.random() < 0.5 else rng.integers(0, k, c)
    return np.asarray(base[:, pick])


def _kernel_answers(table: np.ndarray, most: int | None) -> Any:
    """The kernel's own answer (not the numpy fallback's)."""
    return columns_module._kernel_classes(table, most)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(0, 600),
    c=st.sampled_from([1, 2, 3, 17, 64, 255, 256, 300]),
    k=st.integers(1, 40),
    values=st.sampled_from([1, 2, 5, 1000, 2**40]),
    dtype=st.sampled_from(_DTYPES),
    view=st.sampled_from(["c", "f", "rows", "cols", "neg"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_tables(
    n: int, c: int, k: int, values: int, dtype: Any, view: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).itemsize < 8:
        values = min(values, 100)
    table = _with_dups(rng, n, c, k, values)
    if dtype is np.uint8:
        table = np.abs(table)
    table = table.astype(dtype)
    if view == "f":
        table = np.asfortranarray(table)
    elif view == "rows":
        table = table[::2]
    elif view == "cols":
        table = table[:, ::2]
    elif view == "neg":
        table = table[::-1, ::-1]
    got = _both(table)
    n_classes = int(got[1].size)
    assert _kernel_answers(table, None) is not columns_module._FALLBACK
    for most in (-1, 0, 1, n_classes - 1, n_classes, n_classes + 1, 10**30):
        _both(table, most)


def test_known_answers() -> None:
    """Hand-checked: classes ordered by hash, each class's first column its lowest."""
    table = np.array([[0, 1, 0, 1, 2], [3, 3, 3, 3, 3]], dtype=np.int32)
    cls, first = _both(table)
    w = hash_weights(2, columns_module._SEED)
    signed = [(int(w[0]) * v + int(w[1]) * 3) % 2**64 for v in (0, 1, 2)]
    h = [x - 2**64 if x >= 2**63 else x for x in signed]
    assert sorted(first.tolist()) == [0, 1, 4]
    assert first.tolist() == [int(c) for c in np.array([0, 1, 4])[np.argsort(h)]]
    assert [first[c] for c in cls] == [0, 1, 0, 1, 4]


def test_one_row_no_row_one_column() -> None:
    rng = np.random.default_rng(1)
    for dtype in _DTYPES:
        for shape in ((1, 256), (1, 1), (0, 256), (0, 1), (5, 1), (300, 1)):
            table = rng.integers(0, 2, size=shape).astype(dtype)
            got = _both(table)
            for most in (0, 1, 2, int(got[1].size)):
                _both(table, most)


def test_wide_tables() -> None:
    """Thousands of columns (the kernel hashes them in blocks): runs of equal columns across
    the blocks' borders, and columns that differ from their left neighbour right there."""
    rng = np.random.default_rng(8)
    for c in (1023, 1024, 1025, 2048, 2049, 5000):
        for n in (1, 4, 7, 256):
            for dtype in (np.bool_, np.int32, np.int64):
                table = _with_dups(rng, n, c, 5, 1).astype(dtype)
                _both(table)
                for border in (1023, 2047, 2048, 4095):
                    if border < c:
                        t = table.copy()
                        t[:, border] = t[:, border - 1]
                        if border + 1 < c:
                            t[:, border + 1 :] = t[:, border - 1 : border][:, [0]]
                            t[n - 1, border + 1 :] = (
                                not t[n - 1, border] if dtype is np.bool_ else 9
                            )
                        _both(t)
                        _both(t, 2)


def test_many_rows_and_classes_with_a_cap() -> None:
    """Tables past the probe rows: the answer None on many classes (whether the probe rows
    show them or only the whole table does), the classes where they fit."""
    rng = np.random.default_rng(2)
    for n in (257, 1000, 3000, 5000):
        for dtype in (np.int32, np.int64, np.bool_):
            table = _with_dups(rng, n, 256, 60, 3).astype(dtype)
            n_classes = int(_both(table)[1].size)
            for most in (1, n_classes - 1, n_classes, n_classes + 1, 255):
                _both(table, most)
            # the columns differ only on a row the probe does not read
            quiet = np.zeros((n, 256), dtype=dtype)
            quiet[1, :100] = 1 if dtype is np.bool_ else np.arange(100)
            if n // columns_module._PROBE_ROWS > 1:
                assert not quiet[:: n // columns_module._PROBE_ROWS].any()
            n_classes = int(_both(quiet)[1].size)
            for most in (1, n_classes - 1, n_classes, n_classes + 1):
                _both(quiet, most)


def test_extreme_values_wrap() -> None:
    """int64 extremes: the hash wraps as numpy's int64 product does."""
    rng = np.random.default_rng(4)
    info = np.iinfo(np.int64)
    for _ in range(20):
        choices = np.array([info.min, info.max, 0, -1, 1, info.min + 1], dtype=np.int64)
        base = rng.choice(choices, size=(int(rng.integers(1, 50)), 8))
        table = base[:, rng.integers(0, 8, size=256)]
        _both(table)
        _both(table.astype(np.int32))


def test_hash_collisions_fall_back_to_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two different columns of one hash: the kernel says -1 and numpy decides (its
    lexicographic order), with and without ``most``."""
    table = np.zeros((4, 256), dtype=np.int32)
    table[1, 10] = 2
    table[2, 11] = 3
    table[3, 12:20] = 1
    class_of = np.empty(256, dtype=np.int64)
    first = np.empty(256, dtype=np.int64)

    def classes(w: np.ndarray, most: int | None = None) -> int:
        return int(
            KERNEL.classes(table, 4, 256, 4, w, most is not None, most or 0, 0, class_of, first)
        )

    # columns 10 and 11 collide: w1 * 2 == w2 * 3
    assert classes(np.array([1, 3, 2, 5], dtype=np.int64)) == -1
    # columns 10 and 12..19 (a run of equal columns, hashed by its first)
    assert classes(np.array([1, 5, 7, 10], dtype=np.int64)) == -1
    # ... unless more hashes than most are seen anyway
    assert classes(np.array([1, 5, 7, 10], dtype=np.int64), 2) == -2
    assert classes(np.array([1, 5, 7, 10], dtype=np.int64), 3) == -1
    assert classes(np.array([1, 3, 7, 5], dtype=np.int64)) == 4
    assert first[:4].tolist() == [0, 12, 10, 11]  # by hash: 0, 5, 6, 21
    assert class_of.tolist() == [0] * 10 + [2, 3] + [1] * 8 + [0] * 236

    # equal weights: columns with equal sums hash equal (collide where they differ), and
    # column_classes leaves such tables to numpy
    monkeypatch.setattr(
        columns_module, "hash_weights", lambda size, seed: np.full(size, 7, dtype=np.int64)
    )
    rng = np.random.default_rng(6)
    fell_back = 0
    for dtype in _DTYPES:
        for n in (1, 3, 300):
            base = rng.integers(0, 2, size=(n, 6))
            t = base[:, rng.integers(0, 6, size=64)].astype(dtype)
            fell_back += _kernel_answers(t, None) is columns_module._FALLBACK
            got = _both(t)
            for most in (0, 1, int(got[1].size) - 1, int(got[1].size)):
                _both(t, most)
    assert fell_back > 0
    # a real collision under equal weights: [1, 0] and [0, 1]
    t = np.array([[1, 0, 1], [0, 1, 0]], dtype=np.int32)
    assert _kernel_answers(t, None) is columns_module._FALLBACK
    assert _both(t)[1].tolist() == [1, 0]  # numpy's lexicographic order


def test_tables_the_kernel_does_not_take_use_numpy() -> None:
    rng = np.random.default_rng(7)
    base = rng.integers(0, 3, size=(20, 4))[:, rng.integers(0, 4, size=50)]
    for dtype in (np.int8, np.int16, np.uint16, np.uint32, np.uint64, ">i4", ">i8"):
        table = base.astype(dtype)
        assert _kernel_answers(table, None) is columns_module._FALLBACK
        _both(table)
    empty = np.zeros((5, 0), dtype=np.int32)
    assert _kernel_answers(empty, None) is columns_module._FALLBACK
    got = column_classes(empty)
    assert got[0].size == 0
    assert got[1].size == 0


def test_bad_buffers_raise() -> None:
    table = np.zeros((4, 8), dtype=np.int32)
    out = np.empty(8, dtype=np.int64)
    w = hash_weights(4, 1)
    call = KERNEL.classes
    bad_calls: list[tuple[str, tuple[Any, ...]]] = [
        ("lengths disagree", (table, 5, 8, 4, w, False, 0, 0, out, out.copy())),
        ("lengths disagree", (table, 4, 9, 4, w, False, 0, 0, out, out.copy())),
        ("items", (table, 4, 8, 8, w, False, 0, 0, out, out.copy())),
        ("items", (table, 4, 8, 2, w, False, 0, 0, out, out.copy())),
        ("fewer weights", (table, 4, 8, 4, w[:3], False, 0, 0, out, out.copy())),
        ("lengths disagree", (table, 4, 8, 4, w, False, 0, 0, out[:7], out.copy())),
        ("probe step", (table, 4, 8, 4, w, False, 0, -1, out, out.copy())),
        ("items", (table, 4, 8, 4, w, False, 0, 0, out.astype(np.int32), out.copy())),
        ("lengths disagree", (table, 4, 0, 4, w, False, 0, 0, out[:0], out[:0])),
    ]
    for message, args in bad_calls:
        with pytest.raises(ValueError, match=message):
            call(*args)
    with pytest.raises((ValueError, BufferError, TypeError)):
        call(table[:, ::2], 4, 4, 4, w, False, 0, 0, out[:4], out[:4].copy())
    assert call(table, 4, 8, 4, w, False, 0, 0, out, out.copy()) == 1


def test_the_tables_of_real_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables that compiling JSON schemas on Llama-3 groups (lexers, windows, cuts):
    recorded from the compile, then grouped both ways with caps around their class count."""

    seen: list[tuple[np.ndarray, int | None]] = []
    real = columns_module._kernel_classes

    def record(table: np.ndarray, most: int | None) -> Any:
        seen.append((table.copy(), most))
        return real(table, most)

    monkeypatch.setattr(columns_module, "_kernel_classes", record)
    compile_real_inputs()
    monkeypatch.undo()
    assert seen
    assert any(t.shape[0] > 100 for t, _ in seen)
    for table, most in seen:
        got = _both(table, most)
        cap = int(_both(table)[1].size)
        for m in (cap - 1, cap, cap + 1):
            _both(table, m)
        assert got is None or got[1].size == cap
