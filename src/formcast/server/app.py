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
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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


class _App(FastAPI):
    """The app: FastAPI, with a **fast lane** for the generation routes.

    A ``POST`` to a generation path (exactly ``/v1/chat/completions``, ``/v1/completions`` or
    ``/v1/responses``) with a JSON body valid for its route is served by the route's short
    path (:func:`_read_body_first`) straight from here, past FastAPI's ``__call__`` and the
    middleware stack (ServerErrorMiddleware, FastAPI's exception telemetry, CountRequests,
    ExceptionMiddleware, the exit-stack middleware, the router's match loop): ~40-60 us of
    event-loop CPU a request (in process; ~0.1 ms in the real server), on every head of a
    burst.  Everything the stack does on that path is done here too: the request counted
    (``formcast_requests_total``, the same labels), the scope given the keys the router
    gives it (``app``, ``router``, ``route``, ``endpoint``, ``path_params``).

    Exact on every other path, because every other path *is* the stack: a request the short
    path does not take (another body, content type, an unreadable body) and every exception
    (before or after the response started) is handed back to the full stack with the
    request's scope marked (:class:`_Replay`): the stack runs as for any request, its router
    reaches the same route, and the route's app then -- instead of serving again -- hands the
    declared FastAPI route the body already read, or re-raises the exception (after passing
    the stack's ``send`` the start already sent, which is not sent twice), so the handlers,
    the 500 and its re-raise, the telemetry hook and the count are the stack's own.
    Cancellation (``BaseException``) is counted and re-raised, as CountRequests does.

    The lane steps aside (the stack serves the request, as plain FastAPI) unless the app is
    as :func:`create_app` made it: no ``root_path``, its one middleware, the stack built (the
    first request builds it), FastAPI's telemetry off (its plain path), the router without
    middleware of its own and the generation routes first with their apps unchanged.  Each
    check O(1) per request.  Lifetime: the app's; the lanes are set once by
    :meth:`open_lanes`."""

    _lanes: dict[str, tuple[APIRoute, ASGIApp, _Serve]] | None = None
    _lane_middleware: Any = None
    _counter: CountRequests | None = None

    def open_lanes(
        self,
        lanes: dict[str, tuple[APIRoute, ASGIApp, _Serve]],
        middleware: Any,
        counter: CountRequests,
    ) -> None:
        """Serve ``lanes`` (path -> the route, its app, its short path) on the fast lane while
        ``middleware`` is the app's only user middleware; ``counter`` counts their requests.
        Called once, by :func:`create_app`, after the routes are declared and ordered."""
        self._lanes = lanes
        self._lane_middleware = middleware
        self._counter = counter

    def _lane(self, scope: Scope) -> tuple[APIRoute, ASGIApp, _Serve] | None:
        """The lane of ``scope``, or None when the stack must serve it (see the class)."""
        lanes = self._lanes
        if lanes is None or scope["type"] != "http" or scope.get("method") != "POST":
            return None
        lane = lanes.get(scope["path"])
        if lane is None or self.root_path or scope.get("root_path") or "fastapi.telemetry" in scope:
            return None
        user = self.user_middleware
        if self.middleware_stack is None or len(user) != 1 or user[0] is not self._lane_middleware:
            return None
        telemetry = getattr(self, "_native_telemetry", None)
        if telemetry is None or telemetry.enabled():
            return None
        router = self.router
        route, app, _ = lane
        if route.app is not app or router.middleware_stack != router.app:
            return None
        routes = router.routes
        for r in routes[:3]:  # the generation routes are first (_generation_routes_first)
            if r is route:
                return lane
            if not (isinstance(r, APIRoute) and r.path in _GENERATION):
                return None
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self._lane(scope)
        if lane is None:
            await super().__call__(scope, receive, send)
            return
        route, _, serve = lane
        match, child = route.matches(scope)
        if match is not Match.FULL:  # pragma: no cover - the path is the route's own
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        scope.setdefault("router", self.router)
        scope.update(child)
        status = 500
        started: list[Message] = []  # the response starts handed to send (one, but for a bug)

        async def counting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                started.append(message)
            await send(message)

        error: Exception | None = None
        try:
            rest = await serve(scope, receive, counting_send)
        except Exception as exc:
            error = exc
        except BaseException:
            assert self._counter is not None
            self._counter.count(scope, status)
            raise
        if error is not None:  # the stack answers it, as if it had run the route
            scope[_REPLAY] = _Replay(error, started)
            await super().__call__(scope, receive, _started(send, len(started)))
            return
        if rest is not None:  # not a body for the short path: the declared route, in the stack
            scope[_REPLAY] = _Replay(None, [])
            await super().__call__(scope, rest, send)
            return
        assert self._counter is not None
        self._counter.count(scope, status)


