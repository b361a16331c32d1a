"""The cache tiers of a :class:`~formcast.index.compiler.GrammarCompiler`: memory, then disk.

* **Memory**: an LRU of compiled grammars keyed by
  :func:`~formcast.index.compiled.grammar_key` (the constraint *and* the vocabulary
  fingerprint), bounded by count and by bytes (each grammar weighed with its caches,
  re-measured at every insertion since masks fill them).
* **Disk** (optional): a :class:`~formcast.cache.DiskCache` of serialized grammars shared by
  every process using the directory, keyed also by the format version, the code layout and
  the compiler's limits (a grammar compiled under other limits is another file).  A corrupt or
  stale file is a miss and is replaced.  The directory is a trust boundary (see
  docs/threat_model.md).

Lifetime: one per compiler.  Thread-safe (the LRU and the disk cache lock themselves; the
counters under ``lock``).  Costs: a memory hit is a dict look-up; a disk hit reads and checks a
file (milliseconds); a write serializes the grammar with its caches.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import warnings
import weakref
from typing import Literal

from ..cache import DiskCache, LruCache
from ..errors import SerializationError
from ..limits import CacheLimits, CompileLimits, ParserLimits, cache_dir_from_env
from ..vocab.vocabulary import Vocabulary
from .compiled import CompiledGrammar, serialization_layout
from .persist import FORMAT_VERSION

__all__ = ["CompileCache", "resolve_cache_dir"]

#: the part of a disk-cache file key after the grammar key, by layout digest and limits: the
#: first 32 hex digits of the SHA-256 of the format version, the layout digest and the limits'
#: reprs (each followed by a NUL byte), and those bytes (for keys that are not a digest)
_KEY_TAILS: dict[tuple[str, CompileLimits, ParserLimits, CacheLimits], tuple[str, bytes]] = {}
#: the same by the limits' ids (each entry holds its limits, so their ids are not reused)
_TAILS_BY_ID: dict[
    tuple[str, int, int, int],
    tuple[tuple[CompileLimits, ParserLimits, CacheLimits], tuple[str, bytes]],
] = {}
_DIGEST = re.compile(r"[0-9a-f]{64}")


class CompileCache:
    """The memory and disk tiers of one compiler (see the module docstring).

    Counters (read by the compiler's properties): ``hits`` (found in memory), ``misses``
    (compiled, here or in a worker), ``disk_hits`` (loaded from disk), ``disk_writes``.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        limits: tuple[CompileLimits, ParserLimits, CacheLimits],
        cache_size: int,
        cache_dir: str | None,
    ) -> None:
        self.vocab = vocab
        self.limits = limits
        self.cache_size = cache_size
        self._memory: LruCache[str, CompiledGrammar] | None = None  # (made on first use)
        self.lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.disk_hits = 0
        self.disk_writes = 0
        self.cache_dir = cache_dir
        self.disk = (
            None
            if cache_dir is None
            else DiskCache(cache_dir, limits[2].disk_cache_bytes, suffix=".fcg")
        )
        #: the disk key of each grammar this cache compiled or loaded (for ``save``)
        self.disk_keys: weakref.WeakKeyDictionary[CompiledGrammar, str] = (
            weakref.WeakKeyDictionary()
        )

    # -- memory ---------------------------------------------------------------------------------
    @property
    def memory(self) -> LruCache[str, CompiledGrammar]:
        """The LRU of grammars, made on first use (a compiler without a memory cache, e.g. one
        per request on a disk-cache load path, never makes it)."""
        got = self._memory
        if got is None:
            with self.lock:
                got = self._memory
                if got is None:
                    got = self._memory = LruCache(
                        self.cache_size,
                        max_weight=self.limits[2].grammar_cache_bytes,
                        weight=lambda g: g.nbytes(),
                    )
        return got

    def get(self, key: str) -> CompiledGrammar | None:
        """The grammar kept under ``key`` (counts a hit), else None."""
        if not self.cache_size:
            return None
        _, hit = self.memory.get(key)
        if hit is not None:
            with self.lock:
                self.hits += 1
        return hit

    def put(self, key: str | None, compiled: CompiledGrammar, disk_key: str | None) -> None:
        """Keep ``compiled`` under ``key`` (None: not kept) and remember its disk key."""
        if disk_key is not None:
            self.disk_keys[compiled] = disk_key
        if self.cache_size and key is not None:
            # grammars' caches grew since they were added: re-measure, then evict to fit
            self.memory.put(key, compiled)
            self.memory.reweigh()

    def count_miss(self) -> None:
        with self.lock:
            self.misses += 1

    def clear(self) -> None:
        """Forget the grammars kept in memory (the disk cache is left alone)."""
        memory = self._memory
        if memory is not None:
            memory.clear()

    # -- disk -----------------------------------------------------------------------------------
    def disk_key(self, key: str) -> str | None:
        """The file key of grammar ``key`` (None without a disk cache): also the format
        version, the code layout and the compiler's limits.  O(1) for a digest ``key`` (one
        dict look-up and a regex match)."""
        if self.disk is None:
            return None
        # by the limits objects' identity first (the entry holds them: their ids stay
        # theirs), which spares hashing three dataclasses per load; else by value
        layout = serialization_layout()
        ids = (layout, id(self.limits[0]), id(self.limits[1]), id(self.limits[2]))
        got = _TAILS_BY_ID.get(ids)
        if got is not None:
            tail = got[1]
        else:
            ident = (layout, *self.limits)
            tail = _KEY_TAILS.get(ident)  # type: ignore[assignment]
            if tail is None:
                parts = (str(FORMAT_VERSION), layout, *map(repr, self.limits))
                raw = b"".join(part.encode() + b"\0" for part in parts)
                tail = (hashlib.sha256(raw).hexdigest()[:32], raw)
                if len(_KEY_TAILS) >= 64:
                    _KEY_TAILS.clear()
                _KEY_TAILS[ident] = tail
            if len(_TAILS_BY_ID) >= 64:
                _TAILS_BY_ID.clear()
            _TAILS_BY_ID[ids] = (self.limits, tail)
        # a grammar key is a SHA-256 digest already: the file key is it and the tail's digest
        # (no second hash on the load path); anything else is hashed with the tail
        if len(key) == 64 and _DIGEST.fullmatch(key):
            return key + tail[0]
        return hashlib.sha256(key.encode() + b"\0" + tail[1]).hexdigest()

    def load(self, disk_key: str) -> CompiledGrammar | None:
        """The grammar of the file ``disk_key`` (counts a disk hit); None when absent,
        corrupt, truncated or stale (the file is then removed)."""
        disk = self.disk
        assert disk is not None
        # memory-mapped: nothing copied, and the lazy sections' pages never read unless used
        data = disk.get(disk_key, mapped=True)
        if data is None:
            return None
        try:
            # a section found corrupt on first use removes the file too (the next load misses)
            compiled = CompiledGrammar.deserialize(
                data, self.vocab, on_corrupt=lambda _: disk.discard(disk_key)
            )
        except SerializationError:  # corrupt, truncated or stale: a miss, replaced later
            disk.discard(disk_key)
            return None
        with self.lock:
            self.disk_hits += 1
        return compiled

    def store(self, disk_key: str, compiled: CompiledGrammar, *, first_mask: bool) -> bool:
        """Write ``compiled`` (with its first mask when ``first_mask``: what a loading process
        needs at once); False when it cannot be serialized (a RuntimeWarning says why) or the
        write failed."""
        assert self.disk is not None
        try:
            if first_mask:
                program = compiled.program
                program.token_mask(program.initial_state())
            data = compiled.serialize()
        except SerializationError as e:
            warnings.warn(
                f"formcast: the compiled grammar was not written to the disk cache: {e}",
                RuntimeWarning,
                stacklevel=4,
            )
            return False
        written = self.disk.put(disk_key, data)
        if written:
            with self.lock:
                self.disk_writes += 1
        return written

    def save(self, compiled: CompiledGrammar) -> bool:
        """Rewrite ``compiled`` with every mask computed so far (see
        ``GrammarCompiler.save``)."""
        disk_key = self.disk_keys.get(compiled)
        if self.disk is None or disk_key is None:
            return False
        return self.store(disk_key, compiled, first_mask=False)

    def path(self, compiled: CompiledGrammar) -> str | None:
        """The file of ``compiled`` (see ``GrammarCompiler.cache_path``)."""
        disk_key = self.disk_keys.get(compiled)
        return None if self.disk is None or disk_key is None else self.disk.path(disk_key)


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | Literal[False] | None) -> str | None:
    """The directory of a compiler's ``cache_dir=`` argument: None reads
    ``$FORMCAST_CACHE_DIR`` (unset: no disk cache); False disables the disk cache."""
    if cache_dir is None:
        cache_dir = cache_dir_from_env() or False
    return os.fspath(cache_dir) if cache_dir is not False else None
