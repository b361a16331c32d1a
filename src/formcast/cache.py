"""The bounded caches of every layer: :class:`LruCache` and, for the per-token step memo,
:class:`StepMemo`.

:class:`LruCache` is the cache class (process-wide automaton and index caches, compiled
grammars, masks, loaded models): bounded in entries and in bytes, least recently used first.
:class:`StepMemo` is the one exception, a memo on the per-token path of ``advance`` where an
LRU refresh would cost more than the lookup: a plain ``dict`` emptied when full.

Lifetime: one per cache, for the process (or the compiled grammar that owns it).  ``get`` and
``put`` are O(1); ``put`` takes one lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LruCache", "StepMemo"]

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


class StepMemo(dict[K, V]):
    """A program's memo of token steps, ``(state, token id) -> next state``, of at most
    ``limit`` entries: emptied when full.  A hit is one plain ``dict`` lookup (the per-token
    path of ``advance``: cheaper than an LRU refresh); :meth:`remember` is O(1) amortized.
    Benign races: two threads may compute one step; both store the same value."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: K, value: V) -> None:
        if len(self) >= self.limit:
            self.clear()
        if self.limit:
            self[key] = value
