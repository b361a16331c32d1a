"""Persistent compiled grammars: the explicit binary format behind ``CompiledGrammar.serialize``.

A compiled grammar is plain data — numpy tables, ints, strings, tuples, dicts — held by a few
formcast classes (the programs, their classifiers, the automata, the caches).  This module
writes that object graph, *including the lazily filled caches* (masks per state, position
classifications, token steps, the parser states they are keyed by), so that a grammar warmed
by one process loads warm in another.

Format (little-endian)::

    header  8s magic b"FCGRAMMR" | u32 format version | u32 flags (0) | u64 meta length
            | u64 blob length | u64 main region length | u32 CRC-32 of meta + main region
            | u32 reserved (0)
    meta    UTF-8 JSON: the vocabulary fingerprint, the code layout digest, the grammar's
            fields and program as a tagged tree (``["t", ...]`` a tuple, ``["a", i]`` array i,
            ``["o", "ByteDFA", n, {attr: value}]`` an object of an allow-listed class,
            ``["z", s, attr]`` an attribute written in lazy section s, ``["tz", d, x]``
            nested tuples d deep, a tuple of tuples as ``[length, i, child, ...]`` with its
            non-empty children only, ``["pda", n, auto, limits, far_count, initial state]``
            the parser...), the parser frames
            as a flat table, the array directory and the lazy sections (their extent in the
            blob, CRC-32, tree, and the figures their cache accounting answers unloaded)
    blob    every numpy array's bytes, each at a 64-byte aligned offset in its region: the
            main region (checked at load), then one region per lazy section (checked when
            the section is first used).  Arrays are read-only views into the data (copies
            where writable); large boolean arrays are stored as bits, large tables of small
            non-negative ints as uint8 / uint16, and a section's 2-D tables as their
            distinct columns and a column map, restored on load.

Lazy sections (:data:`_LAZY_ATTRS`): the call-expanded lexer and the position classifier of a
:class:`CfgProgram` are needed only by the first mask of a state the file does not carry.  On
load they are :class:`_LazyAttr` stand-ins: the first attribute access checks the section's
CRC, decodes it, sets the real values on the program and forwards; a corrupt section raises
SerializationError there (after the loader's ``on_corrupt``), before any of its data is used.
:func:`materialize` loads them at once.

Threat model: a cache directory is a trust boundary.  Loading never executes code from the
data: there is no pickle; JSON is parsed by the standard library; objects are created only for
the classes in :data:`PLAIN_CLASSES` (by ``object.__new__``, attributes set directly, no
dunder names), functions only from :data:`_FUNCTIONS`, arrays only of numeric dtypes and
inside the blob.  Attributes a class lists in ``_serialize_omit`` (tables derived from others,
rebuilt on first use) are written as None.  What a loader does *not* defend against is a file
crafted by someone who can write the directory: it can make masks wrong (allow tokens the
constraint forbids) or make the matcher raise.  The CRC catches accidental corruption, not
tampering: give the cache directory the permissions of the serving user (see
docs/threat_model.md).

Compatibility: the header carries :data:`FORMAT_VERSION` and the meta a *layout digest* of the
code (the fields of every allow-listed class, the formcast version); a file written by other
code, for another vocabulary, truncated or corrupt raises
:class:`~formcast.errors.SerializationError` (the disk cache treats it as a miss).

Lifetime: stateless functions (a loaded grammar keeps the file's bytes: its arrays are
views into them).  Cost: O(size of the grammar and its caches) — one pass to encode, one JSON parse
and one CRC pass over the main region to load, plus re-interning the parser states the caches
are keyed by; a section costs its CRC and decoding on first use.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import hashlib
import json
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from .._gc import gc_paused
from .._version import __version__
from ..automata.analysis import GrammarAnalysis
from ..automata.dfa import ByteDFA
from ..automata.lexer import ExpandedLexer, LazyExpandedLexer
from ..automata.pda import Frame, ParserState, PushdownAutomaton
from ..automata.rules import GrammarAutomaton
from ..cache import LruCache, StepMemo
from ..errors import SerializationError
from ..ir.marks import UniqueItemsMark
from ..limits import CacheLimits, ParserLimits
from ..vocab.trie import TokenTrie
from ..vocab.vocabulary import Vocabulary
from . import cfg_program
from .cfg_program import (
    CfgProgram,
    Classification,
    _class_bytes,
    _CountedClassifier,
    _ExitSplitClassifier,
    _LazyExitSplitClassifier,
    _RuleClassifier,
)
from .program import LimitStop, mask_weight
from .regex_program import RegexProgram

__all__ = [
    "FORMAT_VERSION",
    "PLAIN_CLASSES",
    "dump_grammar",
    "layout_digest",
    "load_grammar",
    "materialize",
]

#: Bumped whenever the encoding itself changes (the layout digest covers changes of classes).
FORMAT_VERSION = 3

_MAGIC = b"FCGRAMMR"
_HEAD = struct.Struct("<8sIIQQQII")
_ALIGN = 64

#: The classes whose instances are written attribute by attribute (``__dict__`` and
#: ``__slots__``) and re-created by ``object.__new__``: plain data only.  A grammar holding an
#: instance of any other class cannot be serialized (SerializationError names the attribute):
#: add the class here when it is plain data, or give it an explicit encoding below.
PLAIN_CLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        ByteDFA,
        CacheLimits,
        CfgProgram,
        ExpandedLexer,
        GrammarAnalysis,
        LazyExpandedLexer,
        GrammarAutomaton,
        LimitStop,
        LruCache,
        ParserLimits,
        RegexProgram,
        UniqueItemsMark,
        _CountedClassifier,
        _ExitSplitClassifier,
        _LazyExitSplitClassifier,
        _RuleClassifier,
    )
}
#: attributes written in a *lazy section* of their own (class name → attribute → the
#: zero-argument methods whose answers are written with it, see :class:`_LazyAttr`): the
#: call-expanded lexer and the position classifier are needed only by the first mask of a
#: state the file does not carry, so a load checks and decodes them on first use
_LAZY_ATTRS: dict[str, dict[str, tuple[str, ...]]] = {
    "CfgProgram": {"lexer": (), "_positions": ("__len__", "cache_bytes", "table_bytes")},
}
#: named tuples, written as their fields
_NAMED_TUPLES: dict[str, type] = {"Classification": Classification}
#: the functions a serialized object may hold (cache weights)
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "mask_weight": mask_weight,
    "class_bytes": _class_bytes,
}
_FUNCTION_NAMES = {id(f): name for name, f in _FUNCTIONS.items()}
_DTYPES = frozenset("?bBhHiIlLqQefd")
_LOCK = type(threading.Lock())
_RLOCK = type(threading.RLock())
_SCALARS = (int, str, bool, type(None))
_DTYPE_OF: dict[str, np.dtype[Any]] = {}  # dtype strings already checked
_U1, _U2 = np.dtype("u1"), np.dtype("<u2")
_GOOD_NAMES: set[str] = set()  # attribute names already checked
#: class -> (its instances keep every attribute in their __dict__, it is mypyc-compiled)
_PLAIN_DICT: dict[type, tuple[bool, bool]] = {}


def _attr_names(cls: type) -> list[str]:
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        slots = klass.__dict__.get("__slots__", ())
        for s in (slots,) if isinstance(slots, str) else slots:
            if s not in ("__weakref__", "__dict__"):
                names.append(s)
        if dataclasses.is_dataclass(klass):
            names.extend(f.name for f in dataclasses.fields(klass))
    return sorted(set(names))


def layout_digest(extra: tuple[str, ...] = ()) -> str:
    """A digest of the code the format depends on: :data:`FORMAT_VERSION`, the formcast
    version, the declared attributes of every class in :data:`PLAIN_CLASSES` and of the
    parser's frames and states, and ``extra`` (the compiled grammar's field names).  Part of
    every disk-cache key, so files written by other code are never read."""
    h = hashlib.sha256()
    parts = [str(FORMAT_VERSION), __version__, *extra]
    for name, cls in sorted({**PLAIN_CLASSES, **_NAMED_TUPLES}.items()):
        fields = getattr(cls, "_fields", None) or _attr_names(cls)
        parts.append(f"{name}:{','.join(fields)}")
    for cls in (Frame, ParserState, PushdownAutomaton):
        parts.append(f"{cls.__name__}:{','.join(_attr_names(cls))}")
    h.update("\n".join(parts).encode())
    return h.hexdigest()[:32]


def _instance_attrs(obj: object) -> dict[str, Any]:
    out: dict[str, Any] = dict(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        # a class compiled with mypyc (formcast._native) has no __dict__: its attributes
        native = klass.__dict__.get("__mypyc_attrs__", ())
        for s in ((slots,) if isinstance(slots, str) else tuple(slots)) + tuple(native):
            if s in ("__weakref__", "__dict__"):
                continue
            try:
                out[s] = getattr(obj, s)
            except AttributeError:  # a slot never set
                continue
    return out


def _tuple_depth(v: tuple[Any, ...]) -> tuple[int, bool] | None:
    """``(d, True)`` when ``v`` is tuples nested ``d`` deep with scalars at depth ``d``
    (``(d, False)``: only empty tuples below, which fit any depth from ``d``); None when
    ``v`` mixes depths or holds anything else."""
    fixed: int | None = None
    flex = 0
    for x in v:
        if type(x) in _SCALARS:
            d, exact = 0, True
        elif type(x) is tuple:
            r = _tuple_depth(x)
            if r is None:
                return None
            d, exact = r
        else:
            return None
        if exact:
            if fixed is not None and fixed != d:
                return None
            fixed = d
        else:
            flex = max(flex, d)
    if fixed is not None:
        return None if flex > fixed else (fixed + 1, True)
    return flex + 1, False


def _tuple_sparse(v: tuple[Any, ...]) -> Any:
    """Nested tuples as JSON: a tuple of tuples is ``[length, i, child, j, child, ...]``
    (its non-empty children only, by index), a tuple of scalars a plain list."""
    if not v or type(v[0]) is not tuple:  # scalars (never mixed with tuples: _tuple_depth)
        return list(v)
    out: list[Any] = [len(v)]
    for i, x in enumerate(v):
        if x:
            out += (i, _tuple_sparse(x))
    return out


def _sparse_tuple(x: Any, depth: int) -> tuple[Any, ...]:
    """The inverse of :func:`_tuple_sparse` for ``depth`` levels (scalars at the last)."""
    if type(x) is not list:
        raise TypeError("nested tuples of a non-list")
    if depth == 1:
        if list in map(type, x):
            raise TypeError("a list among the scalars of nested tuples")
        return tuple(x)
    if not x:
        return ()
    n = x[0]
    if type(n) is not int or not 0 <= n <= 1 << 24 or len(x) % 2 != 1:
        raise ValueError("sparse nested tuples")
    out: list[Any] = [()] * n
    last, d = -1, depth - 1
    for k in range(1, len(x), 2):
        i = x[k]
        if type(i) is not int or not last < i < n:
            raise ValueError("sparse nested tuples' index")
        child = _sparse_tuple(x[k + 1], d)
        if not child:
            raise ValueError("an empty child written in sparse nested tuples")
        out[i] = child
        last = i
    return tuple(out)


class _Encoder:
    """One serialization: the tagged tree, the arrays and the parser-frame table."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.arrays: list[np.ndarray] = []
        self.array_ids: dict[int, int] = {}
        self.memo: dict[int, int] = {}
        self.frames: list[list[Any]] = []
        self.frame_ids: dict[int, int] = {}
        self.keep: list[object] = []  # keeps encoded objects alive: ids stay unique
        self.pdas = 0
        # lazy sections: (attribute name -> value, path, facts per attribute), encoded last
        self.sections: list[tuple[dict[str, Any], str, dict[str, tuple[str, ...]]]] = []
        self.in_section = False

    def fail(self, path: str, what: str) -> SerializationError:
        return SerializationError(
            f"cannot serialize {what}: only plain data (numbers, strings, tuples, lists, "
            "dicts, numpy arrays of numbers and the classes in "
            "formcast.index.serialize.PLAIN_CLASSES) can be written; add a plain-data class "
            "to PLAIN_CLASSES or give it an encoding there",
            reason="unsupported",
            where=path,
        )

    def enc(self, v: Any, path: str) -> Any:
        t = type(v)
        if v is None or t is bool or t is int or t is str:
            return v
        if t is float:
            return v if v == v and v not in (float("inf"), float("-inf")) else ["x", repr(v)]
        if t is tuple:
            if all(type(x) in _SCALARS for x in v):  # fast paths: flat tuples of scalars
                return ["ts", *v]
            if all(type(x) is tuple and all(type(y) in _SCALARS for y in x) for x in v):
                return ["tt", *(list(x) for x in v)]
            nested = _tuple_depth(v)
            if nested is not None and nested[0] <= 8:  # nested tuples (a grammar's call edges)
                # sparse: mostly empty (a rule's states without calls), only the others written
                return ["tz", nested[0], _tuple_sparse(v)]
            return ["t", *(self.enc(x, f"{path}[{i}]") for i, x in enumerate(v))]
        if t is list:
            return ["l", *(self.enc(x, f"{path}[{i}]") for i, x in enumerate(v))]
        if t is dict or t is OrderedDict:
            items = list(v.items())  # a snapshot: other threads may be filling the cache
            return [
                "d" if t is dict else "od",
                *([self.enc(k, f"{path}.key"), self.enc(x, f"{path}[{k!r}]")] for k, x in items),
            ]
        if t is frozenset or t is set:
            return ["fs" if t is frozenset else "s", *(self.enc(x, f"{path}.item") for x in v)]
        if t is bytes:
            return ["b", base64.b64encode(v).decode("ascii")]
        if t is np.ndarray:
            return ["a", self.array(v, path)]
        if isinstance(v, np.generic):
            if v.dtype.char not in _DTYPES:
                raise self.fail(path, f"a numpy scalar of dtype {v.dtype}")
            return ["n", v.dtype.str, v.item()]
        if t is StepMemo:
            items = list(v.items())
            return [
                "sm",
                v.limit,
                *([self.enc(k, f"{path}.key"), self.enc(x, f"{path}[{k!r}]")] for k, x in items),
            ]
        if t is _LazyAttr:  # a loaded grammar's section never used since: its value
            return self.enc(v._section.value(v._name), path)
        if t is _LOCK or t is _RLOCK:
            return ["lk", "r" if t is _RLOCK else ""]
        if t is Vocabulary:
            if v is not self.vocab and v.fingerprint != self.vocab.fingerprint:
                raise self.fail(path, "a second vocabulary")
            return ["V"]
        if t is TokenTrie:
            return ["T", self.trie(v, path)]
        if t is Frame:
            return ["f", self.frame(v)]
        if t is ParserState:
            return ["p", [self.frame(f) for f in v.frames], v.accepting, v.error]
        if t is PushdownAutomaton:
            return self.pda(v, path)
        name = _FUNCTION_NAMES.get(id(v))
        if name is not None:
            return ["fn", name]
        if t.__name__ in _NAMED_TUPLES and _NAMED_TUPLES[t.__name__] is t:
            return ["nt", t.__name__, *(self.enc(x, f"{path}.{f}") for f, x in zip(t._fields, v))]
        if PLAIN_CLASSES.get(t.__name__) is t:
            hit = self.memo.get(id(v))
            if hit is not None:
                return ["r", hit]
            n = self.memo[id(v)] = len(self.memo)
            self.keep.append(v)
            omit: frozenset[str] = getattr(t, "_serialize_omit", frozenset())
            lazy = _LAZY_ATTRS.get(t.__name__, {})
            attrs: dict[str, Any] = {}
            deferred: dict[str, Any] = {}
            for k, x in _instance_attrs(v).items():
                if type(x) is _LazyAttr:  # loaded, never used since: its section's value
                    x = x._section.value(x._name)
                if k in omit:
                    attrs[k] = None
                elif k in lazy and x is not None and not self.in_section:
                    deferred[k] = x  # written in a section of its own, after the main tree
                    attrs[k] = ["z", len(self.sections), k]
                else:
                    attrs[k] = self.enc(x, f"{path}.{k}")
            if deferred:
                self.sections.append((deferred, path, lazy))
            return ["o", t.__name__, n, attrs]
        raise self.fail(path, f"{t.__module__}.{t.__qualname__}")

    def array(self, a: np.ndarray, path: str) -> int:
        hit = self.array_ids.get(id(a))
        if hit is not None:
            return hit
        if a.dtype.char not in _DTYPES or a.dtype.hasobject:
            raise self.fail(path, f"a numpy array of dtype {a.dtype}")
        self.array_ids[id(a)] = len(self.arrays)
        self.arrays.append(a)
        self.keep.append(a)
        return len(self.arrays) - 1

    def trie(self, trie: TokenTrie, path: str) -> int | None:
        base = self.vocab.trie
        if trie is base:
            return None
        for byte, (sub, _) in list(base._with_byte.items()):
            if sub is trie:
                return int(byte)
        raise self.fail(path, "a token trie that is not the vocabulary's")

    def frame(self, f: Frame) -> int:
        chain: list[Frame] = []
        cur: Frame | None = f
        while cur is not None and id(cur) not in self.frame_ids:
            chain.append(cur)
            cur = cur.parent
        for fr in reversed(chain):
            parent = -1 if fr.parent is None else self.frame_ids[id(fr.parent)]
            self.frame_ids[id(fr)] = len(self.frames)
            self.frames.append([fr.rule, fr.state, fr.need, fr.left, parent])
            self.keep.append(fr)
        return self.frame_ids[id(f)]

    def pda(self, p: PushdownAutomaton, path: str) -> Any:
        hit = self.memo.get(id(p))
        if hit is not None:
            return ["r", hit]
        self.pdas += 1
        if self.pdas > 1:
            raise self.fail(path, "a second pushdown automaton")
        n = self.memo[id(p)] = len(self.memo)
        self.keep.append(p)
        # the parser's own caches are not written: they refill in microseconds per step
        return [
            "pda",
            n,
            self.enc(p.auto, f"{path}.auto"),
            self.enc(p.limits, f"{path}.limits"),
            p.far_count,
            # the initial state: a load need not compute its closure (the first mask cached
            # under it is then a lookup)
            self.enc(p.initial, f"{path}.initial"),
        ]


