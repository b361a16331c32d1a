"""The generation routes' fast lane (``formcast.server.app._App``): a valid generation request
is served past FastAPI's middleware stack, and every other request -- each error path, before
and after the response started -- answers exactly as the stack answers it: the same ASGI
messages (status, headers, body bytes; ids and times aside), the same exception raised to the
server, the same ``formcast_requests_total`` counts.  Checked in process, message by message,
against the same app with the lane closed (every request through the stack: the behaviour
before the lane)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from server_harness import ToyModel

from formcast.server import ServerConfig, create_app
from formcast.server import chat as chat_mod

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}
CHAT = {"model": "toy", "messages": [{"role": "user", "content": "hi"}], "temperature": 0,
        "max_tokens": 12}
STREAM = {**CHAT, "stream": True, "stream_options": {"include_usage": True},
          "response_format": {"type": "json_schema",
                              "json_schema": {"name": "s", "schema": SCHEMA, "strict": True}}}
JSON = "application/json"
_VOLATILE = {"id", "created", "created_at", "system_fingerprint", "completed_at"}


def _case(path: str, body: Any, ctype: str | None = JSON, *, method: str = "POST",
          disconnect: bool = False, patch: str | None = None) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return {"path": path, "raw": raw, "ctype": ctype, "method": method,
            "disconnect": disconnect, "patch": patch}


CASES: dict[str, dict[str, Any]] = {
    "stream": _case("/v1/chat/completions", STREAM),
    "json": _case("/v1/chat/completions", CHAT),
    "completion": _case("/v1/completions", {"model": "toy", "prompt": "say hi",
                                            "temperature": 0, "max_tokens": 6}),
    "response": _case("/v1/responses", {"model": "toy", "input": "hi", "temperature": 0,
                                        "max_output_tokens": 8}),
    "model 404": _case("/v1/chat/completions", {**CHAT, "model": "other"}),
    "n 400": _case("/v1/chat/completions", {**CHAT, "n": 99}),
    "stream 404": _case("/v1/chat/completions", {**STREAM, "model": "other"}),
    "not json": _case("/v1/chat/completions", b'{"model": "toy", "messages": ['),
    "empty": _case("/v1/chat/completions", b""),
    "text/plain": _case("/v1/chat/completions", CHAT, "text/plain"),
    "no type": _case("/v1/chat/completions", CHAT, None),
    "+json": _case("/v1/chat/completions", CHAT, "application/vnd.x+json"),
    "invalid": _case("/v1/chat/completions", {"model": "toy"}),
    "bad schema": _case("/v1/chat/completions", {**STREAM, "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "nope"}}}}),
    "completion invalid": _case("/v1/completions", {"model": "toy"}),
    "disconnected": _case("/v1/chat/completions", CHAT, disconnect=True),
    "handler raises": _case("/v1/chat/completions", CHAT, patch="raise"),
    "handler cancelled": _case("/v1/chat/completions", CHAT, patch="cancel"),
    "raises after start": _case("/v1/chat/completions", STREAM, patch="late"),
    "trailing slash": _case("/v1/chat/completions/", CHAT),
    "GET chat": _case("/v1/chat/completions", b"", method="GET"),
    "models": _case("/v1/models", b"", method="GET"),
    "newline path": _case("/v1/chat/completions\n", CHAT),
}
# served past the stack (a cancellation is counted and re-raised there, as CountRequests does)
LANE = {"stream", "json", "completion", "response", "handler cancelled"}


class _Late(Exception):
    pass


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _body(raw: bytes) -> Any:
    """A body, ids and times aside (JSON, or SSE events of JSON)."""
    try:
        return _stable(json.loads(raw))
    except ValueError:
        pass
    out: list[Any] = []
    for line in raw.decode().split("\n"):
        if line.startswith("data: {"):
            out.append(_stable(json.loads(line[6:])))
        else:
            out.append(line)
    return out


async def _call(app: Any, case: dict[str, Any]) -> dict[str, Any]:
    raw: bytes = case["raw"]
    headers = [(b"host", b"127.0.0.1:8000"), (b"content-length", str(len(raw)).encode())]
    if case["ctype"] is not None:
        headers.append((b"content-type", case["ctype"].encode()))
    path: str = case["path"]
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": case["method"], "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": headers, "client": ("127.0.0.1", 5000),
             "server": ("127.0.0.1", 8000), "state": {}}
    given = [False]
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if case["disconnect"]:
            return {"type": "http.disconnect"}
        if not given[0]:
            given[0] = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await never.wait()
        raise AssertionError  # pragma: no cover

    messages: list[Any] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    error = None
    try:
        await app(scope, receive, send)
    except BaseException as exc:  # what the server would see
        error = (type(exc).__name__, str(exc))
    out: list[Any] = []
    body = b""
    for m in messages:
        if m["type"] == "http.response.start":
            out.append(("start", m["status"], [tuple(h) for h in m.get("headers", [])]))
        else:
            body += m.get("body", b"")
            if not m.get("more_body", False):
                out.append(("body", _body(body)))
                body = b""
    if body:
        out.append(("unfinished", _body(body)))
    return {"messages": out, "error": error}


_REAL = (chat_mod.render_chat, chat_mod.usage)


def _patched(kind: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_mod, "render_chat", _REAL[0])
    monkeypatch.setattr(chat_mod, "usage", _REAL[1])
    if kind == "raise":
        def boom(*a: Any, **k: Any) -> Any:
            raise RuntimeError("render failed")
        monkeypatch.setattr(chat_mod, "render_chat", boom)
    elif kind == "cancel":
        def cancelled(*a: Any, **k: Any) -> Any:
            raise asyncio.CancelledError()
        monkeypatch.setattr(chat_mod, "render_chat", cancelled)
    elif kind == "late":
        def late(*a: Any, **k: Any) -> Any:
            raise _Late("usage failed after the head")
        monkeypatch.setattr(chat_mod, "usage", late)


def _requests_total(app: Any) -> list[str]:
    payload, _ = app.state.metrics.render()
    text = payload.decode() if isinstance(payload, bytes) else payload
    return sorted(line for line in text.splitlines()
                  if line.startswith("formcast_requests_total{"))


@pytest.fixture(scope="module")
def apps() -> Iterator[tuple[Any, Any]]:
    made = []
    for _ in range(2):
        app = create_app(ToyModel(), ServerConfig(model_name="toy", compile_workers=0))
        app.state.engine.start()
        made.append(app)
    made[1]._lanes = None  # the reference: every request through the stack
    try:
        yield made[0], made[1]
    finally:
        for app in made:
            app.state.engine.close()


def _stack_calls(app: Any) -> list[int]:
    """Wrap ``app``'s built middleware stack with a call counter."""
    calls = [0]
    inner = app.middleware_stack

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        calls[0] += 1
        await inner(scope, receive, send)

    app.middleware_stack = counted
    return calls


