"""What every route shares: the served model, the options, the engine (:class:`ServerContext`),
and the plumbing of one request's job -- start it with a disconnect watcher, read its first
event, collect it, close it.

Lifetime: one :class:`ServerContext` per app; the helpers are per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import Request
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from .api_errors import APIError
from .config import ServerConfig
from .constraints import PlanMemo
from .engine import Engine, Finished, GenerationSpec, Job, Piece
from .metrics import ServerMetrics

if TYPE_CHECKING:  # pragma: no cover
    from ..index.compiled import CompiledGrammar
    from ..model.protocol import LanguageModel

__all__ = [
    "HEAD_END",
    "SSE_HEADERS",
    "EventStream",
    "ServerContext",
    "aclose",
    "collect",
    "first_event",
]

_DISCONNECT_POLL_S = 0.05
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class _HeadEnd(str):
    __slots__ = ()


HEAD_END: str = _HeadEnd("")
"""The chunk a streamed body yields once the chunks of its first event are out (compared by
identity, never sent): :class:`EventStream` writes what came before it at once."""


class EventStream(StreamingResponse):
    """A server-sent-events response whose *head* -- the chunks its body yields before
    :data:`HEAD_END` (the opening chunks and the job's first event, known when the handler
    returns) -- is written from the request's own task, as one body write right after the
    headers, before the response's body task starts.

    Why: with a plain :class:`StreamingResponse` the body runs in a task created when the
    handler returns, queued behind every request that arrived in the same loop turn, so a
    burst of N requests writes its first chunks only after all N handlers have run.  Here
    request k's first content goes out before request k+1's handler runs, and the head costs
    one write, not one per chunk.  The bytes on the wire are the same (the chunks in order);
    the rest of the body streams as :class:`StreamingResponse` does (disconnect listener
    included).

    Lifetime: one response; ``content`` is consumed once (closed here if the head fails)."""

    def __init__(self, content: AsyncIterator[str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=SSE_HEADERS)
        self._body = content  # = body_iterator, typed as the iterator it is
        self._head_sent = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._head_sent:
            body = self._body
            try:
                parts = await _head(body)
                start = {"type": "http.response.start", "status": self.status_code,
                         "headers": self.raw_headers}
                self._head_sent = True
                try:
                    await send(start)
                    if parts:
                        await send({"type": "http.response.body",
                                    "body": "".join(parts).encode(self.charset),
                                    "more_body": True})
                except OSError:  # as StreamingResponse under ASGI spec 2.4
                    raise ClientDisconnect() from None
                # the head is out: the rest (the body task and, under ASGI spec < 2.4 as
                # uvicorn speaks, Starlette's task group and disconnect listener: ~50-100 us)
                # after the heads of the requests already ready to run (a burst read in one
                # loop turn), not before them
                await asyncio.sleep(0)
            except BaseException:
                await aclose(body)
                raise
        await super().__call__(scope, receive, send)

    async def stream_response(self, send: Send) -> None:
        if not self._head_sent:
            self._head_sent = True
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            if chunk is HEAD_END:
                continue
            data = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _head(body: AsyncIterator[str]) -> list[str]:
    """``body``'s chunks up to :data:`HEAD_END` (or its end), taken from it."""
    parts: list[str] = []
    while True:
        try:
            chunk = await body.__anext__()
        except StopAsyncIteration:
            return parts
        if chunk is HEAD_END:
            return parts
        parts.append(chunk)


@dataclass
class ServerContext:
    """The app's shared state: read by every route, never changed after the app starts
    (but for ``plans``, the response formats' plans memoized on the event loop)."""

    model: LanguageModel
    config: ServerConfig
    engine: Engine
    metrics: ServerMetrics
    fingerprint: str
    started: int
    plans: PlanMemo = field(default_factory=PlanMemo)

    def check_model(self, name: str) -> None:
        """A 404 ``model_not_found`` unless ``name`` is the served model's id."""
        if name != self.config.model_name:
            raise APIError(404, f"the model {name!r} does not exist: this server serves "
                           f"{self.config.model_name!r} (GET /v1/models)", param="model",
                           code="model_not_found")

    def new_job(
        self,
        specs: list[GenerationSpec],
        compiled: CompiledGrammar | None,
        *,
        max_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        stop: str | Sequence[str] | None,
        deadline: float | None,
        logprobs: int | None,
        release: Callable[[], None],
    ) -> Job:
        """The engine job of one request (OpenAI's defaults: temperature and top_p 1)."""
        stops = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
        return Job(
            specs=specs,
            compiled=compiled,
            max_tokens=max_tokens,
            temperature=1.0 if temperature is None else temperature,
            top_p=1.0 if top_p is None else top_p,
            stop=stops,
            deadline=deadline,
            loop=asyncio.get_running_loop(),
            logprobs=logprobs,
            on_done=release,  # idempotent: the response's end releases it too
        )

    def start(
        self, request: Request, job: Job
    ) -> tuple[AsyncIterator[Piece | Finished], asyncio.Task[None]]:
        """Queue ``job``: its events, and a task that cancels it when the client leaves."""
        return self.engine.run(job), asyncio.create_task(_watch(request, job))


async def _watch(request: Request, job: Job) -> None:
    """Cancel ``job`` when the client disconnects."""
    while not job.cancel.is_set():
        if await request.is_disconnected():
            job.cancel.set()
            return
        await asyncio.sleep(_DISCONNECT_POLL_S)


async def first_event(
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


async def all_events(
    first: Piece | Finished | None, events: AsyncIterator[Piece | Finished]
) -> AsyncIterator[Piece | Finished]:
    """``first`` (when there is one), then the rest of ``events``."""
    if first is not None:
        yield first
    async for ev in events:
        yield ev


async def collect(
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
        await aclose(events)
    return sorted(done, key=lambda f: f.index)


async def aclose(events: AsyncIterator[Any]) -> None:
    """Close an async generator (cancelling its job when it had not ended)."""
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()