def _shared_entries(program: Any, enc: _Encoder) -> list[Any]:
    """The process-wide classifications this program relies on (counted stack tops)."""
    if not isinstance(program, CfgProgram):
        return []
    sigs = set(program._counted._sigs.values())
    if not sigs:
        return []
    out = []
    for key, cls in cfg_program._COUNTED_CLASSES.items():
        if key[0] in sigs and cls is not None:
            out.append([enc.enc(key, "counted.key"), enc.enc(cls, "counted")])
    return out


#: arrays at least this large are stored narrower when they can be (see :func:`_pack`)
_PACK_MIN = 4096


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


def _facts(obj: Any, names: tuple[str, ...]) -> dict[str, int]:
    """What ``obj`` *as loaded* (its ``_serialize_omit`` attributes None) answers to the
    zero-argument methods ``names`` (``"__len__"``: ``len``): a lazy section answers them
    without being loaded (the cache accounting of a loaded grammar).  Empty when ``obj``
    cannot be probed (the section is then loaded by them)."""
    if not names:
        return {}
    try:
        probe = copy.copy(obj)
        for k in getattr(type(obj), "_serialize_omit", ()):
            object.__setattr__(probe, k, None)
        return {n: int(len(probe) if n == "__len__" else getattr(probe, n)()) for n in names}
    except Exception:  # an object that cannot be probed: no facts
        return {}


