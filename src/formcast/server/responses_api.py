"""``POST /v1/responses``: OpenAI's Responses API, stateless, over the same engine and
constraints as chat.

Request: ``input`` (a text, or items: messages with ``input_text``/``output_text`` parts,
``function_call`` and ``function_call_output`` items), ``instructions`` (a system message),
``text.format`` (``text``, ``json_object``, ``json_schema`` with ``strict``: see
:mod:`.constraints`), function ``tools`` (``{"type": "function", "name", "parameters",
"strict"}``), ``tool_choice`` (``"auto"``, ``"required"``, ``"none"``, ``{"type": "function",
"name": N}``: one call of ``N``), ``parallel_tool_calls``, ``max_output_tokens``,
``temperature``, ``top_p``, ``stream``, ``metadata`` (echoed).

Stateless: nothing is stored (``store`` is answered ``false``); ``previous_response_id``,
``conversation``, ``background`` and ``prompt`` are a 400 naming them -- send the whole
conversation in ``input`` (what ``store: false`` clients do).  Other tool types and reasoning
options are a 400 naming them too.

Response: a ``response`` object whose ``output`` holds a ``message`` item (``output_text``)
and/or ``function_call`` items (``call_id``, ``name``, ``arguments``).  ``status``:
``completed``; ``incomplete`` with ``incomplete_details.reason: "max_output_tokens"`` when the
budget ran out (the text, or the call begun with its arguments so far -- never the model's
call markup); ``failed`` on a timeout or a dead end.  Streamed (``stream: true``): the event
sequence of OpenAI -- ``response.created``, ``response.in_progress``, then per item
``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta``... or ``response.function_call_arguments.delta``... as the tokens
are generated, their ``.done`` events, and ``response.completed`` (``response.incomplete``,
``response.failed``), each with its ``sequence_number``.

Lifetime: the functions serve one request each.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ..tools.calls import new_call_id
from .api_errors import APIError
from .constraints import compile_plan, json_schema_plan, tools_plan
from .context import HEAD_END, EventStream, ServerContext, aclose, all_events, collect, first_event
from .engine import Finished, GenerationSpec, Piece, now_deadline
from .prompts import render_chat
from .requests import ResponsesRequest
from .responses import created
from .tool_bridge import ToolPlan, plan_tools
from .tool_stream import ArgumentsDelta, CallSplitter, CallStarted, TextDelta, split_output

__all__ = ["ResponsesRequest", "create_response"]


#: parameters refused when they ask for something: (name, asks for something, why)
_REFUSED: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("previous_response_id", lambda v: v is not None,
     "this server is stateless (it stores no response): send the whole conversation in input"),
    ("conversation", lambda v: v is not None, "this server is stateless: no conversations"),
    ("background", lambda v: bool(v), "background responses are not implemented"),
    ("prompt", lambda v: v is not None, "stored prompts are not implemented"),
    ("reasoning", lambda v: bool(v) and any(x is not None for x in dict(v).values()),
     "this server serves no reasoning model"),
    ("include", lambda v: bool(v), "no additional output data is implemented"),
    ("top_logprobs", lambda v: bool(v), "logprobs are not implemented on /v1/responses"),
    ("max_tool_calls", lambda v: v is not None, "max_tool_calls is not implemented"),
    ("truncation", lambda v: v not in (None, "disabled"),
     "this server never drops input items: send truncation 'disabled' (a prompt too long for "
     "the context is a 400)"),
    ("text.verbosity", lambda v: v is not None, "verbosity is not implemented"),
)


def _check(body: ResponsesRequest) -> None:
    given = {**(body.model_extra or {}), "previous_response_id": body.previous_response_id}
    if body.text is not None and body.text.model_extra:
        given.update({f"text.{k}": v for k, v in body.text.model_extra.items()})
    for name, asks, why in _REFUSED:
        if name in given and asks(given[name]):
            raise APIError(400, f"unsupported parameter {name!r}: {why}", param=name,
                           code="unsupported_parameter")


def _tools(body: ResponsesRequest) -> list[dict[str, Any]] | None:
    if not body.tools:
        return None
    out = []
    for i, t in enumerate(body.tools):
        if t.get("type") != "function" or not isinstance(t.get("name"), str):
            raise APIError(400, f"tools[{i}] has type {t.get('type')!r}: this server runs "
                           "function tools only ({\"type\": \"function\", \"name\", "
                           "\"parameters\"})", param=f"tools[{i}].type", code="unsupported_tool")
        fn = {k: t[k] for k in ("name", "description", "parameters", "strict")
              if t.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise APIError(400, "tool_choice must be 'auto', 'required', 'none' or "
                           "{\"type\": \"function\", \"name\": ...}", param="tool_choice",
                           code="invalid_request")
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for j, part in enumerate(content):
        if part.get("type") not in ("input_text", "output_text", "text") or not isinstance(
            part.get("text"), str
        ):
            raise APIError(400, f"{where}.content[{j}] has type {part.get('type')!r}: this "
                           "server accepts text parts only", param=f"{where}.content[{j}]",
                           code="unsupported_content")
        parts.append(part["text"])
    return "".join(parts)


def input_messages(body: ResponsesRequest) -> list[dict[str, Any]]:
    """``instructions`` and ``input`` as chat messages (tool calls and results kept)."""
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        messages.append({"role": "user", "content": body.input})
        return messages
    for i, item in enumerate(body.input):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise APIError(400, f"{where}.role must be user, system, developer or "
                               f"assistant, got {role!r}", param=f"{where}.role",
                               code="invalid_request")
            messages.append({"role": "system" if role == "developer" else role,
                             "content": _text(item.get("content"), where)})
        elif kind == "function_call":
            call = {"id": item.get("call_id") or item.get("id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else
                             _text(output, where) if isinstance(output, list)
                             else json.dumps(output)})
        else:
            raise APIError(400, f"{where} has type {kind!r}: this server accepts message, "
                           "function_call and function_call_output items", param=f"{where}.type",
                           code="unsupported_input")
    return messages


async def create_response(ctx: ServerContext, body: ResponsesRequest, request: Request) -> Response:
    """Answer one ``POST /v1/responses`` (see the module docstring)."""
    cfg = ctx.config
    deadline = now_deadline(cfg.request_timeout_s)
    ctx.check_model(body.model)
    _check(body)
    tools = _tools(body)
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    rf_plan = None
    if fmt is not None:
        rf_plan = json_schema_plan(fmt.type, fmt.schema_, fmt.strict, param="text.format.schema"
                                   if fmt.type == "json_schema" else "text.format",
                                   compile_timeout_s=cfg.compile_timeout_s,
                                   allow_extra_properties=cfg.allow_extra_properties,
                                   memo=ctx.plans)
    content = rf_plan.content if rf_plan is not None else (None, None)
    tool_plan = plan_tools(ctx.model, tools, _tool_choice(body.tool_choice),
                           body.parallel_tool_calls, content_schema=content[0],
                           content_options=content[1],
                           allow_extra_properties=cfg.allow_extra_properties)
    prompt = render_chat(ctx.model, input_messages(body), tools, tool_plan)
    release = ctx.engine.admit()
    streaming = False
    try:
        plan = tools_plan(tool_plan) if tool_plan is not None else rf_plan
        compiled = await compile_plan(ctx.engine, plan)
        job = ctx.new_job([GenerationSpec(0, prompt, None)], compiled,
                          max_tokens=body.max_output_tokens, temperature=body.temperature,
                          top_p=body.top_p, stop=None, deadline=deadline, logprobs=None,
                          release=release)
        events, watcher = ctx.start(request, job)
        shell = _shell(ctx, body, _new_id("resp"))
        if body.stream:
            first = await first_event(events, watcher)
            streaming = True
            return EventStream(
                _stream(all_events(first, events), events, watcher, shell, tool_plan, release))
        finished = await collect(events, watcher)
        if not finished:  # cancelled before any output: the client has gone
            raise APIError(500, "the generation ended without a result (cancelled)",
                           type="server_error", code="cancelled")
        done = finished[0]
        return JSONResponse(_finished(shell, _output(done, tool_plan), done))
    finally:
        if not streaming:
            release()


def _new_id(prefix: str) -> str:
    """An id in OpenAI's Responses style: ``resp_...``, ``msg_...``, ``fc_...``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def _shell(ctx: ServerContext, body: ResponsesRequest, rid: str) -> dict[str, Any]:
    """The response object before any output (``status: in_progress``)."""
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    text = {"format": {"type": "text"}} if fmt is None else {
        "format": fmt.model_dump(by_alias=True, exclude_none=True)}
    return {
        "id": rid, "object": "response", "created_at": created(), "status": "in_progress",
        "error": None, "incomplete_details": None, "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens, "model": ctx.config.model_name,
        "output": [], "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": None, "reasoning": None, "store": False,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "text": text, "tool_choice": body.tool_choice or "auto", "tools": body.tools or [],
        "top_p": 1.0 if body.top_p is None else body.top_p, "truncation": "disabled",
        "usage": None, "metadata": body.metadata or {}, "user": body.user,
    }


