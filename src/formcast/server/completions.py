"""``POST /v1/completions``: text prompts (or token ids) to OpenAI's text completion JSON or
chunks (``response_format`` is formcast's extension here).

Lifetime: the functions serve one request each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ..vocab.vocabulary import Vocabulary
from .api_errors import APIError
from .constraints import compile_plan, response_format_plan
from .context import HEAD_END, EventStream, ServerContext, aclose, all_events, collect, first_event
from .engine import Finished, GenerationSpec, Piece, now_deadline
from .requests import CompletionRequest, check_unsupported
from .responses import (
    DONE,
    choice_extension,
    completion_logprobs,
    created,
    finish_reason,
    new_id,
    sse,
    usage,
)

__all__ = ["text_completion"]


async def text_completion(
    ctx: ServerContext, body: CompletionRequest, request: Request
) -> Response:
    """Answer one text completion request."""
    cfg = ctx.config
    deadline = now_deadline(cfg.request_timeout_s)
    ctx.check_model(body.model)
    check_unsupported(body)
    prompts = _prompts(body.prompt)
    if body.n * len(prompts) > cfg.max_n:
        raise APIError(400, f"{len(prompts)} prompts x n={body.n} choices is more than "
                       f"this server's max_n={cfg.max_n}", param="n", code="invalid_request")
    plan = response_format_plan(body.response_format, cfg, ctx.plans)
    release = ctx.engine.admit()
    streaming = False
    try:
        compiled = await compile_plan(ctx.engine, plan)
        warnings = tuple(compiled.warnings) if compiled is not None else ()
        specs = [
            GenerationSpec(p * body.n + j, prompt, None if body.seed is None else body.seed + j)
            for p, prompt in enumerate(prompts)
            for j in range(body.n)
        ]
        job = ctx.new_job(specs, compiled, max_tokens=body.max_tokens,
                          temperature=body.temperature, top_p=body.top_p, stop=body.stop,
                          deadline=deadline, logprobs=body.logprobs, release=release)
        events, watcher = ctx.start(request, job)
        base = {"id": new_id("cmpl"), "created": created(), "model": cfg.model_name,
                "system_fingerprint": ctx.fingerprint, "object": "text_completion"}
        if body.stream:
            first = await first_event(events, watcher)
            streaming = True
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return EventStream(
                _completion_stream(all_events(first, events), events, watcher, base, warnings,
                                   include_usage, release, ctx.model.vocab)
            )
        done = await collect(events, watcher)
        choices = [{"index": f.index, "text": f.text,
                    "logprobs": completion_logprobs(f, ctx.model.vocab),
                    "finish_reason": finish_reason(f),
                    "formcast": choice_extension(f, warnings)} for f in done]
        return JSONResponse({**base, "choices": choices, "usage": usage(done)})
    finally:
        if not streaming:
            release()


def _prompts(prompt: Any) -> list[Any]:
    """``prompt`` as a list of prompts (text or token ids)."""
    if isinstance(prompt, str):
        return [prompt]
    if prompt and all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    if not prompt:
        raise APIError(400, "prompt is empty", param="prompt", code="invalid_request")
    return list(prompt)


async def _completion_stream(
    stream: AsyncIterator[Piece | Finished],
    events: AsyncIterator[Piece | Finished],
    watcher: Any,
    base: dict[str, Any],
    warnings: tuple[str, ...],
    include_usage: bool,
    release: Callable[[], None],
    vocab: Vocabulary,
) -> AsyncIterator[str]:
    """The SSE body of a streamed text completion (``logprobs`` in each choice's last
    chunk); :data:`HEAD_END` after the first event's chunk."""
    done: list[Finished] = []
    head = True

    def chunk(index: int, text: str, finished: Finished | None = None) -> str:
        choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None,
                                  "finish_reason": None}
        if finished is not None:
            choice["finish_reason"] = finish_reason(finished)
            choice["formcast"] = choice_extension(finished, warnings)
            choice["logprobs"] = completion_logprobs(finished, vocab)
        return sse({**base, "choices": [choice]})

    try:
        async for event in stream:
            if isinstance(event, Piece):
                yield chunk(event.index, event.text)
            else:
                done.append(event)
                yield chunk(event.index, "", event)
            if head:
                head = False
                yield HEAD_END
        if include_usage:
            yield sse({**base, "choices": [], "usage": usage(done)})
        yield DONE
    finally:
        watcher.cancel()
        await aclose(events)
        release()
