"""Differential test of ``_reachable_classes`` (the breadth-first numbering a cut signature
hashes, issue #31's cheaper version) against the numpy original it replaced, and of the
digest's int8 row bytes against the int64 rows (equal digests iff equal rows)."""

from __future__ import annotations

import numpy as np
import pytest

from formcast.index import cfg_program as cp


def _reference(part: np.ndarray, cut: np.ndarray, rep: np.ndarray, start: int) -> np.ndarray | None:
    dead = int(part[0])
    first_cls = int(part[start])
    seen = np.zeros(rep.size, dtype=bool)
    seen[dead] = seen[first_cls] = True
    parts = [np.asarray([first_cls], dtype=np.int64)]
    frontier = parts[0]
    total = 1
    while frontier.size:
        flat = part[cut[rep[frontier]]].reshape(-1)
        targets, first = np.unique(flat, return_index=True)
        targets = targets[np.argsort(first)]
        frontier = targets[~seen[targets]].astype(np.int64)
        total += frontier.size
        if total > cp._SHARED_WALK_STATES:
            return None
        seen[frontier] = True
        parts.append(frontier)
    return np.concatenate(parts)


@pytest.mark.parametrize("seed", range(40))
def test_reachable_classes_match_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    cols = int(rng.integers(1, 12))
    # sparse tables (mostly dead) and chains (a whitespace count) as well as dense ones
    density = float(rng.choice([0.05, 0.3, 1.0]))
    cut = rng.integers(0, n, size=(n, cols)).astype(np.int32)
    cut[rng.random((n, cols)) > density] = 0
    if seed % 4 == 0:
        cut[1:-1, 0] = np.arange(2, n)
    cut[0] = 0
    n_cls = int(rng.integers(1, n + 1))
    part = rng.integers(0, n_cls, size=n).astype(np.int64)
    _, part = np.unique(part, return_inverse=True)
    part = part.reshape(-1).astype(np.int64)
    rep = np.zeros(int(part.max()) + 1, dtype=np.int64)
    rep[part[::-1]] = np.arange(part.size - 1, -1, -1)
    succ: dict[int, list[int]] = {}  # shared by the starts, as the lazy classifier does
    for start in rng.integers(1, n, size=8).tolist() if n > 1 else []:
        want = _reference(part, cut, rep, start)
        for got in (
            cp._reachable_classes(part, cut, rep, start),
            cp._reachable_classes(part, cut, rep, start, succ),
        ):
            if want is None:
                assert got is None
            else:
                assert got is not None
                assert got.dtype == np.int64
                assert got.tolist() == want.tolist()


def test_renumbered_bytes_are_the_rows() -> None:
    rng = np.random.default_rng(7)
    k = cp._SHARED_WALK_STATES
    rows = rng.integers(-1, k, size=(k, 9)).astype(np.int64)
    col_of_byte = rng.integers(0, 9, size=256)
    got = np.frombuffer(cp._renumbered_bytes(rows, col_of_byte), dtype=np.int8)
    assert got.astype(np.int64).tolist() == rows[:, col_of_byte].reshape(-1).tolist()
    got = np.frombuffer(cp._renumbered_bytes(rows), dtype=np.int8)
    assert got.astype(np.int64).tolist() == rows.reshape(-1).tolist()
    assert cp._SHARED_WALK_STATES <= 127