def dump_grammar(fields: dict[str, Any], program: Any, vocab: Vocabulary, layout: str) -> bytes:
    """Serialize a compiled grammar's ``fields`` (name → plain value) and ``program``."""
    enc = _Encoder(vocab)
    meta: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "formcast": __version__,
        "layout": layout,
        "vocab": vocab.fingerprint,
        "vocab_size": vocab.vocab_size,
        "fields": {k: enc.enc(v, k) for k, v in fields.items()},
        "program": enc.enc(program, "program"),
    }
    meta["counted"] = _shared_entries(program, enc)
    # the lazy sections, after everything else: objects they share with the main tree are
    # defined there, so a section refers to the main tree and never the other way round
    bounds = [len(enc.arrays)]
    trees: list[list[Any]] = []
    enc.in_section = True
    for deferred, path, lazy in enc.sections:
        tree = {k: enc.enc(x, f"{path}.{k}") for k, x in deferred.items()}
        trees.append([tree, {k: _facts(x, lazy[k]) for k, x in deferred.items()}])
        bounds.append(len(enc.arrays))
    meta["frames"] = enc.frames
    directory: list[list[Any]] = []
    chunks: list[bytes | memoryview] = []
    starts: list[int] = []  # of the regions in the blob: main, then sections (contiguous)
    offset = 0
    for region in range(len(bounds)):
        pad = -offset % _ALIGN
        if pad:  # the previous region's padding: covered by its checksum
            chunks.append(b"\0" * pad)
            offset += pad
        starts.append(start := offset)
        for a in enc.arrays[bounds[region - 1] if region else 0 : bounds[region]]:
            c = np.ascontiguousarray(a)
            pad = -(offset - start) % _ALIGN
            if pad:
                chunks.append(b"\0" * pad)
                offset += pad
            entry: list[Any] = [c.dtype.str, list(c.shape), offset - start, bool(a.flags.writeable)]
            # stored narrower (the loader restores ``entry[0]``)
            c, packing, k = _pack(c, region > 0)
            entry += [packing, region, *([k] if k else [])]
            directory.append(entry)
            chunks.append(c.reshape(-1).view(np.uint8).data if c.size else b"")
            offset += c.nbytes
    regions = [(lo, hi - lo) for lo, hi in zip(starts, [*starts[1:], offset])]
    meta["arrays"] = directory
    blob = b"".join(chunks)
    view = memoryview(blob)
    meta["sections"] = [
        [start, length, zlib.crc32(view[start : start + length]), *tree]
        for (start, length), tree in zip(regions[1:], trees)
    ]
    meta_bytes = json.dumps(meta, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    main = regions[0][1]
    crc = zlib.crc32(view[:main], zlib.crc32(meta_bytes))
    head = _HEAD.pack(_MAGIC, FORMAT_VERSION, 0, len(meta_bytes), len(blob), main, crc, 0)
    return b"".join((head, meta_bytes, blob))


#: what decoding malformed data raises (SerializationError is a ValueError too: callers re-raise
#: it before catching these)
_MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError)


