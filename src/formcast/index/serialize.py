"""Persistent compiled grammars: the explicit binary format behind ``CompiledGrammar.serialize``.

A compiled grammar is plain data — numpy tables, ints, strings, tuples, dicts — held by a few
formcast classes (the programs, their classifiers, the automata, the caches).  This module
writes that object graph, *including the lazily filled caches* (masks per state, position
classifications, token steps, the parser states they are keyed by), so that a grammar warmed
by one process loads warm in another.

Format (little-endian)::

    header  8s magic b"FCGRAMMR" | u32 format version | u32 flags (0) | u64 meta length
            | u64 blob length | u32 CRC-32 of meta + blob | u32 reserved (0)
    meta    UTF-8 JSON: the vocabulary fingerprint, the code layout digest, the grammar's
            fields and program as a tagged tree (``["t", ...]`` a tuple, ``["a", i]`` array i,
            ``["o", "ByteDFA", n, {attr: value}]`` an object of an allow-listed class...),
            the parser frames as a flat table, and the array directory
    blob    every numpy array's bytes, each at a 64-byte aligned offset (arrays are views
            into one private copy of the blob; large boolean arrays are stored as bits and
            large tables of small non-negative ints as uint16, restored on load)

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

Lifetime: stateless functions.  Cost: O(size of the grammar and its caches) — one pass to
encode, one JSON parse and one CRC pass to load (about 2 GB/s), plus re-interning the parser
states the caches are keyed by.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
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
from ..automata.lexer import ExpandedLexer
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
    _RuleClassifier,
)
from .program import LimitStop, mask_weight
from .regex_program import RegexProgram

__all__ = ["FORMAT_VERSION", "PLAIN_CLASSES", "dump_grammar", "layout_digest", "load_grammar"]

#: Bumped whenever the encoding itself changes (the layout digest covers changes of classes).
FORMAT_VERSION = 1

_MAGIC = b"FCGRAMMR"
_HEAD = struct.Struct("<8sIIQQII")
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
        GrammarAutomaton,
        LimitStop,
        LruCache,
        ParserLimits,
        RegexProgram,
        UniqueItemsMark,
        _CountedClassifier,
        _ExitSplitClassifier,
        _RuleClassifier,
    )
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
            attrs = {
                k: None if k in omit else self.enc(x, f"{path}.{k}")
                for k, x in _instance_attrs(v).items()
            }
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


def _pack(c: np.ndarray) -> tuple[np.ndarray, str]:
    """``c`` as stored: large boolean arrays as bits (``"bits"``), large integer tables whose
    values fit as ``uint16`` (``"u2"``: automaton tables, whose states number < 65,536);
    else ``c`` itself (``""``).  Halves the bytes read and checksummed on load."""
    if c.size < _PACK_MIN:
        return c, ""
    if c.dtype == np.bool_:
        return np.packbits(c.reshape(-1)), "bits"
    if c.dtype.kind in "iu" and c.dtype.itemsize > 2 and int(c.min()) >= 0 and int(c.max()) < 65536:
        return c.astype("<u2"), "u2"
    return c, ""


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
    meta["frames"] = enc.frames
    directory = []
    offset = 0
    chunks: list[bytes | memoryview] = []
    for a in enc.arrays:
        c = np.ascontiguousarray(a)
        pad = -offset % _ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        entry: list[Any] = [c.dtype.str, list(c.shape), offset, bool(a.flags.writeable)]
        c, packing = _pack(c)
        if packing:  # stored narrower: the loader restores ``entry[0]``
            entry.append(packing)
        directory.append(entry)
        buf = c.reshape(-1).view(np.uint8).data if c.size else b""
        chunks.append(buf)
        offset += c.nbytes
    meta["arrays"] = directory
    meta_bytes = json.dumps(meta, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    blob = b"".join(chunks)
    crc = zlib.crc32(blob, zlib.crc32(meta_bytes))
    head = _HEAD.pack(_MAGIC, FORMAT_VERSION, 0, len(meta_bytes), len(blob), crc, 0)
    return b"".join((head, meta_bytes, blob))


class _Decoder:
    def __init__(self, meta: dict[str, Any], blob: memoryview, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.blob = blob
        self.directory = meta["arrays"]
        self.arrays: dict[int, np.ndarray] = {}
        self.memo: dict[int, Any] = {}
        self.frame_table = meta["frames"]
        self.frames: list[Frame] = []
        self.pda: PushdownAutomaton | None = None

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
        native = "__mypyc_attrs__" in cls.__dict__
        obj: Any = cast(Any, cls).__new__(cls) if native else object.__new__(cls)
        self.memo[n] = obj
        for k, x in attrs.items():
            if not (type(k) is str and k.isidentifier()) or k.startswith("__"):
                raise self.bad(f"attribute name {k!r}")
            object.__setattr__(obj, k, self.dec(x))
        return obj

    def array(self, i: int) -> np.ndarray:
        hit = self.arrays.get(i)
        if hit is not None:
            return hit
        entry = self.directory[i]
        dtype_str, shape, offset, writeable = entry[:4]
        dt = _DTYPE_OF.get(dtype_str)
        if dt is None:
            dt = np.dtype(dtype_str)
            if dt.char not in _DTYPES or dt.hasobject:
                raise self.bad(f"array dtype {dtype_str!r}")
            _DTYPE_OF[dtype_str] = dt
        if not all(type(s) is int and s >= 0 for s in shape):
            raise self.bad(f"array shape {shape!r}")
        count = math.prod(shape)
        packing = entry[4] if len(entry) > 4 else ""
        stored, n = {"": (dt, count), "u2": (_U2, count), "bits": (_U1, (count + 7) // 8)}.get(
            packing, (None, 0)
        )
        if stored is None:
            raise self.bad(f"array packing {packing!r}")
        if offset < 0 or offset + n * stored.itemsize > len(self.blob):
            raise self.bad(f"array {i} lies outside the data")
        raw = np.frombuffer(self.blob, dtype=stored, count=n, offset=offset)
        if packing == "u2":
            raw = raw.astype(dt)
        elif packing == "bits":
            if dt != np.bool_:
                raise self.bad("bit-packed array of a non-boolean dtype")
            raw = np.unpackbits(raw, count=count).view(np.bool_)
        a = raw.reshape(shape)
        if not writeable:
            a.setflags(write=False)
        self.arrays[i] = a
        return a

    def make_pda(self, v: list[Any]) -> PushdownAutomaton:
        _, n, auto_v, limits_v, far_count = v
        auto, limits = self.dec(auto_v), self.dec(limits_v)
        if self.pda is not None:
            raise self.bad("a second pushdown automaton")
        if not isinstance(auto, GrammarAutomaton) or not isinstance(limits, ParserLimits):
            raise self.bad("the pushdown automaton's grammar or limits")
        if far_count is not None and type(far_count) is not int:
            raise self.bad("far_count")
        pda = PushdownAutomaton(auto, limits, far_count=far_count)
        self.memo[n] = self.pda = pda
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


def read_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int, int]:
    """``(format version, meta length, blob length, crc)``; SerializationError when ``data``
    is not a compiled grammar or is truncated."""
    if len(data) < _HEAD.size:
        raise SerializationError(
            f"truncated compiled grammar: {len(data)} bytes, the header alone is {_HEAD.size}",
            reason="truncated",
        )
    magic, version, _flags, meta_len, blob_len, crc, _ = _HEAD.unpack_from(data, 0)
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
    return version, meta_len, blob_len, crc


def load_grammar(
    data: bytes | bytearray | memoryview, vocab: Vocabulary, layout: str
) -> tuple[dict[str, Any], Any]:
    """``(fields, program)`` of a serialized grammar, bound to ``vocab``.

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
    _, meta_len, _, crc = read_header(data)
    view = memoryview(data)
    meta_bytes = view[_HEAD.size : _HEAD.size + meta_len]
    # the arrays are views into one private, writable copy (writable arrays stay writable)
    blob = memoryview(bytearray(view[_HEAD.size + meta_len :]))
    if zlib.crc32(blob, zlib.crc32(meta_bytes)) != crc:
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
    dec = _Decoder(meta, blob, vocab)
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
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as e:
        raise SerializationError(
            f"corrupt compiled grammar: {type(e).__name__}: {e}", reason="corrupt"
        ) from None
    if not hasattr(program, "token_mask") or not isinstance(fields, dict):
        raise SerializationError("corrupt compiled grammar: no program", reason="corrupt")
    return fields, program
