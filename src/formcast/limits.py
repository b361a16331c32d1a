"""Configuration objects: one frozen dataclass per concern.

Environment variables are read here and nowhere else (:func:`limits_from_env`).
"""

from __future__ import annotations

import functools
import os
import sys
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace
from typing import Any, Generic, ParamSpec, TypeVar

from ._native import interpreted_class
from .cache import LruCache
from .errors import ConfigurationError

__all__ = [
    "CACHE_ENTRY_BYTES",
    "MEMO_HIT_UNITS",
    "CacheLimits",
    "CachedWork",
    "CompileLimits",
    "HashedKey",
    "ParserLimits",
    "WorkBudget",
    "cached_work",
    "charge",
    "check_deadline",
    "compile_memo",
    "compile_scope",
    "current_budget",
    "limits_from_env",
    "metered",
    "metered_cache",
    "replay_cost",
]


@interpreted_class
@dataclass(frozen=True)
class CompileLimits:
    """Hard limits on the work and memory of compiling one regular constraint.

    Exceeding any raises :class:`~formcast.errors.LimitExceededError` naming the field.

    Attributes:
        max_pattern_length: characters of regex source accepted.
        max_repeat: the largest ``m``/``n`` accepted in ``{m,n}``.
        max_nfa_states: Thompson NFA states (after unrolling bounded repeats).
        max_dfa_states: states of the byte DFA (each costs 1 KiB of transition table).
        max_minimize_states: DFAs larger than this are not minimized (correct, but
            equivalent states then cache their masks separately).
        max_alternatives: branches of one alternation (e.g. enum values).
        max_compile_work: the deterministic "fuel" of one whole compile: every stage charges
            it (regex / GBNF / Lark parsing and IR building, the JSON Schema front-end's set
            algebra and string automata, NFA and DFA construction, minimization, the token
            index preparation: call-expanded lexer, position classes), and caches of compile
            work charge a hit what a fresh build would cost in this compile
            (:func:`cached_work`).  So whether a constraint compiles is the same on any
            machine, under any load, whatever was compiled (or evicted) before.  One unit is
            about 0.3 us of compile work on one core of the reference 2-core VM (0.2-0.6 us by
            stage; measured on MaskBench's slowest compiles), so the default (6.5 M) stops a
            runaway compile after about 2 s there (1.5-3.5 s for the pathological schemas of
            ``tests/test_compile_limits.py``; hopeless constraints are refused right
            after NFA construction, from a projection).  Caches make a warm compile faster
            than its fuel says, never cheaper in fuel.  Raises
            :class:`~formcast.errors.CompileBudgetError` (a ``LimitExceededError`` no
            internal fallback swallows).
        max_compile_seconds: wall-clock cap on one compile, in seconds, checked wherever fuel
            is charged (all compile paths).  The default, 30 s, is only a safety net, about
            15x what the default fuel allows; ``None`` disables it.  A tight value depends on
            the machine and its load (the same constraint may compile on one run and not the
            next): use one where a hard latency bound matters more than reproducibility.
            Raises :class:`~formcast.errors.CompileTimeoutError`.
    """

    max_pattern_length: int = 100_000
    max_repeat: int = 100_000
    max_nfa_states: int = 1_000_000
    max_dfa_states: int = 65_536
    max_minimize_states: int = 20_000
    max_alternatives: int = 100_000
    max_compile_work: int = 6_500_000
    max_compile_seconds: float | None = 30.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "max_compile_seconds":
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
                ):
                    raise ConfigurationError(
                        f"CompileLimits.max_compile_seconds must be None or a positive number, "
                        f"got {value!r}"
                    )
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigurationError(
                    f"CompileLimits.{f.name} must be a positive int, got {value!r}"
                )

    def budget(self) -> WorkBudget:
        """A fresh :class:`WorkBudget` for one compile under these limits."""
        return WorkBudget(self.max_compile_work, self.max_compile_seconds)


_MIB = 1 << 20


