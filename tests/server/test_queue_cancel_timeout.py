"""Serving behaviour under load, with a slow model (a sleep in every model call): a full queue is
a 429 with ``Retry-After``; a client that disconnects stops its generation (the model is not
called for it again); a request past its deadline ends with ``finish_reason: "timeout"``."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import openai
import pytest
from server_harness import ToyModel, metric, running_server

from formcast.server import ServerConfig

LONG = "word " * 400  # a reply of ~400 tokens: 8 s at 20 ms a call, if nobody stops it
MSG = [{"role": "user", "content": "hi"}]


def slow_model(delay_s: float = 0.02, reply: str = LONG) -> ToyModel:
    return ToyModel(lambda prompt: reply, delay_s=delay_s)


def wait_until_idle(model: ToyModel, settle_s: float = 0.3, limit_s: float = 10) -> int:
    """The model's call count once it has stopped changing for ``settle_s``."""
    deadline = time.monotonic() + limit_s
    last = model.calls
    while time.monotonic() < deadline:
        time.sleep(settle_s)
        if model.calls == last:
            return last
        last = model.calls
    raise AssertionError("the model kept being called")


def test_full_queue_is_429_with_retry_after() -> None:
    model = slow_model(0.02, "word " * 40)  # ~0.8 s a request
    with running_server(model, ServerConfig(model_name="toy", max_queue=1)) as srv:

        async def main() -> list[Any]:
            client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
            calls = [client.chat.completions.create(model="toy", messages=MSG, temperature=0)
                     for _ in range(4)]
            out = await asyncio.gather(*calls, return_exceptions=True)
            await client.close()
            return list(out)

        results = asyncio.run(main())
        refused = [r for r in results if isinstance(r, openai.RateLimitError)]
        served = [r for r in results if not isinstance(r, Exception)]
        assert len(served) == 2, results  # 1 generating + 1 queued
        assert len(refused) == 2, results
        for r in served:
            assert r.choices[0].finish_reason == "stop"
        for exc in refused:
            assert exc.status_code == 429
            assert int(exc.response.headers["Retry-After"]) >= 1
            err = exc.response.json()["error"]
            assert err["code"] == "queue_full"
            assert "max_queue=1" in err["message"]
        assert metric(srv.url, 'formcast_rejected_total{reason="queue_full"}') == 2
        # once the queue drains, requests are served again
        ok = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        assert ok.chat.completions.create(model="toy", messages=MSG, max_tokens=2).choices


def test_a_closed_stream_stops_the_generation() -> None:
    model = slow_model()
    with running_server(model, ServerConfig(model_name="toy")) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        stream = client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                                stream=True, max_tokens=400)
        got = 0
        for chunk in stream:
            got += bool(chunk.choices and chunk.choices[0].delta.content)
            if got == 5:
                break
        stream.close()  # the client goes away mid-generation
        calls = wait_until_idle(model)
        assert calls < 200, calls  # far fewer than the 400 a finished reply takes
        time.sleep(0.5)
        assert model.calls == calls  # and nothing more after it stopped
        assert metric(srv.url, 'formcast_generations_total{finish_reason="cancelled"}') == 1


def test_a_disconnected_plain_request_stops_the_generation() -> None:
    model = slow_model()
    with running_server(model, ServerConfig(model_name="toy")) as srv:
        body = json.dumps({"model": "toy", "messages": MSG, "max_tokens": 400}).encode()
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        deadline = time.monotonic() + 10
        while model.calls < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        sock.close()
        calls = wait_until_idle(model)
        assert 10 <= calls < 200, calls  # not the 400 of a finished reply
        assert metric(srv.url, 'formcast_generations_total{finish_reason="cancelled"}') == 1


def test_a_request_waiting_in_the_queue_is_dropped_when_its_client_leaves() -> None:
    model = slow_model(0.02, "word " * 50)
    with running_server(model, ServerConfig(model_name="toy")) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=30)
        first = client.chat.completions.create(model="toy", messages=MSG, stream=True,
                                               temperature=0)
        next(iter(first))  # the first request is generating
        second = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=0.3)
        with pytest.raises(openai.APITimeoutError):
            second.chat.completions.create(model="toy", messages=MSG, temperature=0)
        rest = "".join(c.choices[0].delta.content or "" for c in first if c.choices)
        assert rest.strip().startswith("word")
        calls = wait_until_idle(model)
        # the second request never reached the model: one generation's calls only
        assert calls <= 52, calls
        assert metric(srv.url, 'formcast_generations_total{finish_reason="cancelled"}') == 1


def test_timeout_gives_finish_reason_timeout_with_the_text_so_far() -> None:
    model = slow_model()
    config = ServerConfig(model_name="toy", request_timeout_s=0.5)
    with running_server(model, config) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        t0 = time.monotonic()
        r = client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                           max_tokens=400)
        assert time.monotonic() - t0 < 6  # 0.5 s, plus a loaded machine's slack
        choice = r.choices[0]
        assert choice.finish_reason == "timeout"
        assert choice.model_extra["formcast"] == {"finish": "timeout", "complete": False}
        assert choice.message.content.startswith("word word")
        assert len(choice.message.content) < len(LONG)
        chunks = list(client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                                     max_tokens=400, stream=True))
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "timeout"
