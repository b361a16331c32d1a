"""OpenAI request bodies (Pydantic models) and what they become: a prompt, a constraint, a job.

The request models accept the fields of OpenAI's ``/v1/chat/completions`` and
``/v1/completions`` (unknown fields are ignored, as vLLM does).  A parameter the server cannot
honour with a non-default value (``logit_bias``, penalties, ``echo``, ``suffix``,
``best_of``) is a 400 naming it -- never silently dropped.

``response_format`` (chat, and as an extension on completions):

* ``{"type": "text"}`` or absent: no constraint;
* ``{"type": "json_object"}``: a JSON object (the schema ``{"type": "object"}``);
* ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``: a document valid
  for ``schema``.  ``strict`` true or absent fails closed on a keyword formcast cannot enforce
  (400 naming it and its JSON pointer); ``strict: false`` ignores such keywords (they are
  listed in the response's ``formcast.warnings``).

Lifetime: request models live for one request; the functions are pure.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import FormcastError
from ..frontends.jsonschema.options import JsonSchemaOptions
from ..model.protocol import LanguageModel
from .api_errors import APIError
from .tool_bridge import ToolPlan, tools_system_text

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "ConstraintPlan",
    "chat_messages",
    "check_unsupported",
    "render_chat",
    "response_format_plan",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class JsonSchemaFormat(_Body):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class FunctionDef(_Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Body):
    type: Literal["function"] = "function"
    function: FunctionDef


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class _Sampling(_Body):
    model: str
    n: int = Field(default=1, ge=1)
    seed: int | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None


class ChatCompletionRequest(_Sampling):
    """The body of ``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    response_format: ResponseFormat | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class CompletionRequest(_Sampling):
    """The body of ``POST /v1/completions`` (``response_format`` is formcast's extension)."""

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=0)
    response_format: ResponseFormat | None = None
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)


def check_unsupported(body: _Sampling) -> None:
    """A 400 naming the first parameter given a value the server cannot honour."""
    checks: list[tuple[str, bool, str]] = [
        ("presence_penalty", bool(body.presence_penalty), "penalties are not implemented"),
        ("frequency_penalty", bool(body.frequency_penalty), "penalties are not implemented"),
        ("logit_bias", bool(body.logit_bias), "logit_bias is not implemented"),
    ]
    if isinstance(body, ChatCompletionRequest):
        checks.append(("top_logprobs", bool(body.top_logprobs) and not body.logprobs,
                       "top_logprobs needs logprobs: true"))
    if isinstance(body, CompletionRequest):
        checks += [
            ("echo", body.echo, "echo is not implemented"),
            ("suffix", bool(body.suffix), "suffix (insertion) is not implemented"),
            ("best_of", body.best_of not in (None, 1) and body.best_of != body.n,
             "best_of is not implemented"),
        ]
    for param, given, why in checks:
        if given:
            raise APIError(400, f"unsupported parameter {param!r}: {why}", param=param,
                           code="unsupported_parameter")


# -- constraints ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConstraintPlan:
    """What to compile: a :class:`~formcast.index.compiler.GrammarCompiler` method, its
    arguments (``compile_json_schema``: ``(schema, JsonSchemaOptions)``), and the request
    parameter that carried it (for error messages)."""

    method: str
    args: tuple[Any, ...]
    param: str
    json_output: bool = False


