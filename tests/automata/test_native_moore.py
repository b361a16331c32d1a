"""The compiled build's Moore refinement (``formcast.automata._moore``) refines as numpy does.

``equivalence_classes`` runs its refinement in C when the compiled build is installed
(docs/native.md); here every call is made both ways (the kernel switched off for the numpy
reference) and must give the same partition with the same block numbers, the same ``stable``
and the same fuel charged: random tables (small alphabets, a dead state, labels of a few
values), counters that need a round per state, depths short of convergence, work budgets and
fuel limits that stop the refinement at every round, deadlines, and the lexers of real JSON
schemas.  A table leading to a state it lacks raises ValueError (never a read out of
bounds).

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

import formcast.automata.equivalence as eq
from _native_kernel import compile_real_inputs, kernel_or_skip
from formcast.columns import column_classes
from formcast.limits import WorkBudget

KERNEL = kernel_or_skip(eq._KERNEL, "formcast.automata._moore")


def _canonical(part: np.ndarray) -> list[int]:
    """The partition with its blocks renumbered by first occurrence."""
    seen: dict[int, int] = {}
    return [seen.setdefault(int(b), len(seen)) for b in part]


def _run(
    table: np.ndarray,
    labels: np.ndarray,
    depth: int,
    budget: int,
    limit: int | None,
    seconds: float | None,
    kernel: Any,
) -> tuple[np.ndarray, bool, int | None]:
    work = None if limit is None else WorkBudget(limit, seconds)
    eq._KERNEL = kernel
    try:
        part, stable = eq.equivalence_classes(table, labels, depth, budget=budget, work=work)
    finally:
        eq._KERNEL = KERNEL
    return part, stable, None if work is None else work.used


def _both(
    table: np.ndarray,
    labels: np.ndarray,
    depth: int,
    *,
    budget: int = 80_000_000,
    limit: int | None = None,
    seconds: float | None = None,
) -> tuple[np.ndarray, bool, int | None]:
    """The call with the kernel and with numpy: equal (numbers included); the kernel's."""
    ref_part, ref_stable, ref_used = _run(table, labels, depth, budget, limit, seconds, None)
    part, stable, used = _run(table, labels, depth, budget, limit, seconds, KERNEL)
    assert part.dtype == np.int64
    assert _canonical(part) == _canonical(ref_part)
    assert part.tolist() == ref_part.tolist()  # the very numbers of the numpy path
    assert stable == ref_stable
    assert used == ref_used
    return part, stable, used


def _random_table(rng: np.random.Generator, n: int, letters: int, dead: float) -> np.ndarray:
    """``int32[n, 256]``: state 0 dead, ``letters`` bytes (of a few byte ranges) moving to
    random states (a share ``dead`` of the moves to the dead state), the others dead."""
    table = np.zeros((n, 256), dtype=np.int32)
    cols = rng.choice(256, size=letters, replace=False)
    moves = rng.integers(0, n, size=(n - 1, letters))
    moves[rng.random((n - 1, letters)) < dead] = 0
    table[1:, cols] = moves
    # equal columns: a copy of a letter's column under other bytes
    for c in rng.choice(256, size=rng.integers(0, 4), replace=False):
        table[:, c] = table[:, cols[0]]
    return table