@interpreted_class
@dataclass(frozen=True)
class CacheLimits:
    """Byte budgets of the caches a compiled grammar fills while it serves requests (one
    object: ``GrammarCompiler(cache_limits=...)``).  Sizes are formcast's own accounting (the
    arrays' bytes plus a fixed estimate per entry), checked whenever an entry is added; the
    least recently used entries go first.

    Attributes:
        grammar_cache_bytes: the compiler's compiled grammars, each counted with what its
            caches hold when a grammar is added (default 1 GiB; ``cache_size`` still caps
            their number).
        mask_cache_bytes: one grammar's token masks by parser state (default 128 MiB: 8,192
            masks of a 128k-token vocabulary).
        step_cache_bytes: one grammar's memoized token steps, ``(state, token) -> state``
            (default 32 MiB).
        parser_cache_bytes: one grammar's parser caches (interned frames and states, closures,
            byte steps; default 256 MiB), as ``ParserLimits.max_cache_entries`` when that is
            smaller.  States whose counters are out of a token's reach (deep inside a
            ``maxLength: 1000000`` string) are never cached: they are freed with the request.
        shared_cache_bytes: each process-wide cache of token classifications shared by all
            grammars (counted positions, shared walks, window tables; default 256 MiB each).
        disk_cache_bytes: the compiler's disk cache of serialized grammars
            (``GrammarCompiler(cache_dir=...)`` or ``FORMCAST_CACHE_DIR``; default 2 GiB): after
            each write the least recently used files go until the directory holds at most this
            much (every process sharing the directory applies its own bound).
    """

    grammar_cache_bytes: int = 1024 * _MIB
    mask_cache_bytes: int = 128 * _MIB
    step_cache_bytes: int = 32 * _MIB
    parser_cache_bytes: int = 256 * _MIB
    shared_cache_bytes: int = 256 * _MIB
    disk_cache_bytes: int = 2048 * _MIB

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(
                    f"CacheLimits.{f.name} must be an int >= 0 (bytes), got {value!r}"
                )


#: estimated bytes of one entry of a dict cache (key tuple, dict slot, small value object)
CACHE_ENTRY_BYTES = 200


_ENV_PREFIX = "FORMCAST_LIMIT_"


@interpreted_class
@dataclass(frozen=True)
class ParserLimits:
    """Run-time limits of the pushdown automaton (per matcher step).

    Attributes:
        max_stack_depth: deepest nesting accepted (frames on one stack).
        max_stacks: scan-ready stacks in one state (bounds ambiguity blow-up).
        max_closure_work: frames visited by one closure.
        max_cache_entries: interned frames/states and memo entries before caches are reset.
    """

    max_stack_depth: int = 1_000_000
    max_stacks: int = 4_096
    max_closure_work: int = 200_000
    max_cache_entries: int = 2_000_000

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or v <= 0:
                raise ConfigurationError(f"ParserLimits.{f.name} must be a positive int, got {v!r}")


#: the environment variable naming the compiler's default disk cache directory
CACHE_DIR_ENV = "FORMCAST_CACHE_DIR"


def cache_dir_from_env() -> str | None:
    """``$FORMCAST_CACHE_DIR`` (the default ``GrammarCompiler(cache_dir=...)``), or None when it
    is unset or empty.  Read here only."""
    return os.environ.get(CACHE_DIR_ENV) or None


def limits_from_env(base: CompileLimits | None = None) -> CompileLimits:
    """Return ``base`` (default :class:`CompileLimits`) overridden by ``FORMCAST_LIMIT_<FIELD>``.

    Example: ``FORMCAST_LIMIT_MAX_DFA_STATES=200000``.
    """
    base = base or CompileLimits()
    changes: dict[str, int | float] = {}
    for f in fields(base):
        raw = os.environ.get(_ENV_PREFIX + f.name.upper())
        if raw is None:
            continue
        try:
            changes[f.name] = float(raw) if f.name == "max_compile_seconds" else int(raw)
        except ValueError:
            raise ConfigurationError(
                f"environment variable {_ENV_PREFIX + f.name.upper()}={raw!r} is not a number"
            ) from None
    return replace(base, **changes) if changes else base  # type: ignore[arg-type]


