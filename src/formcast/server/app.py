"""The FastAPI app (:func:`create_app`) and its uvicorn runner (:func:`run_server`).

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``
(and ``/v1/models/{id}``), ``GET /health``, ``GET /metrics``.  Errors are answered in OpenAI's
error JSON (:mod:`formcast.server.api_errors`), request-validation errors included (400, the
parameter named as ``messages[0].role``).

One request, in order: the body is validated; the model name and unsupported parameters are
checked; the engine admits it (or answers 429 with ``Retry-After``); its constraint
(``response_format`` or ``tools``) is compiled off the event loop; the job is queued for the
model thread; the answer is one JSON body, or server-sent events (``stream: true``) ending with
``data: [DONE]``.  A watcher polls the connection while the request runs: a client that
disconnects cancels its job (the model is not called again for it).

Lifetime: one app per model; the engine's model thread starts with the app (lifespan) and
stops with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from .._version import __version__
from ..model.protocol import LanguageModel
from ..vocab.vocabulary import Vocabulary
from .api_errors import APIError
from .config import ServerConfig
from .engine import Engine, Finished, GenerationSpec, Job, Piece, now_deadline
from .metrics import ServerMetrics
from .requests import (
    ChatCompletionRequest,
    CompletionRequest,
    ConstraintPlan,
    chat_messages,
    check_unsupported,
    render_chat,
    response_format_plan,
)
from .responses import (
    DONE,
    chat_logprobs,
    choice_extension,
    completion_logprobs,
    created,
    finish_reason,
    new_id,
    sse,
    usage,
)
from .tool_bridge import ToolPlan, ToolStream, plan_tools

if TYPE_CHECKING:  # pragma: no cover
    from ..actions.metrics import Metrics
    from ..index.compiled import CompiledGrammar

__all__ = ["create_app", "run_server"]

_DISCONNECT_POLL_S = 0.05
_ROUTES = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"}
)


def create_app(
    model: LanguageModel,
    config: ServerConfig | None = None,
    *,
    action_metrics: Metrics | None = None,
) -> FastAPI:
    """The OpenAI-compatible app serving ``model``.

    Args:
        model: the model (driven by the app's model thread only).
        config: the options (default :class:`ServerConfig`).
        action_metrics: a :class:`formcast.actions.Metrics` whose per-layer families are
            appended to ``GET /metrics`` (tools executed server-side through an action runner).

    The app's ``state.engine`` is its :class:`~formcast.server.engine.Engine` (the model
    thread starts when the app starts: run it under uvicorn, or ``with TestClient(app)``).

    Raises:
        MissingDependencyError: prometheus-client is not installed (FastAPI and uvicorn are
            checked when ``formcast.server`` gives out this function).
    """
    cfg = config if config is not None else ServerConfig()
    metrics = ServerMetrics(action_metrics)
    engine = Engine(model, cfg, metrics)
    started = int(time.time())
    fingerprint = f"formcast-{__version__}-{model.vocab.fingerprint[:8]}"

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            engine.close()

    app = FastAPI(title="formcast", version=__version__, lifespan=lifespan)
    app.state.engine = engine
    app.state.metrics = metrics

    def error_response(err: APIError) -> Response:
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> Response:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = [p for p in first.get("loc", ()) if p != "body"]
        param = _param_path(loc) or None
        msg = first.get("msg", "invalid request body")
        if first.get("type") == "json_invalid":
            msg, param = f"the request body is not valid JSON: {first.get('ctx', {})}", None
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        return error_response(APIError(400, f"{param or 'body'}: {msg}{more}", param=param,
                                       code="invalid_request"))

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> Response:
        return error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}",
                                       type="server_error", code="internal_error"))

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> Response:
        code = "not_found" if exc.status_code == 404 else "http_error"
        return error_response(APIError(exc.status_code, str(exc.detail), code=code))

    app.add_middleware(_CountRequests, metrics=metrics)  # pure ASGI: keeps receive() intact

    def check_model(name: str) -> None:
        if name != cfg.model_name:
            raise APIError(404, f"the model {name!r} does not exist: this server serves "
                           f"{cfg.model_name!r} (GET /v1/models)", param="model",
                           code="model_not_found")

    async def compile_plan(plan: ConstraintPlan | None) -> CompiledGrammar | None:
        if plan is None:
            return None
        return await engine.compile(plan.method, *plan.args, param=plan.param)

    def new_job(specs: list[GenerationSpec], compiled: CompiledGrammar | None,
                max_tokens: int | None, body: Any, deadline: float | None,
                logprobs: int | None, release: Callable[[], None]) -> Job:
        stop = body.stop
        stops = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
        return Job(
            specs=specs,
            compiled=compiled,
            max_tokens=max_tokens,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            stop=stops,
            deadline=deadline,
            loop=asyncio.get_running_loop(),
            logprobs=logprobs,
            on_done=release,  # idempotent: the response's end releases it too
        )

    async def watch(request: Request, job: Job) -> None:
        """Cancel ``job`` when the client disconnects."""
        while not job.cancel.is_set():
            if await request.is_disconnected():
                job.cancel.set()
                return
            await asyncio.sleep(_DISCONNECT_POLL_S)

    async def start(request: Request, job: Job
                    ) -> tuple[AsyncIterator[Piece | Finished], asyncio.Task[None]]:
        return engine.run(job), asyncio.create_task(watch(request, job))

    # -- chat ---------------------------------------------------------------------------------
    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        deadline = now_deadline(cfg.request_timeout_s)
        check_model(body.model)
        check_unsupported(body)
        if body.n > cfg.max_n:
            raise APIError(400, f"n={body.n} is more than this server's max_n={cfg.max_n}",
                           param="n", code="invalid_request")
        tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
        rf_plan = response_format_plan(body.response_format,
                                       compile_timeout_s=cfg.compile_timeout_s)
        content = rf_plan.args if rf_plan is not None else (None, None)
        tool_plan = plan_tools(model, tools, body.tool_choice, body.parallel_tool_calls,
                               content_schema=content[0], content_options=content[1])
        messages = chat_messages(body.messages)
        prompt = render_chat(model, messages, tools, tool_plan)
        release = engine.admit()
        streaming = False
        try:
            compiled: CompiledGrammar | None
            if tool_plan is not None:  # the tools' tag (with response_format inside)
                compiled = await engine.compile("compile", tool_plan.constraint(),
                                                param="tools")
            else:
                compiled = await compile_plan(rf_plan)
            warnings = tuple(compiled.warnings) if compiled is not None else ()
            max_tokens = (body.max_completion_tokens if body.max_completion_tokens is not None
                          else body.max_tokens)
            specs = [GenerationSpec(j, prompt, None if body.seed is None else body.seed + j)
                     for j in range(body.n)]
            top = (body.top_logprobs or 0) if body.logprobs else None
            job = new_job(specs, compiled, max_tokens, body, deadline, top, release)
            events, watcher = await start(request, job)
            rid, now = new_id("chatcmpl"), created()
            base = {"id": rid, "created": now, "model": cfg.model_name,
                    "system_fingerprint": fingerprint}
            if body.stream:
                first = await _first_event(events, watcher)
                streaming = True
                include_usage = bool(body.stream_options and body.stream_options.include_usage)
                return StreamingResponse(
                    _chat_stream(first, events, watcher, base, body.n, tool_plan, warnings,
                                 include_usage, release, model.vocab),
                    media_type="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                )
            done = await _collect(events, watcher)
            choices = []
            for f in done:
                message: dict[str, Any] = {"role": "assistant", "content": f.text,
                                           "refusal": None}
                calls: list[dict[str, Any]] = []
                if tool_plan is not None and f.finish == "completed":
                    text_part, calls = tool_plan.parse(f.text)
                    if calls:
                        message["content"] = text_part or None
                        message["tool_calls"] = calls
                choices.append({
                    "index": f.index,
                    "message": message,
                    "logprobs": chat_logprobs(f, model.vocab),
                    "finish_reason": finish_reason(f, tool_calls=bool(calls)),
                    "formcast": choice_extension(f, warnings),
                })
            return JSONResponse({**base, "object": "chat.completion", "choices": choices,
                                 "usage": usage(done)})
        finally:
            if not streaming:
                release()

    # -- completions --------------------------------------------------------------------------
    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        deadline = now_deadline(cfg.request_timeout_s)
        check_model(body.model)
        check_unsupported(body)
        prompts = _prompts(body.prompt)
        if body.n * len(prompts) > cfg.max_n:
            raise APIError(400, f"{len(prompts)} prompts x n={body.n} choices is more than "
                           f"this server's max_n={cfg.max_n}", param="n", code="invalid_request")
        plan = response_format_plan(body.response_format,
                                    compile_timeout_s=cfg.compile_timeout_s)
        release = engine.admit()
        streaming = False
        try:
            compiled = await compile_plan(plan)
            warnings = tuple(compiled.warnings) if compiled is not None else ()
            specs = [
                GenerationSpec(p * body.n + j, prompt,
                               None if body.seed is None else body.seed + j)
                for p, prompt in enumerate(prompts)
                for j in range(body.n)
            ]
            job = new_job(specs, compiled, body.max_tokens, body, deadline, body.logprobs,
                          release)
            events, watcher = await start(request, job)
            base = {"id": new_id("cmpl"), "created": created(), "model": cfg.model_name,
                    "system_fingerprint": fingerprint, "object": "text_completion"}
            if body.stream:
                first = await _first_event(events, watcher)
                streaming = True
                include_usage = bool(body.stream_options and body.stream_options.include_usage)
                return StreamingResponse(
                    _completion_stream(first, events, watcher, base, warnings, include_usage,
                                       release, model.vocab),
                    media_type="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                )
            done = await _collect(events, watcher)
            choices = [{"index": f.index, "text": f.text,
                        "logprobs": completion_logprobs(f, model.vocab),
                        "finish_reason": finish_reason(f),
                        "formcast": choice_extension(f, warnings)} for f in done]
            return JSONResponse({**base, "choices": choices, "usage": usage(done)})
        finally:
            if not streaming:
                release()

    # -- the rest -----------------------------------------------------------------------------
    def model_card() -> dict[str, Any]:
        return {"id": cfg.model_name, "object": "model", "created": started,
                "owned_by": "formcast", "max_model_len": model.max_context}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id}")
    async def model_info(model_id: str) -> dict[str, Any]:
        check_model(model_id)
        return model_card()

    @app.get("/health")
    async def health() -> Response:
        alive = engine.alive
        body = {"status": "ok" if alive else "unavailable", "model": cfg.model_name,
                "in_flight": engine.in_flight, "waiting": engine.waiting,
                "max_queue": cfg.max_queue}
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/metrics")
    async def metrics_route() -> Response:
        payload, content_type = metrics.render()
        return Response(payload, media_type=content_type)

    return app


class _CountRequests:
    """ASGI middleware counting answered requests by path and status
    (``formcast_requests_total``).  Plain ASGI, not ``BaseHTTPMiddleware``: that one wraps
    ``receive`` and would hide a client's disconnect from the routes."""

    def __init__(self, app: Any, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def counting_send(message: Any) -> None:
            if message.get("type") == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            path = str(scope.get("path", ""))
            if path not in _ROUTES and not path.startswith("/v1/models/"):
                path = "other"  # bounded label values: unknown paths are one series
            self.metrics.requests.labels(endpoint=path, status=str(status["code"])).inc()


def _param_path(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _prompts(prompt: Any) -> list[Any]:
    """``prompt`` as a list of prompts (text or token ids)."""
    if isinstance(prompt, str):
        return [prompt]
    if prompt and all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    if not prompt:
        raise APIError(400, "prompt is empty", param="prompt", code="invalid_request")
    return list(prompt)


async def _first_event(
    events: AsyncIterator[Piece | Finished], watcher: asyncio.Task[None]
) -> Piece | Finished | None:
    """The job's first event (``None``: it ended without any), so that an error before any
    output is still answered as an error response, not inside a stream."""
    try:
        return await events.__anext__()
    except StopAsyncIteration:
        return None
    except BaseException:
        watcher.cancel()
        raise


async def _collect(
    events: AsyncIterator[Piece | Finished], watcher: asyncio.Task[None]
) -> list[Finished]:
    """Every choice's :class:`Finished`, in index order."""
    done: list[Finished] = []
    try:
        async for event in events:
            if isinstance(event, Finished):
                done.append(event)
    finally:
        watcher.cancel()
        await _aclose(events)
    return sorted(done, key=lambda f: f.index)


async def _aclose(events: AsyncIterator[Any]) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()


def _chunk(base: dict[str, Any], index: int, delta: dict[str, Any], finish: str | None = None,
           extension: dict[str, Any] | None = None,
           logprobs: dict[str, Any] | None = None) -> str:
    choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": logprobs,
                              "finish_reason": finish}
    if extension is not None:
        choice["formcast"] = extension
    return sse({**base, "object": "chat.completion.chunk", "choices": [choice]})


async def _chat_stream(
    first: Piece | Finished | None,
    events: AsyncIterator[Piece | Finished],
    watcher: asyncio.Task[None],
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
    ``finish_reason``): text pieces are whole characters, not tokens."""
    done: list[Finished] = []
    streams = {j: ToolStream(tool_plan) for j in range(n)} if tool_plan is not None else {}
    try:
        for j in range(n):
            yield _chunk(base, j, {"role": "assistant", "content": ""})

        async def all_events() -> AsyncIterator[Piece | Finished]:
            if first is not None:
                yield first
            async for ev in events:
                yield ev

        async for event in all_events():
            if isinstance(event, Piece):
                text = streams[event.index].feed(event.text) if streams else event.text
                if text:
                    yield _chunk(base, event.index, {"content": text})
                continue
            done.append(event)
            calls: list[dict[str, Any]] = []
            if tool_plan is not None:
                ts = streams[event.index]
                if event.finish == "completed" and ts.in_call:
                    _, calls = tool_plan.parse(event.text)
                tail = "" if calls else event.text[ts.emitted :]  # the rest, as content
                if tail:
                    yield _chunk(base, event.index, {"content": tail})
                for k, call in enumerate(calls):
                    fn = call["function"]
                    yield _chunk(base, event.index, {"tool_calls": [{
                        "index": k, "id": call["id"], "type": "function",
                        "function": {"name": fn["name"], "arguments": ""}}]})
                    yield _chunk(base, event.index, {"tool_calls": [{
                        "index": k, "function": {"arguments": fn["arguments"]}}]})
            yield _chunk(base, event.index, {}, finish_reason(event, tool_calls=bool(calls)),
                         choice_extension(event, warnings), chat_logprobs(event, vocab))
        if include_usage:
            yield sse({**base, "object": "chat.completion.chunk", "choices": [],
                       "usage": usage(done)})
        yield DONE
    finally:
        watcher.cancel()
        await _aclose(events)
        release()


async def _completion_stream(
    first: Piece | Finished | None,
    events: AsyncIterator[Piece | Finished],
    watcher: asyncio.Task[None],
    base: dict[str, Any],
    warnings: tuple[str, ...],
    include_usage: bool,
    release: Callable[[], None],
    vocab: Vocabulary,
) -> AsyncIterator[str]:
    """The SSE body of a streamed text completion (``logprobs`` in each choice's last
    chunk)."""
    done: list[Finished] = []

    def chunk(index: int, text: str, finished: Finished | None = None) -> str:
        choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None,
                                  "finish_reason": None}
        if finished is not None:
            choice["finish_reason"] = finish_reason(finished)
            choice["formcast"] = choice_extension(finished, warnings)
            choice["logprobs"] = completion_logprobs(finished, vocab)
        return sse({**base, "choices": [choice]})

    try:
        pending = [first] if first is not None else []
        while True:
            if pending:
                event = pending.pop()
            else:
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    break
            if isinstance(event, Piece):
                yield chunk(event.index, event.text)
            else:
                done.append(event)
                yield chunk(event.index, "", event)
        if include_usage:
            yield sse({**base, "choices": [], "usage": usage(done)})
        yield DONE
    finally:
        watcher.cancel()
        await _aclose(events)
        release()


def run_server(
    model: LanguageModel,
    config: ServerConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
) -> None:
    """Serve ``model`` with uvicorn until interrupted (Ctrl-C / SIGTERM)."""
    import uvicorn

    app = create_app(model, config)
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)
