"""A streamed response's *head* -- its opening chunks and the chunks of the job's first event
(for a constrained chat reply: the role chunk and the forced start) -- is written from the
request's own task, as one body write right after the headers (``EventStream``), before the
response's body task starts: in a burst of requests read in one loop turn, request 1's first
content leaves before request 2's handler runs, instead of after every handler of the burst.

Checked at the ASGI level (deterministic orders of ``send`` / ``receive`` calls, no sockets):
the response class alone (head before the disconnect listener, one write, the same bytes, a
body that ends or fails in its head), then the real app on a model whose calls wait at a gate
(no logits exist: the head can only be what the schema forces), two requests started in the
same loop turn.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_continuous_batching import callable_model
from test_forced_start_streams_first import SCHEMA, GatedFunction

from formcast.server import ServerConfig
from formcast.server.app import create_app
from formcast.server.context import HEAD_END, EventStream

SCOPE: dict[str, Any] = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                         "http_version": "1.1", "method": "GET", "path": "/", "headers": []}


class Recorder:
    """``send`` / ``receive`` of one ASGI call, writing what happens to a shared log;
    ``receive`` gives ``body`` once, then waits until the response has ended."""

    def __init__(self, name: str, log: list[tuple[str, str, Any]], body: bytes = b"") -> None:
        self.name, self.log, self.body = name, log, body
        self.ended = asyncio.Event()
        self.sent: list[dict[str, Any]] = []
        self.gave_body = False

    async def receive(self) -> dict[str, Any]:
        if not self.gave_body:
            self.gave_body = True
            self.log.append((self.name, "receive", "body"))
            return {"type": "http.request", "body": self.body, "more_body": False}
        self.log.append((self.name, "receive", "wait"))
        await self.ended.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        kind = message["type"].removeprefix("http.response.")
        self.log.append((self.name, "send", message.get("body", kind)))
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.ended.set()

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body" and m["body"]]


async def chunks(items: list[str], closed: list[bool], fail: bool = False) -> AsyncIterator[str]:
    try:
        for item in items:
            if item is not HEAD_END and item.startswith("later"):
                await asyncio.sleep(0)  # the rest of the body: after a suspension
            yield item
        if fail:
            raise RuntimeError("boom")
    finally:
        closed.append(True)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_head_is_one_write_before_the_disconnect_listener_starts() -> None:
    async def go() -> tuple[list[tuple[str, str, Any]], Recorder]:
        log: list[tuple[str, str, Any]] = []
        rec = Recorder("a", log)
        rec.gave_body = True  # a GET: only the disconnect is left to receive
        closed: list[bool] = []
        body = chunks(["data: 1\n\n", "data: 2\n\n", HEAD_END, "later: 3\n\n"], closed)
        await EventStream(body)(SCOPE, rec.receive, rec.send)
        assert closed == [True]
        return log, rec

    log, rec = run(go())
    # headers, then the two head chunks in ONE body write, all before anything is received
    assert log[:2] == [("a", "send", "start"), ("a", "send", b"data: 1\n\ndata: 2\n\n")]
    assert ("a", "receive", "wait") in log[2:]
    assert rec.bodies() == [b"data: 1\n\ndata: 2\n\n", b"later: 3\n\n"]
    assert rec.sent[0]["status"] == 200
    headers = dict(rec.sent[0]["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"cache-control"] == b"no-cache"
    assert rec.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def test_a_body_that_ends_in_its_head_is_written_whole() -> None:
    async def go() -> Recorder:
        rec = Recorder("a", [])
        rec.gave_body = True
        closed: list[bool] = []
        await EventStream(chunks(["data: 1\n\n", "data: [DONE]\n\n"], closed))(
            SCOPE, rec.receive, rec.send)
        assert closed == [True]
        return rec

    rec = run(go())
    assert rec.bodies() == [b"data: 1\n\ndata: [DONE]\n\n"]
    assert rec.sent[-1]["more_body"] is False


def test_a_body_failing_in_its_head_sends_nothing_and_is_closed() -> None:
    async def go() -> Recorder:
        rec = Recorder("a", [])
        rec.gave_body = True
        closed: list[bool] = []
        with pytest.raises(RuntimeError, match="boom"):
            await EventStream(chunks(["data: 1\n\n"], closed, fail=True))(
                SCOPE, rec.receive, rec.send)
        assert closed == [True]
        return rec

    assert run(go()).sent == []  # the error handler can still answer a 500


FORMAT = {"name": "c", "schema": SCHEMA, "strict": True}


def _request(route: str, i: int) -> bytes:
    """A streamed request on ``route`` whose reply must start with ``{"city":"``."""
    body: dict[str, Any] = {"model": "toy", "stream": True, "temperature": 0}
    if route == "/v1/chat/completions":
        body |= {"messages": [{"role": "user", "content": f"Which city? ({i})"}],
                 "max_tokens": 30,
                 "response_format": {"type": "json_schema", "json_schema": FORMAT}}
    elif route == "/v1/completions":
        body |= {"prompt": f"Which city? ({i})", "max_tokens": 30,
                 "response_format": {"type": "json_schema", "json_schema": FORMAT}}
    else:
        body |= {"input": f"Which city? ({i})", "max_output_tokens": 30,
                 "text": {"format": {"type": "json_schema", **FORMAT}}}
    return json.dumps(body).encode()


def _scope(route: str, body: bytes, port: int) -> dict[str, Any]:
    return {**SCOPE, "method": "POST", "path": route, "raw_path": route.encode(),
            "query_string": b"", "scheme": "http",
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", port),
            "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]}


def _events(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for event in data.decode().split("\n\n")
            for line in event.split("\n") if line.startswith("data: {")]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [s for v in value for s in _strings(v)] if isinstance(value, list) else []


ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/responses"]


@pytest.mark.parametrize("route", ROUTES)
def test_a_burst_writes_each_first_chunk_before_the_next_handler_runs(route: str) -> None:
    fn = GatedFunction()  # closed: no model call can finish, so no logits exist
    app = create_app(callable_model(fn), ServerConfig(model_name="toy", n_threads=1))
    engine = app.state.engine
    timer = threading.Timer(60, fn.gate.set)  # never hang the suite
    timer.start()

    async def go() -> tuple[list[tuple[str, str, Any]], list[Recorder], bool]:
        # warm-up: the schema compiled and its lead taken (later requests take the loop path)
        fn.gate.set()
        warm = Recorder("w", [], _request(route, 9))
        await app(_scope(route, warm.body, 1), warm.receive, warm.send)
        fn.gate.clear()
        log: list[tuple[str, str, Any]] = []
        recs = [Recorder(name, log, _request(route, i)) for i, name in enumerate("ab")]
        tasks = [asyncio.create_task(app(_scope(route, r.body, 2 + i), r.receive, r.send))
                 for i, r in enumerate(recs)]
        for _ in range(2000):  # 10 s at most: a head held back until the model answers
            if all(r.bodies() for r in recs):
                break
            await asyncio.sleep(0.005)
        heads_while_closed = all(r.bodies() for r in recs) and not fn.gate.is_set()
        fn.gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        return log, recs, heads_while_closed

    engine.start()
    try:
        log, recs, heads_while_closed = run(go())
    finally:
        fn.gate.set()
        timer.cancel()
        engine.close()
    assert heads_while_closed  # each head written before any model call could finish
    a_head = log.index(("a", "send", recs[0].bodies()[0]))
    b_body = log.index(("b", "receive", "body"))
    assert a_head < b_body  # a's first content left before b's handler read its body
    for rec in recs:
        assert rec.sent[0]["status"] == 200
        head = _events(rec.bodies()[0])  # one write: the opening chunks and the forced start
        assert '{"city":"' in _strings(head)
        whole = b"".join(rec.bodies())
        if route == "/v1/chat/completions":
            assert [e["choices"][0]["delta"] for e in head] == [
                {"role": "assistant", "content": ""}, {"content": '{"city":"'}]
            stream = _events(whole)
            assert len({e["id"] for e in stream}) == 1
            text = "".join(e["choices"][0]["delta"].get("content") or ""
                           for e in stream if e["choices"])
            json.loads(text)  # whole and valid (the toy logits complete it)
        if route != "/v1/responses":
            assert whole.endswith(b"data: [DONE]\n\n")
        else:
            assert _events(whole)[-1]["type"] == "response.completed"