def _corrupt(e: Exception) -> SerializationError:
    """The typed error for data that made decoding raise ``e``."""
    what = f"corrupt compiled grammar: {type(e).__name__}: {e}"
    return SerializationError(what, reason="corrupt")


class _Section:
    """A lazy section of a loaded grammar: attributes of one object (``owner``) whose tree
    and arrays are checked (CRC-32) and decoded on first use, then set on ``owner``."""

    __slots__ = ("_dec", "_index", "_lock", "_on_corrupt", "_values", "owner")

    def __init__(self, dec: _Decoder, index: int, owner: object) -> None:
        self._dec: _Decoder | None = dec
        self._index = index
        self.owner = owner
        self._lock = threading.Lock()
        self._values: dict[str, Any] | None = None
        self._on_corrupt = dec.on_corrupt

    def value(self, name: str) -> Any:
        values = self._values
        if values is None:
            with self._lock:
                if self._values is None:
                    self._values = self._load()
                values = self._values
        return values[name]

    def _load(self) -> dict[str, Any]:
        dec = self._dec
        assert dec is not None
        try:
            with gc_paused(True):
                values = dec.section(self._index)
        except SerializationError as e:
            if self._on_corrupt is not None:
                with contextlib.suppress(Exception):
                    self._on_corrupt(e)
            raise
        for k, v in values.items():
            object.__setattr__(self.owner, k, v)
        self._dec = None  # the file's data and the decoder's tables are no longer needed
        return values


