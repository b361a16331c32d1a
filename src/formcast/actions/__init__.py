"""Actions that commit exactly once: the layer between generation and the world.

::

    from formcast import actions

    refund = actions.Tool(name="refund", schema={...}, rules=[...], facts=[...],
                          permission=lambda principal, args: None,
                          execute=lambda args, key: {...})
    runner = actions.ActionRunner(model, tools=[refund], ledger=actions.SqliteLedger("a.db"),
                                  retry=actions.RetryPolicy(max_attempts=3),
                                  metrics=actions.Metrics(), max_tokens=256)
    outcome = runner.run(prompt, principal=user)      # outcome.status, .layers, .result

An action executes only when generation completed in an accepting state, the arguments
validate against the full schema (``jsonschema``), and every business rule, fact check and
permission check passed; the permission is checked again right before execution, and the
ledger makes a key execute at most once (see :mod:`formcast.actions.runner`).

Modules: ``types`` (the values), ``tool`` (:class:`Tool`), ``schema_split`` (the minimal
generation schema), ``retry`` (:class:`RetryPolicy`), ``untrusted`` (prompt delimiting),
``runner`` (:class:`ActionRunner`), ``ledger`` (Memory/Sqlite/Postgres ledgers), ``metrics``
(:class:`Metrics`).

Lifetime: importing this package imports the runner and its dependencies (numpy, the
generation layer); ``jsonschema`` is imported when the first :class:`Tool` is built, psycopg
and prometheus_client only by the classes that need them.  The ledgers and metrics are loaded
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .retry import DEFAULT_RETRY_ON, RetryPolicy, default_feedback, feedback_message
from .runner import GENERATION_OPTIONS, ActionRunner, tools_generation_schema
from .schema_split import generation_schema, read_only_fields, schema_defaults, server_fields
from .tool import Tool, json_pointer
from .types import (
    LAYERS,
    OUTCOME_FINISH_REASONS,
    STATUSES,
    Failure,
    Layer,
    LayerResult,
    Ledger,
    LedgerEntry,
    LedgerState,
    Outcome,
    OutcomeFinishReason,
    Status,
)
from .untrusted import UNTRUSTED_NOTE, untrusted

if TYPE_CHECKING:  # pragma: no cover
    from .ledger import MemoryLedger, PostgresLedger, SqliteLedger
    from .metrics import Metrics

_LAZY = {
    "MemoryLedger": "ledger",
    "SqliteLedger": "ledger",
    "PostgresLedger": "ledger",
    "Metrics": "metrics",
}


def __getattr__(name: str) -> Any:
    """The ledgers and metrics, loaded on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'formcast.actions' has no attribute {name!r}")


__all__ = [
    "DEFAULT_RETRY_ON",
    "GENERATION_OPTIONS",
    "LAYERS",
    "OUTCOME_FINISH_REASONS",
    "STATUSES",
    "UNTRUSTED_NOTE",
    "ActionRunner",
    "Failure",
    "Layer",
    "LayerResult",
    "Ledger",
    "LedgerEntry",
    "LedgerState",
    "MemoryLedger",
    "Metrics",
    "Outcome",
    "OutcomeFinishReason",
    "PostgresLedger",
    "RetryPolicy",
    "SqliteLedger",
    "Status",
    "Tool",
    "default_feedback",
    "feedback_message",
    "generation_schema",
    "json_pointer",
    "read_only_fields",
    "schema_defaults",
    "server_fields",
    "tools_generation_schema",
    "untrusted",
]
