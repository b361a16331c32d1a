#!/usr/bin/env python3
"""Where a burst head's event-loop CPU goes, step by step, in process (no sockets): the app
(``create_app``, SmolLM2 on llama.cpp, one compile worker) is called through ASGI with the 8
bodies of ``server_load.py``'s batching part started in one loop turn, and a timer (loop
thread CPU) is noted at each step of each request: its ASGI call, the route's app, the
handler and its steps (``response_format_plan``, ``render_chat``, ``compile_plan``,
``new_job``, ``start``, ``first_event``), the response's call, the headers sent, the first
content sent.  Printed: the median over heads 2-8 of ``--rounds`` bursts (the first head of
a burst is colder) of each step's CPU, and the **tail**: from request k's first content to
request k+1's ASGI call (what runs between two heads).  ``--asgi-spec`` as in
``server_head.py`` (uvicorn's scopes say 2.3).

Usage::

    PYTHONPATH=/tmp/fc-main python benchmarks/server_burst_stages.py --asgi-spec 2.3 --rounds 6
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import itertools
import json
import statistics
import sys
import time
from typing import Any

_cpu = time.thread_time
_MARKS: dict[int, list[tuple[str, float]]] = {}
_KEY: contextvars.ContextVar[int] = contextvars.ContextVar("k", default=-1)


def _mark(name: str, k: int | None = None) -> None:
    _MARKS.setdefault(_KEY.get() if k is None else k, []).append((name, _cpu()))


def _wrap(owner: Any, name: str, label: str, is_async: bool) -> None:
    fn = getattr(owner, name)
    if is_async:
        @functools.wraps(fn)
        async def inner_async(*a: Any, **kw: Any) -> Any:
            _mark(label + ">")
            try:
                return await fn(*a, **kw)
            finally:
                _mark(label + "<")
        setattr(owner, name, inner_async)
    else:
        @functools.wraps(fn)
        def inner(*a: Any, **kw: Any) -> Any:
            _mark(label + ">")
            try:
                return fn(*a, **kw)
            finally:
                _mark(label + "<")
        setattr(owner, name, inner)


async def run(args: argparse.Namespace) -> int:
    from formcast.model.loading import load_model
    from formcast.server import ServerConfig, chat, context
    from formcast.server import app as app_mod

    _wrap(app_mod, "chat_completion", "handler", True)
    _wrap(chat, "render_chat", "render", False)
    _wrap(chat, "response_format_plan", "rfplan", False)
    _wrap(chat, "compile_plan", "compile", True)
    _wrap(chat, "first_event", "first_event", True)
    _wrap(context.ServerContext, "start", "start", False)
    _wrap(context.ServerContext, "new_job", "new_job", False)
    respond = context.EventStream.__call__

    async def es_call(self: Any, scope: Any, receive: Any, send: Any) -> None:
        _mark("response>")
        await respond(self, scope, receive, send)

    context.EventStream.__call__ = es_call  # type: ignore[method-assign]
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from server_head import _server_load

    sl = _server_load()
    model = load_model("smollm2", n_threads=1)
    cfg = ServerConfig(model_name="smollm2", max_queue=12, compile_workers=1, n_threads=1,
                       request_timeout_s=600)
    app = app_mod.create_app(model, cfg)
    ns = argparse.Namespace(batch_tokens=48, kinds=4)
    bodies = [json.dumps(sl.batch_body(i, ns)).encode() for i in range(8)]
    route = app_mod._post_route(app, "/v1/chat/completions")
    route_app = route.app

    async def timed_route(scope: Any, receive: Any, send: Any) -> None:
        _mark("route")
        await route_app(scope, receive, send)

    route.app = timed_route

    async def call(body: bytes, k: int) -> None:
        _KEY.set(k)
        path = "/v1/chat/completions"
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": args.asgi_spec},
                 "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
                 "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(body)).encode())],
                 "client": ("127.0.0.1", 40000 + k), "server": ("127.0.0.1", 8000), "state": {}}
        done = asyncio.Event()
        given = [False]
        first: list[bool] = []
        _mark("call")

        async def receive() -> dict[str, Any]:
            if not given[0]:
                given[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(m: dict[str, Any]) -> None:
            if m["type"] == "http.response.start":
                _mark("sent_start", k)
            elif m["type"] == "http.response.body":
                data = m.get("body", b"")
                if not first and b'"content": "' in data.replace(b'"content": ""', b""):
                    first.append(True)
                    _mark("first", k)
                if not m.get("more_body", False):
                    done.set()

        await app(scope, receive, send)
        done.set()

    acc: dict[str, list[float]] = {}
    async with app.router.lifespan_context(app):
        for _ in range(2):  # warm-up: every schema compiled, every lead taken
            for k, b in enumerate(bodies):
                await call(b, k)
        for _ in range(args.rounds):
            _MARKS.clear()
            await asyncio.gather(*(call(b, k) for k, b in enumerate(bodies)))
            for k in range(1, len(bodies) - 1):
                f = [t for n, t in _MARKS.get(k, []) if n == "first"]
                c = [t for n, t in _MARKS.get(k + 1, []) if n == "call"]
                if f and c:
                    acc.setdefault("TAIL first(k) -> call(k+1)", []).append((c[0] - f[0]) * 1e6)
            for k, marks in _MARKS.items():
                names = [n for n, _ in marks]
                if k <= 0 or "first" not in names:
                    continue
                end = names.index("first")
                for (n0, t0), (n1, t1) in itertools.pairwise(marks[:end + 1]):
                    acc.setdefault(f"{n0} -> {n1}", []).append((t1 - t0) * 1e6)
    total = 0.0
    for key, values in acc.items():
        m = statistics.median(values)
        total += m
        print(f"{key:32s} {m:7.1f} us")
    print(f"sum of medians {total:.1f} us (ASGI spec {args.asgi_spec})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--asgi-spec", default="2.3")
    return asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
