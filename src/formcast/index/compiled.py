"""The compiled artifact: a grammar bound to a vocabulary, with its memoized token index.

:class:`CompiledGrammar` is what a :class:`~formcast.index.compiler.GrammarCompiler` returns.  It
holds a *program* — an object implementing :class:`~formcast.index.program.GrammarProgram`
(:class:`~formcast.index.regex_program.RegexProgram`,
:class:`~formcast.index.cfg_program.CfgProgram`) — which knows the grammar's states and
computes, once per state, the bitmask of allowed tokens.

Lifetime: per (grammar, vocabulary).  Logically immutable; its program's caches fill lazily and
are safe to share between threads and requests (each entry is computed fully before it is
published).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

from ..vocab.vocabulary import Vocabulary
from .program import GrammarProgram

__all__ = ["CompiledGrammar", "grammar_key"]


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
    """

    kind: str
    source: str
    vocab: Vocabulary
    program: GrammarProgram
    compile_seconds: float = 0.0
    warnings: tuple[str, ...] = ()
    options: str = ""
    compile_work: int = 0
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


def grammar_key(kind: str, source: str, options: str, vocab: Vocabulary) -> str:
    """Cache key of a compiled grammar: the constraint *and* the tokenizer fingerprint."""
    h = hashlib.sha256()
    for part in (kind, source, options, vocab.fingerprint):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()
