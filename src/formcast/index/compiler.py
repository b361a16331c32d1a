"""``GrammarCompiler``: compile constraints against one vocabulary, with a bounded cache.

Lifetime: per model.  Create one compiler per vocabulary and reuse it; compiled grammars are
cached by a key that includes the constraint *and* the vocabulary fingerprint, so a changed
tokenizer never reuses an old index.  Thread-safe.

Two more tiers, both optional: a disk cache (``cache_dir=`` or ``$FORMCAST_CACHE_DIR``) of
serialized grammars shared by every process using the directory (keyed also by the format
version, the code layout and the limits), and ``workers=N`` compile processes
(:mod:`formcast.index.workers`) so that a long compile never holds this process's GIL;
:meth:`GrammarCompiler.compile_async` awaits a compile from asyncio, cancellable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import hashlib
import os
import pickle
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Literal

from .._gc import gc_paused
from ..automata.regular import compile_dfa
from ..automata.rules import compile_grammar_automaton, has_counted_repeat
from ..cache import DiskCache, LruCache
from ..errors import ConfigurationError, SerializationError, UnsatisfiableGrammarError
from ..frontends.jsonschema.options import JsonSchemaOptions
from ..frontends.regex import parse_regex
from ..ir.marks import UniqueItemsMark
from ..ir.nodes import Grammar, Rule
from ..limits import (
    CacheLimits,
    CompileLimits,
    ParserLimits,
    WorkBudget,
    cache_dir_from_env,
    compile_scope,
    current_budget,
)
from ..vocab.vocabulary import Vocabulary
from .cfg_program import CfgProgram
from .compiled import CompiledGrammar, grammar_key, serialization_layout
from .program import GrammarProgram
from .regex_program import RegexProgram
from .serialize import FORMAT_VERSION
from .workers import CompileCancelled, CompilePool, WorkerSettings, worker_loop

if TYPE_CHECKING:  # pragma: no cover
    from ..constraints.core import Constraint

__all__ = ["GrammarCompiler"]

#: The token index's exit byte for context-free grammars (see
#: :class:`~formcast.index.cfg_program.CfgProgram`): JSON's ``"``, which ends the permissive
#: lexemes (string bodies) of JSON Schema, the builtin JSON grammar and most grammars' string
#: literals.  Masks are exact for any byte; this one makes string bodies share their walks.
_JSON_EXIT_BYTE = ord('"')

#: the compile methods ``compile_async`` and the workers run (by name)
_ASYNC_METHODS = frozenset(
    {
        "compile",
        "compile_regex",
        "compile_grammar",
        "compile_grammar_ir",
        "compile_json_schema",
        "compile_builtin_json_grammar",
        "compile_structural_tag",
    }
)


class _Cancel:
    """A compile's cancel switch: set by ``compile_async`` when its task is cancelled.  A
    worker job is killed; an in-process compile's budget runs out at its next charge."""

    __slots__ = ("budgets", "event")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.budgets: list[WorkBudget] = []

    def attach(self, budget: WorkBudget) -> None:
        self.budgets.append(budget)
        if self.event.is_set():
            budget.deadline = float("-inf")

    def set(self) -> None:
        self.event.set()
        for b in list(self.budgets):
            b.deadline = float("-inf")  # the next fuel charge raises: the compile unwinds


_CANCEL: contextvars.ContextVar[_Cancel | None] = contextvars.ContextVar(
    "formcast_compile_cancel", default=None
)


#: ``GrammarCompiler``'s default limits (frozen dataclasses: one instance serves every compiler)
_DEFAULT_LIMITS = (CompileLimits(), ParserLimits(), CacheLimits())
#: the part of a disk-cache file key after the grammar key, by layout digest and limits: the
#: format version, the layout digest and the limits' reprs, each followed by a NUL byte
_KEY_TAILS: dict[tuple[str, CompileLimits, ParserLimits, CacheLimits], bytes] = {}


_DEFAULT_SCHEMA_OPTIONS: list[tuple[JsonSchemaOptions, str | None]] = []


