"""uvicorn's httptools protocol as `formcast serve` runs it (formcast.server.http_protocol):
the access log one loop turn later and, with ``--head-writes one``, a response's headers and
its first body chunk in one transport write -- and otherwise the same bytes, in the same
order, the same closes and the same log lines as uvicorn's own protocol, for apps that
stream, answer at once, suspend between the start and the body, fail before or after the
start, or misuse ASGI; keep-alive or not."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

pytest.importorskip("httptools")
uvicorn = pytest.importorskip("uvicorn")

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from formcast.server.http_protocol import http_protocol  # noqa: E402


class _Transport:
    """A transport that records each write (and whether it was closed)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.closed_after = -1  # how many writes came before close

    def write(self, data: bytes) -> None:
        assert not self.closed, "a write after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.closed_after = len(self.writes)

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5555), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def _start(status: int = 200) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status,
            "headers": [(b"content-type", b"text/event-stream")]}


def _body(data: bytes, more: bool) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


async def _streams(scope: Any, receive: Any, send: Any) -> None:  # formcast's EventStream
    await send(_start())
    await send(_body(b"data: head\n\n", True))
    await asyncio.sleep(0)
    await send(_body(b"data: 1\n\n", True))
    await send(_body(b"", False))


async def _at_once(scope: Any, receive: Any, send: Any) -> None:  # a JSON answer
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
    await send(_body(b"{}", False))


async def _suspends(scope: Any, receive: Any, send: Any) -> None:
    await send(_start())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await send(_body(b"data: late\n\n", True))
    await send(_body(b"", False))


async def _fails_after_start(scope: Any, receive: Any, send: Any) -> None:
    await send(_start())
    raise RuntimeError("boom")


async def _fails_after_start_later(scope: Any, receive: Any, send: Any) -> None:
    await send(_start())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    raise RuntimeError("boom")


