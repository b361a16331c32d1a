"""``GrammarCompiler``: compile constraints against one vocabulary — the one compile path.

Every door (generation, the command line, the server, the engine integrations, the tools)
names what to compile with a :class:`~formcast.index.spec.ConstraintSpec` and calls
:meth:`GrammarCompiler.compile` (or :meth:`~GrammarCompiler.compile_async`); the
``compile_regex`` / ``compile_grammar`` / ``compile_json_schema`` /
``compile_builtin_json_grammar`` / ``compile_structural_tag`` / ``compile_grammar_ir`` methods
are one-line conveniences that build a spec.  A compile is: the cache tiers
(:mod:`formcast.index.compile_cache`), else the spec lowered to the grammar IR and the program
built from it (:meth:`GrammarCompiler.build_program`: the IR's ``hints`` choose the program,
its ``marks`` add the run-time ``uniqueItems`` check), here or in a worker process
(:mod:`formcast.index.compile_executor`), under one fuel budget.

Lifetime: per model.  Create one compiler per vocabulary and reuse it; compiled grammars are
cached by a key that includes the constraint *and* the vocabulary fingerprint, so a changed
tokenizer never reuses an old index.  Thread-safe.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Literal

from .._gc import gc_paused
from ..automata.regular import compile_dfa
from ..automata.rules import compile_grammar_automaton, has_counted_repeat
from ..errors import ConfigurationError, UnsatisfiableGrammarError
from ..frontends.jsonschema.options import JsonSchemaOptions
from ..ir.nodes import Grammar
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
from .compile_cache import CompileCache, resolve_cache_dir
from .compile_executor import CompileExecutor, current_cancel
from .compiled import CompiledGrammar, grammar_key
from .context import context_for
from .program import GrammarProgram
from .programs.dispatch import unique_items_program
from .regex_program import RegexProgram
from .spec import (
    AnyJsonSpec,
    ConstraintSpec,
    GrammarIRSpec,
    GrammarTextSpec,
    JsonSchemaSpec,
    KeyedSpec,
    RegexSpec,
    StructuralTagSpec,
    as_spec,
)
from .workers import WorkerSettings, worker_loop

if TYPE_CHECKING:  # pragma: no cover
    from ..constraints.core import Constraint

__all__ = ["GrammarCompiler"]

#: ``GrammarCompiler``'s default limits (frozen dataclasses: one instance serves every compiler)
_DEFAULT_LIMITS = (CompileLimits(), ParserLimits(), CacheLimits())

#: the spec builders of ``compile_async``'s legacy form (a method name and its arguments)
_SPEC_BUILDERS: dict[str, Callable[..., ConstraintSpec]] = {
    "compile_regex": RegexSpec,
    "compile_grammar": GrammarTextSpec,
    "compile_json_schema": JsonSchemaSpec.of,
    "compile_builtin_json_grammar": AnyJsonSpec,
    "compile_structural_tag": StructuralTagSpec.of,
    "compile_grammar_ir": lambda grammar, *, kind="grammar", source=None, warnings=(): (
        GrammarIRSpec(grammar, kind, source, tuple(warnings))
    ),
    "compile": as_spec,
}


class GrammarCompiler:
    """Compiles constraints (:class:`~formcast.index.spec.ConstraintSpec`: regexes, grammars,
    JSON Schemas, constraint objects, structural tags...) for one vocabulary.

    Lifetime: per vocabulary; thread-safe.  Holds the memory and disk cache tiers
    (:class:`~formcast.index.compile_cache.CompileCache`) and the worker pool and async
    threads (:class:`~formcast.index.compile_executor.CompileExecutor`); :meth:`close` stops
    the latter.  Cost of a compile: the front-end, the automata and the token index's tables
    under ``limits.max_compile_work`` fuel; a memory hit is a dict look-up.

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
        cache_dir: a directory of serialized grammars shared by processes
            (:class:`~formcast.cache.DiskCache`; bounded by
            ``cache_limits.disk_cache_bytes``, least recently used first).  None (the
            default) uses ``$FORMCAST_CACHE_DIR`` when set; False disables it.  A grammar
            found there loads in milliseconds with the masks it was saved with; a compiled
            one is written with its first mask (and :meth:`save` rewrites it warmer).
            Keyed by the constraint, options, vocabulary fingerprint, format version, code
            layout and this compiler's limits; a corrupt or stale file is a miss, replaced.
            The directory is a trust boundary (see docs/threat_model.md).
        workers: compile in this many worker processes (0: in this thread).  The calling
            thread waits with the GIL released; the grammar comes back serialized
            (milliseconds to load).  Grammar IR specs and specs that cannot be pickled
            compile in-process.
        worker_start_method: ``"spawn"`` (default; safe in threaded servers), ``"forkserver"``
            or ``"fork"``.

    Counters: ``hits`` (found in memory), ``misses`` (compiled, here or in a worker),
    ``disk_hits`` (loaded from the disk cache), ``disk_writes``.
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
        cache_dir: str | os.PathLike[str] | Literal[False] | None = None,
        workers: int = 0,
        worker_start_method: str = "spawn",
    ) -> None:
        if not isinstance(vocab, Vocabulary):
            raise ConfigurationError(
                f"GrammarCompiler needs a formcast Vocabulary, got {type(vocab).__name__}; "
                "build one with Vocabulary.from_huggingface / from_tiktoken / from_gguf"
            )
        if cache_size < 0:
            raise ConfigurationError(f"cache_size must be >= 0, got {cache_size}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ConfigurationError(f"workers must be an int >= 0, got {workers!r}")
        if worker_start_method not in ("spawn", "forkserver", "fork"):
            raise ConfigurationError(
                f"worker_start_method must be 'spawn', 'forkserver' or 'fork', got "
                f"{worker_start_method!r}"
            )
        self.vocab = vocab
        # the defaults are shared: frozen, and a compiler per request (a server's disk-cache
        # load path) then pays no validation of three dataclasses
        self.limits = limits or _DEFAULT_LIMITS[0]
        self.parser_limits = parser_limits or _DEFAULT_LIMITS[1]
        self.cache_size = cache_size
        self.pause_gc = pause_gc
        self.cache_limits = cache_limits or _DEFAULT_LIMITS[2]
        self.cache_dir: str | None = resolve_cache_dir(cache_dir)
        # the vocabulary's shared tables, held (and handed to the programs) while it lives
        self.context = context_for(vocab, self.cache_limits)
        self._cache = CompileCache(
            vocab, (self.limits, self.parser_limits, self.cache_limits), cache_size, self.cache_dir
        )
        self.workers = workers
        self._executor = CompileExecutor(
            vocab,
            _compile_worker,
            WorkerSettings.of(vocab, self.limits, self.parser_limits, self.cache_limits, pause_gc)
            if workers  # (only a worker needs them: a load path's compiler skips them)
            else None,
            workers,
            worker_start_method,
        )

    # -- the one compile path ---------------------------------------------------------------------
    def keyed(self, spec: ConstraintSpec | Constraint | KeyedSpec) -> KeyedSpec:
        """``spec`` with its cache key for this compiler's vocabulary
        (:class:`~formcast.index.spec.KeyedSpec`): :meth:`cached` then :meth:`compile` (or
        :meth:`compile_async`) of it key the spec once, not twice.  Cost: keying ``spec``
        (its canonical text hashed: ~0.05 ms for a schema); a ``KeyedSpec`` of this
        vocabulary is returned as it is.

        Raises:
            ConfigurationError: ``spec`` is not a spec (as :meth:`compile`).
        """
        if isinstance(spec, KeyedSpec) and spec.fingerprint == self.vocab.fingerprint:
            return spec
        target, key = self._spec_and_key(spec)
        return KeyedSpec(target, key, self.vocab.fingerprint)

    def _spec_and_key(
        self, spec: ConstraintSpec | Constraint | KeyedSpec
    ) -> tuple[ConstraintSpec, str | None]:
        """``spec`` as a :class:`ConstraintSpec` and its cache key for this vocabulary (None:
        it cannot be keyed): a :class:`KeyedSpec` of this vocabulary's key as it is, anything
        else keyed (its canonical text hashed)."""
        if isinstance(spec, KeyedSpec) and spec.fingerprint == self.vocab.fingerprint:
            return spec.spec, spec.key  # keyed once, by ``keyed``
        target = as_spec(spec)
        kind, source, options = target.key_parts()
        key = None if options is None else grammar_key(kind, source, options, self.vocab)
        return target, key

    def compile(self, spec: ConstraintSpec | Constraint | KeyedSpec) -> CompiledGrammar:
        """Compile ``spec`` (a :class:`~formcast.index.spec.ConstraintSpec`; a
        :mod:`formcast.constraints` object is wrapped in a
        :class:`~formcast.index.spec.CombinatorSpec`): the memory cache, then the disk cache,
        else the spec lowered to the grammar IR and its program built
        (:meth:`build_program`) under one fresh budget — in a worker process when the
        compiler has workers and the spec can travel.

        A constraint object that is regular (no ``json``, no rules) compiles exactly as a
        regex (one minimal DFA); one with a ``json``/``any_json`` part gets the JSON Schema
        settings of the pushdown program; others the grammar settings (the IR's ``hints``).

        ``spec`` may be a :class:`~formcast.index.spec.KeyedSpec` (:meth:`keyed`): its key
        is used as it is.

        Raises:
            ConfigurationError (not a spec), and the spec's own errors: ConstraintError (with
            the path in the constraint object), GrammarSyntaxError, UnsupportedFeatureError,
            UnsatisfiableGrammarError, LimitExceededError.
        """
        spec, key = self._spec_and_key(spec)
        cache = self._cache
        if key is not None:
            hit = cache.get(key)
            if hit is not None:
                return hit
        disk_key = None if key is None else cache.disk_key(key)
        compiled = None if disk_key is None else cache.load(disk_key)
        cancel = current_cancel()
        if compiled is None:
            compiled = self._executor.run_remote(spec, cancel)
            if compiled is None:
                budget = self._budget(spec.max_seconds())
                if cancel is not None:
                    cancel.attach(budget)
                with gc_paused(self.pause_gc), compile_scope(budget):
                    compiled = self._build(spec, budget)
            cache.count_miss()
            if disk_key is not None and not (cancel is not None and cancel.is_set()):
                cache.store(disk_key, compiled, first_mask=True)
        cache.put(key, compiled, disk_key)
        return compiled

    def cached(self, spec: ConstraintSpec | Constraint | KeyedSpec) -> CompiledGrammar | None:
        """The grammar :meth:`compile` would return for ``spec`` from the memory cache (and
        counted as a hit there), else None: never a compile or a disk read.  For a caller that
        runs where a compile must not (an event loop, vLLM's scheduler), then compiles a miss
        elsewhere: pass ``keyed(spec)`` to both so that the spec is keyed once.  Cost: keying
        ``spec`` (its canonical text hashed: ~0.05 ms for a schema; nothing for a
        :class:`~formcast.index.spec.KeyedSpec` of this vocabulary) and a dict look-up;
        thread-safe.

        Raises:
            ConfigurationError: ``spec`` is not a spec (as :meth:`compile`).
        """
        key = self._spec_and_key(spec)[1]
        return None if key is None else self._cache.get(key)

    async def compile_async(
        self, spec: ConstraintSpec | Constraint | KeyedSpec | str, /, *args: Any, **kwargs: Any
    ) -> CompiledGrammar:
        """``await compiler.compile_async(spec)``: :meth:`compile` without blocking the event
        loop.  (The older form, a method name and its arguments —
        ``compile_async("compile_json_schema", schema)``, the ``compile_`` prefix optional —
        builds the same spec.)  A :class:`~formcast.index.spec.KeyedSpec` (:meth:`keyed`) is
        compiled under its key, not keyed again.

        With ``workers`` the compile runs in a worker process (this process only waits on a
        pipe); without, in a thread of this compiler (the compile holds the GIL while it
        runs: use workers in a server).  Cancelling the awaiting task cancels the compile:
        the worker is killed (replaced on the next job), an in-process compile stops at its
        next fuel charge; nothing is written to the disk cache.  The result is identical to
        :meth:`compile`'s, caches included.

        Raises:
            whatever :meth:`compile` raises (its own type and message), CompileWorkerError (a
            worker died), ConfigurationError (an unknown method name).
        """
        if isinstance(spec, str):
            name = spec if spec.startswith("compile") else f"compile_{spec}"
            build = _SPEC_BUILDERS.get(name)
            if build is None:
                raise ConfigurationError(
                    f"compile_async runs one of {sorted(_SPEC_BUILDERS)}, got {spec!r}: "
                    "pass a ConstraintSpec instead"
                )
            spec = build(*args, **kwargs)
        elif args or kwargs:
            raise ConfigurationError("compile_async(spec) takes no other arguments")
        # (a KeyedSpec as it is: its key is used; anything else keyed in the compile's thread)
        target = spec if type(spec) is KeyedSpec else as_spec(spec)
        return await self._executor.run_async(lambda: self.compile(target))

    def _budget(self, seconds: float | None = None) -> WorkBudget:
        """A fresh fuel tank for one compile: ``limits.max_compile_work`` units, and the
        tighter of ``limits.max_compile_seconds`` and ``seconds`` as its deadline."""
        caps = [x for x in (self.limits.max_compile_seconds, seconds) if x is not None]
        return WorkBudget(self.limits.max_compile_work, min(caps) if caps else None)

    def _build(self, spec: ConstraintSpec, budget: WorkBudget) -> CompiledGrammar:
        """``spec`` lowered and its program built, in this thread (the budget is current)."""
        t0 = time.perf_counter()
        lowered = spec.lower(self.limits)
        program = self.build_program(lowered.grammar, budget, empty_message=lowered.empty_message)
        kind, source, options = spec.record()
        return CompiledGrammar(
            kind=kind,
            source=source,
            vocab=self.vocab,
            program=program,
            compile_seconds=time.perf_counter() - t0,
            warnings=lowered.warnings,
            options=options,
            compile_work=budget.used,
            unique_items=lowered.grammar.marks,
        )

    def build_program(
        self,
        grammar: Grammar,
        budget: WorkBudget | None = None,
        *,
        empty_message: str | None = None,
    ) -> GrammarProgram:
        """The program of a grammar IR, from the IR alone: ``grammar.hints`` choose it
        (:class:`~formcast.ir.nodes.ProgramHints`) and ``grammar.marks`` wrap it in the
        run-time ``uniqueItems`` check (:func:`~.programs.dispatch.unique_items_program`).

        * ``hints.one_dfa`` and a start rule without a long counted repeat: one minimal DFA
          (the regex program); ``empty_message`` is the error when it matches nothing.
        * otherwise the rules' automaton: one DFA when it is regular (unless
          ``hints.pushdown``), else the pushdown program, whose token index cuts
          ``hints.exit_byte`` for its shared walks.

        ``budget``: the compile's fuel (default: the current compile's, else a fresh one).
        Cost: the automata and the token index's tables (masks are computed per state later).
        """
        budget = budget or current_budget() or self._budget()
        try:
            program = self._program(grammar, budget, empty_message)
        except UnsatisfiableGrammarError:
            if empty_message is None or not grammar.hints.one_dfa:
                raise
            raise UnsatisfiableGrammarError(empty_message) from None
        if grammar.marks and isinstance(program, CfgProgram):
            program = unique_items_program(program, grammar.marks)
        return program

    def _program(
        self, grammar: Grammar, budget: WorkBudget, empty_message: str | None
    ) -> GrammarProgram:
        hints = grammar.hints
        if hints.one_dfa:
            node = grammar.rule_map()[grammar.start].body
            if not has_counted_repeat(node):
                dfa = compile_dfa(node, self.limits, budget)  # within max_compile_work
                if dfa.is_empty:
                    raise UnsatisfiableGrammarError(
                        empty_message or "the grammar matches no string at all"
                    )
                return RegexProgram(dfa, self.vocab, budget=budget, cache_limits=self.cache_limits)
        # a long bounded repeat (``.{0,5000}``) is counted by the parser, not unrolled
        auto = compile_grammar_automaton(
            grammar,
            self.limits,
            budget=budget,
            expand_calls=hints.expand_calls,
            minimize=hints.minimize,
        )
        if auto.is_regular and not hints.pushdown:
            return RegexProgram(
                auto.dfas[0], self.vocab, budget=budget, cache_limits=self.cache_limits
            )
        return CfgProgram(
            auto,
            self.vocab,
            self.parser_limits,
            budget=budget,
            cache_limits=self.cache_limits,
            exit_byte=hints.exit_byte,
            context=self.context,
        )

    # -- the conveniences: one spec each ----------------------------------------------------------
    def compile_regex(self, pattern: str, *, dialect: str = "ecma") -> CompiledGrammar:
        """Compile a regular expression (fullmatch semantics): ``compile(RegexSpec(...))``.

        Raises:
            GrammarSyntaxError, UnsupportedFeatureError, LimitExceededError,
            UnsatisfiableGrammarError (the pattern matches nothing).
        """
        return self.compile(RegexSpec(pattern, dialect))

    def compile_grammar(
        self, text: str, *, syntax: str = "gbnf", start: str | None = None
    ) -> CompiledGrammar:
        """Compile a grammar written in GBNF (llama.cpp) or Lark (llguidance dialect):
        ``compile(GrammarTextSpec(...))``.

        Raises:
            GrammarSyntaxError (with line and column), UnsupportedFeatureError,
            UnsatisfiableGrammarError, LimitExceededError.
        """
        return self.compile(GrammarTextSpec(text, syntax, start))

    def compile_grammar_ir(
        self,
        grammar: Grammar,
        *,
        kind: str = "grammar",
        source: str | None = None,
        warnings: tuple[str, ...] = (),
    ) -> CompiledGrammar:
        """Compile a grammar IR (what every front-end produces; its ``hints`` and ``marks``
        as they are): ``compile(GrammarIRSpec(...))``.  Always in-process.

        Raises:
            UnsupportedFeatureError (left recursion too large to rewrite),
            UnsatisfiableGrammarError,
            LimitExceededError, GrammarError (undefined rules).
        """
        return self.compile(GrammarIRSpec(grammar, kind, source, warnings))

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        """Any JSON value (RFC 8259) with bounded whitespace between tokens and bounded number
        digits (:func:`~formcast.frontends.builtin_json.builtin_json_grammar`):
        ``compile(AnyJsonSpec())``."""
        return self.compile(AnyJsonSpec())

    def compile_json_schema(
        self,
        schema: Any,
        options: JsonSchemaOptions | None = None,
        *,
        base_uri: str | os.PathLike[str] | None = None,
    ) -> CompiledGrammar:
        """Compile a JSON Schema (a file path, dict, JSON text, bool, or a Pydantic model
        class): ``compile(JsonSchemaSpec.of(...))``.

        The schema is read and checked once, by
        :func:`~formcast.frontends.jsonschema.source.load_schema`, and handed to the front-end
        as read.  See docs/json_schema.md for the supported keywords; unsupported ones fail
        closed with
        :class:`~formcast.errors.UnsupportedFeatureError` unless ``options.lenient``.

        A ``pathlib.Path`` is a schema file: its relative ``$ref``s read the files next to it
        (confined to its directory, or ``options.local_ref_root``; bounded by
        ``options.max_ref_files``/``max_ref_bytes``; never the network).  ``base_uri`` (a path
        or an absolute URI) sets where they resolve for a schema given as a value.  The files
        read are part of the cache key.
        """
        return self.compile(JsonSchemaSpec.of(schema, options, base_uri=base_uri))

    def compile_structural_tag(
        self, tag: Any, *, json_options: JsonSchemaOptions | None = None
    ) -> CompiledGrammar:
        """Compile a structural tag: free text until a trigger, then the tagged structure
        (``begin`` + JSON Schema / regex / grammar + ``end``), then free text again
        (:mod:`formcast.index.structural_tag`): ``compile(StructuralTagSpec.of(...))``.
        ``tag`` is a typed :class:`~formcast.index.structural_tag.StructuralTag` (or a bare
        format), or xgrammar's JSON as vLLM / SGLang send it (a ``dict`` or JSON text: the
        legacy ``structures`` + ``triggers`` form or ``{"type": "structural_tag", "format":
        ...}``).  Compiled as a constraint object (cached by its key); the stop token is
        allowed only where the whole output is complete.

        Raises:
            ConstraintError (malformed tag, with its path), UnsupportedFeatureError
            (token-level formats), and the compile errors of the parts.
        """
        return self.compile(StructuralTagSpec.of(tag, json_options=json_options))

    def compile_reasoning(
        self,
        inner: CompiledGrammar,
        *,
        end_marker: str = "</think>",
        max_thinking_tokens: int | None = None,
        max_thinking_bytes: int | None = None,
    ) -> CompiledGrammar:
        """Think, then constrain: any text (the model's reasoning) until ``end_marker``, then
        ``inner`` (compiled by this compiler: a schema, regex, grammar or structural tag).

        ``max_thinking_tokens`` / ``max_thinking_bytes`` bound the thinking (the marker not
        counted): once spent, only the marker may follow.  The counts are part of the
        matcher's state, so they stay exact under ``rollback``, ``fork`` and
        ``validate_tokens``.  Built in O(1) (masks are computed per state on demand); cached
        per ``inner`` grammar.  See :mod:`formcast.index.reasoning`.

        Raises:
            ConfigurationError: an empty marker, a negative budget, ``inner`` compiled for
                another vocabulary.
        """
        from .reasoning import reasoning_grammar

        return reasoning_grammar(
            inner,
            self.vocab,
            end_marker=end_marker,
            max_thinking_tokens=max_thinking_tokens,
            max_thinking_bytes=max_thinking_bytes,
        )

    # -- the cache tiers and the executor ---------------------------------------------------------
    @property
    def hits(self) -> int:
        """Compiles answered from the memory cache."""
        return self._cache.hits

    @property
    def misses(self) -> int:
        """Grammars compiled (here or in a worker)."""
        return self._cache.misses

    @property
    def disk_hits(self) -> int:
        """Grammars loaded from the disk cache by this compiler."""
        return self._cache.disk_hits

    @property
    def disk_writes(self) -> int:
        """Grammars written to the disk cache by this compiler."""
        return self._cache.disk_writes

    @property
    def cache_bytes(self) -> int:
        """Bytes of the compiled grammars kept (as measured at the last insertion)."""
        return self._cache.memory.total_weight

    def clear_cache(self) -> None:
        """Forget the grammars kept in memory (the disk cache is left alone)."""
        self._cache.clear()

    def save(self, compiled: CompiledGrammar) -> bool:
        """Rewrite ``compiled`` in the disk cache with every mask and classification it has
        computed so far (call it after serving or :meth:`CompiledGrammar.warm_up`, so that
        the next process starts warm).  Returns False when there is no disk cache, the
        grammar was not compiled by this compiler under a cache key, or the write failed."""
        return self._cache.save(compiled)

    def cache_path(self, compiled: CompiledGrammar) -> str | None:
        """The disk-cache file of ``compiled`` (None without a disk cache, or when this
        compiler did not compile or load it under a cache key); it may not exist yet."""
        return self._cache.path(compiled)

    def close(self) -> None:
        """Stop the worker processes and the async threads (a running compile is killed).
        The compiler still compiles in-process afterwards."""
        self._executor.close()

    def worker_pids(self) -> list[int]:
        """Process ids of the running compile workers (empty without workers)."""
        return self._executor.worker_pids()


def _compile_worker(conn: Connection, settings: WorkerSettings) -> None:
    """The entry point of a compile worker process (:class:`~formcast.index.workers.CompilePool`):
    the same vocabulary and limits as the parent's compiler, no caches of its own beyond the
    process-wide ones, no disk cache (the parent writes it)."""

    def build() -> GrammarCompiler:
        vocab = Vocabulary(
            settings.tokens,
            stop_token_ids=settings.stop_token_ids,
            special_token_ids=settings.special_token_ids,
            vocab_size=settings.vocab_size,
            name=settings.name,
        )
        if vocab.fingerprint != settings.fingerprint:  # pragma: no cover - defensive
            raise ConfigurationError("the compile worker's vocabulary differs from the parent's")
        return GrammarCompiler(
            vocab,
            limits=settings.limits,
            parser_limits=settings.parser_limits,
            cache_limits=settings.cache_limits,
            pause_gc=settings.pause_gc,
            cache_size=0,
            cache_dir=False,
        )

    worker_loop(conn, build)