def _default_schema_options() -> tuple[JsonSchemaOptions, str | None]:
    """``JsonSchemaOptions()`` and its cache key, made once (the options are frozen)."""
    if not _DEFAULT_SCHEMA_OPTIONS:
        opts = JsonSchemaOptions()
        _DEFAULT_SCHEMA_OPTIONS.append((opts, opts.cache_key()))
    return _DEFAULT_SCHEMA_OPTIONS[0]


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
            (milliseconds to load).  ``compile_grammar_ir`` and constraint objects that
            cannot be pickled compile in-process.
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
        self.vocab = vocab
        # the defaults are shared: frozen, and a compiler per request (a server's disk-cache
        # load path) then pays no validation of three dataclasses
        self.limits = limits or _DEFAULT_LIMITS[0]
        self.parser_limits = parser_limits or _DEFAULT_LIMITS[1]
        self.cache_size = cache_size
        self.pause_gc = pause_gc
        self.cache_limits = cache_limits or _DEFAULT_LIMITS[2]
        self._cache: LruCache[str, CompiledGrammar] = LruCache(
            cache_size,
            max_weight=self.cache_limits.grammar_cache_bytes,
            weight=lambda g: g.nbytes(),
        )
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        #: grammars loaded from the disk cache, and written to it, by this compiler
        self.disk_hits = 0
        self.disk_writes = 0
        if cache_dir is None:
            cache_dir = cache_dir_from_env() or False
        self.cache_dir: str | None = os.fspath(cache_dir) if cache_dir is not False else None
        self._disk = (
            None
            if self.cache_dir is None
            else DiskCache(self.cache_dir, self.cache_limits.disk_cache_bytes, suffix=".fcg")
        )
        self._disk_keys: weakref.WeakKeyDictionary[CompiledGrammar, str] = (
            weakref.WeakKeyDictionary()
        )
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ConfigurationError(f"workers must be an int >= 0, got {workers!r}")
        if worker_start_method not in ("spawn", "forkserver", "fork"):
            raise ConfigurationError(
                f"worker_start_method must be 'spawn', 'forkserver' or 'fork', got "
                f"{worker_start_method!r}"
            )
        self.workers = workers
        self._pool = (
            CompilePool(
                _compile_worker,
                WorkerSettings.of(
                    vocab, self.limits, self.parser_limits, self.cache_limits, pause_gc
                ),
                workers,
                worker_start_method,
            )
            if workers
            else None
        )
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

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
        remote: tuple[str, tuple[Any, ...], dict[str, Any]] | None = None,
    ) -> CompiledGrammar:
        """The cached grammar of ``(kind, source, options)`` (memory, then the disk cache),
        else ``build(budget)`` run under one fresh budget (made current by
        :func:`~formcast.limits.compile_scope`, so every stage, front-end included, charges
        the same fuel and sees the same deadline) — or, with workers, the job ``remote``
        (``(method, args, kwargs)``) run in a worker process.
        ``options=None``: the constraint cannot be keyed exactly (it is built, not cached)."""
        key = None if options is None else grammar_key(kind, source, options, self.vocab)
        if key is not None:
            _, hit = self._cache.get(key)
            if hit is not None:
                with self._lock:
                    self.hits += 1
                return hit
        disk_key = None if key is None or self._disk is None else self._disk_key(key)
        compiled = None if disk_key is None else self._load_from_disk(disk_key)
        cancel = _CANCEL.get()
        if compiled is None:
            compiled = self._compile_remote(remote, cancel) if remote is not None else None
            if compiled is None:
                budget = self._budget(seconds)
                if cancel is not None:
                    cancel.attach(budget)
                with gc_paused(self.pause_gc), compile_scope(budget):
                    compiled = build(budget)
            with self._lock:
                self.misses += 1
            if disk_key is not None and not (cancel is not None and cancel.event.is_set()):
                self._store(disk_key, compiled, first_mask=True)
        if disk_key is not None:
            self._disk_keys[compiled] = disk_key
        if self.cache_size and key is not None:
            # grammars' caches grew since they were added: re-measure, then evict to fit
            self._cache.put(key, compiled)
            self._cache.reweigh()
        return compiled

    # -- the disk cache and the workers ---------------------------------------------------------
    def _disk_key(self, key: str) -> str:
        """The file key of grammar ``key``: also the format version, the code layout and this
        compiler's limits (a grammar compiled under other limits is another file)."""
        layout = serialization_layout()
        limits = (self.limits, self.parser_limits, self.cache_limits)
        ident = (layout, *limits)
        tail = _KEY_TAILS.get(ident)
        if tail is None:
            parts = (str(FORMAT_VERSION), layout, *map(repr, limits))
            tail = b"".join(part.encode() + b"\0" for part in parts)
            if len(_KEY_TAILS) >= 64:
                _KEY_TAILS.clear()
            _KEY_TAILS[ident] = tail
        return hashlib.sha256(key.encode() + b"\0" + tail).hexdigest()

    def _load_from_disk(self, disk_key: str) -> CompiledGrammar | None:
        assert self._disk is not None
        data = self._disk.get(disk_key)
        if data is None:
            return None
        try:
            # a section found corrupt on first use removes the file too (the next load misses)
            disk = self._disk
            compiled = CompiledGrammar.deserialize(
                data, self.vocab, on_corrupt=lambda _: disk.discard(disk_key)
            )
        except SerializationError:  # corrupt, truncated or stale: a miss, replaced below
            self._disk.discard(disk_key)
            return None
        with self._lock:
            self.disk_hits += 1
        return compiled

    def _store(self, disk_key: str, compiled: CompiledGrammar, *, first_mask: bool) -> bool:
        assert self._disk is not None
        try:
            if first_mask:  # the first mask is what a loading process needs at once
                program = compiled.program
                program.token_mask(program.initial_state())
            data = compiled.serialize()
        except SerializationError as e:
            warnings.warn(
                f"formcast: the compiled grammar was not written to the disk cache: {e}",
                RuntimeWarning,
                stacklevel=3,
            )
            return False
        written = self._disk.put(disk_key, data)
        if written:
            with self._lock:
                self.disk_writes += 1
        return written

    def save(self, compiled: CompiledGrammar) -> bool:
        """Rewrite ``compiled`` in the disk cache with every mask and classification it has
        computed so far (call it after serving or :meth:`CompiledGrammar.warm_up`, so that
        the next process starts warm).  Returns False when there is no disk cache, the
        grammar was not compiled by this compiler under a cache key, or the write failed."""
        disk_key = self._disk_keys.get(compiled)
        if self._disk is None or disk_key is None:
            return False
        return self._store(disk_key, compiled, first_mask=False)

    def cache_path(self, compiled: CompiledGrammar) -> str | None:
        """The disk-cache file of ``compiled`` (None without a disk cache, or when this
        compiler did not compile or load it under a cache key); it may not exist yet."""
        disk_key = self._disk_keys.get(compiled)
        return None if self._disk is None or disk_key is None else self._disk.path(disk_key)

    def _compile_remote(
        self, remote: tuple[str, tuple[Any, ...], dict[str, Any]], cancel: _Cancel | None
    ) -> CompiledGrammar | None:
        """The job compiled by a worker and loaded here; None to compile in-process (no
        workers, or arguments that cannot travel to a worker)."""
        pool = self._pool
        if pool is None:
            return None
        method, args, kwargs = remote
        try:
            pickle.dumps((args, kwargs))
        except Exception:  # e.g. a class defined in a function: compile it here
            return None
        try:
            data = pool.run(method, args, kwargs, cancel=None if cancel is None else cancel.event)
        except CompileCancelled:
            raise asyncio.CancelledError from None
        return CompiledGrammar.deserialize(data, self.vocab)

    async def compile_async(self, method: str, /, *args: Any, **kwargs: Any) -> CompiledGrammar:
        """``await compiler.compile_async("compile_json_schema", schema)``: run one of the
        compile methods (``compile_regex``, ``compile_grammar``, ``compile_json_schema``,
        ``compile_builtin_json_grammar``, ``compile_grammar_ir``, ``compile``; the
        ``compile_`` prefix may be left out) without blocking the event loop.

        With ``workers`` the compile runs in a worker process (this process only waits on a
        pipe); without, in a thread of this compiler (the compile holds the GIL while it
        runs: use workers in a server).  Cancelling the awaiting task cancels the compile:
        the worker is killed (replaced on the next job), an in-process compile stops at its
        next fuel charge; nothing is written to the disk cache.  The result is identical to
        the synchronous method's, caches included.

        Raises:
            whatever the method raises (its own type and message), CompileWorkerError (a
            worker died), ConfigurationError (an unknown method).
        """
        name = method if method.startswith("compile") else f"compile_{method}"
        if name not in _ASYNC_METHODS:
            raise ConfigurationError(
                f"compile_async runs one of {sorted(_ASYNC_METHODS)}, got {method!r}"
            )
        fn: Callable[..., CompiledGrammar] = getattr(self, name)
        cancel = _Cancel()

        def run() -> CompiledGrammar:
            token = _CANCEL.set(cancel)
            try:
                return fn(*args, **kwargs)
            finally:
                _CANCEL.reset(token)

        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=max(self.workers, 1), thread_name_prefix="formcast-compile"
                )
            executor = self._executor
        future = asyncio.get_running_loop().run_in_executor(executor, run)
        try:
            return await future
        except asyncio.CancelledError:
            cancel.set()  # the thread kills the worker / unwinds the compile, writes nothing
            raise

    def close(self) -> None:
        """Stop the worker processes and the async threads (a running compile is killed).
        The compiler still compiles in-process afterwards."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def worker_pids(self) -> list[int]:
        """Process ids of the running compile workers (empty without workers)."""
        return [] if self._pool is None else self._pool.worker_pids()

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

        return self._cached(
            "regex",
            pattern,
            f"dialect={dialect}",
            build,
            remote=("compile_regex", (pattern,), {"dialect": dialect}),
        )

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
        return self._compile_ir(grammar, kind, source, warnings, None)

    def _compile_ir(
        self,
        grammar: Grammar,
        kind: str,
        source: str | None,
        warnings: tuple[str, ...],
        remote: tuple[str, tuple[Any, ...], dict[str, Any]] | None,
    ) -> CompiledGrammar:
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

        return self._cached(kind, src, "", build, remote=remote)

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

        return self._cached(
            syntax,
            text,
            f"start={start}",
            build,
            remote=("compile_grammar", (text,), {"syntax": syntax, "start": start}),
        )

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        """Any JSON value (RFC 8259) with bounded whitespace between tokens and bounded number
        digits (:func:`~formcast.frontends.builtin_json.builtin_json_grammar`)."""
        from ..frontends.builtin_json import builtin_json_grammar

        remote: tuple[str, tuple[Any, ...], dict[str, Any]] = (
            "compile_builtin_json_grammar",
            (),
            {},
        )
        return self._compile_ir(builtin_json_grammar(), "builtin_json", "json", (), remote)

    def compile_json_schema(
        self,
        schema: Any,
        options: JsonSchemaOptions | None = None,
        *,
        base_uri: str | os.PathLike[str] | None = None,
    ) -> CompiledGrammar:
        """Compile a JSON Schema (a file path, dict, JSON text, bool, or a Pydantic model class).

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
        # (imported here: the front-end costs ``import formcast`` ~0.2 s, and most uses of a
        # compiler never compile a schema)
        from ..frontends.jsonschema.api import schema_to_grammar
        from ..frontends.jsonschema.source import load_schema

        opts = options if options is not None else _default_schema_options()[0]
        if not isinstance(opts, JsonSchemaOptions):
            raise ConfigurationError(
                f"options must be a JsonSchemaOptions, got {type(opts).__name__}"
            )
        loaded = load_schema(schema, opts, base_uri=base_uri)
        # the default options' key is computed once (frozen, and without a registry)
        opts_key = _default_schema_options()[1] if options is None else opts.cache_key()

        def build(budget: WorkBudget) -> CompiledGrammar:
            t0 = time.perf_counter()
            marks: list[UniqueItemsMark] = []  # run-time uniqueItems checks
            grammar, ignored = schema_to_grammar(loaded, opts, marks=marks)
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
                unique_items=tuple(marks),
            )

        return self._cached(
            "json_schema",
            loaded.cache_text,
            opts_key,
            build,
            seconds=opts.max_compile_seconds,
            remote=("compile_json_schema", (schema, opts), {"base_uri": base_uri}),
        )

    def compile(self, constraint: Constraint) -> CompiledGrammar:
        """Compile a constraint object built with :mod:`formcast.constraints` (combinators,
        state machines).  A regular constraint (no ``json``, no rules) compiles exactly as a
        regex (one minimal DFA); one with a ``json``/``any_json`` part gets the JSON Schema
        settings of the pushdown program; others the grammar settings.  Cached by the
        constraint's canonical key (``Constraint.cache_key``).

        Raises:
            ConstraintError (with the path in the constraint object), GrammarSyntaxError,
            UnsupportedFeatureError, UnsatisfiableGrammarError, LimitExceededError.
        """
        from ..constraints.core import Constraint as _Constraint
        from ..constraints.core import lower_constraint

        if not isinstance(constraint, _Constraint):
            raise ConfigurationError(
                f"compile() takes a formcast.constraints constraint, got "
                f"{type(constraint).__name__}: use compile_regex / compile_grammar / "
                "compile_json_schema for text, or build one with formcast.constraints"
            )
        key = constraint.cache_key()

        def build(budget: WorkBudget) -> CompiledGrammar:
            t0 = time.perf_counter()
            lowered = lower_constraint(constraint, self.limits)
            node = lowered.node
            program: GrammarProgram
            if node is not None and not has_counted_repeat(node):
                dfa = compile_dfa(node, self.limits, budget)  # exactly compile_regex's path
                if dfa.is_empty:
                    raise UnsatisfiableGrammarError("the constraint matches no string at all")
                program = RegexProgram(
                    dfa, self.vocab, budget=budget, cache_limits=self.cache_limits
                )
            elif lowered.json_like:
                program = self._program_for(
                    lowered.grammar,
                    expand_calls=False,
                    budget=budget,
                    pushdown=True,
                    minimize=False,
                )
            else:
                program = self._program_for(lowered.grammar, budget=budget)
            return CompiledGrammar(
                kind="constraint",
                source=key if key is not None else f"<{constraint.kind} without a cache key>",
                vocab=self.vocab,
                program=program,
                compile_seconds=time.perf_counter() - t0,
                warnings=lowered.warnings,
                compile_work=budget.used,
            )

        return self._cached(
            "constraint",
            key or "",
            "" if key is not None else None,
            build,
            remote=("compile", (constraint,), {}),  # in-process when it cannot be pickled
        )

    def compile_structural_tag(
        self, tag: Any, *, json_options: JsonSchemaOptions | None = None
    ) -> CompiledGrammar:
        """Compile a structural tag: free text until a trigger, then the tagged structure
        (``begin`` + JSON Schema / regex / grammar + ``end``), then free text again
        (:mod:`formcast.index.structural_tag`).  ``tag`` is a typed
        :class:`~formcast.index.structural_tag.StructuralTag` (or a bare format), or
        xgrammar's JSON as vLLM / SGLang send it (a ``dict`` or JSON text: the legacy
        ``structures`` + ``triggers`` form or ``{"type": "structural_tag", "format": ...}``).
        Compiled as a constraint object (cached by its key); the stop token is allowed only
        where the whole output is complete.

        Raises:
            ConstraintError (malformed tag, with its path), UnsupportedFeatureError
            (token-level formats), and the compile errors of the parts.
        """
        from .structural_tag import structural_tag_constraint

        return self.compile(structural_tag_constraint(tag, json_options=json_options))

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