class _LazyAttr:
    """Stands for an attribute of a loaded grammar until its section is used: any attribute
    access loads the section (checked, decoded, set on its owner in place of this) and
    forwards; ``len``, ``cache_bytes()`` and ``table_bytes()`` (the cache accounting) are
    answered from the facts written with it, without loading."""

    __slots__ = ("_facts", "_name", "_section")

    def __init__(self, section: _Section, name: str, facts: dict[str, int]) -> None:
        self._section = section
        self._name = name
        self._facts = facts

    def _value(self) -> Any:
        return self._section.value(self._name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self._value(), attr)

    def __len__(self) -> int:
        known = self._facts.get("__len__")
        return int(known) if known is not None else len(self._value())

    def cache_bytes(self) -> int:
        known = self._facts.get("cache_bytes")
        return int(known) if known is not None else int(self._value().cache_bytes())

    def table_bytes(self) -> int:
        known = self._facts.get("table_bytes")
        return int(known) if known is not None else int(self._value().table_bytes())

    def __repr__(self) -> str:
        return f"<{self._name} of a loaded grammar, not used yet>"


def materialize(obj: object) -> None:
    """Load now every lazy section of ``obj`` (a loaded program): checked and decoded, its
    attributes set.  Raises SerializationError when a section is corrupt."""
    for v in list(_instance_attrs(obj).values()):
        if type(v) is _LazyAttr:
            v._value()


