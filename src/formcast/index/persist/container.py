"""The container of a serialized grammar: header, metadata, and the blob of numpy arrays.

Format (little-endian)::

    header  8s magic b"FCGRAMMR" | u32 format version | u32 flags (0) | u64 meta length
            | u64 blob length | u64 main region length | u32 CRC-32 of meta + main region
            | u32 reserved (0)
    meta    UTF-8 JSON written by :mod:`.codec` (the object tree), plus what this module adds:
            ``arrays`` (the array directory: ``[dtype, shape, offset, writeable, packing,
            region, k?]`` per array stored) and ``sections`` (per lazy section ``[start, length,
            CRC-32, tree, facts]``, the tree as a JSON *string*: a load scans it as one string
            and parses it when the section is first used)
    blob    every numpy array's bytes, each at a 64-byte aligned offset in its region: the
            main region (checked at load), then one region per lazy section (checked when
            the section is first used).  Arrays are read-only views into the data (copies
            where writable); large boolean arrays are stored as bits, large tables of small
            non-negative ints as uint8 / uint16, and a section's 2-D tables as their
            distinct columns and a column map, restored on load.  The other arrays of a
            region that share a dtype, a row shape (``shape[1:]``), writability and packing
            are *pooled*: stored as one array of their rows, each read back as a slice (a
            view) of it (the tree's ``["av", pool, first row, end row]``, and ``["tav", pool,
            first row, rows of each...]`` for a tuple of consecutive ones): a load builds (and
            widens, and copies when writable) one array per pool instead of one per array,
            and the directory lists the pools, not their members.

:data:`FORMAT_VERSION` is bumped whenever this layout or the codec's encoding changes; a file
of another version is refused by :func:`read_header` (``reason="version"``) before anything
else is read, never misread.

Lifetime: stateless functions; an :class:`ArrayReader` lives as long as the grammar it loads
(its arrays are views into the file's bytes, or into its read-only memory map when the disk
cache mapped it).  Cost: O(bytes) to write; a load checks one
CRC over the metadata and the main region, and builds each array (a view, or a widening copy
for packed ones) on first request.
"""

from __future__ import annotations

import json
import mmap
import struct
import zlib
from typing import Any

import numpy as np

from ...errors import SerializationError

__all__ = [
    "ALIGN",
    "DTYPES",
    "FORMAT_VERSION",
    "HEAD",
    "MAGIC",
    "ArrayReader",
    "open_container",
    "read_header",
    "write_container",
]

#: Bumped whenever the encoding itself changes (the layout digest covers changes of classes).
#: 4: objects carry only the fields their class declares (``_persist_fields``, else its
#: dataclass fields / ``__slots__``); a file with another field is refused.
#: 5: arrays of a region with one dtype, row shape, writability and packing are stored as one
#: pool, each ``["av", pool, first row, end row]`` in the tree, read back as a slice of it.
FORMAT_VERSION = 5

MAGIC = b"FCGRAMMR"
HEAD = struct.Struct("<8sIIQQQII")
ALIGN = 64
#: the numpy dtype characters an array (or scalar) in a file may have: numbers only
DTYPES = frozenset("?bBhHiIlLqQefd")
_DTYPE_OF: dict[str, np.dtype[Any]] = {}  # dtype strings already checked
_U1, _U2 = np.dtype("u1"), np.dtype("<u2")
_NARROW: dict[str, np.dtype[Any]] = {"u1": _U1, "u2": _U2}
#: arrays at least this large are stored narrower when they can be (see :func:`_pack`)
_PACK_MIN = 4096


def _narrow(c: np.ndarray) -> str:
    """The packing :func:`_pack` gives ``c`` when it does not store it by columns: ``"bits"``,
    ``"u1"``, ``"u2"`` or ``""``.  O(c.size) (its min and max)."""
    if c.size < _PACK_MIN:
        return ""
    if c.dtype == np.bool_:
        return "bits"
    if c.dtype.kind in "iu" and c.dtype.itemsize > 1 and int(c.min()) >= 0:
        top = int(c.max())
        if top < 256:
            return "u1"
        if top < 65536 and c.dtype.itemsize > 2:
            return "u2"
    return ""


def _pool_key(c: np.ndarray, writeable: bool) -> tuple[Any, ...] | None:
    """The pool an array of a region joins (:func:`write_container`): arrays of one dtype,
    row shape, writability and packing (none, ``"u1"`` or ``"u2"``) are stored as one array
    (their rows concatenated), each read back as a slice of it; None for arrays stored
    alone (0-d, bit- or column-packed)."""
    if c.ndim == 0:
        return None
    packing = _narrow(c)
    if packing == "bits":
        return None
    return (c.dtype.str, c.shape[1:], writeable, packing)


