"""``tools`` / ``tool_choice`` / ``parallel_tool_calls`` to a constraint, and the output back to
``message.tool_calls``, through :mod:`formcast.tools`.

The tool-call format is the model's own (``formcast.tools.get_tool_call_format`` from the
model's name / chat template; Hermes ``<tool_call>{json}</tool_call>`` for ChatML models such
as SmolLM2).  ``tool_choice``:

* ``"none"`` -- text in which the format's trigger never occurs;
* ``"auto"`` (default) -- free text, and after the format's trigger one or more calls whose
  ``name`` selects the parameters' schema;
* ``"required"`` -- at least one call; ``{"type": "function", "function": {"name": N}}`` --
  exactly one call of ``N`` (OpenAI's contract, with or without ``parallel_tool_calls``).

With ``parallel_tool_calls: false`` at most one call is allowed.  A ``response_format`` schema
with ``"auto"`` makes the reply either a document valid for it or calls.  The completed output is
parsed into :class:`formcast.tools.ToolCall` values (arguments valid for their schema) and
answered as ``message.tool_calls`` with ``finish_reason: "tool_calls"``.

Streaming, and outputs cut short: :mod:`formcast.server.tool_stream`.

Lifetime: :class:`ToolPlan` lives for one request.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigurationError, FormcastError
from ..model.protocol import LanguageModel
from .api_errors import APIError, from_formcast_error
from .strict import check_strict_schema, open_free_form_objects

__all__ = ["ToolPlan", "plan_tools", "tools_system_text"]


@dataclass
class ToolPlan:
    """The tools of one request: the OpenAI tool list, the model's call format, the
    structural tag to compile, and whether calls may appear (not for ``tool_choice="none"``)."""

    tools: list[dict[str, Any]]
    format: Any
    tag: Any
    calls_allowed: bool
    triggers: tuple[str, ...]
    legacy: bool = False  # the request used the legacy functions / function_call

    def constraint(self) -> Any:
        """The tag as a constraint object, for ``GrammarCompiler.compile`` (so that it
        compiles through ``compile_async``, off the event loop and cancellable)."""
        from ..index.structural_tag import structural_tag_constraint

        try:
            return structural_tag_constraint(self.tag)
        except FormcastError as exc:
            raise from_formcast_error(exc, param="tools") from exc

    def parse(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        """``(content, tool_calls as OpenAI dicts)`` of a completed output."""
        if not self.calls_allowed:
            return text, []
        from ..tools.parse import parse_tool_calls

        try:
            content, calls = parse_tool_calls(text, self.tools, format=self.format)
        except FormcastError as exc:  # constrained output always parses: a bug if it does not
            raise APIError(500, f"the completed output did not parse as tool calls: {exc}",
                           type="server_error", code="tool_call_parse_error") from exc
        return content, [c.to_openai() for c in calls]


def plan_tools(
    model: LanguageModel,
    tools: list[dict[str, Any]] | None,
    tool_choice: Any,
    parallel_tool_calls: bool | None,
    *,
    content_schema: Any = None,
    content_options: Any = None,
    allow_extra_properties: bool = False,
) -> ToolPlan | None:
    """The :class:`ToolPlan` of a request (``None`` when it has no tools).

    ``content_schema``: the ``response_format`` schema of a text reply; with
    ``tool_choice="auto"`` the reply is then *either* a document valid for it *or* calls.
    A tool with ``"strict": true`` must follow OpenAI's strict-mode rules
    (:func:`~formcast.server.strict.check_strict_schema`); ``allow_extra_properties`` is the
    server's switch for the objects of the others (see :class:`ServerConfig`).

    Raises:
        APIError: 400 for a bad ``tool_choice`` (an unknown function name...) or tools that
            cannot be read.
    """
    if not tools:
        if tool_choice not in (None, "none", "auto"):
            raise APIError(400, "tool_choice is given but tools is empty", param="tool_choice",
                           code="invalid_request")
        return None
    from ..index.structural_tag import JsonSchema
    from ..tools.formats import (
        HERMES,
        TOOL_CALL_JSON_OPTIONS,
        get_tool_call_format,
        tool_call_structural_tag,
    )

    choice = "auto" if tool_choice is None else tool_choice
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        names = [t["function"]["name"] for t in tools]
        if name not in names:
            raise APIError(400, f"tool_choice names the function {name!r}, which is not in "
                           f"tools ({', '.join(names)})", param="tool_choice",
                           code="invalid_request")
    checked = []
    for i, t in enumerate(tools):
        fn = t.get("function") or {}
        if fn.get("strict") and fn.get("parameters") is not None:
            check_strict_schema(fn["parameters"], param=f"tools[{i}].function.parameters")
        elif not allow_extra_properties and isinstance(fn.get("parameters"), dict):
            fn = {**fn, "parameters": open_free_form_objects(fn["parameters"])}
            t = {**t, "function": fn}
        checked.append(t)
    tools = checked
    fmt = get_tool_call_format(_format_hint(model), default=HERMES)
    json_options = replace(TOOL_CALL_JSON_OPTIONS, allow_extra_properties=allow_extra_properties)
    content = None if content_schema is None else JsonSchema(content_schema, content_options)
    # OpenAI's contract: a named function is called exactly once, whatever
    # parallel_tool_calls says ("forcing" a function means one call of it)
    named = isinstance(choice, dict)
    parallel = not named and (True if parallel_tool_calls is None else parallel_tool_calls)
    try:
        tag = tool_call_structural_tag(
            tools,
            choice,
            parallel_tool_calls=parallel,
            max_calls=1 if named else None,
            format=fmt,
            content=content,
            json_options=json_options,
        )
    except ConfigurationError as exc:
        raise APIError(400, f"tools / tool_choice: {exc}", param="tools",
                       code="invalid_request") from exc
    except FormcastError as exc:
        raise from_formcast_error(exc, param="tools") from exc
    return ToolPlan(tools, fmt, tag, choice != "none", (fmt.trigger,))


def _format_hint(model: LanguageModel) -> str:
    """What names the model's tool-call format: its chat template's text or name, else the
    model's name."""
    template = model.chat_template
    source = getattr(template, "source", None)
    if isinstance(source, str) and source:
        return source
    name = getattr(template, "name", None)
    return name if isinstance(name, str) and name else model.name


def tools_system_text(tools: list[dict[str, Any]], fmt: Any) -> str:
    """A system message describing ``tools`` and how to call them, for a chat template that
    does not render tools itself (the hand-written ChatML ones)."""
    import json

    listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    example = fmt.render([("function_name", {"argument": "value"})])
    return (
        "You may call one or more functions to help with the user's request. The functions "
        f"are:\n<tools>\n{listing}\n</tools>\nTo call a function, write:\n{example}"
    )
