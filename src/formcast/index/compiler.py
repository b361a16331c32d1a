"""``GrammarCompiler``: compile constraints against one vocabulary, with a bounded cache.

Lifetime: per model.  Create one compiler per vocabulary and reuse it; compiled grammars are
cached by a key that includes the constraint *and* the vocabulary fingerprint, so a changed
tokenizer never reuses an old index.  Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..automata.dfa import compile_dfa
from ..config import CompileLimits
from ..errors import ConfigurationError, UnsatisfiableGrammarError
from ..grammar.regex import parse_regex
from ..vocab.vocabulary import Vocabulary
from .compiled import CompiledGrammar, RegexProgram, grammar_key

__all__ = ["GrammarCompiler"]


class GrammarCompiler:
    """Compiles regexes (and, through extensions, grammars and schemas) for one vocabulary.

    Args:
        vocab: the model's :class:`~formcast.vocab.vocabulary.Vocabulary`.
        limits: compile limits (:class:`~formcast.config.CompileLimits`).
        cache_size: compiled grammars kept (least recently used evicted); 0 disables caching.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        limits: CompileLimits | None = None,
        cache_size: int = 128,
    ) -> None:
        if not isinstance(vocab, Vocabulary):
            raise ConfigurationError(
                f"GrammarCompiler needs a formcast Vocabulary, got {type(vocab).__name__}; "
                "build one with Vocabulary.from_huggingface / from_tiktoken / from_gguf"
            )
        if cache_size < 0:
            raise ConfigurationError(f"cache_size must be >= 0, got {cache_size}")
        self.vocab = vocab
        self.limits = limits or CompileLimits()
        self.cache_size = cache_size
        self._cache: OrderedDict[str, CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _cached(
        self, kind: str, source: str, options: str, build: Callable[[], CompiledGrammar]
    ) -> CompiledGrammar:
        key = grammar_key(kind, source, options, self.vocab)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return hit
        compiled = build()
        with self._lock:
            self.misses += 1
            if self.cache_size:
                self._cache[key] = compiled
                self._cache.move_to_end(key)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return compiled

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def compile_regex(self, pattern: str, *, dialect: str = "python") -> CompiledGrammar:
        """Compile a regular expression (fullmatch semantics) to a :class:`CompiledGrammar`.

        Raises:
            GrammarSyntaxError, UnsupportedFeatureError, LimitExceededError,
            UnsatisfiableGrammarError (the pattern matches nothing).
        """
        if not isinstance(pattern, str):
            raise ConfigurationError(f"pattern must be str, got {type(pattern).__name__}")

        def build() -> CompiledGrammar:
            t0 = time.perf_counter()
            node = parse_regex(pattern, dialect=dialect, limits=self.limits)
            dfa = compile_dfa(node, self.limits)
            if dfa.is_empty:
                raise UnsatisfiableGrammarError(f"the regex {pattern!r} matches no string at all")
            program = RegexProgram(dfa, self.vocab)
            return CompiledGrammar(
                kind="regex",
                source=pattern,
                vocab=self.vocab,
                program=program,
                compile_seconds=time.perf_counter() - t0,
                options=f"dialect={dialect}",
            )

        return self._cached("regex", pattern, f"dialect={dialect}", build)
