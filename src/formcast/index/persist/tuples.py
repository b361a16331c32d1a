"""Nested tuples of scalars as compact JSON (a grammar's call edges, a classifier's tables).

A tuple of tuples is written ``[length, i, child, j, child, ...]`` with its non-empty children
only (by index), a tuple of scalars as a plain list.  Stateless; O(size).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SCALARS", "sparse_tuple", "tuple_depth", "tuple_sparse"]

#: the types a tuple written as JSON may hold at its leaves
SCALARS = (int, str, bool, type(None))


def tuple_depth(v: tuple[Any, ...]) -> tuple[int, bool] | None:
    """``(d, True)`` when ``v`` is tuples nested ``d`` deep with scalars at depth ``d``
    (``(d, False)``: only empty tuples below, which fit any depth from ``d``); None when
    ``v`` mixes depths or holds anything else."""
    fixed: int | None = None
    flex = 0
    for x in v:
        if type(x) in SCALARS:
            d, exact = 0, True
        elif type(x) is tuple:
            r = tuple_depth(x)
            if r is None:
                return None
            d, exact = r
        else:
            return None
        if exact:
            if fixed is not None and fixed != d:
                return None
            fixed = d
        else:
            flex = max(flex, d)
    if fixed is not None:
        return None if flex > fixed else (fixed + 1, True)
    return flex + 1, False


def tuple_sparse(v: tuple[Any, ...]) -> Any:
    """Nested tuples as JSON: a tuple of tuples is ``[length, i, child, j, child, ...]``
    (its non-empty children only, by index), a tuple of scalars a plain list."""
    if not v or type(v[0]) is not tuple:  # scalars (never mixed with tuples: tuple_depth)
        return list(v)
    out: list[Any] = [len(v)]
    for i, x in enumerate(v):
        if x:
            out += (i, tuple_sparse(x))
    return out


def sparse_tuple(x: Any, depth: int) -> tuple[Any, ...]:
    """The inverse of :func:`tuple_sparse` for ``depth`` levels (scalars at the last).

    Raises:
        TypeError, ValueError: ``x`` is not what :func:`tuple_sparse` writes.
    """
    if type(x) is not list:
        raise TypeError("nested tuples of a non-list")
    if depth == 1:
        if list in map(type, x):
            raise TypeError("a list among the scalars of nested tuples")
        return tuple(x)
    if not x:
        return ()
    n = x[0]
    if type(n) is not int or not 0 <= n <= 1 << 24 or len(x) % 2 != 1:
        raise ValueError("sparse nested tuples")
    out: list[Any] = [()] * n
    last, d = -1, depth - 1
    for k in range(1, len(x), 2):
        i = x[k]
        if type(i) is not int or not last < i < n:
            raise ValueError("sparse nested tuples' index")
        c = x[k + 1]
        if d == 1:  # (the leaves, inline: most of the calls a grammar's call edges make)
            if type(c) is not list or list in map(type, c):
                raise TypeError("a list among the scalars of nested tuples")
            child = tuple(c)
        else:
            child = sparse_tuple(c, d)
        if not child:
            raise ValueError("an empty child written in sparse nested tuples")
        out[i] = child
        last = i
    return tuple(out)
