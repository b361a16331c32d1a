#!/usr/bin/env python3
"""The app's own CPU per streamed chat request, in process: from the ASGI call to the first
content chunk handed to ``send`` (the "head": body validation, plan, template, compile-cache
look-up, the forced start, the response's first write), event-loop thread CPU.

No HTTP server and no client: the app (``create_app``, SmolLM2 on llama.cpp, the server's
defaults but one compile worker) is called through ASGI with the bodies of
``server_load.py``'s batching part (8 streamed greedy schema requests), so that what the
server's Python costs per request is measured without the noise of sockets, a client and the
scheduler (uvicorn's HTTP parsing is not included).  After a warm-up (each request to its end,
twice), ``--rounds`` rounds of: the 8 one after another (each to its end), then the 8 started
in one loop turn (as a burst read at once).  ``--asgi-spec 2.3``: the scopes say what uvicorn's
say (by default 2.4, where Starlette streams without its task group and disconnect listener:
their cost after each head is then not measured).  Printed: lone p50 of the loop CPU to the first
content; together, the p50 over the 8 of the loop CPU from the burst's start to each one's
first content ("CPU ttft"), and their ratio; with ``--repeat K`` the lone head is also timed K
times in a row without waiting for the end (the repeated grammar's path, the process warm).

Usage::

    PYTHONPATH=/tmp/fc-main python benchmarks/server_head.py --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

_cpu = time.thread_time


_SPEC = ["2.4"]  # the ASGI spec version the scopes say (--asgi-spec)


async def _call(
    app: Any, body: bytes, port: int, on_first: Any = None
) -> tuple[float, float]:
    """One request through ``app`` to its end: (loop CPU to the first content, its time)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": _SPEC[0]},
        "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", port), "server": ("127.0.0.1", 8000), "state": {},
    }
    done = asyncio.Event()
    sent = [False]
    c0 = _cpu()
    first: list[float] = []

    async def receive() -> dict[str, Any]:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            data = message.get("body", b"")
            if not first and b'"content": "' in data.replace(b'"content": ""', b""):
                first.append(_cpu())
                if on_first is not None:
                    on_first()
            if not message.get("more_body", False):
                done.set()

    await app(scope, receive, send)
    done.set()
    return (first[0] - c0 if first else float("nan")), (first[0] if first else float("nan"))


async def run(args: argparse.Namespace) -> int:
    from formcast.model.loading import load_model
    from formcast.server import ServerConfig
    from formcast.server.app import create_app

    sl = _server_load()

    model = load_model("smollm2", n_threads=args.threads)
    cfg = ServerConfig(model_name="smollm2", max_queue=12, compile_workers=1,
                       n_threads=args.threads, request_timeout_s=600)
    app = create_app(model, cfg)
    ns = argparse.Namespace(batch_tokens=48, kinds=4)
    bodies = [json.dumps(sl.batch_body(i, ns)).encode() for i in range(8)]
    port = [40000]

    def next_port() -> int:
        port[0] += 1
        return port[0]

    lone: list[float] = []
    together: list[float] = []
    repeat: list[float] = []
    async with app.router.lifespan_context(app):
        for _ in range(2):  # warm-up: every schema compiled, every lead taken
            for b in bodies:
                await _call(app, b, next_port())
        prof = None
        if args.cprofile:
            import cProfile

            prof = cProfile.Profile(_cpu)
        for _ in range(args.rounds):
            for b in bodies:
                lone.append((await _call(app, b, next_port()))[0])
            firsts = [0]

            def on_first(firsts: list[int] = firsts) -> None:  # stop at the 8th first content
                firsts[0] += 1
                if prof is not None and firsts[0] == len(bodies):
                    prof.disable()

            if prof is not None:
                prof.enable()
            c0 = _cpu()
            tasks = [asyncio.ensure_future(_call(app, b, next_port(), on_first)) for b in bodies]
            res = await asyncio.gather(*tasks)
            together.extend(at - c0 for _, at in res)
        if args.repeat:
            for _ in range(args.repeat):
                for b in bodies:
                    repeat.append((await _call(app, b, next_port()))[0])
    if prof is not None:
        prof.dump_stats(args.cprofile)
    lo, to = statistics.median(lone) * 1e3, statistics.median(together) * 1e3
    import formcast

    print(f"formcast from {os.path.dirname(formcast.__file__)}")
    print(f"load average {os.getloadavg()[0]:.1f}; ASGI spec {_SPEC[0]}; app loop CPU to the "
          f"first content: lone p50 "
          f"{lo:.3f} ms, together p50 {to:.3f} ms (x{to / lo:.2f}); per request in the burst "
          f"{statistics.median(sorted(together)[1:]) * 1e3 / 4.5:.3f} ms (p50/4.5)"
          + (f"; repeated lone p50 {statistics.median(repeat) * 1e3:.3f} ms" if repeat else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"lone": lone, "together": together, "repeat": repeat}, f)
    return 0


def _server_load() -> Any:
    """benchmarks/server_load.py, imported without the ``src`` it puts first on ``sys.path``
    (the formcast measured is the one ``PYTHONPATH`` finds, also in the compile worker)."""
    path = list(sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import server_load
    finally:
        sys.path[:] = path
    return server_load


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--cprofile", default=None,
                   help="write a pstats file of the loop thread (CPU timer) over each burst, "
                   "from its start to its 8th first content")
    p.add_argument("--asgi-spec", default="2.4",
                   help="the ASGI spec_version of the scopes (default 2.4: Starlette's "
                   "StreamingResponse without its task group; uvicorn says 2.3, where a "
                   "response's task group and disconnect listener follow its head)")
    args = p.parse_args()
    _SPEC[0] = args.asgi_spec
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
