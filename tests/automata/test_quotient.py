"""The compiled build's ``_subset.quotient`` (thompson34): the quotient of a class table by
Hopcroft's partition in one C pass, as ``dfa._minimize_native``'s numpy gather makes it.

Checked against the numpy formula on random tables and partitions (blocks of every size, the
identity partition: None), end to end (``nfa_to_dfa`` minimized with the kernel and with a
stand-in kernel lacking ``quotient``, on random NFAs with rule references: the same DFA), and
on corrupt arguments (ValueError or BufferError, never a read out of bounds).  In the
pure-Python package the kernel is absent and these tests skip.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import formcast.automata.dfa as dfa_mod
from automata_helpers import KernelWithout, random_nfa
from formcast.automata.dfa import nfa_to_dfa
from formcast.automata.nfa import NFA
from formcast.limits import CompileLimits

KERNEL = dfa_mod._KERNEL
needs_kernel = pytest.mark.skipif(
    KERNEL is None or not hasattr(KERNEL, "quotient"), reason="the C kernel is not built"
)


def _numpy_quotient(
    table: np.ndarray, part: np.ndarray, accepting: np.ndarray
) -> tuple[list[Any], list[bool]] | None:
    n = table.shape[0]
    n_blocks = int(part.max()) + 1
    if n_blocks == n:
        return None
    rep_of_block = np.zeros(n_blocks, dtype=np.int64)
    rep_of_block[part[::-1]] = np.arange(n - 1, -1, -1)
    out = part[table[rep_of_block]].astype(np.int32)
    acc = accepting[rep_of_block]
    out[0] = 0
    acc[0] = False
    return out.tolist(), acc.tolist()


@needs_kernel
@pytest.mark.parametrize("seed", range(300))
def test_quotient_is_the_numpy_gather(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.choice([1, 2, 3, 8, 30])
    k = rnd.choice([1, 2, 5, 40])
    table = np.asarray(
        [[rnd.randrange(n) for _ in range(k)] for _ in range(n)], dtype=np.int32
    ).reshape(n, k)
    n_blocks = rnd.randint(1, n)
    # every block gets a state (hopcroft's partitions have no gaps), state 0 in block 0
    part_l = [0] + [rnd.randrange(n_blocks) for _ in range(n - 1)]
    missing = sorted(set(range(n_blocks)) - set(part_l))
    free = list(range(1, n))
    rnd.shuffle(free)
    for b, s in zip(missing, free, strict=False):
        part_l[s] = b
    part = np.asarray(part_l, dtype=np.int64)
    if len(set(part_l)) != int(part.max()) + 1:
        pytest.skip("a gap left (too few states)")
    accepting = np.asarray([rnd.random() < 0.5 for _ in range(n)], dtype=bool)
    got = KERNEL.quotient(table, k, part, accepting)
    want = _numpy_quotient(table, part, accepting)
    if want is None:
        assert got is None
        return
    q_table, q_acc, q_blocks = got
    assert q_blocks == int(part.max()) + 1
    assert np.frombuffer(q_table, dtype=np.int32).reshape(q_blocks, k).tolist() == want[0]
    assert np.frombuffer(q_acc, dtype=bool).tolist() == want[1]


def _random_nfa(rnd: random.Random) -> NFA:
    return random_nfa(
        rnd,
        max_states=24,
        byte_points=(0, 9, 10, 32, 48, 57, 97, 122, 127, 128, 200, 255),
        min_edges=1,
        single_bytes=0.0,
        max_eps_per_state=1,
        refs=0.5,
        rule_ids=8,
    )


def _fields(dfa: Any) -> tuple[Any, ...]:
    ref = None if dfa.ref_table is None else dfa.ref_table.tolist()
    return (dfa.table.tolist(), dfa.accepting.tolist(), dfa.start, dfa.ref_rules, ref)


@needs_kernel
@pytest.mark.parametrize("seed", range(200))
def test_minimized_dfa_same_without_quotient(seed: int) -> None:
    nfa = _random_nfa(random.Random(seed))
    limits = CompileLimits()
    got = _fields(nfa_to_dfa(nfa, limits, minimize=True))
    saved = dfa_mod._KERNEL
    dfa_mod._KERNEL = KernelWithout(KERNEL, "quotient")
    try:
        want = _fields(nfa_to_dfa(nfa, limits, minimize=True))
    finally:
        dfa_mod._KERNEL = saved
    assert got == want


@needs_kernel
def test_quotient_rejects_corrupt_arguments() -> None:
    table = np.asarray([[0, 0], [2, 1], [1, 2]], dtype=np.int32)
    part = np.asarray([0, 1, 1], dtype=np.int64)
    acc = np.asarray([False, True, True])
    q_table, q_acc, q_blocks = KERNEL.quotient(table, 2, part, acc)
    assert (bytes(q_table), bytes(q_acc), q_blocks) == (
        np.asarray([[0, 0], [1, 1]], dtype=np.int32).tobytes(),
        b"\x00\x01",
        2,
    )
    assert KERNEL.quotient(table, 2, np.asarray([0, 1, 2], dtype=np.int64), acc) is None
    bad = table.copy()
    bad[1, 1] = 3
    big = np.asarray([[0, 0], [2, 1], [1, 2], [3, 3]], dtype=np.int32)
    big_acc = np.asarray([False, True, True, False])
    for args in (
        (bad, 2, part, acc),
        (big, 2, np.asarray([0, 2, 2, 2], dtype=np.int64), big_acc),  # block 1 has no state
        (table, 2, np.asarray([0, 3, 1], dtype=np.int64), acc),  # block 3 >= n
        (table, 2, np.asarray([0, -1, 1], dtype=np.int64), acc),
        (table, 3, part, acc),
        (table, 0, part, acc),
        (table, 2, part[:2].copy(), acc),
        (table, 2, part.astype(np.int32), acc),
        (table, 2, part, acc[:2]),
        (np.asfortranarray(table), 2, part, acc),
    ):
        with pytest.raises((ValueError, BufferError)):
            KERNEL.quotient(*args)
