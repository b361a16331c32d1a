"""The FastAPI app (:func:`create_app`: routes only) and its uvicorn runner (:func:`run_server`).

Routes, each over typed OpenAI request models and a handler module: ``POST
/v1/chat/completions`` (:mod:`.chat`), ``POST /v1/completions`` (:mod:`.completions`),
``POST /v1/responses`` (:mod:`.responses_api`), ``GET /v1/models`` (and ``/v1/models/{id}``),
``GET /health``, ``GET /metrics``.  Errors are answered in OpenAI's error JSON
(:mod:`formcast.server.api_errors`), request-validation errors included (400, the parameter
named as ``messages[0].role``).

One request, in order: the body is validated; the model name and unsupported parameters are
checked; the engine admits it (or answers 429 with ``Retry-After``); its constraint
(:mod:`.constraints`) is compiled off the event loop; the job is queued for the model (the
continuous batcher's slots, or the model thread: :mod:`.engine`);
the answer is one JSON body, or server-sent events (``stream: true``).  A watcher polls the
connection while the request runs: a client that disconnects cancels its job (the model is
not called again for it).

Lifetime: one app per model; the engine's model thread starts with the app (lifespan) and
stops with it.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.types import Message, Receive, Scope, Send

from .._version import __version__
from ..model.protocol import LanguageModel
from .chat import chat_completion
from .completions import text_completion
from .config import ServerConfig
from .context import ServerContext
from .engine import Engine
from .error_handlers import install_error_handlers
from .metrics import ServerMetrics
from .middleware import CountRequests
from .requests import ChatCompletionRequest, CompletionRequest
from .responses_api import ResponsesRequest, create_response

if TYPE_CHECKING:  # pragma: no cover
    from ..actions.metrics import Metrics

__all__ = ["create_app", "run_server"]

_Body = TypeVar("_Body", bound=BaseModel)

_ROUTES = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/models", "/health",
     "/metrics"}
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

    ctx = ServerContext(model, cfg, engine, metrics, fingerprint, started)
    app = FastAPI(title="formcast", version=__version__, lifespan=lifespan)
    app.state.engine = engine
    app.state.metrics = metrics

    install_error_handlers(app)
    # pure ASGI middleware: keeps receive() intact (disconnects reach the routes)
    app.add_middleware(CountRequests, metrics=metrics, routes=_ROUTES)

    # -- generation ---------------------------------------------------------------------------
    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await chat_completion(ctx, body, request)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await text_completion(ctx, body, request)

    @app.post("/v1/responses")
    async def responses(body: ResponsesRequest, request: Request) -> Response:
        return await create_response(ctx, body, request)

    # the three generation routes read their bodies without FastAPI's per-request machinery
    # (dependency solving, its body parsing) when the body is plain JSON valid for its model;
    # anything else goes through FastAPI as declared above (same errors)
    _read_body_first(_post_route(app, "/v1/chat/completions"), ChatCompletionRequest, ctx,
                     chat_completion)
    _read_body_first(_post_route(app, "/v1/completions"), CompletionRequest, ctx,
                     text_completion)
    _read_body_first(_post_route(app, "/v1/responses"), ResponsesRequest, ctx, create_response)
    _generation_routes_first(app)

    # -- the rest -----------------------------------------------------------------------------
    def model_card() -> dict[str, Any]:
        return {"id": cfg.model_name, "object": "model", "created": started,
                "owned_by": "formcast", "max_model_len": model.max_context}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id}")
    async def model_info(model_id: str) -> dict[str, Any]:
        ctx.check_model(model_id)
        return model_card()

    @app.get("/health")
    async def health() -> Response:
        alive = engine.alive
        batcher = engine.batcher
        body = {"status": "ok" if alive else "unavailable", "model": cfg.model_name,
                "in_flight": engine.in_flight, "waiting": engine.waiting,
                "max_queue": cfg.max_queue, "batching": batcher is not None,
                "slots": engine.slots,
                "running": batcher.running if batcher is not None else None,
                "batching_off": engine.batching_off}
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/metrics")
    async def metrics_route() -> Response:
        payload, content_type = metrics.render()
        return Response(payload, media_type=content_type)

    return app


def _post_route(app: FastAPI, path: str) -> APIRoute:
    """The app's ``POST path`` route."""
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.path == path and "POST" in (route.methods or ()):
            return route
    raise LookupError(path)  # pragma: no cover - the routes are declared above


_GENERATION = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})