class _Decoder:
    def __init__(
        self,
        meta: dict[str, Any],
        main: memoryview,
        data: bytes | bytearray | memoryview,
        blob_start: int,
        vocab: Vocabulary,
        on_corrupt: Callable[[SerializationError], None] | None = None,
    ) -> None:
        self.vocab = vocab
        self.meta = meta
        self.regions: dict[int, memoryview] = {0: main}  # the checked regions of the blob
        self.data, self.blob_start = data, blob_start  # where the sections are read from
        self.directory = meta["arrays"]
        self.arrays: dict[int, np.ndarray] = {}
        self.memo: dict[int, Any] = {}
        self.frame_table = meta["frames"]
        self.frames: list[Frame] = []
        self.pda: PushdownAutomaton | None = None
        self.sections: dict[int, _Section] = {}
        self.on_corrupt = on_corrupt

    def bad(self, what: str) -> SerializationError:
        return SerializationError(f"corrupt compiled grammar: {what}", reason="corrupt")

    def dec(self, v: Any) -> Any:
        if type(v) is not list:
            if v is None or type(v) in (bool, int, float, str):
                return v
            raise self.bad(f"unexpected JSON value of type {type(v).__name__}")
        tag = v[0]
        # the most frequent tags first (a load decodes thousands of nodes)
        if tag == "ts":
            if len(v) == 1:
                return ()
            if list in map(type, v):
                raise self.bad("a list inside a flat tuple")
            return tuple(v[1:])
        if tag == "a":
            return self.array(v[1])
        if tag == "t":
            dec = self.dec
            return tuple([dec(x) for x in v[1:]])
        if tag == "o":
            return self.obj(v)
        if tag == "r":
            if v[1] not in self.memo:
                raise self.bad(f"reference to object {v[1]} before it is defined")
            return self.memo[v[1]]
        if tag == "tz":
            if len(v) != 3 or type(v[1]) is not int or not 1 <= v[1] <= 8:
                raise self.bad("nested tuples")
            return _sparse_tuple(v[2], v[1])
        if tag == "tt":
            out = tuple([tuple(x) for x in v[1:]])
            for x in v[1:]:
                if list in map(type, x):
                    raise self.bad("a list inside a flat tuple")
            return out
        if tag == "l":
            return [self.dec(x) for x in v[1:]]
        if tag == "d":
            return {self.dec(k): self.dec(x) for k, x in v[1:]}
        if tag == "od":
            return OrderedDict((self.dec(k), self.dec(x)) for k, x in v[1:])
        if tag == "nt":
            cls = _NAMED_TUPLES.get(v[1])
            if cls is None:
                raise self.bad(f"unknown named tuple {v[1]!r}")
            return cls(*(self.dec(x) for x in v[2:]))
        if tag == "p":
            return self.state(v)
        if tag == "f":
            return self.frame(v[1])
        if tag == "fs":
            return frozenset(self.dec(x) for x in v[1:])
        if tag == "s":
            return {self.dec(x) for x in v[1:]}
        if tag == "b":
            return base64.b64decode(v[1], validate=True)
        if tag == "x":
            if v[1] not in ("nan", "inf", "-inf"):
                raise self.bad(f"bad float {v[1]!r}")
            return float(v[1])
        if tag == "n":
            dt = np.dtype(v[1])
            if dt.char not in _DTYPES:
                raise self.bad(f"dtype {v[1]!r}")
            return dt.type(v[2])
        if tag == "sm":
            memo: StepMemo[Any, Any] = StepMemo(int(v[1]))
            for k, x in v[2:]:
                memo[self.dec(k)] = self.dec(x)
            return memo
        if tag == "lk":
            return threading.RLock() if v[1] == "r" else threading.Lock()
        if tag == "V":
            return self.vocab
        if tag == "T":
            return self.vocab.trie if v[1] is None else self.vocab.trie.with_byte(int(v[1]))[0]
        if tag == "fn":
            fn = _FUNCTIONS.get(v[1])
            if fn is None:
                raise self.bad(f"unknown function {v[1]!r}")
            return fn
        if tag == "pda":
            return self.make_pda(v)
        raise self.bad(f"unknown tag {tag!r}")

    def obj(self, v: list[Any]) -> Any:
        _, name, n, attrs = v
        cls = PLAIN_CLASSES.get(name)
        if cls is None:
            raise self.bad(f"class {name!r} is not allow-listed")
        # a mypyc-compiled class (formcast._native) refuses object.__new__; its own __new__
        # only allocates (no __init__ runs), as object.__new__ does for the others
        kind = _PLAIN_DICT.get(cls)
        if kind is None:  # instances keep every attribute in their __dict__ (no slots)?
            native = "__mypyc_attrs__" in cls.__dict__
            plain = not native and not any("__slots__" in k.__dict__ for k in cls.__mro__[:-1])
            kind = _PLAIN_DICT[cls] = (plain, native)
        plain, native = kind
        obj: Any = cast(Any, cls).__new__(cls) if native else object.__new__(cls)
        self.memo[n] = obj
        if type(attrs) is not dict:
            raise self.bad(f"attributes of a {name}")
        values: dict[str, Any] = {}
        for k, x in attrs.items():
            if k not in _GOOD_NAMES:
                if not (type(k) is str and k.isidentifier()) or k.startswith("__"):
                    raise self.bad(f"attribute name {k!r}")
                _GOOD_NAMES.add(k)
            if type(x) is list and x and x[0] == "z":
                values[k] = self.lazy(obj, k, x)
            else:
                values[k] = self.dec(x)
            if not plain:
                object.__setattr__(obj, k, values[k])
        if plain:
            obj.__dict__.update(values)
        return obj

    def lazy(self, owner: object, name: str, v: list[Any]) -> _LazyAttr:
        """The stand-in of attribute ``name`` of ``owner``, written in section ``v[1]``."""
        sections = self.meta.get("sections")
        if (
            len(v) != 3
            or type(v[1]) is not int
            or type(sections) is not list
            or not 0 <= v[1] < len(sections)
            or v[2] != name
            or name not in _LAZY_ATTRS.get(type(owner).__name__, {})
        ):
            raise self.bad(f"lazy attribute {name!r}")
        entry = sections[v[1]]
        if type(entry) is not list or len(entry) != 5 or type(entry[3]) is not dict:
            raise self.bad(f"section {v[1]}")
        if name not in entry[3]:
            raise self.bad(f"section {v[1]} has no attribute {name!r}")
        section = self.sections.get(v[1])
        if section is None:
            section = self.sections[v[1]] = _Section(self, v[1], owner)
        elif section.owner is not owner:
            raise self.bad(f"section {v[1]} of two objects")
        facts = entry[4].get(name) if type(entry[4]) is dict else None
        if type(facts) is not dict or not all(type(x) is int for x in facts.values()):
            raise self.bad(f"section {v[1]}'s facts")
        return _LazyAttr(section, name, facts)

    def section(self, index: int) -> dict[str, Any]:
        """Check (CRC-32) and decode section ``index``: its attributes by name."""
        start, length, crc, tree, _ = self.meta["sections"][index]
        try:
            if not all(type(x) is int for x in (start, length, crc)) or start < 0 or length < 0:
                raise self.bad(f"section {index}'s extent")
            lo = self.blob_start + start
            if lo + length > len(self.data):
                raise self.bad(f"section {index} lies outside the data")
            region = memoryview(self.data)[lo : lo + length]
            if zlib.crc32(region) != crc:
                raise SerializationError(
                    f"corrupt compiled grammar: the checksum of section {index} does not "
                    "match (a damaged file): recompile it",
                    reason="corrupt",
                )
            self.regions[index + 1] = region
            return {k: self.dec(x) for k, x in tree.items()}
        except SerializationError:
            raise
        except _MALFORMED as e:
            raise _corrupt(e) from None

    def array(self, i: int) -> np.ndarray:
        hit = self.arrays.get(i)
        if hit is not None:
            return hit
        entry = self.directory[i]
        if type(entry) is not list or not 4 <= len(entry) <= 7:
            raise self.bad(f"array entry {i}")
        dtype_str, shape, offset, writeable = entry[:4]
        packing = entry[4] if len(entry) > 4 else ""
        blob = self.regions.get(entry[5] if len(entry) > 5 else 0)
        if blob is None:  # a section's array reached from elsewhere, or no such section
            raise self.bad(f"array {i} lies outside the checked data")
        dt = _DTYPE_OF.get(dtype_str)
        if dt is None:
            dt = np.dtype(dtype_str)
            if dt.char not in _DTYPES or dt.hasobject:
                raise self.bad(f"array dtype {dtype_str!r}")
            _DTYPE_OF[dtype_str] = dt
        if type(shape) is not list:
            raise self.bad(f"array shape {shape!r}")
        count = 1
        for s in shape:
            if type(s) is not int or s < 0:
                raise self.bad(f"array shape {shape!r}")
            count *= s
        if packing == "":
            stored, n = dt, count
        elif packing == "u2":
            stored, n = _U2, count
        elif packing == "u1":
            if dt.kind not in "iu":
                raise self.bad("an integer array packed as bytes of another dtype")
            stored, n = _U1, count
        elif packing == "bits":
            if dt != np.bool_:
                raise self.bad("bit-packed array of a non-boolean dtype")
            stored, n = _U1, (count + 7) // 8
        elif packing == "c" or packing == "c2":
            return self.columns(i, entry, dt, shape, offset, blob)
        else:
            raise self.bad(f"array packing {packing!r}")
        if type(offset) is not int or offset < 0 or offset + n * stored.itemsize > len(blob):
            raise self.bad(f"array {i} lies outside the data")
        # a read-only view into the (immutable) data, copied when it is to be writable
        raw = np.frombuffer(blob, dtype=stored, count=n, offset=offset)
        if packing == "u2" or packing == "u1":
            raw = raw.astype(dt)
        elif packing == "bits":
            raw = np.unpackbits(raw, count=count).view(np.bool_)
        elif writeable:
            raw = raw.copy()
        a = raw if len(shape) == 1 else raw.reshape(shape)
        if not writeable and a.flags.writeable:  # a view of read-only data is read-only
            a.setflags(write=False)
        self.arrays[i] = a
        return a

    def columns(
        self, i: int, entry: list[Any], dt: np.dtype[Any], shape: list[int], offset: Any, blob: Any
    ) -> np.ndarray:
        """Array ``i`` stored as its distinct columns and the column map (see :func:`_pack`)."""
        k = entry[6] if len(entry) > 6 else None
        if len(shape) != 2 or type(k) is not int or not 1 <= k <= 256 or dt.kind not in "iub":
            raise self.bad(f"array {i}'s columns")
        rows, cols = shape
        inner = _U2 if entry[4] == "c2" else dt
        head = cols + (-cols % 8)
        if type(offset) is not int or offset < 0:
            raise self.bad(f"array {i} lies outside the data")
        if offset + head + rows * k * inner.itemsize > len(blob):
            raise self.bad(f"array {i} lies outside the data")
        inverse = np.frombuffer(blob, dtype=_U1, count=cols, offset=offset)
        columns = np.frombuffer(blob, dtype=inner, count=rows * k, offset=offset + head)
        if cols and int(inverse.max()) >= k:
            raise self.bad(f"array {i}'s column map")
        a = np.ascontiguousarray(columns.reshape(rows, k).astype(dt, copy=False)[:, inverse])
        if not entry[3]:
            a.setflags(write=False)
        self.arrays[i] = a
        return a

    def make_pda(self, v: list[Any]) -> PushdownAutomaton:
        _, n, auto_v, limits_v, far_count, initial_v = v
        auto, limits = self.dec(auto_v), self.dec(limits_v)
        if self.pda is not None:
            raise self.bad("a second pushdown automaton")
        if not isinstance(auto, GrammarAutomaton) or not isinstance(limits, ParserLimits):
            raise self.bad("the pushdown automaton's grammar or limits")
        if far_count is not None and type(far_count) is not int:
            raise self.bad("far_count")
        if type(initial_v) is not list or len(initial_v) != 4 or initial_v[0] != "p":
            raise self.bad("the pushdown automaton's initial state")
        pda = PushdownAutomaton(auto, limits, far_count=far_count, initial_closure=False)
        self.memo[n] = self.pda = pda
        pda.initial = self.state(initial_v)
        return pda

    def frame(self, i: int) -> Frame:
        pda = self.pda
        if pda is None:
            raise self.bad("a parser frame before its pushdown automaton")
        table, done = self.frame_table, self.frames
        while len(done) <= i:
            rule, state, need, left, parent = table[len(done)]
            if not -1 <= parent < len(done):
                raise self.bad("a parser frame's parent")
            done.append(pda.frame(rule, state, None if parent < 0 else done[parent], need, left))
        return done[i]

    def state(self, v: list[Any]) -> ParserState:
        _, frames_v, accepting, error = v
        frames = frozenset(self.frame(i) for i in frames_v)
        pda = self.pda
        if pda is None:  # pragma: no cover - frame() raised already
            raise self.bad("a parser state before its pushdown automaton")
        if error is not None:
            return ParserState(frames, bool(accepting), -1, str(error))
        return pda.state_of(frames, bool(accepting))