class WorkBudget:
    """Mutable fuel counter shared by every automaton built for one constraint.

    Lifetime: one compile.  ``spend`` raises :class:`LimitExceededError` when the total passes
    :attr:`CompileLimits.max_compile_work`.
    """

    __slots__ = ("deadline", "limit", "memo", "seconds", "used")

    def __init__(self, limit: int, seconds: float | None = None) -> None:
        self.limit = limit
        self.used = 0
        #: what the metered caches returned in this compile (:func:`compile_memo`)
        self.memo: dict[Hashable, Any] = {}
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def check_projected(self, amount: int) -> None:
        """Raise now if spending ``amount`` more would certainly exceed the limit."""
        if self.used + amount > self.limit:
            from .errors import CompileBudgetError

            raise CompileBudgetError(
                "max_compile_work",
                self.limit,
                f"projected {self.used + amount} units: the constraint's automata are too large "
                "to build (long bounded repeats or huge alternations)",
            )

    def check_time(self) -> None:
        """Raise :class:`LimitExceededError` (``max_compile_seconds``) past the deadline."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            from .errors import CompileTimeoutError

            raise CompileTimeoutError(
                "max_compile_seconds",
                float(self.seconds or 0.0),
                "the compile ran out of wall-clock time (raise the limit, or None)",
            )

    def spend(self, amount: int) -> None:
        self.used += amount
        self.check_time()
        if self.used > self.limit:
            from .errors import CompileBudgetError

            raise CompileBudgetError(
                "max_compile_work",
                self.limit,
                f"{self.used} units used: the constraint is too costly to compile (long bounded "
                "repeats, huge alternations, or combinations of string constraints)",
            )


_SCOPE: ContextVar[WorkBudget | None] = ContextVar("formcast_compile_budget", default=None)


@contextmanager
def compile_scope(budget: WorkBudget) -> Iterator[WorkBudget]:
    """Make ``budget`` the current compile's budget (for :func:`check_deadline`), in this
    thread or task only."""
    token = _SCOPE.set(budget)
    try:
        yield budget
    finally:
        _SCOPE.reset(token)


def check_deadline() -> None:
    """Raise ``LimitExceededError("max_compile_seconds")`` when the current compile (see
    :func:`compile_scope`) is past its deadline; a no-op outside a compile.  O(1): called from
    the loops of front-ends that do not spend fuel."""
    budget = _SCOPE.get()
    if budget is not None and budget.deadline is not None:
        budget.check_time()


def current_budget() -> WorkBudget | None:
    """The budget of the compile running in this thread or task (see :func:`compile_scope`),
    or None outside a compile."""
    return _SCOPE.get()


def compile_memo() -> dict[Hashable, Any] | None:
    """The current compile's memo of metered cache entries (None outside a compile).

    A process-wide cache of compile work charges a hit what a build would cost in this
    compile (:func:`cached_work`), so that whether a compile fits ``max_compile_work`` does not
    depend on earlier compiles; charging the full cost again for every *repeated* use within
    one compile (a format or pattern used in a hundred properties) over-counts: a repeat costs
    a lookup.  The caches therefore charge the build once per compile and keep its
    :class:`CachedWork` here (alive for the compile, whatever the shared cache evicts); a
    repeat is a dict lookup charged :data:`MEMO_HIT_UNITS`.  The fuel stays a function of the
    compile alone: an entry built inside another one is recorded as its child, and a hit
    replays that tree against this memo (:func:`replay_cost`)."""
    budget = _SCOPE.get()
    return None if budget is None else budget.memo


MEMO_HIT_UNITS = 4
"""Fuel of a repeated use of a metered cache's result within one compile (a lookup)."""


def charge(units: int) -> None:
    """Spend ``units`` of the current compile's fuel (and check its deadline); a no-op outside
    a compile.  For the stages that are not handed a :class:`WorkBudget` (front-ends, the JSON
    Schema set algebra): every stage charges the one tank, so ``max_compile_work`` bounds the
    whole compile deterministically.  One unit is about 0.7 us of work (see
    :class:`CompileLimits`)."""
    budget = _SCOPE.get()
    if budget is not None:
        budget.spend(units)


_T = TypeVar("_T")
_K = TypeVar("_K", bound=Hashable)


def metered(build: Callable[[], _T]) -> tuple[_T, int]:
    """``(build(), the fuel it charged)``.  Inside a compile the fuel is charged to it as usual
    (same limit, same deadline); outside one it is only counted.  What :func:`cached_work`
    measures a build with (a cache hit must charge what a fresh build would, so whether a
    compile fits ``max_compile_work`` does not depend on what was compiled before)."""
    outer = _SCOPE.get()
    if outer is None:
        inner = WorkBudget(1 << 62)
    else:
        inner = WorkBudget(outer.limit)
        inner.used, inner.seconds, inner.deadline = outer.used, outer.seconds, outer.deadline
        inner.memo = outer.memo
    start = inner.used
    with compile_scope(inner):
        value = build()
    if outer is not None:
        outer.used = inner.used
    return value, inner.used - start


