"""Equal columns of an integer table: the byte classes of an automaton's transition table.

* :func:`column_classes` — ``(class of each column, first column of each class)``; with
  ``most``, None as soon as there are more classes than that (a caller that only profits
  from few classes skips the exact check).
* :func:`hash_weights` — the random odd 62-bit weights the row and column hashes use.

Shared by the automata (minimization, the lexers, the token index's equivalence pass) and the
vocabulary trie (class tries of permissive walks), which may not import each other.

Lifetime: pure functions over read-only tables; the only state is the process-wide cache of
hashing weights (a few KiB per seed).  Cost: O(rows x columns), temporaries bounded to
:data:`_CHUNK_ROWS` rows of float64.
"""

from __future__ import annotations

from typing import Any, cast, overload

import numpy as np

# numpy.ma at import: numpy 2.x's ``np.unique`` asks ``np.ma.is_masked`` on its first call, a
# lazy import of ~10 ms that otherwise lands inside a process's first mask that calls it
import numpy.ma

__all__ = ["column_classes", "hash_weights"]

# the compiled build's column classes (docs/native.md); absent from the pure-Python package,
# where the numpy code below runs (tests set this to None for the reference)
_KERNEL: Any
try:
    from . import _columns as _KERNEL  # type: ignore[no-redef]
except ImportError:  # pragma: no cover - depends on the build
    _KERNEL = None

_WEIGHTS: dict[int, np.ndarray] = {}
# rows per float64 temporary of the column hash (4096 x 256 columns: 8 MiB)
_CHUNK_ROWS = 4096
# with a class cap: the rows of the first look (spread over the table), and those hashed
# before the first look at the partial hashes (then twice as many each time, up to
# _CHUNK_ROWS): a table with many classes usually shows them in a few hundred rows
_PROBE_ROWS = 256
_SEED = 0x5EED


def hash_weights(size: int, seed: int) -> np.ndarray:
    """``size`` random odd 62-bit weights for row/column hashing (fixed seed; cached, so
    repeated hashing does not pay for a random generator each time).  Read-only."""
    have = _WEIGHTS.get(seed)
    if have is None or have.size < size:
        grown = max(size, 2 * (have.size if have is not None else 0), 1024)
        have = np.random.default_rng(seed).integers(1, 1 << 62, size=grown, dtype=np.int64)
        have |= 1
        have.setflags(write=False)
        _WEIGHTS[seed] = have
    return have[:size]


# made at import, as the row weights of formcast.automata.equivalence: the first random
# generator of a process (numpy.random's set-up, up to ~30 ms) is not paid inside a mask
hash_weights(1024, _SEED)