def read_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int, int, int]:
    """``(format version, meta length, blob length, main region length, crc)``;
    SerializationError when ``data`` is not a compiled grammar or is truncated."""
    if len(data) < _HEAD.size:
        raise SerializationError(
            f"truncated compiled grammar: {len(data)} bytes, the header alone is {_HEAD.size}",
            reason="truncated",
        )
    magic, version, _flags, meta_len, blob_len, main_len, crc, _ = _HEAD.unpack_from(data, 0)
    if magic != _MAGIC:
        raise SerializationError(
            "not a serialized formcast compiled grammar (bad magic bytes)", reason="corrupt"
        )
    if version != FORMAT_VERSION:
        raise SerializationError(
            f"compiled grammar format version {version}, this formcast reads version "
            f"{FORMAT_VERSION}: recompile it (a disk cache does so by itself)",
            reason="version",
        )
    if len(data) != _HEAD.size + meta_len + blob_len:
        raise SerializationError(
            f"truncated or padded compiled grammar: {len(data)} bytes, the header says "
            f"{_HEAD.size + meta_len + blob_len}",
            reason="truncated",
        )
    if main_len > blob_len:
        raise SerializationError(
            "corrupt compiled grammar: the main region exceeds the data", reason="corrupt"
        )
    return version, meta_len, blob_len, main_len, crc