def _message_item(text: str, status: str, mid: str | None = None) -> dict[str, Any]:
    return {"type": "message", "id": mid or _new_id("msg"), "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [],
                         "logprobs": []}]}


def _call_item(call_id: str, name: str, arguments: str, status: str,
               fid: str | None = None) -> dict[str, Any]:
    return {"type": "function_call", "id": fid or _new_id("fc"), "call_id": call_id,
            "name": name, "arguments": arguments, "status": status}


def _output(f: Finished, tool_plan: ToolPlan | None) -> list[dict[str, Any]]:
    """The output items of a finished generation (non-streamed)."""
    status = "completed" if f.finish in ("completed", "stop") else "incomplete"
    if tool_plan is None or not tool_plan.calls_allowed:
        return [_message_item(f.text, status)]
    if f.finish == "completed":
        text, calls = tool_plan.parse(f.text)
    else:
        view = split_output(f.text, tool_plan.format, final=True, cut=True)
        calls = [{"id": new_call_id(), "function": {"name": c.name, "arguments": c.arguments}}
                 for c in view.calls]
        text = view.content.strip() if calls else view.content
    items = [_message_item(text, status)] if text or not calls else []
    items += [_call_item(c["id"], c["function"]["name"], c["function"]["arguments"], status)
              for c in calls]
    return items