# slots with a weak-reference slot from Python 3.11 on; Python 3.10's dataclass has no
# weakref_slot, so there the instances keep a __dict__ (which also allows weak references)
_WORK_SLOTS: dict[str, Any] = (
    {"slots": True, "weakref_slot": True} if sys.version_info >= (3, 11) else {}
)


@interpreted_class
@dataclass(frozen=True, eq=False, **_WORK_SLOTS)
class CachedWork(Generic[_T]):
    """One entry of a cache of compile work (:func:`cached_work`): the value, the fuel of its
    own work, and the cached calls its build made, in call order (each a ``CachedWork``, so
    the tree stays replayable whatever the caches evict since).

    Immutable; kept by a process-wide cache, by the compile memos that used it and by the
    entries built on it.  ``own`` excludes what the nested cached calls charged, so the fuel a
    fresh build costs in a compile is ``own`` plus, for each child in order, the memo's hit
    cost when the compile already has it, else the child's own replayed cost
    (:func:`replay_cost`)."""

    key: Hashable
    value: _T
    own: int
    children: tuple[CachedWork[Any], ...]


class HashedKey:
    """A cache key that hashes once: a tuple of ``parts`` and its hash ``h`` (by default
    ``hash(parts)``; a caller may pass any function of the parts' hashes, e.g. one that reuses
    a :class:`CompileLimits`' hash computed once per compile).

    Equal exactly when the ``parts`` tuples are (component by component, identity first, as
    tuples compare) and never equal to anything else, so a store keyed by it hits and misses
    as one keyed by the tuple would.  The point is the hash: a tuple's is recomputed on every
    dict operation of a :func:`cached_work` lookup (the store's lookup, and on a miss the
    live-entry lookup, ``put``'s membership test and insertion, the live-entry insertion),
    which walks every part: the IR nodes' ``__hash__`` and a CompileLimits' interpreted
    dataclass ``__hash__`` (about 0.4 us).  Immutable; O(1) hash, and O(1) equality where
    the parts are shared objects.  The keys of the rule and sub-automaton caches
    (formcast.automata.rules and .regular) and a rule body's canonical form."""

    __slots__ = ("hash", "parts")

    def __init__(self, parts: tuple[Any, ...], h: int | None = None) -> None:
        self.parts = parts
        self.hash = hash(parts) if h is None else h

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, HashedKey) or self.hash != other.hash:
            return False
        # (compared as ``object``: typed, the compiled build's ``==`` of two equal parts said
        # False; thompson35's gotcha, cf. nfa._may_fold)
        a: object = self.parts
        b: object = other.parts
        return a == b

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        return f"HashedKey({self.parts!r})"


class _Frame:
    """The cached calls made while one :class:`CachedWork` is being built."""

    __slots__ = ("charged", "children", "memo")

    def __init__(self, memo: dict[Hashable, Any] | None) -> None:
        self.memo = memo
        self.children: list[CachedWork[Any]] = []
        self.charged = 0


_FRAME: ContextVar[_Frame | None] = ContextVar("formcast_cached_build", default=None)

#: every live entry by (its store, its key), whatever the stores evicted: an entry stays alive
#: while a compile's memo or an entry built on it holds it, and a lookup must return *that*
#: entry (the same value object), not a rebuilt copy, so that the objects a compile sees share
#: structure as in a fresh process (identity-keyed passes charge per distinct node)
_LIVE: weakref.WeakValueDictionary[tuple[int, Hashable], CachedWork[Any]] = (
    weakref.WeakValueDictionary()
)