def _generation_routes_first(app: FastAPI) -> None:
    """Move the generation routes to the front of ``app``'s routes, before the routes FastAPI
    declares itself (``/openapi.json``, ``/docs``, ``/docs/oauth2-redirect``, ``/redoc``), so
    that a generation request is not matched against those first.  No path of one set
    matches a route of the other, so every request is routed as before (Starlette takes the
    first full match); only the order of the checks changes.  Called once, by
    :func:`create_app`, after the routes are declared."""
    routes = app.router.routes
    first = [r for r in routes if isinstance(r, APIRoute) and r.path in _GENERATION]
    routes[:] = first + [r for r in routes if r not in first]


def _json_media_type(scope: Scope) -> bool:
    """Whether the request says its body is exactly ``application/json`` (parameters such as
    ``charset`` aside, any case): the one content type the short path takes (FastAPI reads
    ``+json`` types and the rest its own way, through the declared route)."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for name, value in headers:
        if name == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"application/json"
    return False


def _read_body_first(
    route: APIRoute,
    model: type[_Body],
    ctx: ServerContext,
    handler: Callable[[ServerContext, _Body, Request], Awaitable[Response]],
) -> None:
    """Serve ``route`` (declared as ``handler(ctx, body: model, request)`` through FastAPI) by
    reading its body here first: a body that is JSON (``Content-Type: application/json``)
    and valid for ``model`` is handed to ``handler`` at once, without FastAPI's per-request
    dependency solving and body handling (about 0.1-0.15 ms of event-loop CPU a request, a
    sixth of a streamed request's way to its first chunk).  Any other body -- not JSON, another
    content type, invalid, unreadable -- is replayed to the route's FastAPI handler, which
    answers it exactly as before (its validation errors, 400s).  Exceptions of ``handler``
    reach the app's exception middleware and its handlers, as a route's do.  Replaces
    ``route.app``; the route stays declared (the OpenAPI schema).  Lifetime: the app's."""
    declared = route.app

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            raw = await request.body()
        except Exception:  # a client gone while sending: FastAPI's answer, from the same state
            await declared(scope, receive, send)
            return
        body: _Body | None = None
        if raw and _json_media_type(scope):
            try:
                body = model.model_validate(json.loads(raw))
            except (ValueError, ValidationError):  # JSONDecodeError is a ValueError
                body = None
        if body is None:
            await declared(scope, _replayed(raw, receive), send)
            return
        # an exception goes to the app's exception middleware (its handlers), as a route's
        response = await handler(ctx, body, request)
        await response(scope, receive, send)

    route.app = app


def _replayed(raw: bytes, receive: Receive) -> Receive:
    """``receive`` with the body already read (``raw``) given back first."""
    given = [False]

    async def again() -> Message:
        if not given[0]:
            given[0] = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return again


def run_server(
    model: LanguageModel,
    config: ServerConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    loop: str = "asyncio",
    head_in_one_write: bool = False,
) -> None:
    """Serve ``model`` with uvicorn until interrupted (Ctrl-C / SIGTERM).

    ``loop``: uvicorn's event loop, ``"asyncio"`` by default, not uvicorn's ``"auto"`` (uvloop
    when installed): under uvloop a burst of requests already received is read one
    connection per loop turn, each after the handlers of those before it and their prompts'
    tokenizes, where asyncio's loop reads them all first and writes their first chunks back
    to back -- measured (benchmarks/server_profile.py --raw, SmolLM2, 8 requests together):
    the 8th request read 8-19 ms after the first under uvloop, within 0.4 ms under asyncio;
    the burst's median loop CPU to its first chunk 3.9-4.9 against 2.1-2.8 ms.  The HTTP
    parser stays uvicorn's choice (httptools when installed, else h11); over httptools, the
    access log line is written one loop turn later and, with ``head_in_one_write``, each
    response's headers go out with its first body chunk in one write (:mod:`.http_protocol`;
    ``False``: uvicorn's two writes)."""
    import gc

    import uvicorn

    from .http_protocol import http_protocol

    app = create_app(model, config)
    # what start-up made (the model, its vocabulary and tokenizer, the app: ~150k objects on
    # SmolLM2) lives as long as the process: moved out of the collector's passes, so that a
    # full collection while serving scans what requests made, not all of it (one such pass
    # over the start-up objects: ~90 ms on the event loop; docs/notes/server36.md)
    gc.collect()
    gc.freeze()
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5,
                loop=loop, http=http_protocol(head_in_one_write))