async def _fails_before_start(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("boom")


async def _body_first(scope: Any, receive: Any, send: Any) -> None:
    await send(_body(b"x", False))


async def _start_twice(scope: Any, receive: Any, send: Any) -> None:
    await send(_start())
    await send(_start())


async def _never_ends(scope: Any, receive: Any, send: Any) -> None:
    await send(_start())
    await send(_body(b"data: head\n\n", True))


async def _reads_then_streams(scope: Any, receive: Any, send: Any) -> None:
    message = await receive()
    await send(_start())
    await send(_body(message["body"], False))


_APPS = [_streams, _at_once, _suspends, _fails_after_start, _fails_after_start_later,
         _fails_before_start, _body_first, _start_twice, _never_ends, _reads_then_streams]

_REQUEST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2\r\n%s\r\n{}")


def _serve(protocol_class: type[Any], app: Any, close: bool) -> tuple[_Transport, list[str]]:
    """One request through ``protocol_class`` over a recording transport; its writes and the
    access log lines."""
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    access = logging.getLogger("uvicorn.access")
    handler = Lines()
    access.addHandler(handler)
    old_level = access.level
    access.setLevel(logging.INFO)
    loop = asyncio.new_event_loop()
    try:
        config = uvicorn.Config(app, http=protocol_class, loop="asyncio", lifespan="off",
                                log_config=None)
        config.load()
        protocol = protocol_class(config=config, server_state=ServerState(), app_state={},
                                  _loop=loop)
        transport = _Transport()
        protocol.connection_made(transport)
        protocol.data_received(_REQUEST % (b"Connection: close\r\n" if close else b""))

        async def settle() -> None:
            for _ in range(20):
                await asyncio.sleep(0)

        loop.run_until_complete(settle())
        if protocol.timeout_keep_alive_task is not None:
            protocol.timeout_keep_alive_task.cancel()
    finally:
        loop.close()
        access.removeHandler(handler)
        access.setLevel(old_level)
    return transport, lines


@pytest.mark.parametrize("close", [False, True])
@pytest.mark.parametrize("app", _APPS, ids=lambda a: a.__name__.strip("_"))
def test_same_bytes_closes_and_log_lines_as_uvicorns(app: Any, close: bool) -> None:
    ours = http_protocol(head_in_one_write=True)
    assert isinstance(ours, type)
    assert issubclass(ours, HttpToolsProtocol)
    theirs, their_lines = _serve(HttpToolsProtocol, app, close)
    mine, my_lines = _serve(ours, app, close)
    assert b"".join(mine.writes) == b"".join(theirs.writes)
    assert mine.closed == theirs.closed
    if theirs.closed:  # closed after the same bytes
        assert b"".join(mine.writes[:mine.closed_after]) == b"".join(
            theirs.writes[:theirs.closed_after])
    assert my_lines == their_lines
    assert len(mine.writes) <= len(theirs.writes)


@pytest.mark.parametrize("app", [_streams, _at_once, _never_ends, _reads_then_streams])
def test_headers_and_first_body_chunk_in_one_write(app: Any) -> None:
    ours = http_protocol(head_in_one_write=True)
    assert isinstance(ours, type)
    theirs, _ = _serve(HttpToolsProtocol, app, False)
    mine, _ = _serve(ours, app, False)
    assert len(mine.writes) == len(theirs.writes) - 1
    assert mine.writes[0] == theirs.writes[0] + theirs.writes[1]
    assert mine.writes[0].startswith(b"HTTP/1.1 ")
    assert mine.writes[1:] == theirs.writes[2:]


def test_headers_not_held_past_the_loop_turn() -> None:
    """An app that suspends after the start: its headers are written at the next loop turn,
    alone, before its body (a bounded delay, not until the body)."""
    ours = http_protocol(head_in_one_write=True)
    assert isinstance(ours, type)
    theirs, _ = _serve(HttpToolsProtocol, _suspends, False)
    mine, _ = _serve(ours, _suspends, False)
    assert mine.writes == theirs.writes


def test_access_log_after_the_request_step() -> None:
    """The access line is written after the app's first step (the head), not inside it."""
    order: list[str] = []
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            order.append("log")
            lines.append(record.getMessage())

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(_start())
        order.append("start sent")
        await send(_body(b"data: head\n\n", True))
        order.append("head sent")
        await asyncio.sleep(0)
        await send(_body(b"", False))

    access = logging.getLogger("uvicorn.access")
    handler = Lines()
    access.addHandler(handler)
    old_level = access.level
    access.setLevel(logging.INFO)
    try:
        ours = http_protocol(head_in_one_write=True)
        assert isinstance(ours, type)
        loop = asyncio.new_event_loop()
        try:
            config = uvicorn.Config(app, http=ours, loop="asyncio", lifespan="off",
                                    log_config=None)
            config.load()
            protocol = ours(config=config, server_state=ServerState(), app_state={}, _loop=loop)
            protocol.connection_made(_Transport())
            protocol.data_received(_REQUEST % b"")

            async def settle() -> None:
                for _ in range(10):
                    await asyncio.sleep(0)

            loop.run_until_complete(settle())
            if protocol.timeout_keep_alive_task is not None:
                protocol.timeout_keep_alive_task.cancel()
        finally:
            loop.close()
    finally:
        access.removeHandler(handler)
        access.setLevel(old_level)
    assert order == ["start sent", "head sent", "log"]
    assert lines == ['127.0.0.1:5555 - "POST /v1/chat/completions HTTP/1.1" 200']


@pytest.mark.parametrize("app", _APPS, ids=lambda a: a.__name__.strip("_"))
def test_two_writes_when_asked_exactly_uvicorns(app: Any) -> None:
    """``head_in_one_write=False`` (the default; ``formcast serve --head-writes two``):
    uvicorn's own writes, one for one; the access log still a loop turn later, the same
    lines."""
    ours = http_protocol(head_in_one_write=False)
    assert isinstance(ours, type)
    theirs, their_lines = _serve(HttpToolsProtocol, app, False)
    mine, my_lines = _serve(ours, app, False)
    assert mine.writes == theirs.writes
    assert mine.closed == theirs.closed
    assert my_lines == their_lines


def test_serve_head_writes_option() -> None:
    from formcast.cli.main import _parser

    def head_writes(*extra: str) -> str:
        return str(_parser().parse_args(["serve", "--model", "smollm2", *extra]).head_writes)

    assert head_writes() == "two"  # uvicorn's writes by default (docs/benchmarks_server.md)
    assert head_writes("--head-writes", "one") == "one"
