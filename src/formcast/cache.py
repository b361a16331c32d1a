"""The bounded caches of every layer: :class:`LruCache`, for the per-token step memo
:class:`StepMemo`, and on disk :class:`DiskCache`.

:class:`LruCache` is the cache class (process-wide automaton and index caches, compiled
grammars, masks, loaded models): bounded in entries and in bytes, least recently used first.
:class:`StepMemo` is the one exception, a memo on the per-token path of ``advance`` where an
LRU refresh would cost more than the lookup: a plain ``dict`` emptied when full.

Lifetime: one per cache, for the process (or the compiled grammar that owns it).  ``get`` and
``put`` are O(1); ``put`` takes one lock.

:class:`DiskCache` is a directory of immutable byte blobs (the compiler's persistent compiled
grammars) shared by any number of processes: a write goes to a temporary file renamed into
place, so a reader sees a whole file or none; the directory is bounded in bytes (oldest
modification time first, a read refreshes it).  Each ``get``/``put`` is one file operation;
``put`` also lists the directory to evict.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, Generic, TypeVar

__all__ = ["DiskCache", "LruCache", "StepMemo"]

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

    #: what a serialized grammar holds of it (formcast.index.persist)
    _persist_fields: ClassVar[tuple[str, ...]] = (
        "_items", "_lock", "_max_entries", "_max_weight", "_total", "_weight", "hits", "misses",
    )  # fmt: skip

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

    def items(self) -> list[tuple[K, V]]:
        """A snapshot of the entries, least recently used first (does not refresh them)."""
        with self._lock:
            return list(self._items.items())

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


_KEY = re.compile(r"[0-9a-f]{16,128}")
#: temporary files older than this are a crashed writer's: removed by the next eviction
_STALE_TMP_SECONDS = 3600.0


class DiskCache:
    """Immutable blobs in one directory, keyed by hex digests, shared by several processes.

    Args:
        directory: the cache directory (created, with its parents, on first write).
        max_bytes: at most this many bytes of entries are kept: after each write the entries
            with the oldest modification time go first (a read refreshes an entry's time, so
            this is least recently used across every process using the directory).  An entry
            larger than ``max_bytes`` on its own is not written.
        suffix: the file name extension of entries.

    Safety with several processes: a writer writes a temporary file in the same directory and
    renames it into place (``os.replace``, atomic on POSIX and Windows), so a reader sees a
    whole file or none, and two writers of one key leave one whole file.  A reader does not
    check contents: the caller validates what it reads (the compiled-grammar format has a
    checksum) and calls :meth:`discard` on a bad entry.  The directory is a trust boundary:
    whoever can write it decides what is read back (see docs/threat_model.md).

    Mutation: the files only.  Counts ``hits``, ``misses`` and ``writes`` of this instance.
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int, *, suffix: str = ".bin"):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
        self.directory = os.fspath(directory)
        self.max_bytes = max_bytes
        self.suffix = suffix
        self.hits = 0
        self.misses = 0
        self.writes = 0

    def path(self, key: str) -> str:
        """The file of ``key`` (a lower-case hex digest: nothing else reaches the file system)."""
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"a disk cache key is a lower-case hex digest, got {key!r}")
        return os.path.join(self.directory, key + self.suffix)

    def get(self, key: str, *, mapped: bool = False) -> bytes | mmap.mmap | None:
        """The bytes stored under ``key``, or None (missing or unreadable).

        ``mapped``: a file of at least :data:`MAP_MIN_BYTES` comes back (on POSIX) as a
        read-only memory map instead of a copy (``bytes`` below that): the pages a reader
        never touches (a compiled grammar's lazy sections) are never read, nothing is copied.  Safe
        with this class's writers, which never modify a file in place (a replaced or evicted
        file stays mapped, unchanged, while the map lives); a file truncated *in place* by
        something else while mapped would fault on access (see docs/threat_model.md: the
        directory is a trust boundary).  The map lives as long as anything refers to it.
        """
        path = self.path(key)
        try:
            fd = os.open(path, _READ_FLAGS)
        except OSError:
            self.misses += 1
            return None
        try:
            data = _map_or_read(fd) if mapped else _read_all(fd)
            # refresh its age (best effort: read-only directories), on the open file
            _touch(fd if os.utime in os.supports_fd else path)
        except OSError:
            self.misses += 1
            return None
        finally:
            os.close(fd)
        self.hits += 1
        return data

    def put(self, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` (replacing an entry), then evict to ``max_bytes``.
        Returns False when not written (too large, or the directory is not writable)."""
        path = self.path(key)
        if len(data) > self.max_bytes:
            return False
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=self.suffix, dir=self.directory)
        except OSError:
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            _touch(path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return False
        self.writes += 1
        self.evict(keep=path)
        return True

    def discard(self, key: str) -> None:
        """Remove the entry of ``key`` (a corrupt or stale one); missing is fine."""
        with contextlib.suppress(OSError):
            os.unlink(self.path(key))

    def entries(self) -> list[tuple[str, int, int]]:
        """``(path, bytes, modification time in ns)`` of every entry, oldest first."""
        out: list[tuple[str, int, int]] = []
        try:
            scan = list(os.scandir(self.directory))
        except OSError:
            return out
        now = time.time()
        for e in scan:
            try:
                st = e.stat()
            except OSError:  # removed by another process meanwhile
                continue
            if e.name.startswith(".tmp-"):
                if now - st.st_mtime > _STALE_TMP_SECONDS:
                    with contextlib.suppress(OSError):
                        os.unlink(e.path)
                continue
            if e.name.endswith(self.suffix) and e.is_file():
                out.append((e.path, st.st_size, st.st_mtime_ns))
        out.sort(key=lambda t: t[2])
        return out

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def evict(self, keep: str | None = None) -> int:
        """Remove the oldest entries until at most ``max_bytes`` remain (never ``keep``);
        returns how many were removed.  Races with other processes are harmless: an entry
        removed twice is skipped, an open file stays readable by whoever opened it."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = 0
        for path, size, _ in entries:
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
            total -= size
        return removed


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0)


#: files at least this large are memory-mapped by ``DiskCache.get(mapped=True)`` (a map costs
#: a few system calls; a small file is cheaper to copy)
MAP_MIN_BYTES = 64 * 1024
#: before Python 3.13 a memory map holds a duplicate of its file's descriptor while it lives
#: (a loaded grammar lives as long as its arrays): at most this many such maps live at once,
#: files are copied beyond (a process's descriptors are a bounded resource, often 1,024)
MAX_LIVE_MAPS = 256
_NO_FD: dict[str, Any] = {"trackfd": False} if sys.version_info >= (3, 13) else {}
_HOLDS_FD = not _NO_FD
#: the live maps that hold a descriptor (weak references, removed as each map is freed)
_LIVE_MAPS: set[weakref.ref[mmap.mmap]] = set()


def _map_or_read(fd: int) -> bytes | mmap.mmap:
    """File ``fd`` as a read-only memory map (at least :data:`MAP_MIN_BYTES`, POSIX, and
    fewer than :data:`MAX_LIVE_MAPS` live maps holding a descriptor), else its bytes."""
    size = os.fstat(fd).st_size
    # (POSIX only: on Windows a mapped file cannot be replaced or removed by the writers)
    if (
        size < MAP_MIN_BYTES
        or os.name != "posix"
        or (_HOLDS_FD and len(_LIVE_MAPS) >= MAX_LIVE_MAPS)
    ):
        return _read_all(fd)
    try:
        got = mmap.mmap(fd, size, access=mmap.ACCESS_READ, **_NO_FD)
    except (OSError, ValueError):  # a file system that cannot map it, or it shrank
        return _read_all(fd)
    if _HOLDS_FD:
        _LIVE_MAPS.add(weakref.ref(got, _LIVE_MAPS.discard))
    return got


def _read_all(fd: int) -> bytes:
    """The whole of file ``fd``: one read of its size (no copy), then reads to the end."""
    first = os.read(fd, os.fstat(fd).st_size + 1)
    chunks = [first]
    while chunks[-1]:
        chunks.append(os.read(fd, 1 << 20))
    return first if len(chunks) == 2 else b"".join(chunks)


def _touch(path: str | int) -> None:
    """Set ``path``'s times to now, in nanoseconds (the file system's own clock is often
    coarser than the gap between two writes: the eviction order needs the exact order)."""
    now = time.time_ns()
    with contextlib.suppress(OSError):
        os.utime(path, ns=(now, now))
