"""One per-vocabulary context of the token index's shared tables (issue #31 item 3).

What every grammar compiled for one vocabulary may share -- lexical tables of the tokens, the
run-time programs' brace and number tables, reasoning markers' candidate tokens, the pushdown
programs' shared walks and counted windows, subsets and classifications
(:mod:`formcast.index.cfg_program`'s ``SHARED_WALKS``, ``COUNTED_*``) -- used to live in
module-level caches, one per kind, each keyed by the vocabulary's fingerprint and bounded on
its own.  :class:`TokenIndexContext` holds them in one place, per vocabulary:

* **Kinds.**  A :class:`ContextSlot` names one kind of entry, typed by its key and value, with
  how an entry is built from ``(vocabulary, key)`` (or None: entries put by their user), its
  entry count and its weight (bytes; :func:`approx_nbytes` by default).  Slots are declared at
  module level by the module that uses them (``LEXICAL_TABLES`` in
  :mod:`formcast.index.programs.unique.lexer`...); this module imports none of them.
* **Bounds.**  Each slot of a context is an :class:`~formcast.cache.LruCache` of at most its
  slot's entries and :attr:`~formcast.limits.CacheLimits.shared_cache_bytes` bytes (the budget
  of each shared cache of token classifications).  The registry (:func:`context_for`) keeps the
  :data:`KEPT_CONTEXTS` most recently used contexts, and any other while someone holds it.
* **Lifetime.**  A context lives while an owner holds it or it is among the registry's most
  recent ones.  A ``GrammarCompiler`` creates its context (bounded by its ``cache_limits``)
  through :func:`context_for`, holds it (``compiler.context``) and hands it to the pushdown
  programs it builds (``CfgProgram(context=...)``, which passes it to its counted
  classifier).  Everything else finds it through the registry, by fingerprint: it returns the
  context an owner holds, so all of them see the compiler's -- the run-time programs' slots
  (``SLOT.of(vocab, key)``), the exit-split classifiers' shared walks, and grammars loaded from
  disk (a program's context is not written: a loaded ``CfgProgram`` asks the registry on first
  use; the counted classifications written with it go back into it).  Two compilers of one
  vocabulary share one context, bounded by the first one's limits (:func:`context_for`
  ignores the limits of a context that exists).  Two vocabularies with the same fingerprint
  (same tokens, same ids) share one context; two others never share an entry.
* **Serializable.**  Every entry a slot builds is a pure function of the vocabulary and its key
  (read-only once built), so a grammar need not carry the tables: :meth:`~TokenIndexContext.
  manifest` lists the ``(slot, key)`` pairs filled, and :meth:`~TokenIndexContext.warm`
  rebuilds them for a loaded grammar's vocabulary.
* **Threads.**  Reads are lock-free (``LruCache.get``); a missing entry is built once, under
  its slot's lock (a build may read other slots: one lock per slot, re-entrant).
* **What stays out.**  ``formcast.columns._WEIGHTS`` (seeded hash weights, the same for
  every vocabulary; ``columns`` is a shared module that imports no layer), the tables of
  layers below ``index`` (``vocab.trie``'s column classes, ``_TABLE_CLASSES``: ``vocab`` may
  not import ``index``; they belong to the vocabulary's trie itself), the compile-time
  automaton caches (``RULE_DFA_CACHE``, ``SUB_DFA_CACHE``: of grammars, not vocabularies) and
  ``cfg_program._ROW_POOL`` (a free list of memory maps, not tables: any vocabulary's walk
  tables reuse them).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar, cast

import numpy as np

from ..cache import LruCache
from ..limits import CacheLimits
from ..vocab.vocabulary import Vocabulary

__all__ = [
    "KEPT_CONTEXTS",
    "ContextSlot",
    "TokenIndexContext",
    "approx_nbytes",
    "context_for",
    "live_contexts",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: contexts the registry keeps without an owner (the most recently used vocabularies)
KEPT_CONTEXTS = 4

#: every slot by name (what a manifest names), filled as slots are declared
_SLOTS: dict[str, ContextSlot[Any, Any]] = {}


class ContextSlot(Generic[K, V]):
    """One kind of per-vocabulary entry: ``name`` (unique in the process), ``build(vocab,
    key)`` (None: entries are put by their user, through :meth:`TokenIndexContext.cache`), at
    most ``max_entries`` entries per vocabulary, weighed by ``weight`` (bytes; default
    :func:`approx_nbytes`).  Declared once, at module level; immutable."""

    __slots__ = ("build", "max_entries", "name", "weight")

    def __init__(
        self,
        name: str,
        build: Callable[[Vocabulary, K], V] | None = None,
        *,
        max_entries: int = 1,
        weight: Callable[[V], int] | None = None,
    ) -> None:
        if name in _SLOTS:
            raise ValueError(f"a context slot named {name!r} exists already")
        self.name = name
        self.build = build
        self.max_entries = max_entries
        self.weight: Callable[[V], int] = weight if weight is not None else approx_nbytes
        _SLOTS[name] = self

    def of(self, vocab: Vocabulary, key: K) -> V:
        """The entry of ``key`` in ``vocab``'s context (:func:`context_for`), built when
        missing."""
        return context_for(vocab).get(self, vocab, key)

    def __repr__(self) -> str:
        return f"ContextSlot({self.name!r})"


class TokenIndexContext:
    """The shared tables of one vocabulary (see the module docstring): one bounded
    :class:`~formcast.cache.LruCache` per :class:`ContextSlot`, made on first use.  Holds no
    reference to the vocabulary, only its ``fingerprint``; ``limits`` bounds each slot."""

    def __init__(self, fingerprint: str, limits: CacheLimits | None = None) -> None:
        self.fingerprint = fingerprint
        self.limits = limits if limits is not None else CacheLimits()
        self._caches: dict[str, LruCache[Any, Any]] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._lock = threading.Lock()

    def cache(self, slot: ContextSlot[K, V]) -> LruCache[K, V]:
        """The bounded cache of ``slot`` in this context (for entries put by their user)."""
        got = self._caches.get(slot.name)
        if got is None:
            with self._lock:
                got = self._caches.get(slot.name)
                if got is None:
                    got = LruCache(
                        slot.max_entries,
                        max_weight=self.limits.shared_cache_bytes,
                        weight=slot.weight,
                    )
                    self._locks[slot.name] = threading.RLock()
                    self._caches[slot.name] = got
        return cast("LruCache[K, V]", got)

    def get(self, slot: ContextSlot[K, V], vocab: Vocabulary, key: K) -> V:
        """The entry of ``key``, built by ``slot.build(vocab, key)`` once when missing (under
        the slot's lock).  ``vocab`` must be this context's vocabulary."""
        if vocab.fingerprint != self.fingerprint:
            raise ValueError("the vocabulary is not this context's (another fingerprint)")
        cache = self.cache(slot)
        found, got = cache.get(key)
        if found:
            return cast("V", got)
        if slot.build is None:
            raise KeyError(f"{slot.name}: no entry for {key!r} and nothing builds one")
        with self._locks[slot.name]:
            found, got = cache.get(key)
            if found:
                return cast("V", got)
            built = slot.build(vocab, key)
            cache.put(key, built)
            return built

    def manifest(self) -> list[tuple[str, Any]]:
        """The ``(slot name, key)`` of every entry held that its slot can rebuild (what a
        serialized grammar needs to warm this context again: :meth:`warm`)."""
        out: list[tuple[str, Any]] = []
        for name, cache in sorted(self._caches.items()):
            if _SLOTS[name].build is not None:
                out.extend((name, key) for key, _ in cache.items())
        return out

    def warm(self, vocab: Vocabulary, manifest: Iterable[tuple[str, Any]]) -> int:
        """Build the entries a :meth:`manifest` names (slots this process does not know, or
        that do not build, are skipped).  Returns how many it named that are now held."""
        n = 0
        for name, key in manifest:
            slot = _SLOTS.get(name)
            if slot is not None and slot.build is not None:
                self.get(slot, vocab, key)
                n += 1
        return n

    def nbytes(self) -> int:
        """The weight of the entries held (bytes, as measured when they were added)."""
        return sum(c.total_weight for c in list(self._caches.values()))

    def clear(self) -> None:
        """Drop every entry (they are rebuilt on demand)."""
        for c in list(self._caches.values()):
            c.clear()


_CONTEXTS: OrderedDict[str, TokenIndexContext] = OrderedDict()
_LIVE: weakref.WeakValueDictionary[str, TokenIndexContext] = weakref.WeakValueDictionary()
_CONTEXTS_LOCK = threading.Lock()


def context_for(vocab: Vocabulary, limits: CacheLimits | None = None) -> TokenIndexContext:
    """``vocab``'s context (by fingerprint): the one held by the registry or by an owner, else
    a new one bounded by ``limits`` (default :class:`CacheLimits`; ignored when the context
    exists).  The registry keeps the :data:`KEPT_CONTEXTS` most recently used.  Thread-safe."""
    fp = vocab.fingerprint
    with _CONTEXTS_LOCK:
        got = _CONTEXTS.get(fp)
        if got is None:
            got = _LIVE.get(fp)
            if got is None:
                got = TokenIndexContext(fp, limits)
                _LIVE[fp] = got
            _CONTEXTS[fp] = got
        _CONTEXTS.move_to_end(fp)
        while len(_CONTEXTS) > KEPT_CONTEXTS:
            _CONTEXTS.popitem(last=False)
        return got


def live_contexts() -> list[TokenIndexContext]:
    """Every context alive: the registry's and those their owners hold (a test's fresh start:
    clear a slot in each)."""
    with _CONTEXTS_LOCK:
        return list({id(c): c for c in [*_CONTEXTS.values(), *_LIVE.values()]}.values())


def approx_nbytes(value: object, depth: int = 4) -> int:
    """About how many bytes ``value`` holds: arrays' buffers, strings, and containers' slots
    and items (objects by their attributes), ``depth`` levels down.  O(items)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes) + 112
    if isinstance(value, (bytes, bytearray, str)):
        return len(value) + 49
    if value is None or isinstance(value, (bool, int, float)):
        return 0  # (counted as a container's slot)
    if depth <= 0:
        return 64
    if isinstance(value, dict):
        inner = sum(
            approx_nbytes(k, depth - 1) + approx_nbytes(v, depth - 1) for k, v in value.items()
        )
        return 64 + 48 * len(value) + inner
    if isinstance(value, (list, tuple, set, frozenset)):
        return 56 + 8 * len(value) + sum(approx_nbytes(x, depth - 1) for x in value)
    fields: dict[str, Any] = dict(getattr(value, "__dict__", {}))
    for name in getattr(type(value), "__slots__", ()):
        if hasattr(value, name):
            fields[name] = getattr(value, name)
    return 64 + sum(approx_nbytes(v, depth - 1) for v in fields.values())
