"""uvicorn's HTTP protocol (httptools) with a response's headers and its first body chunk in
one socket write, and the access log written after the request's own step.

Why (issue #30, the concurrent time to first token): uvicorn writes a response's status line
and headers at ``http.response.start`` (one ``transport.write``, i.e. one ``send`` syscall on
an idle socket) and its first body chunk at the next ``http.response.body`` (a second one).  A
streamed answer's first content chunk is in that body write (:class:`~.context.EventStream`
writes its head right after the headers, in the same loop step), so the client is woken
twice per request -- once by the headers alone -- and the server pays two loopback sends (the
first one also runs the receiver's TCP path).  Here the headers wait (in memory) for the
response's first body chunk and both go out in one write: the same bytes in the same order.

Exactness: the held headers are written (before anything else on the connection)

* with the response's first body chunk, when the app sends it;
* at the next turn of the event loop, when the app suspends before sending it (a delay of
  at most one loop iteration; a response whose body is not ready at once -- not formcast's --
  gets its headers then, as a client would see them anyway);
* before the connection is closed (uvicorn closes it after an app's exception once the
  response started), or before any other use of the transport than ``write``.

uvicorn's state (``response_started``, keep-alive, chunked encoding, the 500 it answers for an
app that fails before starting) is its own, unchanged: only the cycle's ``transport`` is
stood in for, between the start and the first body write.

The access log (``uvicorn.access``, on at ``--log-level info``): uvicorn formats and writes
its line inside ``http.response.start`` -- ~12 us of the event loop's CPU per request (thread
time, to a pipe) inside every head of a burst.  Here the same call, with the same arguments,
is made one loop turn later (``loop.call_soon``): the same line, its timestamp up to one loop
iteration later, after the heads of the requests already ready to run.

Off by default (``formcast serve --head-writes one`` / ``run_server(head_in_one_write=True)``
turn it on): in the real server it removed the 0.2-1.2 ms wall gap between the start and the
first content (7 of 7 pairs) and some loop CPU, but the target's wall-clock benchmark under
load 7-12 did not show it better (docs/benchmarks_server.md "Session 25"), and with a free
core the client's handling of the headers can overlap the server's work only when they
come first: it needs an idle-machine A/B before it is the default.

Only uvicorn's httptools protocol (``http="auto"`` when httptools is installed, as the
``server`` extra pins it) is extended, through its ``_start_asgi_task`` hook (uvicorn 0.54);
:func:`http_protocol` gives uvicorn's own choice (``"auto"``) where either is missing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import Message, Receive, Scope, Send

__all__ = ["http_protocol"]


def http_protocol(head_in_one_write: bool = False) -> type[asyncio.Protocol] | str:
    """The ``http`` option for ``uvicorn.run``: uvicorn's httptools protocol with the access
    log one loop turn later and, when ``head_in_one_write``, each response's headers written
    with its first body chunk (module docstring) -- when httptools (and uvicorn's
    ``_start_asgi_task`` hook) is there; else ``"auto"`` (uvicorn's choice, unchanged).  A
    new class per call (one per server)."""
    cls = _protocol_class(head_in_one_write)
    return cls if cls is not None else "auto"


def _protocol_class(head_in_one_write: bool) -> type[asyncio.Protocol] | None:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools not installed: h11, as uvicorn picks it
        return None
    if not hasattr(HttpToolsProtocol, "_start_asgi_task"):  # pragma: no cover - other uvicorn
        return None

    class HeadInOneWrite(HttpToolsProtocol):
        """uvicorn's httptools protocol; each request's access log call is made one loop
        turn later and (``head_in_one_write``) its app gets a ``send`` that writes the
        response's headers with its first body chunk (module docstring).  Lifetime: one
        connection (uvicorn makes one per accepted socket)."""

        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            if cycle.access_log:
                cycle.access_logger = _LoggedLater(cycle.access_logger, self.loop)
            if head_in_one_write:
                app = _head_in_one_write(cycle, app, self.loop)
            super()._start_asgi_task(cycle, app)

    HeadInOneWrite.__qualname__ = HeadInOneWrite.__name__
    return HeadInOneWrite


class _LoggedLater:
    """Stands in for uvicorn's access logger in one request's cycle: ``info`` is called on
    the real logger one loop turn later (same arguments).  Lifetime: the cycle's."""

    __slots__ = ("_logger", "_loop")

    def __init__(self, logger: logging.Logger, loop: asyncio.AbstractEventLoop) -> None:
        self._logger = logger
        self._loop = loop

    def info(self, msg: str, *args: object) -> None:
        self._loop.call_soon(self._logger.info, msg, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


class _Held:
    """Stands in for a connection's transport between a response's start and its first body
    write: ``write`` keeps the bytes, :meth:`flush` writes what it kept in one write; anything
    else (``close``, ``is_closing``, ...) flushes first, then goes to the transport.
    Lifetime: one response's start; one per response."""

    __slots__ = ("parts", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def flush(self) -> None:
        parts = self.parts
        if parts:
            self.parts = []
            self.transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self.transport, name)


def _head_in_one_write(cycle: Any, app: Any, loop: asyncio.AbstractEventLoop) -> Any:
    """``app`` for one request ``cycle`` of uvicorn's httptools protocol, its ``send`` holding
    the response's headers until its first body chunk (module docstring).  Cost: one call
    frame per ``send``; the start and the first body, a few attribute swaps."""
    real: asyncio.Transport = cycle.transport
    held: list[_Held] = []  # the headers held (one item) until released
    later: list[asyncio.Handle] = []
    passing = [False]  # the first body went out (or the response never held): plain sends

    def release() -> None:
        if held:
            cycle.transport = real
            held.pop().flush()

    async def send(message: Message) -> None:
        if passing[0]:
            await cycle.send(message)
            return
        if not held:  # before the start
            if (message["type"] != "http.response.start" or cycle.response_started
                    or cycle.disconnected or cycle.flow.write_paused):
                await cycle.send(message)  # uvicorn's own errors, unchanged
                return
            stand_in = _Held(real)
            held.append(stand_in)
            cycle.transport = stand_in
            try:
                await cycle.send(message)
            except BaseException:
                release()
                passing[0] = True
                raise
            later.append(loop.call_soon(release))
            return
        # the headers are held: this message (the first body) goes out with them
        passing[0] = True
        later.pop().cancel()
        if message["type"] != "http.response.body" or cycle.flow.write_paused:
            release()
            await cycle.send(message)
            return
        try:
            await cycle.send(message)
        finally:
            release()

    async def run(scope: Scope, receive: Receive, _: Send) -> Any:
        result: Any = await app(scope, receive, send)
        return result  # uvicorn checks that it is None

    return run
