"""``POST /v1/chat/completions``: a request to a job, the job's events to OpenAI's JSON or chunks.

One request, in order: the body is validated (:mod:`.requests`); the model name and the
parameters are checked; legacy ``functions`` become tools; the engine admits it (or answers
429); its constraint (``response_format`` or the tools' tag) is planned
(:mod:`.constraints`) and compiled off the event loop; the job is queued; the answer is one
JSON body, or server-sent events ending with ``data: [DONE]``.

Tool calls (:mod:`.tool_stream`): streamed as they are written -- the call's id and name in
one ``tool_calls`` delta as soon as the name is whole, then its arguments in fragments as the
tokens come (as vLLM and SGLang do).  A reply cut short (``max_tokens``, timeout) keeps the
calls begun as *partial* calls in ``tool_calls`` (arguments a prefix of a JSON document) with
``finish_reason: "length"`` -- the model's call markup never reaches ``content``.  With the
legacy ``functions``, the call is answered in ``message.function_call`` (``delta.function_call``)
with ``finish_reason: "function_call"``.

Lifetime: the functions serve one request each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ..tools.calls import new_call_id
from ..vocab.vocabulary import Vocabulary
from .api_errors import APIError
from .constraints import compile_plan, response_format_plan, tools_plan
from .context import HEAD_END, EventStream, ServerContext, aclose, all_events, collect, first_event
from .engine import Finished, GenerationSpec, Piece, now_deadline
from .prompts import chat_messages, render_chat
from .requests import ChatCompletionRequest, check_unsupported, legacy_functions
from .responses import (
    DONE,
    chat_logprobs,
    choice_extension,
    created,
    finish_reason,
    new_id,
    sse,
    usage,
)
from .tool_bridge import ToolPlan, plan_tools
from .tool_stream import ArgumentsDelta, CallSplitter, CallStarted, TextDelta, split_output

__all__ = ["chat_completion", "chat_message"]


async def chat_completion(
    ctx: ServerContext, body: ChatCompletionRequest, request: Request
) -> Response:
    """Answer one chat completion request (see the module docstring)."""
    cfg = ctx.config
    deadline = now_deadline(cfg.request_timeout_s)
    ctx.check_model(body.model)
    check_unsupported(body)
    if body.n > cfg.max_n:
        raise APIError(400, f"n={body.n} is more than this server's max_n={cfg.max_n}",
                       param="n", code="invalid_request")
    legacy = legacy_functions(body)
    tools: list[dict[str, Any]] | None
    parallel: bool | None
    if legacy is not None:
        tools, tool_choice, parallel = legacy[0], legacy[1], False
    else:
        tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
        tool_choice, parallel = body.tool_choice, body.parallel_tool_calls
    rf_plan = response_format_plan(body.response_format, cfg, ctx.plans)
    content = rf_plan.content if rf_plan is not None else (None, None)
    tool_plan = plan_tools(ctx.model, tools, tool_choice, parallel,
                           content_schema=content[0], content_options=content[1],
                           allow_extra_properties=cfg.allow_extra_properties)
    if legacy is not None and tool_plan is not None:
        tool_plan.legacy = True
    prompt = render_chat(ctx.model, chat_messages(body.messages), tools, tool_plan)
    release = ctx.engine.admit()
    streaming = False
    try:
        plan = tools_plan(tool_plan) if tool_plan is not None else rf_plan
        compiled = await compile_plan(ctx.engine, plan)
        warnings = tuple(compiled.warnings) if compiled is not None else ()
        max_tokens = (body.max_completion_tokens if body.max_completion_tokens is not None
                      else body.max_tokens)
        specs = [GenerationSpec(j, prompt, None if body.seed is None else body.seed + j)
                 for j in range(body.n)]
        top = (body.top_logprobs or 0) if body.logprobs else None
        job = ctx.new_job(specs, compiled, max_tokens=max_tokens, temperature=body.temperature,
                          top_p=body.top_p, stop=body.stop, deadline=deadline, logprobs=top,
                          release=release)
        events, watcher = ctx.start(request, job)
        base = {"id": new_id("chatcmpl"), "created": created(), "model": cfg.model_name,
                "system_fingerprint": ctx.fingerprint}
        if body.stream:
            first = await first_event(events, watcher)
            streaming = True
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return EventStream(
                _chat_stream(all_events(first, events), events, watcher, base, body.n,
                             tool_plan, warnings, include_usage, release, ctx.model.vocab)
            )
        done = await collect(events, watcher)
        choices = []
        for f in done:
            message, reason = chat_message(f, tool_plan)
            choices.append({
                "index": f.index,
                "message": message,
                "logprobs": chat_logprobs(f, ctx.model.vocab),
                "finish_reason": reason,
                "formcast": choice_extension(f, warnings),
            })
        return JSONResponse({**base, "object": "chat.completion", "choices": choices,
                             "usage": usage(done)})
    finally:
        if not streaming:
            release()


def chat_message(f: Finished, tool_plan: ToolPlan | None) -> tuple[dict[str, Any], str]:
    """The ``message`` of a finished choice and its ``finish_reason``.

    A completed output with calls: the calls parsed and checked against their tools, the text
    before them as ``content``.  An output cut short: the calls begun (partial), the text
    outside them as ``content``, never the call markup."""
    message: dict[str, Any] = {"role": "assistant", "content": f.text, "refusal": None}
    if tool_plan is None or not tool_plan.calls_allowed:
        return message, finish_reason(f)
    if f.finish == "completed":
        text, calls = tool_plan.parse(f.text)
        if calls:
            message["content"] = text or None
    else:
        view = split_output(f.text, tool_plan.format, final=True, cut=True)
        calls = [{"id": new_call_id(), "type": "function",
                  "function": {"name": c.name, "arguments": c.arguments}} for c in view.calls]
        message["content"] = (view.content.strip() or None) if calls else view.content
    if calls and tool_plan.legacy:
        message["function_call"] = calls[0]["function"]
    elif calls:
        message["tool_calls"] = calls
    reason = finish_reason(f, tool_calls=bool(calls))
    if reason == "tool_calls" and tool_plan.legacy:
        reason = "function_call"
    return message, reason


def _chunk(base: dict[str, Any], index: int, delta: dict[str, Any], finish: str | None = None,
           extension: dict[str, Any] | None = None,
           logprobs: dict[str, Any] | None = None) -> str:
    choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": logprobs,
                              "finish_reason": finish}
    if extension is not None:
        choice["formcast"] = extension
    return sse({**base, "object": "chat.completion.chunk", "choices": [choice]})


def _call_delta(event: CallStarted | ArgumentsDelta, legacy: bool) -> dict[str, Any]:
    if isinstance(event, CallStarted):
        if legacy:
            return {"function_call": {"name": event.name, "arguments": ""}}
        return {"tool_calls": [{"index": event.index, "id": event.id, "type": "function",
                                "function": {"name": event.name, "arguments": ""}}]}
    if legacy:
        return {"function_call": {"arguments": event.text}}
    return {"tool_calls": [{"index": event.index, "function": {"arguments": event.text}}]}


async def _chat_stream(
    stream: AsyncIterator[Piece | Finished],
    events: AsyncIterator[Piece | Finished],
    watcher: Any,
    base: dict[str, Any],
    n: int,
    tool_plan: ToolPlan | None,
    warnings: tuple[str, ...],
    include_usage: bool,
    release: Callable[[], None],
    vocab: Vocabulary,
) -> AsyncIterator[str]:
    """The SSE body of a streamed chat completion (OpenAI's chunk format).  Asked-for
    ``logprobs`` come whole in each choice's final chunk (the one with its
    ``finish_reason``): text pieces are whole characters, not tokens.  :data:`HEAD_END`
    follows the first event's chunks (:class:`EventStream` writes them at once)."""
    done: list[Finished] = []
    fmt = tool_plan.format if tool_plan is not None and tool_plan.calls_allowed else None
    legacy = tool_plan is not None and tool_plan.legacy
    splitters = {j: CallSplitter(fmt) for j in range(n)}
    head = True
    try:
        for j in range(n):
            yield _chunk(base, j, {"role": "assistant", "content": ""})
        async for event in stream:
            splitter = splitters[event.index]
            if isinstance(event, Piece):
                out = splitter.feed(event.text)
            else:
                done.append(event)
                out = splitter.finish(cut=event.finish != "completed")
            for e in out:
                if isinstance(e, TextDelta):
                    yield _chunk(base, event.index, {"content": e.text})
                else:
                    yield _chunk(base, event.index, _call_delta(e, legacy))
            if isinstance(event, Finished):
                reason = finish_reason(event, tool_calls=bool(splitter.view.calls))
                if reason == "tool_calls" and legacy:
                    reason = "function_call"
                yield _chunk(base, event.index, {}, reason, choice_extension(event, warnings),
                             chat_logprobs(event, vocab))
            if head:
                head = False
                yield HEAD_END
        if include_usage:
            yield sse({**base, "object": "chat.completion.chunk", "choices": [],
                       "usage": usage(done)})
        yield DONE
    finally:
        watcher.cancel()
        await aclose(events)
        release()
