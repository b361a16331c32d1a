"""In a burst of streamed requests read in one loop turn, every request's head (its first
content, written from its own task by ``EventStream``) goes out before any request's *tail*:
what a response does after its head -- under ASGI spec 2.3, as uvicorn speaks it, Starlette's
task group and disconnect listener (~50-100 us a request), then the body task -- waits until
the requests already ready to run have written their heads.  Before, request k's head waited
for the tails of requests 1..k-1 too.

Checked at the ASGI level (deterministic order of ``send`` / ``receive`` calls, no sockets) on
the real app over a model whose calls wait at a gate (no logits: a head can only be the
forced start), three requests started in the same loop turn, on each generation route; and
on the response class alone (the head, then a suspension, then the listener).  The bytes are
those of the existing tests (test_first_chunks_leave_in_the_request_task.py).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from test_continuous_batching import callable_model
from test_first_chunks_leave_in_the_request_task import (
    ROUTES,
    SCOPE,
    Recorder,
    _events,
    _request,
    _scope,
    _strings,
    chunks,
)
from test_forced_start_streams_first import GatedFunction

from formcast.server import ServerConfig
from formcast.server.app import create_app
from formcast.server.context import HEAD_END, EventStream


def test_the_response_suspends_once_its_head_is_out() -> None:
    """Another task ready when a head goes out runs before the head's listener starts."""

    async def go() -> list[tuple[str, str, Any]]:
        log: list[tuple[str, str, Any]] = []
        rec = Recorder("a", log)
        rec.gave_body = True
        closed: list[bool] = []
        body = chunks(["data: 1\n\n", HEAD_END, "later: 2\n\n"], closed)

        async def other() -> None:
            log.append(("b", "ran", None))

        # made in the same turn: a runs first (its head), b is ready meanwhile
        task = asyncio.create_task(EventStream(body)(SCOPE, rec.receive, rec.send))
        other_task = asyncio.create_task(other())
        await asyncio.gather(task, other_task)
        return log

    log = run(go())
    assert log[:2] == [("a", "send", "start"), ("a", "send", b"data: 1\n\n")]
    assert log.index(("b", "ran", None)) < log.index(("a", "receive", "wait"))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("route", ROUTES)
def test_a_burst_writes_every_head_before_any_tail(route: str) -> None:
    fn = GatedFunction()  # closed: no model call can finish, so no logits exist
    app = create_app(callable_model(fn), ServerConfig(model_name="toy", n_threads=1))
    engine = app.state.engine
    timer = threading.Timer(60, fn.gate.set)  # never hang the suite
    timer.start()

    async def go() -> tuple[list[tuple[str, str, Any]], list[Recorder]]:
        fn.gate.set()  # warm-up: the schema compiled and its lead taken
        warm = Recorder("w", [], _request(route, 9))
        await app(_scope(route, warm.body, 1), warm.receive, warm.send)
        fn.gate.clear()
        log: list[tuple[str, str, Any]] = []
        recs = [Recorder(name, log, _request(route, i)) for i, name in enumerate("abc")]
        tasks = [asyncio.create_task(app(_scope(route, r.body, 2 + i), r.receive, r.send))
                 for i, r in enumerate(recs)]
        for _ in range(2000):  # 10 s at most
            if all(r.bodies() for r in recs):
                break
            await asyncio.sleep(0.005)
        fn.gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        return log, recs

    engine.start()
    try:
        log, recs = run(go())
    finally:
        fn.gate.set()
        timer.cancel()
        engine.close()
    heads = [log.index((r.name, "send", r.bodies()[0])) for r in recs]
    assert heads == sorted(heads)  # FIFO, as read
    waits = [i for i, (_, what, arg) in enumerate(log) if (what, arg) == ("receive", "wait")]
    assert waits
    assert max(heads) < min(waits)  # no listener (no tail) before the last head
    for rec in recs:  # the same answers: a 200, the forced start in the head, a whole stream
        assert rec.sent[0]["status"] == 200
        assert '{"city":"' in _strings(_events(rec.bodies()[0]))
        whole = b"".join(rec.bodies())
        if route != "/v1/responses":
            assert whole.endswith(b"data: [DONE]\n\n")
        else:
            assert _events(whole)[-1]["type"] == "response.completed"
