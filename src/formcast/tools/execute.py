"""Server-side execution of parsed tool calls through :mod:`formcast.actions`.

A call parsed from a chat completion is executed the way an
:class:`~formcast.actions.ActionRunner` executes its own: the same layers (server fields
filled, the *full* schema checked with jsonschema, rules, facts, inspection, permission), then
the commit through the ledger (claim, permission re-check, execute, record), exactly once per
idempotency key (:meth:`ActionRunner.commit_arguments
<formcast.actions.runner.ActionRunner.commit_arguments>`).  The key of a call defaults to
``"tool_call:" + call.id``, so a client that retries a turn with the same call ids does not run
a side effect twice.

Lifetime: stateless functions; the runner (and its ledger) is the caller's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..actions import ActionRunner, Outcome, Tool
from ..errors import ConfigurationError
from .calls import FunctionTool, ToolCall

__all__ = ["execute_tool_calls", "function_tools"]


def function_tools(tools: Iterable[Tool]) -> tuple[FunctionTool, ...]:
    """The :class:`~formcast.tools.FunctionTool` of each action tool, with its *generation*
    schema (the fields the server fills itself are not the model's to write)."""
    out = []
    for t in tools:
        if not isinstance(t, Tool):
            raise ConfigurationError(f"function_tools takes actions.Tool values, got {t!r}")
        out.append(FunctionTool(t.name, t.generation_schema, t.description))
    return tuple(out)


def execute_tool_calls(
    calls: Sequence[ToolCall],
    runner: ActionRunner,
    *,
    principal: Any = None,
    key_prefix: str = "tool_call:",
    text: str = "",
) -> list[Outcome]:
    """Validate and commit each call through ``runner``'s tools and ledger, in order.

    Args:
        calls: parsed calls (:func:`~formcast.tools.parse_tool_calls`).
        runner: the :class:`~formcast.actions.ActionRunner` holding the tools (by name), the
            ledger, the metrics.
        principal: who asks (given to each tool's ``permission``).
        key_prefix: each call's idempotency key is ``key_prefix + call.id``.
        text: the generated text the calls came from (for the tools' inspection layer).

    Returns:
        One :class:`~formcast.actions.Outcome` per call (``committed``, ``rejected``,
        ``handed_off``, ``duplicate``); a failing call does not stop the next ones.

    Raises:
        ConfigurationError: a call names a function the runner has no tool for.
    """
    outcomes = []
    for call in calls:
        if not isinstance(call, ToolCall):
            raise ConfigurationError(f"execute_tool_calls takes ToolCall values, got {call!r}")
        outcomes.append(
            runner.commit_arguments(
                call.name, call.arguments, principal, key_prefix + call.id, text=text
            )
        )
    return outcomes
