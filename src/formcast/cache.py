"""A bounded, thread-safe LRU map: the process-wide caches of the automaton and index layers.

Lifetime: one per cache, for the process.  ``get`` and ``put`` are O(1) under one lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LruCache"]

_MISSING = object()

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """Least-recently-used map with at most ``max_entries`` entries and, with ``weight``, at
    most ``max_weight`` total weight (oldest entries go first; a weight is usually the entry's
    bytes: see :class:`formcast.limits.CacheLimits`).  Counts ``hits`` and ``misses``.
    Mutation: ``get`` refreshes an entry, ``put`` inserts (an existing key keeps its value) and
    evicts; an entry heavier than ``max_weight`` on its own is not kept.  For values that grow
    after insertion (a compiled grammar's own caches), :meth:`reweigh` re-measures them.
    """

    def __init__(
        self,
        max_entries: int,
        *,
        max_weight: int | None = None,
        weight: Callable[[V], int] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[K, V] = OrderedDict()
        self._max_entries = max_entries
        self._max_weight = max_weight
        self._weight = weight
        self._total = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> tuple[bool, V | None]:
        """``(True, value)`` for a cached key (values may be None), else ``(False, None)``.

        Lock-free (the hot path of every mask lookup): a dict read and a recency refresh are
        each one atomic operation of the C ``OrderedDict``; a key evicted between them by
        another thread is still returned, and only ``put``/eviction take the lock."""
        items = self._items
        value = items.get(key, _MISSING)
        if value is _MISSING:
            self.misses += 1
            return False, None
        try:  # noqa: SIM105 (hot path: contextlib.suppress costs a context manager)
            items.move_to_end(key)
        except KeyError:  # evicted by another thread in between
            pass
        self.hits += 1
        return True, value  # type: ignore[return-value]

    def put(self, key: K, value: V) -> None:
        with self._lock:
            if key in self._items:
                return
            self._items[key] = value
            self._total += self._weight(value) if self._weight else 0
            self._evict()

    def reweigh(self) -> None:
        """Re-measure every entry (values whose weight changed since ``put``) and evict the
        oldest until the total fits again.  O(entries)."""
        if self._weight is None:
            return
        with self._lock:
            self._total = sum(self._weight(v) for v in self._items.values())
            self._evict()

    def _evict(self) -> None:
        while self._items and (
            len(self._items) > self._max_entries
            or (self._max_weight is not None and self._total > self._max_weight)
        ):
            _, old = self._items.popitem(last=False)
            self._total -= self._weight(old) if self._weight else 0

    @property
    def total_weight(self) -> int:
        """The weight (bytes) of the entries held, as measured when they were added."""
        return self._total

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._total = 0

    def __len__(self) -> int:
        return len(self._items)
