"""The compiled artifact: a grammar bound to a vocabulary, with its memoized token index.

:class:`CompiledGrammar` is what a :class:`~formcast.index.compiler.GrammarCompiler` returns.  It
holds a *program* — an object implementing :class:`~formcast.index.program.GrammarProgram`
(:class:`~formcast.index.regex_program.RegexProgram`,
:class:`~formcast.index.cfg_program.CfgProgram`) — which knows the grammar's states and
computes, once per state, the bitmask of allowed tokens.

Lifetime: per (grammar, vocabulary).  Logically immutable; its program's caches fill lazily and
are safe to share between threads and requests (each entry is computed fully before it is
published).  :meth:`CompiledGrammar.serialize` writes it, caches included, in the explicit
format of :mod:`formcast.index.serialize` (no pickle); :meth:`CompiledGrammar.deserialize`
loads it for the same vocabulary in any process.
"""

from __future__ import annotations

import hashlib
import mmap
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from ..errors import SerializationError
from ..ir.marks import UniqueItemsMark
from ..vocab.vocabulary import Vocabulary
from .cfg_program import CfgProgram
from .persist import dump_grammar, layout_digest, load_grammar, materialize
from .program import GrammarProgram
from .programs.dispatch import MARKED_PROGRAMS, unique_items_program

__all__ = ["CompiledGrammar", "grammar_key", "serialization_layout"]


@dataclass(frozen=True, eq=False)
class CompiledGrammar:
    """An immutable grammar compiled against one vocabulary.

    Attributes:
        kind: ``"regex"``, ``"grammar"``, ``"json_schema"``...
        source: the constraint as given (pattern text, grammar text, canonical schema JSON).
        vocab: the vocabulary it was compiled for.
        program: the state machine and token index (see :class:`GrammarProgram`).
        compile_seconds: wall time spent compiling.
        warnings: what a lenient compile ignored (empty when strict).
        compile_work: the fuel the compile used (units of ``CompileLimits.max_compile_work``):
            deterministic, the same on any machine and whatever was compiled before.
        unique_items: the arrays whose ``uniqueItems`` the matcher checks at run time
            (:class:`~formcast.ir.marks.UniqueItemsMark`, plain data; the grammar IR's
            ``marks``).  When there are any, ``program`` already is the run-time check around
            the pushdown program (:func:`~formcast.index.programs.dispatch.unique_items_program`):
            a matcher runs ``program`` as it is; the serialized form holds the pushdown
            program and the marks, and a load wraps it again.
    """

    kind: str
    source: str
    vocab: Vocabulary
    program: GrammarProgram
    compile_seconds: float = 0.0
    warnings: tuple[str, ...] = ()
    options: str = ""
    compile_work: int = 0
    unique_items: tuple[UniqueItemsMark, ...] = ()
    _fingerprint: list[str] = field(default_factory=list, repr=False)

    @property
    def vocab_size(self) -> int:
        return self.vocab.vocab_size

    @property
    def fingerprint(self) -> str:
        """Hash of (kind, source, options, vocabulary fingerprint): the cache key."""
        if not self._fingerprint:
            self._fingerprint.append(grammar_key(self.kind, self.source, self.options, self.vocab))
        return self._fingerprint[0]

    def cache_info(self) -> dict[str, int]:
        return self.program.cache_info()

    def nbytes(self) -> int:
        """Bytes held by this grammar (its program's tables and caches), by formcast's own
        accounting; what the compiler's ``CacheLimits.grammar_cache_bytes`` counts."""
        measure = getattr(self.program, "nbytes", None)
        return int(measure()) if callable(measure) else 0

    def warm_up(self, max_seconds: float = 0.5, stop: threading.Event | None = None) -> int:
        """Precompute token classifications for up to ``max_seconds`` (or until ``stop`` is set).

        Masks are otherwise computed lazily on a state's first visit (milliseconds each); warming
        up moves that cost off the decoding path.  Safe to call from a background thread, e.g.
        while the model processes the prompt (``formcast.generate`` does).  Returns the number
        of states or positions prepared.
        """
        import time

        deadline = time.perf_counter() + max_seconds

        def should_stop() -> bool:
            return time.perf_counter() > deadline or (stop is not None and stop.is_set())

        return self.program.warm_up(should_stop)

    # -- persistence ----------------------------------------------------------------------------
    def serialize(self) -> bytes:
        """This grammar as bytes, with every mask, classification and token step computed so
        far (a warm grammar loads warm), in the explicit format of
        :mod:`formcast.index.serialize`: a format version, the vocabulary fingerprint, a
        checksum; no pickle.  Every dataclass field except ``vocab`` is written (``program``
        through its plain data), so a field added later is carried or refused, never dropped.

        Safe while other threads use the grammar (each cache is snapshotted).  O(size of the
        tables and caches).

        Raises:
            SerializationError: some field or cache holds an object that is not plain data
                (``reason="unsupported"``, ``where`` names it).
        """
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _BOUND}
        return dump_grammar(values, _stored(self.program), self.vocab, serialization_layout())

    @classmethod
    def deserialize(
        cls,
        data: bytes | bytearray | memoryview | mmap.mmap,
        vocab: Vocabulary,
        *,
        on_corrupt: Callable[[SerializationError], None] | None = None,
    ) -> CompiledGrammar:
        """Load a grammar written by :meth:`serialize`, for ``vocab``.

        ``data`` may be a read-only memory map of the file (``DiskCache.get(mapped=True)``):
        the grammar's arrays are views into it (it lives as long as they do).

        Loading executes no code from ``data`` (see the threat model in
        :mod:`formcast.index.serialize`): only allow-listed plain-data classes are created.
        Masks are bit-identical to those of the grammar that was written.  The tables that
        only a state missing from the file needs (the call-expanded lexer, the position
        classifier) are checked and decoded on their first use (:meth:`load_sections` does
        it now); a corrupt one raises SerializationError there, after ``on_corrupt(error)``.

        Raises:
            SerializationError: another format version or formcast code layout, another
                vocabulary (its fingerprint differs), truncated or corrupt data.
        """
        values, program = load_grammar(data, vocab, serialization_layout(), on_corrupt=on_corrupt)
        obj = cls.__new__(cls)
        for name in _STORED if cls is CompiledGrammar else _stored_fields(cls):
            if name not in values:
                raise SerializationError(
                    f"the serialized grammar has no field {name!r}: recompile it",
                    reason="layout",
                )
            object.__setattr__(obj, name, values[name])
        object.__setattr__(obj, "vocab", vocab)
        marks = values.get("unique_items") or ()
        if marks and isinstance(program, CfgProgram):  # the run-time check, as compiled
            program = unique_items_program(program, tuple(marks))
        object.__setattr__(obj, "program", program)
        return obj

    def load_sections(self) -> None:
        """Check and decode now what :meth:`deserialize` left for first use (a no-op for a
        grammar compiled in this process).  Raises SerializationError when it is corrupt."""
        materialize(_stored(self.program))