def _finished(shell: dict[str, Any], output: list[dict[str, Any]], f: Finished
              ) -> dict[str, Any]:
    out = {**shell, "output": output, "usage": {
        "input_tokens": f.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": f.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": f.prompt_tokens + f.completion_tokens}}
    if f.finish in ("completed", "stop"):
        out["status"] = "completed"
    elif f.finish == "max_tokens":
        out["status"] = "incomplete"
        out["incomplete_details"] = {"reason": "max_output_tokens"}
    else:
        out["status"] = "failed"
        why = ("the request's time ran out (--timeout)" if f.finish == "timeout" else
               "the constraint allowed no token (a dead end)")
        out["error"] = {"code": "server_error", "message": why}
    return out


async def _stream(
    stream: AsyncIterator[Piece | Finished],
    events: AsyncIterator[Piece | Finished],
    watcher: Any,
    shell: dict[str, Any],
    tool_plan: ToolPlan | None,
    release: Callable[[], None],
) -> AsyncIterator[str]:
    """The SSE body of a streamed response (the module docstring's event sequence);
    :data:`HEAD_END` after the first event's lines."""
    seq = 0
    head = True

    def event(kind: str, **fields: Any) -> str:
        nonlocal seq
        payload = {"type": kind, "sequence_number": seq, **fields}
        seq += 1
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"

    fmt = tool_plan.format if tool_plan is not None and tool_plan.calls_allowed else None
    splitter = CallSplitter(fmt)
    items: list[dict[str, Any]] = []
    open_item: dict[str, Any] | None = None  # the item receiving deltas

    def close(status: str) -> list[str]:
        nonlocal open_item
        item, open_item = open_item, None
        if item is None:
            return []
        k = items.index(item)
        item["status"] = status
        if item["type"] == "message":
            part = item["content"][0]
            return [event("response.output_text.done", item_id=item["id"], output_index=k,
                          content_index=0, text=part["text"], logprobs=[]),
                    event("response.content_part.done", item_id=item["id"], output_index=k,
                          content_index=0, part=part),
                    event("response.output_item.done", output_index=k, item=item)]
        return [event("response.function_call_arguments.done", item_id=item["id"],
                      output_index=k, name=item["name"], arguments=item["arguments"]),
                event("response.output_item.done", output_index=k, item=item)]

    def apply(e: TextDelta | CallStarted | ArgumentsDelta) -> list[str]:
        nonlocal open_item
        out: list[str] = []
        if isinstance(e, TextDelta):
            if open_item is None or open_item["type"] != "message":
                out += close("completed")
                open_item = _message_item("", "in_progress")
                open_item["content"] = []
                items.append(open_item)
                k = len(items) - 1
                out.append(event("response.output_item.added", output_index=k,
                                 item=dict(open_item, content=[])))
                open_item["content"] = [{"type": "output_text", "text": "", "annotations": [],
                                         "logprobs": []}]
                out.append(event("response.content_part.added", item_id=open_item["id"],
                                 output_index=k, content_index=0,
                                 part={"type": "output_text", "text": "", "annotations": []}))
            open_item["content"][0]["text"] += e.text
            out.append(event("response.output_text.delta", item_id=open_item["id"],
                             output_index=items.index(open_item), content_index=0,
                             delta=e.text, logprobs=[]))
        elif isinstance(e, CallStarted):
            out += close("completed")
            open_item = _call_item(e.id, e.name, "", "in_progress")
            items.append(open_item)
            out.append(event("response.output_item.added", output_index=len(items) - 1,
                             item=dict(open_item)))
        else:
            assert open_item is not None  # a call's arguments follow its start
            open_item["arguments"] += e.text
            out.append(event("response.function_call_arguments.delta", item_id=open_item["id"],
                             output_index=items.index(open_item), delta=e.text))
        return out

    try:
        yield event("response.created", response=shell)
        yield event("response.in_progress", response=shell)
        async for ev in stream:
            if isinstance(ev, Piece):
                for e in splitter.feed(ev.text):
                    for line in apply(e):
                        yield line
                if head:
                    head = False
                    yield HEAD_END
                continue
            cut = ev.finish != "completed"
            for e in splitter.finish(cut=cut):
                for line in apply(e):
                    yield line
            status = "completed" if ev.finish in ("completed", "stop") else "incomplete"
            for line in close(status):
                yield line
            final = _finished(shell, items, ev)
            kind = {"completed": "response.completed", "incomplete": "response.incomplete",
                    "failed": "response.failed"}[final["status"]]
            yield event(kind, response=final)
            if head:
                head = False
                yield HEAD_END
    finally:
        watcher.cancel()
        await aclose(events)
        release()