def replay_cost(entry: CachedWork[Any], memo: dict[Hashable, Any], hit_units: int) -> int:
    """The fuel a fresh build of ``entry`` would charge now, in the compile whose memo is
    ``memo``, and memoize its nested entries there as that build would (depth first, in call
    order: an entry never occurs in its own subtree).  O(nodes of the tree)."""
    cost = entry.own
    stack = [iter(entry.children)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
        elif child.key in memo:
            cost += hit_units
        else:
            memo[child.key] = child
            cost += child.own
            stack.append(iter(child.children))
    return cost


def cached_work(
    store: LruCache[_K, CachedWork[_T]],
    key: _K,
    memo_key: Hashable,
    build: Callable[[], _T],
    memo: dict[Hashable, Any] | None,
    *,
    hit_units: int = MEMO_HIT_UNITS,
    budget: WorkBudget | None = None,
    memoize: bool = True,
) -> _T:
    """``build()``, through the process-wide ``store`` (by ``key``) and the compile's ``memo``
    (by ``memo_key``), charged exactly what a fresh build would charge in this compile.

    A repeat within the compile (``memo_key`` in ``memo``) is charged ``hit_units``; a hit in
    ``store`` is charged :func:`replay_cost` (its own work plus its nested cached calls
    replayed against ``memo``); a miss is built, its nested cached calls (those sharing
    ``memo``) recorded as its children.  So the fuel, and whether a compile fits
    ``max_compile_work``, do not depend on what the process compiled or evicted before.
    ``budget``: charge that budget (the automata stages) rather than the current compile's
    (:func:`charge`, :func:`metered`).  ``memoize=False``: do not look up or keep this entry
    itself in ``memo`` (its children still are).  Exceptions are not cached."""
    if budget is None and _SCOPE.get() is None:
        # outside any compile: one scratch compile (unlimited, its own memo), so that the
        # nested cached calls of a build share the memo its entry is recorded against
        scratch = WorkBudget(1 << 62)
        with compile_scope(scratch):
            return cached_work(
                store, key, memo_key, build, scratch.memo, hit_units=hit_units, memoize=memoize
            )
    spend = budget.spend if budget is not None else charge
    frame = _FRAME.get()
    if frame is not None and frame.memo is not memo:
        frame = None
    entry: CachedWork[_T] | None = memo.get(memo_key) if memo is not None and memoize else None
    if entry is not None:
        cost = hit_units
        spend(cost)
    else:
        found, entry = store.get(key)
        if not found or entry is None:
            entry = _LIVE.get((id(store), key))
            if entry is not None:
                store.put(key, entry)
        if entry is not None:
            cost = replay_cost(entry, {} if memo is None else memo, hit_units)
            spend(cost)
        else:
            child_frame = _Frame(memo)
            token = _FRAME.set(child_frame)
            try:
                if budget is None:
                    value, cost = metered(build)
                else:
                    before = budget.used
                    value = build()
                    cost = budget.used - before
            finally:
                _FRAME.reset(token)
            entry = CachedWork(
                memo_key, value, cost - child_frame.charged, tuple(child_frame.children)
            )
            store.put(key, entry)
            _LIVE[id(store), key] = entry
        if memo is not None and memoize:
            memo[memo_key] = entry
    if frame is not None:
        frame.children.append(entry)
        frame.charged += cost
    return entry.value


_P = ParamSpec("_P")


def metered_cache(maxsize: int) -> Callable[[Callable[_P, _T]], Callable[_P, _T]]:
    """``functools.lru_cache`` for compile work (:func:`cached_work`): a hit charges what a
    fresh build would cost in the current compile (its own work, plus its nested cached calls
    replayed against the compile's memo), a repeat within one compile
    :data:`MEMO_HIT_UNITS`, so a cached front-end helper (a parsed pattern, a format's IR)
    costs a compile the same fuel whether it was built by this compile, an earlier one, or
    outside any.  Arguments must be hashable; exceptions are not cached.  Thread-safe."""

    def decorate(fn: Callable[_P, _T]) -> Callable[_P, _T]:
        store: LruCache[Hashable, CachedWork[_T]] = LruCache(maxsize)
        # the wrapper itself (memo keys are ``(wrapper, key)``), through a cell: a mypyc-compiled
        # closure cannot refer to its own name
        this: list[Callable[_P, _T]] = []

        @functools.wraps(fn)
        def cached(*args: _P.args, **kwargs: _P.kwargs) -> _T:
            key: Hashable = (args, tuple(sorted(kwargs.items()))) if kwargs else args
            return cached_work(
                store, key, (this[0], key), lambda: fn(*args, **kwargs), compile_memo()
            )

        this.append(cached)
        return cached

    return decorate
