"""Test-only views of the token index and its caches (kept out of ``src``).

* :func:`lru_values` - a snapshot of a :class:`~formcast.cache.LruCache`'s values, oldest
  first (what a test checks the weights of).
* :func:`regex_dfa` - the byte DFA of a compiled regular grammar.
"""

from __future__ import annotations

from typing import Any, TypeVar

from formcast.automata.dfa import ByteDFA
from formcast.cache import LruCache
from formcast.index.compiled import CompiledGrammar

V = TypeVar("V")


def lru_values(cache: LruCache[Any, V]) -> list[V]:
    """A snapshot of the values of ``cache``, oldest first."""
    with cache._lock:
        return list(cache._items.values())


def regex_dfa(compiled: CompiledGrammar) -> ByteDFA:
    """The byte DFA of a regular grammar (``AttributeError`` for context-free ones)."""
    dfa = getattr(compiled.program, "dfa", None)
    if dfa is None:
        raise AttributeError(f"a {compiled.kind} grammar has no single DFA")
    assert isinstance(dfa, ByteDFA)
    return dfa
