"""``GrammarCompiler``: compile constraints against one vocabulary, with a bounded cache.

Lifetime: per model.  Create one compiler per vocabulary and reuse it; compiled grammars are
cached by a key that includes the constraint *and* the vocabulary fingerprint, so a changed
tokenizer never reuses an old index.  Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .._gc import gc_paused
from ..automata.regular import compile_dfa
from ..automata.rules import compile_grammar_automaton, has_counted_repeat
from ..cache import LruCache
from ..errors import ConfigurationError, UnsatisfiableGrammarError
from ..frontends.jsonschema.options import JsonSchemaOptions
from ..frontends.regex import parse_regex
from ..ir.nodes import Grammar, Rule
from ..limits import (
    CacheLimits,
    CompileLimits,
    ParserLimits,
    WorkBudget,
    compile_scope,
    current_budget,
)
from ..vocab.vocabulary import Vocabulary
from .cfg_program import CfgProgram
from .compiled import CompiledGrammar, grammar_key
from .program import GrammarProgram
from .regex_program import RegexProgram

__all__ = ["GrammarCompiler"]

#: The token index's exit byte for context-free grammars (see
#: :class:`~formcast.index.cfg_program.CfgProgram`): JSON's ``"``, which ends the permissive
#: lexemes (string bodies) of JSON Schema, the builtin JSON grammar and most grammars' string
#: literals.  Masks are exact for any byte; this one makes string bodies share their walks.
_JSON_EXIT_BYTE = ord('"')


class GrammarCompiler:
    """Compiles regexes (and, through extensions, grammars and schemas) for one vocabulary.

    Args:
        vocab: the model's :class:`~formcast.vocab.vocabulary.Vocabulary`.
        limits: compile limits (:class:`~formcast.limits.CompileLimits`).
        cache_size: compiled grammars kept (least recently used evicted); 0 disables caching.
        cache_limits: byte budgets of the caches (:class:`~formcast.limits.CacheLimits`): the
            compiled grammars kept here (``grammar_cache_bytes``, each grammar counted with
            its caches) and each grammar's masks, token steps and parser caches.
        pause_gc: pause Python's cyclic garbage collector while a grammar compiles (about 30%
            of compile time is otherwise spent scanning short-lived containers; reference
            counting still frees memory, and the collector's previous state is restored, see
            :func:`formcast._gc.gc_paused`).  False leaves the collector alone.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        limits: CompileLimits | None = None,
        parser_limits: ParserLimits | None = None,
        cache_size: int = 128,
        pause_gc: bool = True,
        cache_limits: CacheLimits | None = None,
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
        self.parser_limits = parser_limits or ParserLimits()
        self.cache_size = cache_size
        self.pause_gc = pause_gc
        self.cache_limits = cache_limits or CacheLimits()
        self._cache: LruCache[str, CompiledGrammar] = LruCache(
            cache_size,
            max_weight=self.cache_limits.grammar_cache_bytes,
            weight=lambda g: g.nbytes(),
        )
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _budget(self, seconds: float | None = None) -> WorkBudget:
        """A fresh fuel tank for one compile: ``limits.max_compile_work`` units, and the
        tighter of ``limits.max_compile_seconds`` and ``seconds`` as its deadline."""
        caps = [x for x in (self.limits.max_compile_seconds, seconds) if x is not None]
        return WorkBudget(self.limits.max_compile_work, min(caps) if caps else None)

    def _cached(
        self,
        kind: str,
        source: str,
        options: str | None,
        build: Callable[[WorkBudget], CompiledGrammar],
        *,
        seconds: float | None = None,
    ) -> CompiledGrammar:
        """The cached grammar of ``(kind, source, options)``, else ``build(budget)`` run under
        one fresh budget (made current by :func:`~formcast.limits.compile_scope`, so every
        stage, front-end included, charges the same fuel and sees the same deadline).
        ``options=None``: the constraint cannot be keyed exactly (it is built, not cached)."""
        key = None if options is None else grammar_key(kind, source, options, self.vocab)
        if key is not None:
            _, hit = self._cache.get(key)
            if hit is not None:
                with self._lock:
                    self.hits += 1
                return hit
        budget = self._budget(seconds)
        with gc_paused(self.pause_gc), compile_scope(budget):
            compiled = build(budget)
        with self._lock:
            self.misses += 1
        if self.cache_size and key is not None:
            # grammars' caches grew since they were added: re-measure, then evict to fit
            self._cache.put(key, compiled)
            self._cache.reweigh()
        return compiled

    @property
    def cache_bytes(self) -> int:
        """Bytes of the compiled grammars kept (as measured at the last insertion)."""
        return self._cache.total_weight

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def compile_regex(self, pattern: str, *, dialect: str = "ecma") -> CompiledGrammar:
        """Compile a regular expression (fullmatch semantics) to a :class:`CompiledGrammar`.

        Raises:
            GrammarSyntaxError, UnsupportedFeatureError, LimitExceededError,
            UnsatisfiableGrammarError (the pattern matches nothing).
        """
        if not isinstance(pattern, str):
            raise ConfigurationError(f"pattern must be str, got {type(pattern).__name__}")

        def build(budget: WorkBudget) -> CompiledGrammar:
            t0 = time.perf_counter()
            node = parse_regex(pattern, dialect=dialect, limits=self.limits)
            program: GrammarProgram
            if has_counted_repeat(node):
                # a long bounded repeat (``.{0,5000}``) is counted by the parser, not unrolled
                try:
                    program = self._program_for(
                        Grammar((Rule("regex", node),), "regex"), budget=budget
                    )
                except UnsatisfiableGrammarError:
                    raise UnsatisfiableGrammarError(
                        f"the regex {pattern!r} matches no string at all"
                    ) from None
            else:
                dfa = compile_dfa(node, self.limits, budget)  # within limits.max_compile_work
                if dfa.is_empty:
                    raise UnsatisfiableGrammarError(
                        f"the regex {pattern!r} matches no string at all"
                    )
                program = RegexProgram(
                    dfa, self.vocab, budget=budget, cache_limits=self.cache_limits
                )
            return CompiledGrammar(
                kind="regex",
                source=pattern,
                vocab=self.vocab,
                program=program,
                compile_seconds=time.perf_counter() - t0,
                options=f"dialect={dialect}",
                compile_work=budget.used,
            )

        return self._cached("regex", pattern, f"dialect={dialect}", build)

    # -- context-free grammars ------------------------------------------------------------------
    def _program_for(
        self,
        grammar: Grammar,
        *,
        expand_calls: bool = True,
        budget: WorkBudget | None = None,
        pushdown: bool = False,
        minimize: bool = True,
        exit_byte: int | None = _JSON_EXIT_BYTE,
    ) -> GrammarProgram:
        """The program of a grammar: one DFA when it is regular (unless ``pushdown``), else
        the pushdown program, whose token index cuts ``exit_byte`` for its shared walks.
        JSON Schema asks for the pushdown program even for regular grammars: its token index
        walks every string body once per process (the exit-byte cut, shared walks), where the
        DFA program walks each string position of each grammar on its own."""
        # one fuel tank (and deadline) for every stage: the compile's, else a fresh one
        budget = budget or current_budget() or self._budget()
        auto = compile_grammar_automaton(
            grammar, self.limits, budget=budget, expand_calls=expand_calls, minimize=minimize
        )
        if auto.is_regular and not pushdown:
            return RegexProgram(
                auto.dfas[0], self.vocab, budget=budget, cache_limits=self.cache_limits
            )
        return CfgProgram(
            auto,
            self.vocab,
            self.parser_limits,
            budget=budget,
            cache_limits=self.cache_limits,
            exit_byte=exit_byte,
        )

    def compile_grammar_ir(
        self,
        grammar: Grammar,
        *,
        kind: str = "grammar",
        source: str | None = None,
        warnings: tuple[str, ...] = (),
    ) -> CompiledGrammar:
        """Compile a grammar IR (what every front-end produces).

        Regular grammars get the DFA program; others the pushdown program.

        Raises:
            UnsupportedFeatureError (left recursion too large to rewrite),
            UnsatisfiableGrammarError,
            LimitExceededError, GrammarError (undefined rules).
        """
        src = source if source is not None else repr(grammar)

        def build(budget: WorkBudget) -> CompiledGrammar:
            t0 = time.perf_counter()
            program = self._program_for(grammar, budget=budget)
            return CompiledGrammar(
                kind=kind,
                source=src,
                vocab=self.vocab,
                program=program,
                compile_seconds=time.perf_counter() - t0,
                warnings=warnings,
                compile_work=budget.used,
            )

        return self._cached(kind, src, "", build)

    def compile_grammar(
        self, text: str, *, syntax: str = "gbnf", start: str | None = None
    ) -> CompiledGrammar:
        """Compile a grammar written in GBNF (llama.cpp) or Lark (llguidance dialect).

        Raises:
            GrammarSyntaxError (with line and column), UnsupportedFeatureError,
            UnsatisfiableGrammarError, LimitExceededError.
        """
        if syntax not in ("gbnf", "lark"):
            raise ConfigurationError(f"unknown grammar syntax {syntax!r}; use 'gbnf' or 'lark'")

        def build(budget: WorkBudget) -> CompiledGrammar:
            t0 = time.perf_counter()
            if syntax == "gbnf":
                from ..frontends.gbnf import parse_gbnf

                ir = parse_gbnf(text, start=start or "root")
            else:
                from ..frontends.lark import parse_lark

                ir = parse_lark(text, start=start or "start")
            program = self._program_for(ir, budget=budget)
            return CompiledGrammar(
                kind=syntax,
                source=text,
                vocab=self.vocab,
                program=program,
                compile_seconds=time.perf_counter() - t0,
                options=f"start={start}",
                compile_work=budget.used,
            )

        return self._cached(syntax, text, f"start={start}", build)

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        """Any JSON value (RFC 8259) with bounded whitespace between tokens and bounded number
        digits (:func:`~formcast.frontends.builtin_json.builtin_json_grammar`)."""
        from ..frontends.builtin_json import builtin_json_grammar

        return self.compile_grammar_ir(builtin_json_grammar(), kind="builtin_json", source="json")

    def compile_json_schema(
        self, schema: Any, options: JsonSchemaOptions | None = None
    ) -> CompiledGrammar:
        """Compile a JSON Schema (dict, JSON text, bool, or a Pydantic model class).

        The schema is read and checked once, by
        :func:`~formcast.frontends.jsonschema.source.load_schema`, and handed to the front-end
        as read.  See docs/json_schema.md for the supported keywords; unsupported ones fail
        closed with
        :class:`~formcast.errors.UnsupportedFeatureError` unless ``options.lenient``.
        """
        # (imported here: the front-end costs ``import formcast`` ~0.2 s, and most uses of a
        # compiler never compile a schema)
        from ..frontends.jsonschema.api import schema_to_grammar
        from ..frontends.jsonschema.source import load_schema

        opts = options if options is not None else JsonSchemaOptions()
        if not isinstance(opts, JsonSchemaOptions):
            raise ConfigurationError(
                f"options must be a JsonSchemaOptions, got {type(opts).__name__}"
            )
        loaded = load_schema(schema, opts)
        opts_key = opts.cache_key()

        def build(budget: WorkBudget) -> CompiledGrammar:
            t0 = time.perf_counter()
            grammar, ignored = schema_to_grammar(loaded, opts)
            # call-site expansion copies "any value" into every undeclared-member slot:
            # measured on MaskBench it triples compile time and does not speed masks up
            program = self._program_for(
                grammar, expand_calls=False, budget=budget, pushdown=True, minimize=False
            )
            return CompiledGrammar(
                kind="json_schema",
                source=loaded.canonical,
                vocab=self.vocab,
                program=program,
                compile_seconds=time.perf_counter() - t0,
                warnings=tuple(ignored),
                options=opts_key if opts_key is not None else repr(opts),
                compile_work=budget.used,
            )

        return self._cached(
            "json_schema", loaded.canonical, opts_key, build, seconds=opts.max_compile_seconds
        )
