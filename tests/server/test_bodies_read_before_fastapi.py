"""The generation routes read a JSON body valid for their model without FastAPI's per-request
body handling (``formcast.server.app._read_body_first``), and answer every other body exactly
as FastAPI did: the same status and the same JSON, checked here against an app built without
the short path, over real HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from server_harness import ToyModel, running_server

from formcast.server import ServerConfig
from formcast.server import app as app_mod

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}
CHAT = {"model": "toy", "messages": [{"role": "user", "content": "hi"}], "temperature": 0,
        "max_tokens": 12}
CHAT_SCHEMA = {**CHAT, "response_format": {"type": "json_schema", "json_schema": {
    "name": "s", "schema": SCHEMA, "strict": True}}}
COMPLETION = {"model": "toy", "prompt": "say hi", "temperature": 0, "max_tokens": 8}
RESPONSE = {"model": "toy", "input": "hi", "temperature": 0, "max_output_tokens": 12}
JSON = "application/json"

# (path, raw body, content type or None): valid bodies, bodies FastAPI reads another way, and
# bodies it rejects
CASES: list[tuple[str, bytes, str | None]] = [
    ("/v1/chat/completions", json.dumps(CHAT).encode(), JSON),
    ("/v1/chat/completions", json.dumps(CHAT_SCHEMA).encode(), "Application/JSON; charset=utf-8"),
    ("/v1/chat/completions", json.dumps({**CHAT, "model": "other"}).encode(), JSON),  # 404
    ("/v1/chat/completions", json.dumps({**CHAT, "n": 99}).encode(), JSON),  # handler's 400
    ("/v1/chat/completions", json.dumps(CHAT).encode(), "application/vnd.x+json"),
    ("/v1/chat/completions", json.dumps(CHAT).encode(), "text/plain"),
    ("/v1/chat/completions", json.dumps(CHAT).encode(), None),
    ("/v1/chat/completions", b"", JSON),
    ("/v1/chat/completions", b'{"model": "toy", "messages": [', JSON),
    ("/v1/chat/completions", b"[1, 2]", JSON),
    ("/v1/chat/completions", json.dumps({"model": "toy"}).encode(), JSON),
    ("/v1/chat/completions",
     json.dumps({**CHAT, "messages": [{"role": "robot", "content": "x"}]}).encode(), JSON),
    ("/v1/chat/completions", json.dumps({**CHAT, "temperature": "hot"}).encode(), JSON),
    ("/v1/completions", json.dumps(COMPLETION).encode(), JSON),
    ("/v1/completions", json.dumps({"model": "toy"}).encode(), JSON),
    ("/v1/completions", b"not json", JSON),
    ("/v1/responses", json.dumps(RESPONSE).encode(), JSON),
    ("/v1/responses", json.dumps({"input": "hi"}).encode(), JSON),
    ("/v1/responses", b"{", "text/plain"),
]

_VOLATILE = {"id", "created", "created_at", "system_fingerprint", "completed_at"}


def _stable(value: Any) -> Any:
    """``value`` without the fields that differ between two answers (ids, times)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _post(url: str, raw: bytes, content_type: str | None) -> tuple[int, Any]:
    headers = {} if content_type is None else {"Content-Type": content_type}
    req = urllib.request.Request(url, data=raw, headers=headers, method="POST")
    if content_type is None:  # urllib adds a form content type to a POST without one
        req.remove_header("Content-type")
        req.unredirected_hdrs.pop("Content-type", None)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Any, Any]]:
    """(this app, the same app with every body read by FastAPI)."""
    cfg = ServerConfig(model_name="toy", compile_workers=0, batching=False)
    with running_server(ToyModel(), cfg) as fast:
        patch = pytest.MonkeyPatch()
        patch.setattr(app_mod, "_read_body_first", lambda *args: None)
        try:
            with running_server(ToyModel(), cfg) as declared:
                yield fast, declared
        finally:
            patch.undo()


@pytest.mark.parametrize("case", range(len(CASES)))
def test_every_body_answered_as_fastapi_answers_it(servers: tuple[Any, Any], case: int) -> None:
    path, raw, content_type = CASES[case]
    fast, declared = servers
    got = _post(fast.url + path, raw, content_type)
    want = _post(declared.url + path, raw, content_type)
    assert got[0] == want[0]
    assert _stable(got[1]) == _stable(want[1])


def test_valid_json_bodies_skip_fastapi_body_handling(
    servers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With FastAPI's dependency solving broken, a JSON body valid for its route is still
    answered (the short path), while a body the short path declines reaches FastAPI."""
    from fastapi import routing

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("FastAPI's body handling was used")

    monkeypatch.setattr(routing, "solve_dependencies", broken)
    fast, _ = servers
    for path, body in (("/v1/chat/completions", CHAT_SCHEMA), ("/v1/completions", COMPLETION),
                       ("/v1/responses", RESPONSE)):
        status, answer = _post(fast.url + path, json.dumps(body).encode(), JSON)
        assert status == 200, answer
    status, answer = _post(fast.url + "/v1/chat/completions", json.dumps(CHAT).encode(),
                           "text/plain")
    assert status == 500
    assert "FastAPI's body handling was used" in answer["error"]["message"]


def test_generation_routes_are_matched_first() -> None:
    """The three generation routes come before FastAPI's own (docs, OpenAPI), which still
    answer; a wrong method on a generation path is still a 405 through the error handlers."""
    from fastapi.routing import APIRoute
    from fastapi.testclient import TestClient

    from formcast.server.app import _GENERATION

    app = app_mod.create_app(ToyModel(), ServerConfig(model_name="toy", compile_workers=0,
                                                      batching=False))
    paths = [getattr(r, "path", None) for r in app.router.routes]
    assert set(paths[:3]) == _GENERATION
    assert all(isinstance(r, APIRoute) for r in app.router.routes[:3])
    assert {"/openapi.json", "/docs", "/redoc"} <= set(paths[3:])
    with TestClient(app) as client:
        assert client.get("/openapi.json").status_code == 200
        assert "/v1/chat/completions" in client.get("/openapi.json").json()["paths"]
        assert client.get("/docs").status_code == 200
        assert client.get("/v1/chat/completions").status_code == 405
        assert client.get("/health").status_code == 200
