"""``GrammarCompiler``: compile constraints against one vocabulary, with a bounded cache.

Lifetime: per model.  Create one compiler per vocabulary and reuse it; compiled grammars are
cached by a key that includes the constraint *and* the vocabulary fingerprint, so a changed
tokenizer never reuses an old index.  Thread-safe.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .._gc import gc_paused
from ..automata.dfa import compile_dfa
from ..automata.grammar_fsm import compile_grammar_automaton, has_counted_repeat
from ..automata.pda import ParserLimits
from ..config import CompileLimits, WorkBudget, compile_scope
from ..errors import ConfigurationError, UnsatisfiableGrammarError
from ..grammar.ir import Grammar, Rule
from ..grammar.regex import parse_regex
from ..vocab.vocabulary import Vocabulary
from .cfg_program import CfgProgram
from .compiled import CompiledGrammar, GrammarProgram, RegexProgram, grammar_key

__all__ = ["GrammarCompiler"]


class GrammarCompiler:
    """Compiles regexes (and, through extensions, grammars and schemas) for one vocabulary.

    Args:
        vocab: the model's :class:`~formcast.vocab.vocabulary.Vocabulary`.
        limits: compile limits (:class:`~formcast.config.CompileLimits`).
        cache_size: compiled grammars kept (least recently used evicted); 0 disables caching.
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
        with gc_paused(self.pause_gc):
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
            program: GrammarProgram
            if has_counted_repeat(node):
                # a long bounded repeat (``.{0,5000}``) is counted by the parser, not unrolled
                try:
                    program = self._program_for(Grammar((Rule("regex", node),), "regex"))
                except UnsatisfiableGrammarError:
                    raise UnsatisfiableGrammarError(
                        f"the regex {pattern!r} matches no string at all"
                    ) from None
            else:
                dfa = compile_dfa(node, self.limits)  # within limits.max_compile_work
                if dfa.is_empty:
                    raise UnsatisfiableGrammarError(
                        f"the regex {pattern!r} matches no string at all"
                    )
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

    # -- context-free grammars ------------------------------------------------------------------
    def _program_for(
        self,
        grammar: Grammar,
        *,
        expand_calls: bool = True,
        budget: WorkBudget | None = None,
        pushdown: bool = False,
        minimize: bool = True,
    ) -> GrammarProgram:
        """The program of a grammar: one DFA when it is regular (unless ``pushdown``), else
        the pushdown program.  JSON Schema asks for the pushdown program even for regular
        grammars: its token index walks every string body once per process (the exit-byte
        cut, shared walks), where the DFA program walks each string position of each
        grammar on its own."""
        budget = budget or self.limits.budget()  # one fuel tank (and deadline) for every stage
        auto = compile_grammar_automaton(
            grammar, self.limits, budget=budget, expand_calls=expand_calls, minimize=minimize
        )
        if auto.is_regular and not pushdown:
            return RegexProgram(auto.dfas[0], self.vocab)
        return CfgProgram(auto, self.vocab, self.parser_limits, budget=budget)

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
            UnsupportedFeatureError (left recursion), UnsatisfiableGrammarError,
            LimitExceededError, GrammarError (undefined rules).
        """
        src = source if source is not None else repr(grammar)

        def build() -> CompiledGrammar:
            t0 = time.perf_counter()
            program = self._program_for(grammar)
            return CompiledGrammar(
                kind=kind,
                source=src,
                vocab=self.vocab,
                program=program,
                compile_seconds=time.perf_counter() - t0,
                warnings=warnings,
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

        def build() -> CompiledGrammar:
            t0 = time.perf_counter()
            if syntax == "gbnf":
                from ..grammar.gbnf import parse_gbnf

                ir = parse_gbnf(text, start=start or "root")
            else:
                from ..grammar.lark import parse_lark

                ir = parse_lark(text, start=start or "start")
            program = self._program_for(ir)
            return CompiledGrammar(
                kind=syntax,
                source=text,
                vocab=self.vocab,
                program=program,
                compile_seconds=time.perf_counter() - t0,
                options=f"start={start}",
            )

        return self._cached(syntax, text, f"start={start}", build)

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        """Any JSON value (RFC 8259), compact or with bounded whitespace between tokens."""
        from ..grammar.builtin import json_grammar

        return self.compile_grammar_ir(json_grammar(), kind="builtin_json", source="json")

    def compile_json_schema(self, schema: Any, options: Any = None) -> CompiledGrammar:
        """Compile a JSON Schema (dict, JSON text, bool, or a Pydantic model class).

        See docs/json_schema.md for the supported keywords; unsupported ones fail closed with
        :class:`~formcast.errors.UnsupportedFeatureError` unless ``options.lenient``.
        """
        import importlib

        js: Any = importlib.import_module("formcast.grammar.json_schema")

        if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
            schema = schema.model_json_schema()
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise ConfigurationError(f"the schema is not valid JSON: {exc}") from None
        opts = options if options is not None else js.JsonSchemaOptions()
        canonical = json.dumps(schema, sort_keys=True, ensure_ascii=False)

        def build() -> CompiledGrammar:
            t0 = time.perf_counter()
            seconds = [x for x in (self.limits.max_compile_seconds, opts.max_compile_seconds) if x]
            budget = WorkBudget(self.limits.max_compile_work, min(seconds) if seconds else None)
            with compile_scope(budget):
                grammar, ignored = js.schema_to_grammar(schema, opts)
                # call-site expansion copies "any value" into every undeclared-member slot:
                # measured on MaskBench it triples compile time and does not speed masks up
                program = self._program_for(
                    grammar, expand_calls=False, budget=budget, pushdown=True, minimize=False
                )
            return CompiledGrammar(
                kind="json_schema",
                source=canonical,
                vocab=self.vocab,
                program=program,
                compile_seconds=time.perf_counter() - t0,
                warnings=tuple(ignored),
                options=repr(opts),
            )

        return self._cached("json_schema", canonical, repr(opts), build)
