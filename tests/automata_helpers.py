"""Test helpers for the byte automata of :mod:`formcast.automata` (kept out of the package).

* :func:`dfa_fingerprint` - a SHA-256 of a :class:`~formcast.automata.dfa.ByteDFA`'s table,
  accepting flags and start state: equal for automata that are equal state for state (the
  minimal DFA is canonical, so two patterns of one language compile to one fingerprint).
* :func:`random_nfa` - an arbitrary NFA for the C kernels' differential tests.
* :class:`KernelWithout` - a native kernel with one function hidden, so the code under test
  takes that function's numpy fallback.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np

from formcast.automata.dfa import ByteDFA
from formcast.automata.nfa import NFA

__all__ = ["KernelWithout", "dfa_fingerprint", "random_nfa"]

#: byte values random NFAs draw their ranges from (class boundaries, ASCII, UTF-8 lead bytes)
NFA_BYTES = (0, 9, 10, 32, 34, 48, 57, 65, 97, 122, 127, 128, 191, 192, 255)


def dfa_fingerprint(dfa: ByteDFA) -> str:
    """Hex SHA-256 of ``dfa``'s transition table, accepting flags and start state."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(dfa.table).tobytes())
    h.update(np.ascontiguousarray(dfa.accepting).tobytes())
    h.update(str(dfa.start).encode())
    return h.hexdigest()


def random_nfa(
    rnd: random.Random,
    *,
    max_states: int = 24,
    byte_points: tuple[int, ...] = NFA_BYTES,
    min_edges: int = 0,
    single_bytes: float = 0.3,
    max_eps_per_state: int = 2,
    refs: float = 0.5,
    rule_ids: int = 39,
) -> NFA:
    """An arbitrary NFA of 2..``max_states`` states: byte ranges between ``byte_points``
    (overlapping; a fraction ``single_bytes`` of one byte), epsilon moves (cycles allowed),
    with probability ``refs`` rule references to ids 1..``rule_ids``, states that reach
    nothing and states nothing reaches; start and accept drawn at random."""
    n = rnd.randint(2, max_states)
    nfa = NFA()
    for _ in range(n):
        nfa.eps.append([])
        nfa.edges.append([])
        nfa.refs.append([])
    for _ in range(rnd.randint(min_edges, 3 * n)):
        a, b = sorted((rnd.choice(byte_points), rnd.choice(byte_points)))
        if rnd.random() < single_bytes:
            b = a
        nfa.edges[rnd.randrange(n)].append((a, b, rnd.randrange(n)))
    for _ in range(rnd.randint(0, max_eps_per_state * n)):
        nfa.eps[rnd.randrange(n)].append(rnd.randrange(n))
    if rnd.random() < refs:
        rules = rnd.sample(range(1, rule_ids + 1), rnd.randint(1, 4))
        for _ in range(rnd.randint(1, n)):
            nfa.refs[rnd.randrange(n)].append((rnd.choice(rules), rnd.randrange(n)))
    nfa.start = rnd.randrange(n)
    nfa.accept = rnd.randrange(n)
    return nfa


class KernelWithout:
    """``kernel`` with its function ``name`` hidden (``AttributeError``): code that looks the
    function up takes its numpy fallback.  Lifetime: a test's."""

    def __init__(self, kernel: Any, name: str) -> None:
        self._kernel, self._name = kernel, name

    def __getattr__(self, name: str) -> Any:
        if name == self._name:
            raise AttributeError(name)
        return getattr(self._kernel, name)