def _pack(c: np.ndarray, by_columns: bool) -> tuple[np.ndarray, str, int]:
    """``(stored, packing, k)``: ``c`` as stored.  A large 2-D table of integers or booleans
    with few distinct columns (an automaton's byte classes) as those ``k`` columns and the
    column map (``"c"``; ``"c2"``: the columns as ``uint16``): ``uint8[cols]`` map, padding
    to 8 bytes, ``[rows, k]`` columns; else large boolean arrays as bits (``"bits"``), large
    tables of integers that fit as ``uint16`` (``"u2"``: automaton tables, whose states
    number < 65,536; ``"u1"``: < 256); else ``c`` itself (``""``).  Shrinks what a load
    reads and checks.  Columns only when ``by_columns`` (the lazy sections: expanding them,
    5x the cost of widening, is paid when a section is first used, the smaller read at
    every load)."""
    if c.size < _PACK_MIN:
        return c, "", 0
    small = c.dtype.kind in "iu" and int(c.min()) >= 0 and int(c.max()) < 65536
    if (
        by_columns
        and c.ndim == 2
        and c.shape[0]
        and 64 <= c.shape[1] <= 256
        and c.dtype.kind in "iub"
    ):
        found = _distinct_columns(c, c.shape[1] // 4)
        if found is not None:
            reps, inverse = found
            wide = small and c.dtype.itemsize > 2
            columns = np.ascontiguousarray(c[:, reps].astype("<u2") if wide else c[:, reps])
            head = np.zeros(c.shape[1] + (-c.shape[1] % 8), dtype=np.uint8)
            head[: c.shape[1]] = inverse
            stored = np.concatenate([head, columns.reshape(-1).view(np.uint8)])
            return stored, "c2" if wide else "c", len(reps)
    if c.dtype == np.bool_:
        return np.packbits(c.reshape(-1)), "bits", 0
    if small and c.dtype.itemsize > 1 and int(c.max()) < 256:
        return c.astype(np.uint8), "u1", 0
    if small and c.dtype.itemsize > 2:
        return c.astype("<u2"), "u2", 0
    return c, "", 0


def _distinct_columns(c: np.ndarray, limit: int) -> tuple[list[int], np.ndarray] | None:
    """``(reps, inverse)``: the first column of each distinct column of ``c`` in order, and
    each column's index among them; None when there are more than ``limit`` distinct.
    O(c.size) (one transposed copy, a dict of column bytes)."""
    t = np.ascontiguousarray(c.T)
    seen: dict[bytes, int] = {}
    reps: list[int] = []
    inverse = np.empty(c.shape[1], dtype=np.uint8)
    for j in range(c.shape[1]):
        i = seen.setdefault(t[j].tobytes(), len(seen))
        if i == len(reps):
            if i >= limit:
                return None
            reps.append(j)
        inverse[j] = i
    return reps, inverse


def write_container(
    meta: dict[str, Any],
    arrays: list[np.ndarray],
    bounds: list[int],
    sections: list[list[Any]],
    nodes: list[list[list[Any]]],
    tuples: list[list[Any]],
) -> bytes:
    """The file of ``meta`` (the codec's JSON tree; this adds ``arrays`` and ``sections``),
    ``arrays`` (region ``r`` holds ``arrays[bounds[r-1]:bounds[r]]``, region 0 from 0: the
    main region, then one per lazy section) and ``sections`` (per lazy section ``[tree,
    facts]``, the tree written as a JSON string).  ``nodes[i]``: the tree's ``["a", i]``
    nodes of array ``i``, rewritten here to where it is stored: ``["a", d]`` (entry ``d``
    of the directory) or ``["av", d, first, end]`` (rows of pool ``d``); ``tuples``: the
    tree's tuples of arrays (``["t", ["a", i], ...]``), each rewritten ``["tav", d, first,
    rows...]`` when its arrays are consecutive rows of one pool.  ``meta`` and the trees are
    updated in place."""
    directory: list[list[Any]] = []
    chunks: list[bytes | memoryview] = []
    starts: list[int] = []  # of the regions in the blob: main, then sections (contiguous)
    offset = 0

    def put(c: np.ndarray, region: int, writeable: bool, how: str | None) -> int:
        """Write ``c`` at the next aligned offset of the region, stored narrower as
        :func:`_pack` says (``how`` None; by columns in a lazy section) or as ``how`` says
        (a pool: its members' packing); its directory entry's index."""
        nonlocal offset
        pad = -(offset - starts[region]) % ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        entry: list[Any] = [c.dtype.str, list(c.shape), offset - starts[region], writeable]
        # stored narrower (the reader restores ``entry[0]``)
        if how is None:
            c, packing, k = _pack(c, region > 0)
        else:
            c, packing, k = (c.astype(_NARROW[how]) if how else c), how, 0
        entry += [packing, region, *([k] if k else [])]
        chunks.append(c.reshape(-1).view(np.uint8).data if c.size else b"")
        offset += c.nbytes
        directory.append(entry)
        return len(directory) - 1

    for region in range(len(bounds)):
        pad = -offset % ALIGN
        if pad:  # the previous region's padding: covered by its checksum
            chunks.append(b"\0" * pad)
            offset += pad
        starts.append(offset)
        pools: dict[tuple[Any, ...], list[tuple[int, np.ndarray]]] = {}
        for i in range(bounds[region - 1] if region else 0, bounds[region]):
            a = arrays[i]
            c = np.ascontiguousarray(a)
            writeable = bool(a.flags.writeable)
            key = _pool_key(c, writeable)
            if key is not None and region > 0 and _pack(c, True)[1] in ("c", "c2"):
                key = None  # a section's table stored by its distinct columns
            if key is None:
                d = put(c, region, writeable, None)
                for node in nodes[i]:
                    node[1] = d
            else:
                pools.setdefault(key, []).append((i, c))
        for (_, _, writeable, packing), members in pools.items():
            if len(members) == 1:  # alone: as any other array
                i, c = members[0]
                d = put(c, region, writeable, packing)
                for node in nodes[i]:
                    node[1] = d
                continue
            # one array of their rows; each member's nodes ``["av", pool, first row, end]``
            d = put(np.concatenate([c for _, c in members]), region, writeable, packing)
            rows = 0
            for i, c in members:
                for node in nodes[i]:
                    node[:] = ["av", d, rows, rows + c.shape[0]]
                rows += c.shape[0]
    for node in tuples:
        _join_rows(node)
    regions = [(lo, hi - lo) for lo, hi in zip(starts, [*starts[1:], offset])]
    meta["arrays"] = directory
    blob = b"".join(chunks)
    view = memoryview(blob)
    meta["sections"] = [
        [start, length, zlib.crc32(view[start : start + length]), _compact(tree), facts]
        for (start, length), (tree, facts) in zip(regions[1:], sections)
    ]
    meta_bytes = _compact(meta).encode("ascii")
    main = regions[0][1]
    crc = zlib.crc32(view[:main], zlib.crc32(meta_bytes))
    head = HEAD.pack(MAGIC, FORMAT_VERSION, 0, len(meta_bytes), len(blob), main, crc, 0)
    return b"".join((head, meta_bytes, blob))


def _join_rows(node: list[Any]) -> None:
    """Rewrite in place a tuple node whose items are consecutive rows of one pool (``["t",
    ["av", p, a, b], ["av", p, b, c], ...]``: a rule automaton's per-rule vectors) as
    ``["tav", p, a, b - a, c - b, ...]``: one JSON list of small ints instead of a list and
    two ints per item.  Other nodes are left as they are."""
    if len(node) < 3 or node[0] != "t" or type(node[1]) is not list or node[1][:1] != ["av"]:
        return
    pool, end = node[1][1], node[1][2]
    sizes: list[int] = []
    for item in node[1:]:
        if type(item) is not list or len(item) != 4 or item[:3] != ["av", pool, end]:
            return
        sizes.append(item[3] - end)
        end = item[3]
    node[:] = ["tav", pool, node[1][2], *sizes]


def _compact(tree: Any) -> str:
    return json.dumps(tree, separators=(",", ":"), ensure_ascii=True)


def read_header(data: bytes | bytearray | memoryview | mmap.mmap) -> tuple[int, int, int, int, int]:
    """``(format version, meta length, blob length, main region length, crc)``;
    SerializationError when ``data`` is not a compiled grammar of this
    :data:`FORMAT_VERSION` or is truncated."""
    if len(data) < HEAD.size:
        raise SerializationError(
            f"truncated compiled grammar: {len(data)} bytes, the header alone is {HEAD.size}",
            reason="truncated",
        )
    magic, version, _flags, meta_len, blob_len, main_len, crc, _ = HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise SerializationError(
            "not a serialized formcast compiled grammar (bad magic bytes)", reason="corrupt"
        )
    if version != FORMAT_VERSION:
        raise SerializationError(
            f"compiled grammar format version {version}, this formcast reads version "
            f"{FORMAT_VERSION}: recompile it (a disk cache does so by itself)",
            reason="version",
        )
    if len(data) != HEAD.size + meta_len + blob_len:
        raise SerializationError(
            f"truncated or padded compiled grammar: {len(data)} bytes, the header says "
            f"{HEAD.size + meta_len + blob_len}",
            reason="truncated",
        )
    if main_len > blob_len:
        raise SerializationError(
            "corrupt compiled grammar: the main region exceeds the data", reason="corrupt"
        )
    return version, meta_len, blob_len, main_len, crc


def _immutable(data: object) -> bool:
    """``data`` cannot change while a grammar's arrays view it: ``bytes``, or a read-only
    memory map (``DiskCache.get(mapped=True)``: its files are replaced, never rewritten)."""
    return type(data) is bytes or (type(data) is mmap.mmap and memoryview(data).readonly)


def open_container(
    data: bytes | bytearray | memoryview | mmap.mmap,
) -> tuple[dict[str, Any], bytes | bytearray | memoryview | mmap.mmap, int, memoryview]:
    """``(meta, source, blob offset in source, main region)`` of a file whose header and
    checksum (metadata and main region) are right.  ``source`` is ``data`` when it is
    ``bytes`` or a read-only memory map (immutable: arrays are views into it), else a
    private copy of the blob.

    Raises:
        SerializationError: another version, truncated, corrupt (``reason``).
    """
    _, meta_len, _, main_len, crc = read_header(data)
    view = memoryview(data)
    blob_start = HEAD.size + meta_len
    meta_bytes = view[HEAD.size : blob_start]
    main = view[blob_start : blob_start + main_len]
    if zlib.crc32(main, zlib.crc32(meta_bytes)) != crc:
        raise SerializationError(
            "corrupt compiled grammar: the checksum does not match (a damaged file): recompile it",
            reason="corrupt",
        )
    try:
        meta = json.loads(str(meta_bytes, "ascii"))  # (written ASCII: no bytes copy first)
    except (ValueError, RecursionError) as e:
        raise SerializationError(f"corrupt compiled grammar: {e}", reason="corrupt") from None
    if not isinstance(meta, dict):
        raise SerializationError("corrupt compiled grammar: no metadata", reason="corrupt")
    source = data if _immutable(data) else bytes(view[blob_start:])
    offset = blob_start if source is data else 0
    return meta, source, offset, memoryview(source)[offset : offset + main_len]


def _bad(what: str) -> SerializationError:
    return SerializationError(f"corrupt compiled grammar: {what}", reason="corrupt")


class ArrayReader:
    """The arrays of one loaded file, built from the directory on first request.

    ``regions`` maps a region number to its checked bytes (0: the main region, checked at
    load; ``s + 1``: lazy section ``s``, added by the codec once its CRC is checked): an
    array of a region not checked yet is refused.  Not thread-safe by itself (the codec
    decodes under its section locks)."""

    __slots__ = ("arrays", "directory", "regions", "views")

    def __init__(self, directory: Any, main: memoryview) -> None:
        if type(directory) is not list:
            raise _bad("the array directory")
        if not main.readonly:  # arrays are views into it, left writable otherwise
            raise TypeError("ArrayReader reads immutable data (bytes)")
        self.directory: list[Any] = directory
        self.regions: dict[int, memoryview] = {0: main}
        self.arrays: dict[int, np.ndarray] = {}
        self.views: dict[tuple[int, int, int], np.ndarray] = {}

    def array(self, i: int) -> np.ndarray:
        """Array ``i`` (a read-only view into the data unless written as writeable).

        An unpacked array is one ``np.ndarray`` over the region's buffer (its base is the
        file's bytes or memory map), a packed one that and its widened copy: a load makes few
        objects (in a new process, each object's memory is what a warm start pays for)."""
        hit = self.arrays.get(i)
        if hit is not None:
            return hit
        if type(i) is not int or not 0 <= i < len(self.directory):
            raise _bad(f"array {i!r}")
        entry = self.directory[i]
        if type(entry) is not list or not 4 <= len(entry) <= 7:
            raise _bad(f"array entry {i}")
        dtype_str, shape, offset, writeable = entry[:4]
        packing = entry[4] if len(entry) > 4 else ""
        region = entry[5] if len(entry) > 5 else 0
        blob = self.regions.get(region)
        if blob is None:  # a section's array reached from elsewhere, or no such section
            raise _bad(f"array {i} lies outside the checked data")
        dt = _DTYPE_OF.get(dtype_str)
        if dt is None:
            dt = np.dtype(dtype_str)
            if dt.char not in DTYPES or dt.hasobject:
                raise _bad(f"array dtype {dtype_str!r}")
            _DTYPE_OF[dtype_str] = dt
        if type(shape) is not list:
            raise _bad(f"array shape {shape!r}")
        count = 1
        for s in shape:
            if type(s) is not int or s < 0:
                raise _bad(f"array shape {shape!r}")
            count *= s
        if packing == "":
            stored, n = dt, count
        elif packing == "u2":
            stored, n = _U2, count
        elif packing == "u1":
            if dt.kind not in "iu":
                raise _bad("an integer array packed as bytes of another dtype")
            stored, n = _U1, count
        elif packing == "bits":
            if dt != np.bool_:
                raise _bad("bit-packed array of a non-boolean dtype")
            stored, n = _U1, (count + 7) // 8
        elif packing == "c" or packing == "c2":
            return self._columns(i, entry, dt, shape, offset, blob)
        else:
            raise _bad(f"array packing {packing!r}")
        if type(offset) is not int or offset < 0 or offset + n * stored.itemsize > len(blob):
            raise _bad(f"array {i} lies outside the data")
        if not packing:
            # one read-only view into the (immutable) data, copied when it is to be writable
            a: np.ndarray = np.ndarray(shape, dt, blob, offset)
            if writeable:
                a = a.copy()
        else:
            raw: np.ndarray = np.ndarray(n, stored, blob, offset)
            if packing == "bits":
                raw = np.unpackbits(raw, count=count).view(np.bool_)
            else:
                raw = raw.astype(dt)
            if not writeable:
                raw.flags.writeable = False
            a = raw if len(shape) == 1 else raw.reshape(shape)
        self.arrays[i] = a
        return a

    def view(self, pool: int, first: int, end: int) -> np.ndarray:
        """Rows ``[first, end)`` of array ``pool`` (a pool of arrays stored as one): a view
        of it (read-only, or of its writable copy), the same object for the same rows."""
        key = (pool, first, end)
        hit = self.views.get(key)
        if hit is None:
            base = self.arrays.get(pool)
            if base is None:
                base = self.array(pool)
            if type(first) is not int or type(end) is not int or not 0 <= first <= end <= len(base):
                raise _bad(f"rows {first!r}:{end!r} of array {pool} lie outside the data")
            hit = self.views[key] = base[first:end]
        return hit

    def rows(self, pool: int, first: int, sizes: list[Any]) -> tuple[np.ndarray, ...]:
        """Consecutive rows of array ``pool``, ``sizes[0]`` from ``first``, then
        ``sizes[1]``...: views of it, as :meth:`view` makes them (one bounds check)."""
        base = self.arrays.get(pool)
        if base is None:
            base = self.array(pool)
        end = first
        for n in sizes:
            if type(n) is not int or n < 0:
                raise _bad(f"rows of array {pool}")
            end += n
        if type(first) is not int or not 0 <= first <= end <= len(base):
            raise _bad(f"rows {first!r}:{end!r} of array {pool} lie outside the data")
        views = self.views
        out: list[np.ndarray] = []
        for n in sizes:
            key = (pool, first, first + n)
            hit = views.get(key)
            if hit is None:
                hit = views[key] = base[first : first + n]
            out.append(hit)
            first += n
        return tuple(out)

    def _columns(
        self, i: int, entry: list[Any], dt: np.dtype[Any], shape: list[int], offset: Any, blob: Any
    ) -> np.ndarray:
        """Array ``i`` stored as its distinct columns and the column map (see :func:`_pack`)."""
        k = entry[6] if len(entry) > 6 else None
        if len(shape) != 2 or type(k) is not int or not 1 <= k <= 256 or dt.kind not in "iub":
            raise _bad(f"array {i}'s columns")
        rows, cols = shape
        inner = _U2 if entry[4] == "c2" else dt
        head = cols + (-cols % 8)
        if type(offset) is not int or offset < 0:
            raise _bad(f"array {i} lies outside the data")
        if offset + head + rows * k * inner.itemsize > len(blob):
            raise _bad(f"array {i} lies outside the data")
        inverse = np.frombuffer(blob, dtype=_U1, count=cols, offset=offset)
        columns = np.frombuffer(blob, dtype=inner, count=rows * k, offset=offset + head)
        if cols and int(inverse.max()) >= k:
            raise _bad(f"array {i}'s column map")
        a = np.ascontiguousarray(columns.reshape(rows, k).astype(dt, copy=False)[:, inverse])
        if not entry[3]:
            a.setflags(write=False)
        self.arrays[i] = a
        return a
