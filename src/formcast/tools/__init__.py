"""Tool calling: tool-call formats, tool_choice constraints, parsing, execution (docs/tools.md).

::

    from formcast.tools import get_tool_call_format, tool_call_structural_tag, parse_tool_calls

    fmt = get_tool_call_format("Qwen/Qwen2.5-7B-Instruct")          # HERMES: <tool_call>...
    tag = tool_call_structural_tag(tools, "required", parallel_tool_calls=False, format=fmt)
    compiled = compiler.compile_structural_tag(tag)                  # name selects the schema
    ... generate under ``compiled`` ...
    content, calls = parse_tool_calls(text, tools, fmt)             # [ToolCall(...)]
    outcomes = execute_tool_calls(calls, runner)                     # through formcast.actions

Modules: ``calls`` (:class:`ToolCall`, :class:`FunctionTool`, reading ``tools`` and
``tool_choice``), ``formats`` (:class:`ToolCallFormat`: ``HERMES``, ``LLAMA3``, ``MISTRAL``;
:func:`get_tool_call_format`; :func:`tool_call_structural_tag`), ``parse``
(:func:`parse_tool_calls`), ``execute`` (:func:`execute_tool_calls` through an
:class:`~formcast.actions.ActionRunner`; imported on first use).

Layer: between ``actions`` and ``integrations``.  Lifetime: immutable values and pure functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .calls import FunctionTool, ToolCall, ToolChoice, new_call_id, read_tool_choice, read_tools
from .formats import (
    FORMATS,
    HERMES,
    LLAMA3,
    MISTRAL,
    TOOL_CALL_JSON_OPTIONS,
    ToolCallFormat,
    get_tool_call_format,
    tool_call_structural_tag,
)
from .parse import parse_tool_calls, validate_arguments

if TYPE_CHECKING:  # pragma: no cover
    from .execute import execute_tool_calls, function_tools

__all__ = [
    "FORMATS",
    "HERMES",
    "LLAMA3",
    "MISTRAL",
    "TOOL_CALL_JSON_OPTIONS",
    "FunctionTool",
    "ToolCall",
    "ToolCallFormat",
    "ToolChoice",
    "execute_tool_calls",
    "function_tools",
    "get_tool_call_format",
    "new_call_id",
    "parse_tool_calls",
    "read_tool_choice",
    "read_tools",
    "tool_call_structural_tag",
    "validate_arguments",
]


def __getattr__(name: str) -> Any:
    """``execute_tool_calls`` / ``function_tools`` load :mod:`formcast.actions` on first use."""
    if name in ("execute_tool_calls", "function_tools"):
        from . import execute

        return getattr(execute, name)
    raise AttributeError(f"module 'formcast.tools' has no attribute {name!r}")
