#!/usr/bin/env python3
"""The HTTP server's own share of a burst head's event-loop CPU: uvicorn (httptools, the
protocol ``run_server`` gives it) serving a **stub ASGI app** that reads the body, sends the
start and one SSE body chunk at once (the head), then the end ``--tail-ms`` later -- the
shape of a streamed ``formcast serve`` answer, with none of the app's Python.  Optionally
the stub is wrapped in a FastAPI app with formcast's middleware and error handlers
(``--fastapi``: the stack a generation request crosses, the handler still the stub).

Printed per round: the server loop thread's CPU per request for 8 requests sent together with
the raw client (connections opened first, bytes made first: ``server_load.py``'s raw mode), and
for the same 8 one after another.  Compare with ``server_profile.py``'s
``loop_cpu_per_request_burst`` (the real app) to see the app's share.

Usage::

    PYTHONPATH=src python benchmarks/server40_uvicorn_floor.py --rounds 5 [--fastapi]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import sys
import time
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_CHUNK = (b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","choices":[{"index":0,'
          b'"delta":{"role":"assistant","content":""}}]}\n\ndata: {"id":"chatcmpl-x","object":'
          b'"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"{\\""}}]}\n\n')


def _serve(port: int, tail_s: float, fastapi: bool) -> None:
    import uvicorn

    from formcast.server.http_protocol import http_protocol

    async def stub(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/cpu":
            body = json.dumps(time.thread_time()).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        more = True
        while more:
            msg = await receive()
            more = msg.get("more_body", False)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"),
                                (b"cache-control", b"no-cache")]})
        await send({"type": "http.response.body", "body": _CHUNK, "more_body": True})
        await asyncio.sleep(tail_s)
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    app: Any = stub
    if fastapi:
        from fastapi import FastAPI, Request

        from formcast.server.error_handlers import install_error_handlers
        from formcast.server.metrics import ServerMetrics
        from formcast.server.middleware import CountRequests

        api = FastAPI()
        install_error_handlers(api)
        api.add_middleware(CountRequests, metrics=ServerMetrics(None),
                           routes=frozenset({"/v1/chat/completions"}))

        @api.post("/v1/chat/completions")
        async def route(request: Request) -> None:  # pragma: no cover - replaced below
            raise AssertionError

        @api.get("/cpu")
        async def cpu() -> float:
            return time.thread_time()

        for r in api.router.routes:
            if getattr(r, "path", None) == "/v1/chat/completions":
                r.app = stub  # type: ignore[attr-defined]
        app = api
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", loop="asyncio",
                http=http_protocol(False))


def _cpu(url: str) -> float:
    with urllib.request.urlopen(f"{url}/cpu", timeout=10) as resp:
        return float(json.loads(resp.read()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tail-ms", type=float, default=20.0)
    ap.add_argument("--fastapi", action="store_true")
    args = ap.parse_args()
    import server_load as sl

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = multiprocessing.get_context("spawn").Process(
        target=_serve, args=(port, args.tail_ms / 1e3, args.fastapi), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            _cpu(url)
            break
        except OSError:
            time.sleep(0.1)
    ns = argparse.Namespace(batch_tokens=48, kinds=4)
    bodies = [sl.batch_body(i, ns) for i in range(8)]
    forced = [""] * 8

    async def stub_streamed(conns: list[Any], together: bool) -> None:
        async def one(c: Any) -> None:
            assert c.writer is not None
            assert c.reader is not None
            c.writer.write(c.request)
            await c.reader.read(65536)
            while await c.reader.read(65536):
                pass
            c.writer.close()

        if together:
            await asyncio.gather(*(one(c) for c in conns))
        else:
            for c in conns:
                await one(c)

    async def run(together: bool) -> None:
        conns = [sl._RawConnection(url, b) for b in bodies]
        await asyncio.gather(*(c.open() for c in conns))
        await stub_streamed(conns, together)

    del forced
    try:
        asyncio.run(run(False))
        base = []
        for _ in range(5):
            a = _cpu(url)
            base.append(_cpu(url) - a)
        per_get = statistics.median(base)
        for k in range(args.rounds):
            row = []
            for together in (False, True):
                a = _cpu(url)
                asyncio.run(run(together))
                b = _cpu(url)
                row.append((b - a - per_get) / 8)
            print(f"round {k}: loop CPU per request lone {row[0] * 1e6:.0f} us, together "
                  f"{row[1] * 1e6:.0f} us  load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
