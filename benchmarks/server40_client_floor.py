#!/usr/bin/env python3
"""The openai client's own share of #30's ttft ratio: ``server_load.py``'s default-mode
measurement (a fresh ``openai.AsyncOpenAI``, the 8 batching requests alone then together) and
its warm-pool mode, against a **stub server** that costs almost nothing: a process of its own
(asyncio, no framework) that answers every ``POST`` at once with the headers, the role chunk
and a content chunk, then the rest (usage, ``[DONE]``) ``--tail-ms`` later; ``GET`` with a
tiny JSON.  Whatever ratio this prints is the client's floor: what the server cannot remove.
``--head-cost-ms`` makes the stub burn that much CPU before each head (a server's head cost,
serialized on one loop), to see how the ratio grows with the server's per-head CPU.

Usage::

    python benchmarks/server40_client_floor.py --rounds 5 [--head-cost-ms 0.7]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_ROLE = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "system_fingerprint": "f",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                      "logprobs": None, "finish_reason": None}]}


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _stub(port: int, head_cost_s: float, tail_s: float) -> None:
    """The stub server (runs in its own process until killed)."""

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = transport
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while True:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buf[:end].decode("latin-1")
                length = 0
                for line in head.split("\r\n")[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v)
                if len(self.buf) < end + 4 + length:
                    return
                self.buf = self.buf[end + 4 + length:]
                if head.startswith("GET"):
                    body = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
                    self.t.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\n\r\n%s" % (len(body), body))
                    continue
                t0 = time.thread_time()
                while time.thread_time() - t0 < head_cost_s:
                    pass
                role = _sse(_ROLE)
                content = dict(_ROLE, choices=[{"index": 0, "delta": {"content": "{\""},
                                                "logprobs": None, "finish_reason": None}])
                self.t.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n"
                             + _chunked(role + _sse(content)))
                usage = dict(_ROLE, choices=[], usage={"prompt_tokens": 10,
                                                       "completion_tokens": 5,
                                                       "total_tokens": 15})
                last = dict(_ROLE, choices=[{"index": 0, "delta": {"content": "a\"}"},
                                             "logprobs": None, "finish_reason": "stop"}])
                rest = _chunked(_sse(last) + _sse(usage) + b"data: [DONE]\n\n") + b"0\r\n\r\n"
                asyncio.get_running_loop().call_later(tail_s, self.t.write, rest)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Proto, "127.0.0.1", port)
        await server.serve_forever()

    asyncio.run(main())


async def _cpu_ttfts(url: str, bodies: list[dict[str, object]], together: bool) -> list[float]:
    """The client thread's CPU to each request's first content chunk, from its ``create``
    call (as server_load.py's ``t0``), lone and together: the client's own share of the
    ttft, which no server can remove."""
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    out: list[float] = []

    async def one(body: dict[str, object], c0: float | None) -> float:
        start = time.thread_time() if c0 is None else c0
        got = None
        stream = await client.chat.completions.create(**body)  # type: ignore[call-overload]
        async for chunk in stream:
            for c in chunk.choices:
                if c.delta.content and got is None:
                    got = time.thread_time() - start
        assert got is not None
        return got

    try:
        if together:
            out = list(await asyncio.gather(*(one(b, None) for b in bodies)))
        else:
            for b in bodies:
                out.append(await one(b, None))
    finally:
        await client.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--head-cost-ms", type=float, default=0.0)
    ap.add_argument("--tail-ms", type=float, default=30.0)
    args = ap.parse_args()
    import server_load as sl

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = multiprocessing.get_context("spawn").Process(
        target=_stub, args=(port, args.head_cost_ms / 1e3, args.tail_ms / 1e3), daemon=True)
    proc.start()
    time.sleep(1.0)
    url = f"http://127.0.0.1:{port}"
    ns = argparse.Namespace(batch_tokens=48, kinds=4)
    bodies = [sl.batch_body(i, ns) for i in range(8)]
    try:
        asyncio.run(sl.lone_and_concurrent(url, bodies, together=False))
        for k in range(args.rounds):
            row = []
            for warm in (False, True):
                lone = asyncio.run(sl.lone_and_concurrent(url, bodies, False, None, warm))
                conc = asyncio.run(sl.lone_and_concurrent(url, bodies, True, None, warm))
                lo = statistics.median(r["ttft"] for r in lone)
                co = statistics.median(r["ttft"] for r in conc)
                spread = max(r["t0"] for r in conc) - min(r["t0"] for r in conc)
                row.append(f"{'warm' if warm else 'openai'} {lo * 1e3:.2f}/{co * 1e3:.2f} ms "
                           f"x{co / lo:.2f} (sends spread {spread * 1e3:.1f} ms)")
            lone_cpu = asyncio.run(_cpu_ttfts(url, bodies, False))
            conc_cpu = asyncio.run(_cpu_ttfts(url, bodies, True))
            lc, cc = statistics.median(lone_cpu), statistics.median(conc_cpu)
            row.append(f"client CPU ttft {lc * 1e3:.2f}/{cc * 1e3:.2f} ms x{cc / lc:.2f}")
            print(f"round {k}: " + "; ".join(row) + f"  load {os.getloadavg()[0]:.1f}",
                  flush=True)
    finally:
        proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