def response_format_plan(
    fmt: ResponseFormat | None, *, compile_timeout_s: float
) -> ConstraintPlan | None:
    """The compile of ``response_format`` (``None``: free text)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        options = JsonSchemaOptions(max_compile_seconds=compile_timeout_s)
        return ConstraintPlan("compile_json_schema", ({"type": "object"}, options),
                              "response_format", json_output=True)
    spec = fmt.json_schema
    if spec is None or spec.schema_ is None:
        raise APIError(
            400,
            "response_format type 'json_schema' needs json_schema.schema (the JSON Schema the "
            "output must be valid for)",
            param="response_format.json_schema",
            code="invalid_request",
        )
    options = JsonSchemaOptions(lenient=spec.strict is False, max_compile_seconds=compile_timeout_s)
    return ConstraintPlan("compile_json_schema", (spec.schema_, options),
                          "response_format.json_schema.schema", json_output=True)


# -- chat messages -------------------------------------------------------------------------------
def _text_content(content: str | list[dict[str, Any]] | None, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for j, part in enumerate(content):
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise APIError(
                400,
                f"messages[{index}].content[{j}] has type {part.get('type')!r}: this server "
                "accepts text parts only",
                param=f"messages[{index}].content[{j}]",
                code="unsupported_content",
            )
        parts.append(part["text"])
    return "".join(parts)


def chat_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as plain dicts for a chat template: text content, ``developer`` as
    ``system``, tool calls and tool results kept (``tool_calls``, ``tool_call_id``)."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        msg: dict[str, Any] = {
            "role": "system" if m.role == "developer" else m.role,
            "content": _text_content(m.content, i),
        }
        if m.tool_calls:
            msg["tool_calls"] = m.tool_calls
        if m.tool_call_id is not None:
            msg["tool_call_id"] = m.tool_call_id
        if m.name is not None:
            msg["name"] = m.name
        out.append(msg)
    return out


def render_chat(
    model: LanguageModel,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    tool_plan: ToolPlan | None = None,
) -> str:
    """The prompt text of ``messages`` (and ``tools``) in the model's own chat template.

    A template that renders tools itself (a model's jinja template that uses ``tools``) gets
    them as they are; any other (a hand-written ChatML, or a jinja template without tool
    support such as SmolLM2's) gets text-only messages, earlier tool calls written in the
    model's call format, and the tools described in a system message."""
    template = model.chat_template
    if template is None:
        raise APIError(
            400,
            f"the model {model.name!r} has no chat template: use /v1/completions with a text "
            "prompt",
            param="messages",
            code="no_chat_template",
        )
    fmt = tool_plan.format if tool_plan is not None else None
    try:
        if _renders_tools(template):
            render: Any = template.render
            text: str = render(messages, tools=tools or None)
            return text
        plain = [_plain_message(m, fmt) for m in messages]
        if tools and fmt is not None:
            note = tools_system_text(tools, fmt)
            if plain and plain[0]["role"] == "system":
                plain[0] = {"role": "system", "content": plain[0]["content"] + "\n\n" + note}
            else:
                plain.insert(0, {"role": "system", "content": note})
        return template.render(plain)
    except FormcastError as exc:  # the template refused the conversation
        raise APIError(400, f"the chat template cannot render these messages: {exc}",
                       param="messages", code="invalid_request") from exc


def _renders_tools(template: Any) -> bool:
    """Does the template show tools and tool calls itself (a jinja template of the model), or
    is it a hand-written turn format (text only)?"""
    from ..model import chat

    turn = getattr(chat, "TurnTemplate", None)
    if isinstance(turn, type) and isinstance(template, turn):
        return False
    source = getattr(template, "source", None)
    if isinstance(source, str) and "tools" not in source:
        return False  # a jinja template that never shows tools (SmolLM2's)
    return "tools" in inspect.signature(template.render).parameters


def _plain_message(m: Mapping[str, Any], fmt: Any) -> dict[str, str]:
    """A message with text content only: an assistant's tool calls written in the model's
    call format (Hermes when none is known)."""
    content = str(m.get("content") or "")
    calls = m.get("tool_calls")
    if calls:
        from ..tools.formats import HERMES

        pairs = []
        for c in calls:
            fn = c.get("function") or {}
            args = fn.get("arguments")
            if isinstance(args, str):
                with contextlib.suppress(ValueError):  # not JSON: kept as the text it is
                    args = json.loads(args)
            pairs.append((str(fn.get("name")), args))
        content += (fmt if fmt is not None else HERMES).render(pairs)
    return {"role": str(m["role"]), "content": content}