def load_grammar(
    data: bytes | bytearray | memoryview,
    vocab: Vocabulary,
    layout: str,
    *,
    on_corrupt: Callable[[SerializationError], None] | None = None,
) -> tuple[dict[str, Any], Any]:
    """``(fields, program)`` of a serialized grammar, bound to ``vocab``.

    The header, the metadata and the main region (every array but those of the lazy
    sections) are checked here; a lazy section (:data:`_LAZY_ATTRS`) is checked and decoded
    on its first use, and raises SerializationError there when it is corrupt, after calling
    ``on_corrupt(error)`` (the disk cache drops the file).

    Raises:
        SerializationError: another format version or code layout (``reason`` ``"version"``
            / ``"layout"``), another vocabulary (``"vocabulary"``), truncated or corrupt data.
    """
    if not isinstance(vocab, Vocabulary):
        raise SerializationError(
            f"deserialize needs the formcast Vocabulary it was compiled for, got "
            f"{type(vocab).__name__}",
            reason="vocabulary",
        )
    _, meta_len, _, main_len, crc = read_header(data)
    view = memoryview(data)
    blob_start = _HEAD.size + meta_len
    meta_bytes = view[_HEAD.size : blob_start]
    main = view[blob_start : blob_start + main_len]
    if zlib.crc32(main, zlib.crc32(meta_bytes)) != crc:
        raise SerializationError(
            "corrupt compiled grammar: the checksum does not match (a damaged file): recompile it",
            reason="corrupt",
        )
    try:
        meta = json.loads(bytes(meta_bytes))
    except (ValueError, RecursionError) as e:
        raise SerializationError(f"corrupt compiled grammar: {e}", reason="corrupt") from None
    if not isinstance(meta, dict):
        raise SerializationError("corrupt compiled grammar: no metadata", reason="corrupt")
    if meta.get("layout") != layout:
        raise SerializationError(
            f"the compiled grammar was written by other formcast code (formcast "
            f"{meta.get('formcast')!r}, layout {meta.get('layout')!r}; this is formcast "
            f"{__version__}, layout {layout!r}): recompile it",
            reason="layout",
        )
    if meta.get("vocab") != vocab.fingerprint or meta.get("vocab_size") != vocab.vocab_size:
        raise SerializationError(
            f"the compiled grammar was compiled for vocabulary {str(meta.get('vocab'))[:16]}, "
            f"not {vocab.fingerprint[:16]} ({vocab.name!r}): load it with the tokenizer it was "
            "compiled for, or recompile it",
            reason="vocabulary",
        )
    # the arrays are read from ``data`` (read-only views; copies where writable or widened),
    # the sections when first used: a private copy of it unless it is immutable
    source = data if type(data) is bytes else bytes(view[blob_start:])
    offset = blob_start if source is data else 0
    main = memoryview(source)[offset : offset + main_len]
    dec = _Decoder(meta, main, source, offset, vocab, on_corrupt)
    with gc_paused(True):  # a load makes thousands of objects: no collector passes meanwhile
        return _decode_all(dec, meta)


def _decode_all(dec: _Decoder, meta: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    try:
        program = dec.dec(meta["program"])
        fields = {k: dec.dec(v) for k, v in meta["fields"].items()}
        for key_v, cls_v in meta.get("counted", ()):
            key, cls = dec.dec(key_v), dec.dec(cls_v)
            if not isinstance(cls, Classification):
                raise dec.bad("a counted classification")
            cfg_program._COUNTED_CLASSES.put(key, cls)
    except SerializationError:
        raise
    except _MALFORMED as e:
        raise _corrupt(e) from None
    if not hasattr(program, "token_mask") or not isinstance(fields, dict):
        raise SerializationError("corrupt compiled grammar: no program", reason="corrupt")
    return fields, program
