"""Tool calls and tool definitions: :class:`ToolCall`, :class:`FunctionTool`, :func:`read_tools`.

OpenAI-style ``tools`` (``[{"type": "function", "function": {"name", "description",
"parameters"}}]``) are read once into :class:`FunctionTool` values (name checked, parameters
schema defaulted to "any object"); ``tool_choice`` is read by :func:`read_tool_choice`.

Lifetime: immutable values; reading is a pure function.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigurationError

__all__ = [
    "FunctionTool",
    "ToolCall",
    "ToolChoice",
    "new_call_id",
    "read_tool_choice",
    "read_tools",
]

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")

ToolChoice = Literal["auto", "required", "none"] | str
"""``"auto"``, ``"required"``, ``"none"``, or the name of the one function to call."""


def new_call_id() -> str:
    """A fresh call id in OpenAI's style (``call_`` + 24 hex digits)."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: ``arguments`` is the decoded JSON object, valid for the tool's
    ``parameters`` schema when it came out of :func:`~formcast.tools.parse_tool_calls`.
    Treat ``arguments`` as read-only (it is the parsed value, not a copy)."""

    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=new_call_id)

    def arguments_json(self) -> str:
        """The arguments as JSON text (what OpenAI's ``function.arguments`` holds)."""
        return json.dumps(self.arguments, ensure_ascii=False)

    def to_openai(self) -> dict[str, Any]:
        """``{"id", "type": "function", "function": {"name", "arguments": <JSON text>}}``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_json()},
        }


@dataclass(frozen=True)
class FunctionTool:
    """A function the model may call: ``parameters`` is its arguments' JSON Schema."""

    name: str
    parameters: Any = field(default_factory=lambda: {"type": "object"})
    description: str = ""

    def to_openai(self) -> dict[str, Any]:
        fn: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            fn["description"] = self.description
        return {"type": "function", "function": fn}


def _read_tool(value: Any, where: str) -> FunctionTool:
    if isinstance(value, FunctionTool):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{where}: a tool is {{'type': 'function', 'function': {{'name', 'parameters'}}}}, "
            f"got {type(value).__name__}"
        )
    if value.get("type", "function") != "function":
        raise ConfigurationError(
            f"{where}: only tools of type 'function' are supported, got {value.get('type')!r}"
        )
    fn = value.get("function", value)
    if not isinstance(fn, Mapping):
        raise ConfigurationError(f"{where}.function must be an object with 'name'")
    name = fn.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"{where}.function.name must be 1-64 characters of letters, digits, '_', '-' or '.', "
            f"got {name!r}"
        )
    params = fn.get("parameters")
    if params is None:
        params = {"type": "object"}
    if not isinstance(params, (Mapping, bool)):
        raise ConfigurationError(
            f"{where}.function.parameters must be a JSON Schema object, got {type(params).__name__}"
        )
    desc = fn.get("description") or ""
    if not isinstance(desc, str):
        raise ConfigurationError(f"{where}.function.description must be a string")
    return FunctionTool(name, dict(params) if isinstance(params, Mapping) else params, desc)


def read_tools(tools: Iterable[Any] | None) -> tuple[FunctionTool, ...]:
    """OpenAI-style ``tools`` (or :class:`FunctionTool` values) as a tuple of
    :class:`FunctionTool` with distinct names.

    Raises:
        ConfigurationError: a malformed tool (the message names its index), duplicate names.
    """
    if tools is None:
        return ()
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        raise ConfigurationError("tools must be a list of {'type': 'function', 'function': ...}")
    out = tuple(_read_tool(t, f"tools[{i}]") for i, t in enumerate(tools))
    seen: set[str] = set()
    for t in out:
        if t.name in seen:
            raise ConfigurationError(f"tools: the function name {t.name!r} appears twice")
        seen.add(t.name)
    return out


def read_tool_choice(tool_choice: Any, tools: tuple[FunctionTool, ...]) -> str:
    """``tool_choice`` as ``"auto"``, ``"required"``, ``"none"`` or ``"function:NAME"``.

    Accepts the strings, OpenAI's ``{"type": "function", "function": {"name": ...}}``, and
    ``None`` (``"auto"`` with tools, ``"none"`` without, as OpenAI).

    Raises:
        ConfigurationError: an unknown choice, a named function not in ``tools``, or
            ``"required"`` without tools.
    """
    if tool_choice is None:
        return "auto" if tools else "none"
    name: Any = None
    if isinstance(tool_choice, str):
        if tool_choice in ("auto", "required", "none"):
            if tool_choice == "required" and not tools:
                raise ConfigurationError("tool_choice 'required' needs at least one tool")
            return tool_choice
        raise ConfigurationError(
            f"tool_choice must be 'auto', 'required', 'none' or "
            f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}"
        )
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function")
        if tool_choice.get("type") == "function" and isinstance(fn, Mapping):
            name = fn.get("name")
    if not isinstance(name, str):
        raise ConfigurationError(
            "tool_choice must be 'auto', 'required', 'none' or "
            f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}"
        )
    if name not in {t.name for t in tools}:
        raise ConfigurationError(
            f"tool_choice names the function {name!r}, which is not among the tools "
            f"{[t.name for t in tools]}"
        )
    return f"function:{name}"