def _started(send: Send, n: int) -> Send:
    """``send`` for a request whose response start went out already (``n`` starts: 0 or 1,
    more only for an app that sends a second): the first ``n`` ``http.response.start``
    messages handed to it (the stack's replay of them) are not sent again; every other
    message is.  ``send`` itself when ``n`` is 0."""
    if n == 0:
        return send
    left = [n]

    async def rest(message: Message) -> None:
        if left[0] and message["type"] == "http.response.start":
            left[0] -= 1
            return
        await send(message)

    return rest


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
    app = _App(title="formcast", version=__version__, lifespan=lifespan)
    app.state.engine = engine
    app.state.metrics = metrics

    install_error_handlers(app)
    # pure ASGI middleware: keeps receive() intact (disconnects reach the routes)
    app.add_middleware(CountRequests, metrics=metrics, routes=_ROUTES)
    counted = app.user_middleware[0]

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
    lanes = {
        "/v1/chat/completions": _read_body_first(
            _post_route(app, "/v1/chat/completions"), ChatCompletionRequest, ctx, chat_completion),
        "/v1/completions": _read_body_first(
            _post_route(app, "/v1/completions"), CompletionRequest, ctx, text_completion),
        "/v1/responses": _read_body_first(
            _post_route(app, "/v1/responses"), ResponsesRequest, ctx, create_response),
    }
    _generation_routes_first(app)
    app.open_lanes(lanes, counted, CountRequests(None, metrics, _ROUTES))

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


_REPLAY = "formcast.replay"
"""The scope key under which :class:`_App`'s fast lane hands a request back to the full stack
(a :class:`_Replay`): what the route's app then does in place of serving it again."""


class _Replay:
    """What the route's app does for a request the fast lane hands back to the stack: raise
    ``error`` (after handing the stack's ``send`` the response starts already sent,
    ``starts``, so that the middlewares know the response started and its status), or --
    ``error`` None -- serve it by the declared FastAPI route (a body not for the short path).
    One request's; read once."""

    __slots__ = ("error", "starts")

    def __init__(self, error: Exception | None, starts: list[Message]) -> None:
        self.error = error
        self.starts = starts


_Serve = Callable[[Scope, Receive, Send], Awaitable[Receive | None]]


def _read_body_first(
    route: APIRoute,
    model: type[_Body],
    ctx: ServerContext,
    handler: Callable[[ServerContext, _Body, Request], Awaitable[Response]],
) -> tuple[APIRoute, ASGIApp, _Serve]:
    """Serve ``route`` (declared as ``handler(ctx, body: model, request)`` through FastAPI) by
    reading its body here first: a body that is JSON (``Content-Type: application/json``)
    and valid for ``model`` is handed to ``handler`` at once, without FastAPI's per-request
    dependency solving and body handling (about 0.1-0.15 ms of event-loop CPU a request, a
    sixth of a streamed request's way to its first chunk).  Any other body -- not JSON, another
    content type, invalid, unreadable -- is replayed to the route's FastAPI handler, which
    answers it exactly as before (its validation errors, 400s).  Exceptions of ``handler``
    reach the app's exception middleware and its handlers, as a route's do.  Replaces
    ``route.app``; the route stays declared (the OpenAPI schema).  Lifetime: the app's.

    Returns ``(route, route.app, serve)``: ``serve(scope, receive, send)`` is the short path
    alone (for :class:`_App`'s fast lane): it answers the request and returns None, or
    returns the ``receive`` to hand to the declared route (the body read, given back first)
    without sending anything; exceptions propagate."""
    declared = route.app

    async def serve(scope: Scope, receive: Receive, send: Send) -> Receive | None:
        request = Request(scope, receive, send)
        try:
            raw = await request.body()
        except Exception:  # a client gone while sending: FastAPI's answer, from the same state
            return receive
        body: _Body | None = None
        if raw and _json_media_type(scope):
            try:
                body = model.model_validate(json.loads(raw))
            except (ValueError, ValidationError):  # JSONDecodeError is a ValueError
                body = None
        if body is None:
            return _replayed(raw, receive)
        # an exception goes to the app's exception middleware (its handlers), as a route's
        response = await handler(ctx, body, request)
        await response(scope, receive, send)
        return None

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        replay: _Replay | None = scope.pop(_REPLAY, None)
        if replay is not None:  # handed back by the fast lane: what the stack must see
            for start in replay.starts:  # not sent again (the lane's send drops them)
                await send(start)
            if replay.error is not None:
                raise replay.error
            await declared(scope, receive, send)
            return
        rest = await serve(scope, receive, send)
        if rest is not None:
            await declared(scope, rest, send)

    route.app = app
    return route, app, serve


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
