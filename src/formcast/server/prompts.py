"""Chat messages to the prompt text, in the model's own chat template.

Text content only (text parts are joined; other parts are a 400 naming them); ``developer``
is a system message; an assistant's ``tool_calls`` (and the legacy ``function_call``) and
``tool`` results (and legacy ``function`` results) are kept for the template, or written in
the model's call format for a template that does not render tools.

Lifetime: pure functions.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import FormcastError
from ..model.protocol import LanguageModel
from .api_errors import APIError
from .requests import ChatMessage
from .tool_bridge import ToolPlan, tools_system_text

__all__ = ["chat_messages", "render_chat"]


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
    legacy_ids: list[str] = []  # ids given to legacy function calls, for their results
    for i, m in enumerate(messages):
        role = {"developer": "system", "function": "tool"}.get(m.role, m.role)
        msg: dict[str, Any] = {"role": role, "content": _text_content(m.content, i)}
        if m.tool_calls:
            msg["tool_calls"] = m.tool_calls
        elif m.function_call and m.role == "assistant":  # legacy: one call
            legacy_ids.append(f"call_legacy_{len(legacy_ids)}")
            msg["tool_calls"] = [{"id": legacy_ids[-1], "type": "function",
                                  "function": dict(m.function_call)}]
        if m.role == "function" and m.tool_call_id is None and legacy_ids:
            msg["tool_call_id"] = legacy_ids[-1]
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