@overload
def column_classes(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
@overload
def column_classes(table: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray] | None: ...
def column_classes(
    table: np.ndarray, most: int | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Group the equal columns of ``table``: ``(class_of_column, first_column_of_class)``,
    both int64.

    Classes are numbered in the order of a 64-bit integer hash of the column (random
    weights, fixed seed), so the result depends on the table alone.  The columns are grouped
    first by a floating-point hash (far cheaper than the integer one over the whole table;
    summed row after row in the same order for every column, so equal columns hash equal,
    which a BLAS product does not promise), the grouping is checked exactly (every column
    equals its class's first column, and the first columns have distinct integer hashes),
    and only the first columns get the integer hash that orders the classes; on any doubt
    the whole table is hashed and sorted as integers (a lexicographic sort on a collision).
    With ``most``: None where the table has more than ``most`` classes, decided on the float
    hash before the exact check: on a large table first on a spread of :data:`_PROBE_ROWS`
    rows, then as soon as the rows hashed so far tell more than ``most`` columns apart.
    O(rows x columns); with ``most``, usually O(:data:`_PROBE_ROWS` x columns) where the
    answer is None.

    In the compiled build a C kernel (:data:`_KERNEL`) gives the same answer for the tables
    it takes (2-D, int32, int64, bool or uint8, at least one column), hashing every column as
    integers in one pass; on a hash collision between two different columns it leaves the
    table to the numpy code below.
    """
    if _KERNEL is not None:
        got = _kernel_classes(table, most)
        if got is not _FALLBACK:
            return cast("tuple[np.ndarray, np.ndarray] | None", got)
    n = table.shape[0]
    # columns that differ on some rows differ on the whole table: past ``most`` distinct
    # hashes of a spread of rows (then of the rows hashed so far) the answer is None
    if most is not None and n > _PROBE_ROWS:
        spread = table[:: n // _PROBE_ROWS]
        probe = _float_hash(spread, hash_weights(spread.shape[0], _SEED))
        if np.unique(probe).size > most:
            return None
    weights = hash_weights(n, _SEED)
    hf = np.zeros(table.shape[1], dtype=np.float64)
    lo, step = 0, (_CHUNK_ROWS if most is None else _PROBE_ROWS)
    while lo < n:
        hi = min(n, lo + step)
        hf += _float_hash(table[lo:hi], weights[lo:hi])
        lo, step = hi, min(2 * step, _CHUNK_ROWS)
        if most is not None and lo < n and np.unique(hf).size > most:
            return None
    _, f_first, f_inverse = np.unique(hf, return_index=True, return_inverse=True)
    if most is not None and f_first.size > most:
        return None
    f_inverse = f_inverse.reshape(-1)
    fast = _checked_float_classes(table, weights, f_first, f_inverse)
    if fast is not None:
        return fast
    with np.errstate(over="ignore"):
        h = weights @ np.asarray(table, dtype=np.int64)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not _grouping_holds(table, first, inverse):
        _, first, inverse = np.unique(table, axis=1, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    if most is not None and first.size > most:
        return None
    return inverse.astype(np.int64), first.astype(np.int64)


# _kernel_classes' answer where the numpy code decides
_FALLBACK: Any = object()


def _kernel_classes(table: np.ndarray, most: int | None) -> Any:
    """column_classes by the C kernel: its answer, or :data:`_FALLBACK` where the kernel
    does not take the table or two different columns share a hash."""
    if table.ndim != 2 or table.shape[1] == 0 or not table.dtype.isnative:
        return _FALLBACK
    kind, size = table.dtype.kind, table.dtype.itemsize
    if not ((kind == "i" and size in (4, 8)) or (kind in "bu" and size == 1)):
        return _FALLBACK
    n, c = table.shape
    src = table if table.flags.c_contiguous else np.ascontiguousarray(table)
    class_of = np.empty(c, dtype=np.int64)
    first = np.empty(c, dtype=np.int64)
    k = int(
        _KERNEL.classes(
            src,
            n,
            c,
            size,
            hash_weights(n, _SEED),
            most is not None,
            0 if most is None else max(-1, min(most, c)),
            n // _PROBE_ROWS if most is not None and n > _PROBE_ROWS else 0,
            class_of,
            first,
        )
    )
    if k == -2:
        return None
    if k < 0:
        return _FALLBACK
    return class_of, first[:k]


def _float_hash(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``float64[columns]``: the weighted sum of each column of ``rows`` (``weights`` scaled
    to [0, 1)), summed row after row in the same order for every column, so equal columns
    get bit-equal sums (a BLAS product may order its sums by column position)."""
    block = rows.astype(np.float64)
    block *= (weights.astype(np.float64) * (1.0 / (1 << 62)))[:, None]
    out: np.ndarray = block.sum(axis=0)
    return out


def _grouping_holds(table: np.ndarray, first: np.ndarray, inverse: np.ndarray) -> bool:
    """Whether every column of ``table`` equals the first column of its class (checked in
    blocks of :data:`_CHUNK_ROWS` rows)."""
    cols = first[inverse]
    return all(
        np.array_equal(table[lo : lo + _CHUNK_ROWS][:, cols], table[lo : lo + _CHUNK_ROWS])
        for lo in range(0, table.shape[0], _CHUNK_ROWS)
    )


def _checked_float_classes(
    table: np.ndarray, weights: np.ndarray, f_first: np.ndarray, f_inverse: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The float hash's grouping numbered as the integer hash numbers it, or None when the
    grouping cannot be confirmed (then the caller hashes the whole table as integers)."""
    if not _grouping_holds(table, f_first, f_inverse):
        return None
    # the classes' integer hashes, as the whole-table path computes them per column
    with np.errstate(over="ignore"):
        h_rep = weights @ np.asarray(table[:, f_first], dtype=np.int64)
    order = np.argsort(h_rep, kind="stable")
    if h_rep.size > 1 and bool((h_rep[order][1:] == h_rep[order][:-1]).any()):
        return None  # an integer collision (or equal columns split apart): the slow path
    # np.unique(h) numbers the classes by ascending hash, each with its first column
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size, dtype=np.int64)
    first: np.ndarray = np.asarray(f_first, dtype=np.int64)[order]
    return rank[f_inverse], first
