"""What every route shares: the served model, the options, the engine (:class:`ServerContext`),
and the plumbing of one request's job -- start it with a disconnect watcher, read its first
event, collect it, close it.

Lifetime: one :class:`ServerContext` per app; the helpers are per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import Request

from .api_errors import APIError
from .config import ServerConfig
from .engine import Engine, Finished, GenerationSpec, Job, Piece
from .metrics import ServerMetrics

if TYPE_CHECKING:  # pragma: no cover
    from ..index.compiled import CompiledGrammar
    from ..model.protocol import LanguageModel

__all__ = ["SSE_HEADERS", "ServerContext", "aclose", "collect", "first_event"]

_DISCONNECT_POLL_S = 0.05
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class ServerContext:
    """The app's shared state: read by every route, never changed after the app starts."""

    model: LanguageModel
    config: ServerConfig
    engine: Engine
    metrics: ServerMetrics
    fingerprint: str
    started: int

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
