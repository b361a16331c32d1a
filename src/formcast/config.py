"""Configuration objects: one frozen dataclass per concern.

Environment variables are read here and nowhere else (:func:`limits_from_env`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace

from .errors import ConfigurationError

__all__ = [
    "CompileLimits",
    "WorkBudget",
    "check_deadline",
    "compile_scope",
    "limits_from_env",
]


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
        max_compile_work: total automaton-construction work for one constraint, in units of
            NFA states built and DFA states constructed (deterministic "fuel"; one unit is
            about 0.7 us on one core of a 2-core VM, so the default stops a compile after
            about 2 s there; hopeless constraints are refused right after NFA construction,
            from a projection).
            It also covers the token-index preparation of a grammar (call-expanded lexer,
            position classes).
        max_compile_seconds: optional wall-clock cap on one compile, in seconds (``None``,
            the default: none).  Unlike ``max_compile_work`` it depends on the machine and its
            load, so the same constraint may compile on one run and not on the next; use it
            where a hard latency bound matters more than reproducibility (a server facing
            untrusted schemas).
    """

    max_pattern_length: int = 100_000
    max_repeat: int = 100_000
    max_nfa_states: int = 1_000_000
    max_dfa_states: int = 65_536
    max_minimize_states: int = 20_000
    max_alternatives: int = 100_000
    max_compile_work: int = 3_000_000
    max_compile_seconds: float | None = None

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


_ENV_PREFIX = "FORMCAST_LIMIT_"


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

    __slots__ = ("deadline", "limit", "seconds", "used")

    def __init__(self, limit: int, seconds: float | None = None) -> None:
        self.limit = limit
        self.used = 0
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def check_projected(self, amount: int) -> None:
        """Raise now if spending ``amount`` more would certainly exceed the limit."""
        if self.used + amount > self.limit:
            from .errors import LimitExceededError

            raise LimitExceededError(
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
            from .errors import LimitExceededError

            raise LimitExceededError(
                "max_compile_work",
                self.limit,
                "the constraint's automata are too large to build (long bounded repeats or "
                "huge alternations)",
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