def test_every_path_answers_as_the_stack(
    apps: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    lane_app, stack_app = apps

    async def run(app: Any, name: str) -> dict[str, Any]:
        _patched(CASES[name]["patch"], monkeypatch)
        return await _call(app, CASES[name])

    async def warm(app: Any) -> None:  # builds the stack (the first request does)
        await _call(app, CASES["models"])

    asyncio.run(warm(lane_app))
    asyncio.run(warm(stack_app))
    calls = _stack_calls(lane_app)
    for name in CASES:
        before = calls[0]
        got = asyncio.run(run(lane_app, name))
        through_stack = calls[0] - before
        want = asyncio.run(run(stack_app, name))
        assert got == want, name
        assert got["messages"] or name == "handler cancelled", (name, got)
        assert through_stack == (0 if name in LANE else 1), name
    assert _requests_total(lane_app) == _requests_total(stack_app)


def test_errors_are_answered_in_openai_shape_on_the_lane(apps: tuple[Any, Any]) -> None:
    lane_app, _ = apps
    got = asyncio.run(_call(lane_app, CASES["model 404"]))
    assert got["messages"][0][1] == 404
    assert got["messages"][1][1]["error"]["code"] == "model_not_found"
    assert got["error"] is None
    got = asyncio.run(_call(lane_app, CASES["stream"]))
    assert got["messages"][0][1] == 200
    assert got["messages"][-1][1][-3:] == ["data: [DONE]", "", ""]


def test_the_lane_steps_aside_for_an_app_changed_after_create_app() -> None:
    from starlette.middleware import Middleware

    app = create_app(ToyModel(), ServerConfig(model_name="toy", compile_workers=0))
    route = app.router.routes[0]
    assert app._lane({"type": "http", "method": "POST", "path": route.path}) is None  # unbuilt
    app.middleware_stack = app.build_middleware_stack()
    scope = {"type": "http", "method": "POST", "path": route.path}
    assert app._lane(scope) is not None
    assert app._lane({**scope, "method": "GET"}) is None
    assert app._lane({**scope, "root_path": "/api"}) is None
    assert app._lane({**scope, "fastapi.telemetry": object()}) is None
    app.user_middleware.append(Middleware(object))
    assert app._lane(scope) is None
    app.user_middleware.pop()
    app.router.routes.insert(0, app.router.routes.pop())
    assert app._lane(scope) is None
