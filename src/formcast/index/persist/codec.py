"""The codec of serialized grammars: a compiled grammar's object graph as a tagged JSON tree
and numpy arrays (the container of :mod:`.container` holds both).

A compiled grammar is plain data — numpy tables, ints, strings, tuples, dicts — held by a few
formcast classes (the programs, their classifiers, the automata, the caches).  This writes
that graph, *including the lazily filled caches* (masks per state, position classifications,
token steps, the parser states they are keyed by), so that a grammar warmed by one process
loads warm in another.

The tree: ``["t", ...]`` a tuple, ``["a", i]`` array i, ``["av", i, first, end]`` rows of
array i (a pool of arrays stored as one, :mod:`.container`; ``["tav", i, first, n0, n1,
...]`` a tuple of consecutive rows of it), ``["o", "ByteDFA", n, {field:
value}]`` an object of an allow-listed class with the fields its class declares
(:mod:`.registry`), ``["z", s, field]`` a field written in lazy section s, ``["tz", d, x]``
nested tuples d deep (:mod:`.tuples`), ``["pda", n, auto, limits, far_count, initial state]``
the parser, ``["p", frames, accepting, error]`` a parser state over the flat frame table
``meta["frames"]``...  A lazy section's tree is stored as a JSON string (parsed on first use).

Lazy sections (a class's ``_persist_lazy``): the call-expanded lexer and the position
classifier of a :class:`~formcast.index.cfg_program.CfgProgram` are needed only by the first
mask of a state the file does not carry.  On load they are :class:`_LazyAttr` stand-ins: the
first attribute access checks the section's CRC, decodes it, sets the real values on the
program and forwards; a corrupt section raises SerializationError there (after the loader's
``on_corrupt``), before any of its data is used.  :func:`materialize` loads them at once.

Threat model: a cache directory is a trust boundary.  Loading never executes code from the
data: there is no pickle; JSON is parsed by the standard library; objects are created only for
the classes in :data:`~.registry.PLAIN_CLASSES` (without ``__init__``, only their declared
fields set), functions only from :data:`~.registry.FUNCTIONS`, arrays only of numeric dtypes
and inside the blob.  What a loader does *not* defend against is a file crafted by someone who
can write the directory: it can make masks wrong (allow tokens the constraint forbids) or make
the matcher raise.  The CRC catches accidental corruption, not tampering: give the cache
directory the permissions of the serving user (see docs/threat_model.md).

Lifetime: stateless functions (a loaded grammar keeps the file's bytes, or its read-only
memory map: its arrays are views into them).  Cost: O(size of the grammar and its caches) —
one pass to encode, one JSON parse and one CRC pass over the main region to load, plus
re-interning the parser states the caches are keyed by; a section costs its CRC and
decoding on first use.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import mmap
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..._gc import gc_paused
from ..._version import __version__
from ...automata.pda import Frame, ParserState, PushdownAutomaton
from ...automata.rules import GrammarAutomaton
from ...cache import StepMemo
from ...errors import SerializationError
from ...limits import ParserLimits
from ...vocab.trie import TokenTrie
from ...vocab.vocabulary import Vocabulary
from .. import cfg_program
from ..context import context_for
from .container import DTYPES, FORMAT_VERSION, ArrayReader, open_container, write_container
from .registry import (
    CODEC_LAZY,
    FIELD_SETS,
    FIELDS,
    FUNCTION_NAMES,
    FUNCTIONS,
    LAZY_FIELDS,
    NAMED_TUPLES,
    OMIT,
    PLAIN_CLASSES,
    instance_attrs,
)
from .tuples import SCALARS, sparse_tuple, tuple_depth, tuple_sparse

__all__ = ["dump_grammar", "load_grammar", "materialize"]

_LOCK = type(threading.Lock())
#: a lazy section being written: (field name -> value, path, the facts each field answers
#: unloaded, the tree's ``["z", index, field]`` nodes that refer to it)
_Deferred = tuple[dict[str, Any], str, dict[str, tuple[str, ...]], list[list[Any]]]
_RLOCK = type(threading.RLock())
_NO_LAZY: dict[str, tuple[str, ...]] = {}
#: class -> (its instances keep every attribute in their __dict__, it is mypyc-compiled)
_PLAIN_DICT: dict[type, tuple[bool, bool]] = {}


class _Encoder:
    """One serialization: the tagged tree, the arrays and the parser-frame table."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.arrays: list[np.ndarray] = []
        self.array_ids: dict[int, int] = {}
        self.array_nodes: list[list[list[Any]]] = []  # per array, the tree's nodes of it
        self.array_tuples: list[list[Any]] = []  # the tree's tuples of arrays
        self.memo: dict[int, int] = {}
        self.frames: list[list[Any]] = []
        self.frame_ids: dict[int, int] = {}
        self.keep: list[object] = []  # keeps encoded objects alive: ids stay unique
        self.pdas = 0
        # lazy sections: (field name -> value, path, facts per field, the ``["z", index,
        # field]`` nodes that refer to it), encoded last: those the classes declare, then
        # the format's own (CODEC_LAZY), which are numbered once all are known
        self.sections: list[_Deferred] = []
        self.late_sections: list[_Deferred] = []
        self.in_section = False

    def fail(self, path: str, what: str) -> SerializationError:
        return SerializationError(
            f"cannot serialize {what}: only plain data (numbers, strings, tuples, lists, "
            "dicts, numpy arrays of numbers and the classes in "
            "formcast.index.persist.PLAIN_CLASSES) can be written; add a plain-data class "
            "to PLAIN_CLASSES (declaring its fields) or give it an encoding in "
            "formcast.index.persist.codec",
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
            if all(type(x) in SCALARS for x in v):  # fast paths: flat tuples of scalars
                return ["ts", *v]
            if all(type(x) is tuple and all(type(y) in SCALARS for y in x) for x in v):
                return ["tt", *(list(x) for x in v)]
            nested = tuple_depth(v)
            if nested is not None and nested[0] <= 8:  # nested tuples (a grammar's call edges)
                # sparse: mostly empty (a rule's states without calls), only the others written
                return ["tz", nested[0], tuple_sparse(v)]
            node = ["t", *(self.enc(x, f"{path}[{i}]") for i, x in enumerate(v))]
            if all(type(x) is np.ndarray for x in v):  # (rows of one pool: see write_container)
                self.array_tuples.append(node)
            return node
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
            node = ["a", self.array(v, path)]
            self.array_nodes[node[1]].append(node)  # (where it is stored: write_container)
            return node
        if isinstance(v, np.generic):
            if v.dtype.char not in DTYPES:
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
        name = FUNCTION_NAMES.get(id(v))
        if name is not None:
            return ["fn", name]
        if t.__name__ in NAMED_TUPLES and NAMED_TUPLES[t.__name__] is t:
            return ["nt", t.__name__, *(self.enc(x, f"{path}.{f}") for f, x in zip(t._fields, v))]
        if PLAIN_CLASSES.get(t.__name__) is t:
            return self.obj(v, t.__name__, path)
        raise self.fail(path, f"{t.__module__}.{t.__qualname__}")

    def obj(self, v: Any, name: str, path: str) -> Any:
        """An object of an allow-listed class: the fields its class declares."""
        hit = self.memo.get(id(v))
        if hit is not None:
            return ["r", hit]
        n = self.memo[id(v)] = len(self.memo)
        self.keep.append(v)
        held = instance_attrs(v)
        undeclared = held.keys() - FIELD_SETS[name]
        if undeclared:
            cls = type(v)
            raise SerializationError(
                f"cannot serialize a {name} at {path}: it holds {sorted(undeclared)}, which "
                f"{cls.__module__}.{cls.__qualname__} does not declare as serialized fields: "
                "add them to its _persist_fields (or _persist_extra / __slots__), or to "
                "_serialize_omit when they are derived from the others",
                reason="unsupported",
                where=path,
            )
        omit = OMIT[name]
        lazy = LAZY_FIELDS.get(name, _NO_LAZY)
        attrs: dict[str, Any] = {}
        deferred: dict[str, Any] = {}
        refs: list[list[Any]] = []
        for k in FIELDS[name]:
            if k not in held:  # a slot never set
                continue
            x = held[k]
            if type(x) is _LazyAttr:  # loaded, never used since: its section's value
                x = x._section.value(x._name)
            if k in omit:
                attrs[k] = None
            elif k in lazy and x is not None and not self.in_section:
                deferred[k] = x  # written in a section of its own, after the main tree
                attrs[k] = ["z", -1, k]  # (its section's index: set by dump_grammar)
                refs.append(attrs[k])
            else:
                attrs[k] = self.enc(x, f"{path}.{k}")
        if deferred:
            late = deferred.keys() <= CODEC_LAZY.get(name, {}).keys()
            (self.late_sections if late else self.sections).append((deferred, path, lazy, refs))
        return ["o", name, n, attrs]

    def array(self, a: np.ndarray, path: str) -> int:
        hit = self.array_ids.get(id(a))
        if hit is not None:
            return hit
        if a.dtype.char not in DTYPES or a.dtype.hasobject:
            raise self.fail(path, f"a numpy array of dtype {a.dtype}")
        self.array_ids[id(a)] = len(self.arrays)
        self.arrays.append(a)
        self.array_nodes.append([])
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
    """The classifications of its vocabulary's context this program relies on (counted stack
    tops)."""
    if not isinstance(program, cfg_program.CfgProgram):
        return []
    sigs = set(program._counted._sigs.values())
    if not sigs:
        return []
    out = []
    for key, cls in program.context.cache(cfg_program.COUNTED_CLASSES).items():
        if key[0] in sigs and cls is not None:
            out.append([enc.enc(key, "counted.key"), enc.enc(cls, "counted")])
    return out


def _facts(obj: Any, names: tuple[str, ...]) -> dict[str, int]:
    """What ``obj`` *as loaded* (its ``_serialize_omit`` fields None) answers to the
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
    """Serialize a compiled grammar's ``fields`` (name → plain value) and ``program``.

    Raises:
        SerializationError: the graph holds something that is not plain data, or an attribute
            its class does not declare (``reason="unsupported"``, ``where`` the path).
    """
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
    sections = enc.sections + enc.late_sections
    for index, (_, _, _, refs) in enumerate(sections):
        for ref in refs:
            ref[1] = index
    for deferred, path, lazy, _ in sections:
        tree = {k: enc.enc(x, f"{path}.{k}") for k, x in deferred.items()}
        trees.append([tree, {k: _facts(x, lazy[k]) for k, x in deferred.items()}])
        bounds.append(len(enc.arrays))
    meta["frames"] = enc.frames
    return write_container(meta, enc.arrays, bounds, trees, enc.array_nodes, enc.array_tuples)


#: what decoding malformed data raises (SerializationError is a ValueError too: callers re-raise
#: it before catching these)
_MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError)


def _corrupt(e: Exception) -> SerializationError:
    """The typed error for data that made decoding raise ``e``."""
    what = f"corrupt compiled grammar: {type(e).__name__}: {e}"
    return SerializationError(what, reason="corrupt")


class _Section:
    """A lazy section of a loaded grammar: fields of one object (``owner``) whose tree and
    arrays are checked (CRC-32) and decoded on first use, then set on ``owner``.

    Sections are written in order, each after the main tree and the sections before it: a
    section may refer to their objects and arrays (the program's lexer to its rule
    automaton's analysis), so loading one loads those before it first (``others``: every
    section of the file by index; locks taken from the higher index down, never up)."""

    __slots__ = ("_dec", "_index", "_lock", "_on_corrupt", "_values", "others", "owner")

    def __init__(self, dec: _Decoder, index: int, owner: object) -> None:
        self._dec: _Decoder | None = dec
        self._index = index
        self.owner = owner
        self.others = dec.sections
        self._lock = threading.Lock()
        self._values: dict[str, Any] | None = None
        self._on_corrupt = dec.on_corrupt

    def value(self, name: str) -> Any:
        return self.load()[name]

    def load(self) -> dict[str, Any]:
        """The section's fields by name, loaded (and set on the owner) on the first call."""
        values = self._values
        if values is None:
            with self._lock:
                if self._values is None:
                    self._values = self._load()
                values = self._values
        return values

    def _load(self) -> dict[str, Any]:
        dec = self._dec
        assert dec is not None
        for j in range(self._index):  # what this section may refer to, loaded first
            earlier = self.others.get(j)
            if earlier is not None:
                earlier.load()
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
    """Stands for a field of a loaded grammar until its section is used: any attribute
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
    """Load now every lazy section of ``obj`` (a loaded program) and of the file it was loaded
    from (its rule automaton's too): checked and decoded, their fields set.  Raises
    SerializationError when a section is corrupt."""
    found: list[_LazyAttr] = []
    for v in list(instance_attrs(obj).values()):
        if type(v) is _LazyAttr:
            found.append(v)
        elif PLAIN_CLASSES.get(type(v).__name__) is type(v):  # (a field's object: one level)
            found += [x for x in instance_attrs(v).values() if type(x) is _LazyAttr]
    for v in found:
        for section in sorted(v._section.others.items()):
            section[1].load()
        v._value()


class _Decoder:
    def __init__(
        self,
        meta: dict[str, Any],
        main: memoryview,
        data: bytes | bytearray | memoryview | mmap.mmap,
        blob_start: int,
        vocab: Vocabulary,
        on_corrupt: Callable[[SerializationError], None] | None = None,
    ) -> None:
        self.vocab = vocab
        self.meta = meta
        self.data, self.blob_start = data, blob_start  # where the sections are read from
        self.reader = ArrayReader(meta["arrays"], main)
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
            return self.reader.array(v[1])
        if tag == "av":
            if len(v) != 4 or type(v[1]) is not int:
                raise self.bad("rows of a pooled array")
            return self.reader.view(v[1], v[2], v[3])
        if tag == "tav":  # a tuple of consecutive rows of one pool
            if type(v[1]) is not int:
                raise self.bad("rows of a pooled array")
            return self.reader.rows(v[1], v[2], v[3:])
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
            return sparse_tuple(v[2], v[1])
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
            cls = NAMED_TUPLES.get(v[1])
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
            if dt.char not in DTYPES:
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
            fn = FUNCTIONS.get(v[1])
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
            raise self.bad(f"fields of a {name}")
        declared = FIELD_SETS[name]
        lazy = LAZY_FIELDS.get(name, _NO_LAZY)
        values: dict[str, Any] = {}
        for k, x in attrs.items():
            if k not in declared:
                raise self.bad(f"attribute name {k!r} is not a declared field of {name}")
            if type(x) is list and x and x[0] == "z":
                if k not in lazy:
                    raise self.bad(f"lazy attribute {k!r}")
                values[k] = self.lazy(obj, k, x)
            else:
                values[k] = self.dec(x)
            if not plain:
                object.__setattr__(obj, k, values[k])
        if plain:
            obj.__dict__.update(values)
        return obj

    def lazy(self, owner: object, name: str, v: list[Any]) -> _LazyAttr:
        """The stand-in of field ``name`` of ``owner``, written in section ``v[1]``."""
        sections = self.meta.get("sections")
        if (
            len(v) != 3
            or type(v[1]) is not int
            or type(sections) is not list
            or not 0 <= v[1] < len(sections)
            or v[2] != name
        ):
            raise self.bad(f"lazy attribute {name!r}")
        entry = sections[v[1]]
        if type(entry) is not list or len(entry) != 5 or type(entry[3]) is not str:
            raise self.bad(f"section {v[1]}")
        if type(entry[4]) is not dict or name not in entry[4]:
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
        """Check (CRC-32) and decode section ``index``: its fields by name."""
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
            self.reader.regions[index + 1] = region
            fields = json.loads(tree)  # written as a string: parsed now, not at load
            if type(fields) is not dict or fields.keys() != self.meta["sections"][index][4].keys():
                raise self.bad(f"section {index}'s fields")
            return {k: self.dec(x) for k, x in fields.items()}
        except SerializationError:
            raise
        except _MALFORMED as e:
            raise _corrupt(e) from None

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


def load_grammar(
    data: bytes | bytearray | memoryview | mmap.mmap,
    vocab: Vocabulary,
    layout: str,
    *,
    on_corrupt: Callable[[SerializationError], None] | None = None,
) -> tuple[dict[str, Any], Any]:
    """``(fields, program)`` of a serialized grammar, bound to ``vocab``.

    The header, the metadata and the main region (every array but those of the lazy
    sections) are checked here; a lazy section is checked and decoded on its first use, and
    raises SerializationError there when it is corrupt, after calling ``on_corrupt(error)``
    (the disk cache drops the file).

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
    meta, source, offset, main = open_container(data)
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
    try:
        dec = _Decoder(meta, main, source, offset, vocab, on_corrupt)
    except SerializationError:
        raise
    except _MALFORMED as e:
        raise _corrupt(e) from None
    with gc_paused(True):  # a load makes thousands of objects: no collector passes meanwhile
        return _decode_all(dec, meta)


def _decode_all(dec: _Decoder, meta: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    try:
        program = dec.dec(meta["program"])
        fields = {k: dec.dec(v) for k, v in meta["fields"].items()}
        shared = meta.get("counted", ())
        counted = context_for(dec.vocab).cache(cfg_program.COUNTED_CLASSES) if shared else None
        for key_v, cls_v in shared:
            key, cls = dec.dec(key_v), dec.dec(cls_v)
            if not isinstance(cls, cfg_program.Classification):
                raise dec.bad("a counted classification")
            if counted is not None:
                counted.put(key, cls)
    except SerializationError:
        raise
    except _MALFORMED as e:
        raise _corrupt(e) from None
    if not hasattr(program, "token_mask") or not isinstance(fields, dict):
        raise SerializationError("corrupt compiled grammar: no program", reason="corrupt")
    return fields, program
