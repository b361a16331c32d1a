"""The determinized window of a counted rule (``subset_window``) against a brute-force simulation.

For random item automata whose iterations may overlap (an accepting state going on on the bytes
that also begin the next iteration), random callee and follow bytes, and the bounds a counted
classifier asks for (no bound within reach; the upper bound only, ``need`` met; the lower bound
only) and windows with both bounds within reach, every string of up to ``reach`` bytes over
the items' alphabet is classified twice:

* walking it from the entry's row through ``subset_window``'s table with the augmented-walk rule
  (a split counts from the second byte on; dying after one is a *candidate*, else *rejected*;
  surviving is *alive*);
* by simulating the counted frame on the unpruned set of ``(state, level)`` pairs, one byte at a
  time, with the same rule.

They must agree exactly: the pruning of dominated pairs and the clipping of levels change nothing
a token can see.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from formcast.automata.counted import subset_window

ALPHABET = (0x61, 0x62, 0x63)  # the bytes items use; every other byte is dead
REACH = 4  # the longest token: counts clip at REACH + 1


def _random_item(rng: random.Random) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(table, accepting, call_split, exit_split) of a random item DFA: state 0 dead, 1 start
    (not accepting: an item always consumes), every state reachable from the start."""
    n = rng.randint(3, 5)
    table = np.zeros((n, 256), dtype=np.int32)
    for q in range(1, n):
        for b in ALPHABET:
            if rng.random() < 0.55:
                table[q, b] = rng.randint(1, n - 1)
    for q in range(2, n):  # a path from the start to every state
        table[rng.randint(1, q - 1), rng.choice(ALPHABET)] = q
    table[1][table[1] == 1] = 0  # the start is never re-entered: it cannot accept
    accepting = np.zeros(n, dtype=bool)
    accepting[2:] = [rng.random() < 0.6 for _ in range(n - 2)]
    accepting[rng.randint(2, n - 1)] = True
    call_split = np.zeros((n, 256), dtype=bool)
    for q in range(1, n):
        for b in ALPHABET:
            call_split[q, b] = rng.random() < 0.1
    exit_split = np.zeros(256, dtype=bool)
    for b in ALPHABET:
        exit_split[b] = rng.random() < 0.4
    return table, accepting, call_split, exit_split


def _simulate(item, start, need, iterations, entry, data: bytes) -> str:
    """The classification of ``data`` from ``entry`` by the counted frame's own semantics, on
    every ``(state, level)`` pair (nothing pruned)."""
    table, accepting, call_split, exit_split = item
    single = iterations < 0
    pairs = {entry}
    passed = False
    for k, b in enumerate(data):
        new = set()
        split = False
        for q, i in pairs:
            t = int(table[q, b])
            if t:
                new.add((t, i))
            split |= bool(call_split[q, b])
            if accepting[q]:
                met = need == 0 if single else i >= need - 1
                split |= bool(exit_split[b]) and met
                if single or i + 1 < iterations:
                    split |= bool(call_split[start, b])
                    t = int(table[start, b])
                    if t:
                        new.add((t, i if single else i + 1))
        if k:  # the parser's closure already expanded the entry's own splits
            passed |= split
        pairs = new
        if not pairs:
            return "candidate" if passed and k else "rejected"
    return "alive"


def _walk(table: np.ndarray, split: np.ndarray, row: int, data: bytes) -> str:
    passed = False
    for k, b in enumerate(data):
        if k:
            passed |= bool(split[row, b])
        row = int(table[row, b])
        if row == 0:
            return "candidate" if passed else "rejected"
    return "alive"


def _windows(cap: int) -> list[tuple[int, int, list[int]]]:
    """(need, iterations, entry levels) as the counted classifier builds them, and windows
    with both bounds within reach (which it leaves to the parser)."""
    out: list[tuple[int, int, list[int]]] = [(0, -1, [0]), (cap, -1, [0])]
    out.append((0, cap, list(range(cap))))
    out.append((cap, 2 * cap, list(range(1, cap))))
    out += [(2, cap - 1, [0]), (3, cap, [0]), (1, 2, [0])]
    return out


STRINGS = [bytes(s) for n in range(1, REACH + 1) for s in itertools.product(ALPHABET, repeat=n)]


@pytest.mark.parametrize("seed", range(30))
def test_subset_window_classifies_like_the_unpruned_frame(seed: int) -> None:
    rng = random.Random(seed)
    item = _random_item(rng)
    table, accepting, call_split, exit_split = item
    start = 1
    cap = REACH + 1
    live = np.flatnonzero((table != 0).any(axis=1)).tolist()
    for need, iterations, levels in _windows(cap):
        entries = [(q, i) for i in levels for q in live]
        got = subset_window(
            table, accepting, start, call_split, exit_split, need, iterations, entries, REACH
        )
        assert got is not None
        sub, sub_split, rows = got
        for entry, row in zip(entries, rows):
            for data in STRINGS:
                want = _simulate(item, start, need, iterations, entry, data)
                have = _walk(sub, sub_split, row, data)
                assert have == want, (seed, need, iterations, entry, data, have, want)


def test_subset_window_gives_up_past_its_caps() -> None:
    item = _random_item(random.Random(0))
    table, accepting, call_split, exit_split = item
    entries = [(q, i) for i in range(5) for q in (1, 2)]
    args = (table, accepting, 1, call_split, exit_split, 0, 5, entries, REACH)
    assert subset_window(*args, max_states=2) is None
    assert subset_window(*args, max_work=1) is None
