"""The values an action run produces: :class:`Failure`, :class:`LayerResult`, :class:`Outcome`,
and the :class:`Ledger` protocol that makes execution idempotent.

Lifetime: plain immutable values, one :class:`Outcome` per ``ActionRunner.run`` call; a ledger
lives as long as its store (memory, an SQLite file, a PostgreSQL database).  Nothing here does
work: constructing these costs what a frozen dataclass costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "LAYERS",
    "OUTCOME_FINISH_REASONS",
    "STATUSES",
    "Failure",
    "Layer",
    "LayerResult",
    "Ledger",
    "LedgerEntry",
    "LedgerState",
    "Outcome",
    "OutcomeFinishReason",
    "Status",
]

#: The validation layers, in the order the runner applies them.  ``syntax``: the parser
#: (complete termination); ``schema``: ``jsonschema`` validation of the parsed value (server
#: fields filled in first); ``business``: the tool's rules (cross-field invariants);
#: ``facts``: evidence checks (database lookups); ``inspection``: the optional content check of
#: free-text fields; ``permission``: the principal, re-checked right before execution;
#: ``execution``: the tool's own result or exception.
Layer = Literal["syntax", "schema", "business", "facts", "inspection", "permission", "execution"]
LAYERS: tuple[Layer, ...] = (
    "syntax", "schema", "business", "facts", "inspection", "permission", "execution",
)

#: ``committed``: executed by this run.  ``duplicate``: the idempotency key was already
#: executed (or failed) before: the recorded result is returned, nothing runs again.
#: ``rejected``: a layer failed that the retry policy neither retries nor hands off.
#: ``handed_off``: attempts ran out, a never-retried layer (permission) failed, or the key is
#: in doubt (a ``pending`` ledger entry): ``on_hand_off`` received the outcome.
#: ``not_committed``: generation was interrupted (cancelled, timeout): nothing executed.
Status = Literal["committed", "rejected", "handed_off", "duplicate", "not_committed"]
STATUSES: tuple[Status, ...] = ("committed", "rejected", "handed_off", "duplicate", "not_committed")

#: How the last attempt's generation ended (the generation loop's reasons plus the two
#: interruptions the runner adds).
OutcomeFinishReason = Literal["completed", "max_tokens", "dead_end", "stop", "cancelled", "timeout"]
OUTCOME_FINISH_REASONS: tuple[OutcomeFinishReason, ...] = (
    "completed", "max_tokens", "dead_end", "stop", "cancelled", "timeout",
)


@dataclass(frozen=True)
class Failure:
    """One structured failure: which ``layer``, a stable machine-readable ``code`` (e.g.
    ``"incomplete"``, ``"required"``, ``"amount_exceeds_order"``, ``"forbidden"``,
    ``"raised"``), a human ``message`` and the JSON ``pointer`` of the offending value
    (``""`` for the whole document)."""

    layer: Layer
    code: str
    message: str
    pointer: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"layer": self.layer, "code": self.code, "message": self.message,
                "pointer": self.pointer}


@dataclass(frozen=True)
class LayerResult:
    """The verdict of one layer on one attempt: ``ok`` and, when not, its failures (never
    empty when ``ok`` is false).  A layer that did not run (an earlier one failed) has no
    result at all."""

    layer: Layer
    ok: bool
    failures: tuple[Failure, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What one ``ActionRunner.run`` call did.

    Attributes:
        status: see :data:`Status`.
        finish_reason: how the last attempt's generation ended.
        layers: the last attempt's layer results, in :data:`LAYERS` order (only the layers
            that ran).
        attempts: generations made (1 without retries).
        idempotency_key: the key of the logical action (given or made once, reused by every
            retry).
        tool: the tool's name (``None`` when no attempt parsed into a tool call).
        args: the validated arguments (server fields included), or the last parsed value.
        result: the execution's result (``committed``), or the recorded one (``duplicate``).
        in_doubt: the ledger holds a ``pending`` entry for the key (a crash between execute
            and the ledger write): it is reported, never re-executed.
        history: every attempt's layer results, oldest first (``layers`` is the last).
        text: the last attempt's generated text.
    """

    status: Status
    finish_reason: OutcomeFinishReason
    layers: tuple[LayerResult, ...]
    attempts: int
    idempotency_key: str
    tool: str | None = None
    args: Mapping[str, Any] | None = None
    result: Any = None
    in_doubt: bool = False
    history: tuple[tuple[LayerResult, ...], ...] = ()
    text: str = ""

    @property
    def failures(self) -> tuple[Failure, ...]:
        """The last attempt's failures, layer by layer."""
        return tuple(f for lr in self.layers for f in lr.failures)

    @property
    def committed(self) -> bool:
        return self.status == "committed"


LedgerState = Literal["pending", "executed", "failed"]


@dataclass(frozen=True)
class LedgerEntry:
    """One idempotency key's record: ``pending`` (claimed, execution under way or crashed),
    ``executed`` with the tool's JSON-serializable ``result``, or ``failed`` with ``error``."""

    key: str
    tool: str
    args: Mapping[str, Any]
    state: LedgerState
    result: Any = None
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Ledger(Protocol):
    """Where executions are recorded so that a key runs at most once.

    ``claim`` is the atomic step: it records ``pending`` for a new key and returns ``None``
    (the caller now owns the execution), or returns the existing entry untouched (the caller
    must not execute).  After executing, the owner records ``executed`` (with the result) or
    ``failed``.  Implementations: ``MemoryLedger`` (one process), ``SqliteLedger`` (one machine,
    several processes), ``PostgresLedger`` (several machines).  Thread-safe."""

    def claim(self, key: str, tool: str, args: Mapping[str, Any]) -> LedgerEntry | None: ...

    def record_executed(self, key: str, result: Any) -> None: ...

    def record_failed(self, key: str, error: str) -> None: ...

    def get(self, key: str) -> LedgerEntry | None: ...