def _stored(program: GrammarProgram) -> GrammarProgram:
    """The program as serialized: the pushdown program inside a run-time ``uniqueItems``
    check (rebuilt from the marks on load), else ``program`` itself."""
    if isinstance(program, MARKED_PROGRAMS):
        return program.cfg
    return program


#: fields bound at load time rather than written: the vocabulary (given to ``deserialize``)
#: and the program (written through its own plain data)
_BOUND = frozenset({"vocab", "program"})


def _stored_fields(cls: type) -> tuple[str, ...]:
    """The names of the dataclass fields of ``cls`` that ``serialize`` writes."""
    return tuple(f.name for f in fields(cls) if f.name not in _BOUND)


#: :class:`CompiledGrammar`'s written fields, in order (a constant of the class)
_STORED = _stored_fields(CompiledGrammar)


def serialization_layout() -> str:
    """The layout digest of serialized grammars (:func:`~formcast.index.serialize.layout_digest`
    over :class:`CompiledGrammar`'s fields): part of every disk-cache key."""
    if not _LAYOUT:
        _LAYOUT.append(layout_digest(tuple(f.name for f in fields(CompiledGrammar))))
    return _LAYOUT[0]


_LAYOUT: list[str] = []


def grammar_key(kind: str, source: str, options: str, vocab: Vocabulary) -> str:
    """Cache key of a compiled grammar: the constraint *and* the tokenizer fingerprint."""
    # the SHA-256 of each part followed by a NUL byte, hashed in one call
    text = f"{kind}\0{source}\0{options}\0{vocab.fingerprint}\0"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
