"""What a serialized grammar may hold: the plain-data classes, named tuples and functions, and
the fields each class declares beside itself.

A class is written field by field, and the fields are the ones *it* declares (the codec never
decides what a class holds):

* ``_persist_fields: ClassVar[tuple[str, ...]]`` when the class sets one (the classes that keep
  attributes in ``__dict__``, or hold one beyond their dataclass fields);
* else its dataclass fields and ``__slots__`` (both declarations beside the class), plus the
  attributes it lists in ``_persist_extra`` (a cached value set outside ``__init__``).

Two optional class-level declarations refine them: ``_serialize_omit`` (fields derived from
the others, written as None and rebuilt on first use after a load) and ``_persist_lazy``
(field → the zero-argument methods whose answers are written with it: the field is written
in a lazy section of its own, see :mod:`.codec`).  An instance holding an attribute its class
does not declare cannot be written (SerializationError names it), and a file naming one is
refused: a field added to a class without its declaration fails loudly, never silently.

The allow-list (:data:`PLAIN_CLASSES`) names each class once; a module with private persisted
classes exports them (``cfg_program.PERSISTED_CLASSES``), so this module imports no private
names.  Lifetime: module-level constants, built at import.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

from ..._version import __version__
from ...automata.analysis import GrammarAnalysis
from ...automata.dfa import ByteDFA
from ...automata.lexer import ExpandedLexer, LazyExpandedLexer
from ...automata.pda import Frame, ParserState, PushdownAutomaton
from ...automata.rules import GrammarAutomaton
from ...cache import LruCache
from ...ir.marks import UniqueItemsMark
from ...limits import CacheLimits, ParserLimits
from .. import cfg_program
from ..program import LimitStop, mask_weight
from ..regex_program import RegexProgram
from .container import FORMAT_VERSION

__all__ = [
    "CODEC_LAZY",
    "FUNCTIONS",
    "FUNCTION_NAMES",
    "LAZY_FIELDS",
    "NAMED_TUPLES",
    "OMIT",
    "PLAIN_CLASSES",
    "declared_fields",
    "instance_attrs",
    "layout_digest",
]


def _attr_names(cls: type, native: bool = False) -> list[str]:
    """The dataclass fields and ``__slots__`` of ``cls`` and its bases, sorted.

    ``native``: a class compiled with mypyc (:data:`formcast._native.NATIVE_MODULES`) keeps no
    ``__slots__`` in its ``__dict__``: its ``__mypyc_attrs__`` (the attributes mypyc gave it,
    the same names as the ``__slots__`` of its source) stand for them, so a class with
    ``__slots__`` declares the same fields compiled or not (tests/project/test_native_build.py
    compares the layout digests of both builds).  Off for the parser classes of
    :func:`layout_digest` (a compiled ``PushdownAutomaton`` has attributes where its source
    declares no slots)."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        slots = klass.__dict__.get("__slots__", None)
        if slots is None:
            slots = klass.__dict__.get("__mypyc_attrs__", ()) if native else ()
        for s in (slots,) if isinstance(slots, str) else slots:
            if s not in ("__weakref__", "__dict__"):
                names.append(s)
        if dataclasses.is_dataclass(klass):
            names.extend(f.name for f in dataclasses.fields(klass))
    return sorted(set(names))


def declared_fields(cls: type) -> tuple[str, ...]:
    """The fields ``cls`` declares as serialized (see the module docstring).

    Raises:
        TypeError: ``cls`` declares none (give it ``_persist_fields``).
    """
    declared = getattr(cls, "_persist_fields", None)
    if declared is not None:
        return tuple(declared)
    names = [*_attr_names(cls, native=True), *getattr(cls, "_persist_extra", ())]
    if not names:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} declares no serialized fields: give it "
            "_persist_fields (a ClassVar tuple of attribute names), dataclass fields or "
            "__slots__"
        )
    return tuple(names)