@given(
    st.integers(1, 48),
    st.integers(1, 6),
    st.floats(0.0, 0.8),
    st.integers(1, 4),
    st.integers(0, 2**31),
    st.integers(0, 14),
)
@settings(max_examples=300, deadline=None)
def test_random_tables(
    n: int, letters: int, dead: float, n_labels: int, seed: int, depth: int
) -> None:
    rng = np.random.default_rng(seed)
    table = _random_table(rng, n, letters, dead)
    labels = rng.integers(1, n_labels + 1, size=n)
    labels[0] = 0
    _both(table, labels, depth)
    _both(table, labels, depth, limit=10**9)
    # budgets and fuel that stop the refinement at some round (round one costs n * k)
    k = column_classes(table)[1].size
    total = n * k * max(depth, 1)
    budgets = {0, 1, n, 3 * n, total // 7, total // 3, total // 2}
    budgets |= {n * k * r + d for r in (1, 2, 3) for d in (-1, 0, 1)}
    for budget in sorted(budgets):
        _both(table, labels, depth, budget=budget)
    for limit in (0, 1, 2, 3, 5, 8):
        _both(table, labels, depth, limit=limit)


@given(st.integers(2, 200), st.integers(0, 2**31), st.integers(1, 3))
@settings(max_examples=60, deadline=None)
def test_counters_need_a_round_per_state(n: int, seed: int, width: int) -> None:
    """A chain ``1 -> 2 -> ... -> n - 1`` on digits with the last state accepting: refinement
    takes a round per state; depths short of that are not stable."""
    rng = np.random.default_rng(seed)
    table = np.zeros((n, 256), dtype=np.int32)
    digits = list(range(ord("0"), ord("0") + width))
    for s in range(1, n - 1):
        table[s, digits] = s + 1
    if rng.random() < 0.5:  # a loop back, or a second letter: other shapes of the same chain
        table[n - 1, ord("x")] = 1
    labels = np.ones(n, dtype=np.int64)
    labels[0] = 0
    labels[n - 1] = 2
    for depth in sorted({0, 1, 2, n // 3, n // 2, n - 3, n - 2, n - 1, n, n + 1, 3 * n}):
        if depth < 0:
            continue
        _, stable, _ = _both(table, labels, depth)
        if depth >= n:
            assert stable
        _both(table, labels, depth, limit=10**9)
    for budget in range(0, 256 * n, max(1, 256 * n // 23)):
        _both(table, labels, n, budget=budget // 16)
    for limit in range(0, 3 * n, max(1, n // 7)):
        _both(table, labels, n, limit=limit)


def test_fuel_and_stability_known_values() -> None:
    """A counter of 6 states: the rounds, their fuel and their outcomes, by hand."""
    n = 6
    table = np.zeros((n, 256), dtype=np.int32)
    for s in range(1, n - 1):
        table[s, ord("1")] = s + 1
    labels = np.array([0, 1, 1, 1, 1, 2])
    part, stable, used = _both(table, labels, 10, limit=10**6)
    assert stable
    assert len(set(part.tolist())) == n
    # depth 1: one round over every state (k = 2 distinct columns): 6 * 2 // 64 + 1 units
    part, stable, used = _both(table, labels, 1, limit=10**6)
    assert not stable
    assert used == 1
    assert _canonical(part) == [0, 1, 1, 1, 2, 3]
    # fuel for one round only: the identity (stable), one round charged
    part, stable, used = _both(table, labels, 10, limit=1)
    assert stable
    assert part.tolist() == list(range(n))
    assert used == 1


def test_deadlines() -> None:
    rng = np.random.default_rng(7)
    table = _random_table(rng, 40, 3, 0.2)
    labels = rng.integers(1, 3, size=40)
    labels[0] = 0
    part, stable, used = _both(table, labels, 20, limit=10**6, seconds=-1.0)  # past it
    assert part.tolist() == list(range(40))
    assert stable
    assert used == 0
    _both(table, labels, 20, limit=10**6, seconds=3600.0)
    _both(table, labels, 20, limit=10**6, seconds=eq._DEADLINE_RESERVE / 2)  # within reserve
    # a cancelled compile: its deadline is -inf (GrammarCompiler's cancel)
    for kernel in (None, KERNEL):
        work = WorkBudget(10**6, 3600.0)
        work.deadline = float("-inf")
        eq._KERNEL = kernel
        try:
            part, stable = eq.equivalence_classes(table, labels, 20, work=work)
        finally:
            eq._KERNEL = KERNEL
        assert part.tolist() == list(range(40))
        assert stable
        assert work.used == 0


def test_row_hash_collisions_fall_back_to_row_order() -> None:
    """With every row hash equal (zero weights) the kernel groups rows exactly and numbers the
    new blocks in row order, as numpy does when hashes collide."""
    rng = np.random.default_rng(5)
    for _ in range(30):
        n = int(rng.integers(2, 40))
        table = _random_table(rng, n, int(rng.integers(1, 5)), 0.2)
        labels = rng.integers(0, 3, size=n)
        want, want_stable, _ = _run(table, labels, 12, 10**9, None, None, None)
        first = column_classes(table)[1]
        cols = np.ascontiguousarray(table[:, first])
        part = np.unique(labels, return_inverse=True)[1].astype(np.int64)
        n_blocks = int(part.max()) + 1
        if n_blocks == n:
            continue
        zero = np.zeros(first.size + 1, dtype=np.int64)
        status, _ = KERNEL.refine(
            cols, first.size, part, n_blocks, 12, 10**9, zero, False, 0, float("inf")
        )
        assert _canonical(part) == _canonical(want)
        assert (status == 0) == want_stable


def test_a_table_leading_to_a_missing_state_raises() -> None:
    table = np.zeros((3, 256), dtype=np.int32)
    table[1, ord("a")] = 2
    table[2, ord("b")] = 7  # no state 7
    with pytest.raises(ValueError, match="state it lacks"):
        eq.equivalence_classes(table, np.array([0, 1, 1]), 5)
    table[2, ord("b")] = -1
    with pytest.raises(ValueError, match="state it lacks"):
        eq.equivalence_classes(table, np.array([0, 1, 1]), 5)


def test_tables_the_kernel_does_not_take_use_numpy() -> None:
    rng = np.random.default_rng(2)
    table = _random_table(rng, 20, 3, 0.3)
    labels = rng.integers(0, 2, size=20)
    assert eq._native_takes(table, labels)
    assert not eq._native_takes(table.astype(np.int64), labels)
    assert not eq._native_takes(table[:0], labels[:0])
    want = _run(table, labels, 8, 10**9, None, None, None)
    got = eq.equivalence_classes(table.astype(np.int64), labels, 8)
    assert got[0].tolist() == want[0].tolist()
    # labels of other kinds: the numpy numbering of the initial blocks
    for other in (labels.astype(np.uint8) * 200, labels - 5, labels.astype(np.float64)):
        _both(table, other, 8)


def test_the_lexers_of_real_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    """The (cut) lexers of compiled JSON schemas on Llama-3, as the token index refines
    them: recorded from the compile, then refined both ways with ample and scarce fuel."""
    from formcast._native import compiled_modules
    from formcast.index import cfg_program

    if compiled_modules().get("formcast.index.cfg_program", False):
        # (compiled, it calls the compiled equivalence_classes directly: a patched module
        # name is never called; the pure package's run records them)
        pytest.skip("records cfg_program's calls by patching it (cfg_program compiled)")
    seen: list[tuple[np.ndarray, np.ndarray, int]] = []
    real = cfg_program.equivalence_classes

    def record(table: np.ndarray, labels: np.ndarray, depth: int, **kw: Any) -> Any:
        seen.append((table.copy(), labels.copy(), depth))
        return real(table, labels, depth, **kw)

    monkeypatch.setattr(cfg_program, "equivalence_classes", record)
    monkeypatch.setattr(cfg_program, "LAZY_INDEX", False)  # the eager index refines at compile
    compile_real_inputs()
    assert seen
    for table, labels, depth in seen:
        _, _, used = _both(table, labels, depth, limit=10**9)
        assert used is not None
        for limit in (used // 3, used - 1, used):
            _both(table, labels, depth, limit=max(limit, 0))
        _both(table, labels, 3)
