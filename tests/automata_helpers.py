"""Test helpers for the byte automata of :mod:`formcast.automata` (kept out of the package).

* :func:`dfa_fingerprint` - a SHA-256 of a :class:`~formcast.automata.dfa.ByteDFA`'s table,
  accepting flags and start state: equal for automata that are equal state for state (the
  minimal DFA is canonical, so two patterns of one language compile to one fingerprint).
"""

from __future__ import annotations

import hashlib

import numpy as np

from formcast.automata.dfa import ByteDFA

__all__ = ["dfa_fingerprint"]


def dfa_fingerprint(dfa: ByteDFA) -> str:
    """Hex SHA-256 of ``dfa``'s transition table, accepting flags and start state."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(dfa.table).tobytes())
    h.update(np.ascontiguousarray(dfa.accepting).tobytes())
    h.update(str(dfa.start).encode())
    return h.hexdigest()