#: The classes whose instances are written field by field (their declared fields) and
#: re-created without ``__init__``: plain data only.  A grammar holding an instance of any
#: other class cannot be serialized (SerializationError names the attribute): add the class
#: here when it is plain data (and declare its fields beside it), or give it an encoding in
#: :mod:`.codec`.
PLAIN_CLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        ByteDFA,
        CacheLimits,
        ExpandedLexer,
        GrammarAnalysis,
        LazyExpandedLexer,
        GrammarAutomaton,
        LimitStop,
        LruCache,
        ParserLimits,
        RegexProgram,
        UniqueItemsMark,
        *cfg_program.PERSISTED_CLASSES,
    )
}
#: class name -> its declared fields (a tuple, and the same as a frozenset)
FIELDS: dict[str, tuple[str, ...]] = {n: declared_fields(c) for n, c in PLAIN_CLASSES.items()}
FIELD_SETS: dict[str, frozenset[str]] = {n: frozenset(f) for n, f in FIELDS.items()}
#: class name -> its derived fields (written as None, rebuilt after a load)
OMIT: dict[str, frozenset[str]] = {
    n: frozenset(getattr(c, "_serialize_omit", ())) for n, c in PLAIN_CLASSES.items()
}
#: fields the format itself writes in a lazy section (beside the classes' own
#: ``_persist_lazy``): a rule automaton's FIRST / FOLLOW analysis, which only the
#: call-expanded lexer reads (building it or its rows: never a mask the file carries, nor a
#: parser step), so a load builds none of its ~3 arrays per rule.  Its section is written
#: before the program's lexer section, which refers to it (see the codec's ``_Section``).
CODEC_LAZY: dict[str, dict[str, tuple[str, ...]]] = {"GrammarAutomaton": {"_analysis": ()}}
#: class name -> field -> the methods answered unloaded (fields written in a lazy section)
LAZY_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    n: {**CODEC_LAZY.get(n, {}), **(getattr(c, "_persist_lazy", None) or {})}
    for n, c in PLAIN_CLASSES.items()
    if getattr(c, "_persist_lazy", None) or n in CODEC_LAZY
}
for _name, _cls in PLAIN_CLASSES.items():  # a declaration naming no field is a typo
    _extra = (OMIT[_name] | set(LAZY_FIELDS.get(_name, ()))) - FIELD_SETS[_name]
    if _extra:
        raise TypeError(f"{_name} omits or defers fields it does not declare: {sorted(_extra)}")
#: named tuples, written as their fields
NAMED_TUPLES: dict[str, type] = {c.__name__: c for c in cfg_program.PERSISTED_TUPLES}
#: the functions a serialized object may hold (cache weights)
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "mask_weight": mask_weight,
    **cfg_program.PERSISTED_FUNCTIONS,
}
FUNCTION_NAMES = {id(f): name for name, f in FUNCTIONS.items()}


def layout_digest(extra: tuple[str, ...] = ()) -> str:
    """A digest of the code the format depends on: :data:`FORMAT_VERSION`, the formcast
    version, the declared fields of every class in :data:`PLAIN_CLASSES` (derived and lazy
    ones marked), the named tuples', the parser's frames and states, and ``extra`` (the
    compiled grammar's field names).  Part of every disk-cache key, so files written by
    other code are never read."""
    h = hashlib.sha256()
    parts = [str(FORMAT_VERSION), __version__, *extra]
    for name in sorted(PLAIN_CLASSES):
        marks = {**{k: "~" for k in OMIT[name]}, **{k: "*" for k in LAZY_FIELDS.get(name, ())}}
        parts.append(f"{name}:{','.join(f + marks.get(f, '') for f in FIELDS[name])}")
    for name, cls in sorted(NAMED_TUPLES.items()):
        parts.append(f"{name}:{','.join(getattr(cls, '_fields', ()))}")
    for cls in (Frame, ParserState, PushdownAutomaton):
        parts.append(f"{cls.__name__}:{','.join(_attr_names(cls))}")
    h.update("\n".join(parts).encode())
    return h.hexdigest()[:32]


def instance_attrs(obj: object) -> dict[str, Any]:
    """Every attribute ``obj`` holds (``__dict__``, set slots, a mypyc class's attributes),
    declared or not: what the codec checks against the declaration."""
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
