#!/usr/bin/env python3
"""Load test of ``formcast serve``: concurrent OpenAI-client requests against a real server on
the bundled SmolLM2-135M-Instruct (llama.cpp, one thread), checking that nothing is lost or
mixed up.

The script starts ``python -m formcast serve`` in a subprocess on a free 127.0.0.1 port, then
sends ``--requests`` chat requests at once with ``openai.AsyncOpenAI``:

* mixed schemas (``--kinds`` shapes: objects, arrays, enums, patterns), each carrying the
  request's own marker as a ``const`` (``{"req": {"const": "r17"}}``), so a reply given to the
  wrong request fails its schema;
* every third request streamed (``stream_options.include_usage``), every eighth abandoned after
  three chunks (the client closes the stream: the server must cancel that generation);
* greedy decoding, ``--max-tokens`` per request.

Checks (the script exits 1 when one fails): every request not abandoned is answered; each reply
with ``finish_reason "stop"`` is valid for ITS schema (``jsonschema``); a reply cut by
``max_tokens`` says ``"length"`` and ``formcast.complete: false``; ids are unique and a stream
has one id; the server counts the abandoned requests as cancelled and ends with an empty queue.

Reported: latency p50 / p99 / max (request sent -> last byte), time to first content chunk for
streams, throughput (requests/s and output tokens/s over the whole run), the largest queue
depth seen on ``GET /metrics``.

Usage::

    python benchmarks/server_load.py                       # 32 requests (docs/benchmarks_server.md)
    python benchmarks/server_load.py --requests 8 --json out.json

Needs the server extra and the bundled model (``pip install -e '.[server]'``,
``scripts/install_model_extras.sh``) and the ``openai`` client (the test extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

import openai

import jsonschema


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def schema_for(i: int, kinds: int) -> dict[str, Any]:
    """Request ``i``'s schema: one of ``kinds`` shapes, with the request's marker as a const."""
    marker = {"const": f"r{i}"}
    shapes: list[dict[str, Any]] = [
        {"type": "object",
         "properties": {"req": marker, "name": {"type": "string", "maxLength": 24},
                        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
         "required": ["req", "name", "age"], "additionalProperties": False},
        {"type": "object", "properties": {"req": marker, "colors": {
            "type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}},
         "required": ["req", "colors"], "additionalProperties": False},
        {"type": "object", "properties": {"req": marker, "date": {
            "type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}},
         "required": ["req", "date"], "additionalProperties": False},
        {"type": "object", "properties": {"req": marker, "ok": {"type": "boolean"},
                                          "score": {"type": "number", "minimum": 0, "maximum": 1}},
         "required": ["req", "ok", "score"], "additionalProperties": False},
    ]
    return shapes[i % min(kinds, len(shapes))]


PROMPTS = [
    "Extract the person: Ada Lovelace, 36.",
    "Which colors are in the French flag?",
    "When did Apollo 11 land on the Moon?",
    "Is the sky blue? Give a confidence score.",
]


def scrape(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            key, _, value = line.rpartition(" ")
            if key == name:
                return float(value)
    return 0.0


async def one(client: Any, i: int, args: argparse.Namespace) -> dict[str, Any]:
    schema = schema_for(i, args.kinds)
    kwargs: dict[str, Any] = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
        "temperature": 0,
        "max_tokens": args.max_tokens,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}},
    }
    out: dict[str, Any] = {"i": i, "schema": schema}
    t0 = time.perf_counter()
    if i % 8 == 7:
        stream = await client.chat.completions.create(stream=True, **kwargs)
        seen = 0
        async for _chunk in stream:
            seen += 1
            if seen == 3:
                break
        await stream.close()
        out.update(kind="abandoned", latency=time.perf_counter() - t0)
        return out
    if i % 3 == 2:
        stream = await client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kwargs
        )
        ids, text, finish, ext, tokens, ttft = set(), "", None, None, 0, None
        async for chunk in stream:
            ids.add(chunk.id)
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
            for c in chunk.choices:
                if c.delta.content and ttft is None:
                    ttft = time.perf_counter() - t0
                text += c.delta.content or ""
                if c.finish_reason:
                    finish, ext = c.finish_reason, (c.model_extra or {}).get("formcast")
        out.update(kind="stream", ids=sorted(ids), text=text, finish=finish, ext=ext,
                   tokens=tokens, ttft=ttft, latency=time.perf_counter() - t0)
        return out
    r = await client.chat.completions.create(**kwargs)
    c = r.choices[0]
    out.update(kind="plain", ids=[r.id], text=c.message.content, finish=c.finish_reason,
               ext=(c.model_extra or {}).get("formcast"), tokens=r.usage.completion_tokens,
               latency=time.perf_counter() - t0)
    return out


async def run_load(url: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], float, int]:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    peak = 0
    stop = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            depth = await asyncio.to_thread(scrape, url, "formcast_queue_depth")
            peak = max(peak, int(depth))
            await asyncio.sleep(0.25)

    watcher = asyncio.create_task(watch())
    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(client, i, args) for i in range(args.requests)),
                                   return_exceptions=True)
    wall = time.perf_counter() - t0
    stop.set()
    await watcher
    await client.close()
    out: list[dict[str, Any]] = []
    for i, r in enumerate(results):
        out.append(r if isinstance(r, dict) else {"i": i, "kind": "error", "error": repr(r)})
    return out, wall, peak


def check(results: list[dict[str, Any]], url: str) -> list[str]:
    """The failed checks (empty: nothing lost, nothing mixed up)."""
    problems = []
    seen_ids: list[str] = []
    for r in results:
        i = r["i"]
        if r["kind"] == "error":
            problems.append(f"request {i} lost: {r['error']}")
            continue
        if r["kind"] == "abandoned":
            continue
        if len(r["ids"]) != 1:
            problems.append(f"request {i}: {len(r['ids'])} ids in one response")
        seen_ids += r["ids"]
        if r["finish"] == "stop":
            try:
                jsonschema.validate(json.loads(r["text"]), r["schema"])
            except (ValueError, jsonschema.ValidationError) as exc:
                problems.append(f"request {i}: reply not valid for ITS schema: {exc}")
            if not (r["ext"] or {}).get("complete"):
                problems.append(f"request {i}: stop without formcast.complete")
        elif r["finish"] == "length":
            if (r["ext"] or {}).get("complete") is not False:
                problems.append(f"request {i}: a truncated reply not marked incomplete")
        else:
            problems.append(f"request {i}: finish_reason {r['finish']!r}")
    if len(set(seen_ids)) != len(seen_ids):
        problems.append("duplicate response ids")
    abandoned = sum(r["kind"] == "abandoned" for r in results)
    cancelled = scrape(url, 'formcast_generations_total{finish_reason="cancelled"}')
    if cancelled < 1 and abandoned:
        problems.append(f"{abandoned} abandoned requests, none cancelled by the server")
    if scrape(url, "formcast_queue_depth") != 0:
        problems.append("the queue is not empty after the run")
    return problems


def pct(values: list[float], q: float) -> float:
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--kinds", type=int, default=4, help="schema shapes used (1-4)")
    p.add_argument("--json", default=None, help="write the figures to this file")
    args = p.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "formcast", "serve", "--model", "smollm2", "--port", str(port),
         "--max-queue", str(args.requests + 4), "--compile-workers", "1",
         "--timeout", "600", "--log-level", "warning"],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    print("the server did not start", file=sys.stderr)
                    return 1
                time.sleep(0.2)
        results, wall, peak = asyncio.run(run_load(url, args))
        problems = check(results, url)
        mask = scrape(url, "formcast_mask_seconds_sum") / max(1.0, scrape(
            url, "formcast_mask_seconds_count"))
        decode = scrape(url, "formcast_decode_step_seconds_sum") / max(1.0, scrape(
            url, "formcast_decode_step_seconds_count"))
        cancelled = scrape(url, 'formcast_generations_total{finish_reason="cancelled"}')
    finally:
        server.terminate()
        server.wait(30)

    done = [r for r in results if r["kind"] in ("plain", "stream")]
    lat = [r["latency"] for r in done]
    ttft = [r["ttft"] for r in done if r["kind"] == "stream" and r["ttft"] is not None]
    tokens = sum(r["tokens"] for r in done)
    figures = {
        "requests": args.requests,
        "answered": len(done),
        "streamed": sum(r["kind"] == "stream" for r in done),
        "abandoned": sum(r["kind"] == "abandoned" for r in results),
        "cancelled_by_server": cancelled,
        "finish_stop": sum(r["finish"] == "stop" for r in done),
        "finish_length": sum(r["finish"] == "length" for r in done),
        "wall_s": wall,
        "latency_p50_s": statistics.median(lat) if lat else None,
        "latency_p99_s": pct(lat, 99) if lat else None,
        "latency_max_s": max(lat) if lat else None,
        "stream_ttft_p50_s": statistics.median(ttft) if ttft else None,
        "throughput_req_s": len(done) / wall,
        "throughput_tok_s": tokens / wall,
        "output_tokens": tokens,
        "peak_queue_depth": peak,
        "mask_step_mean_us": mask * 1e6,
        "decode_step_mean_ms": decode * 1e3,
        "problems": problems,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
    }
    print(f"{figures['answered']}/{args.requests - figures['abandoned']} answered "
          f"({figures['streamed']} streamed), {figures['abandoned']} abandoned "
          f"({int(cancelled)} cancelled by the server); finish stop {figures['finish_stop']}, "
          f"length {figures['finish_length']}")
    print(f"latency p50 {figures['latency_p50_s']:.2f} s, p99 {figures['latency_p99_s']:.2f} s, "
          f"max {figures['latency_max_s']:.2f} s; stream first chunk p50 "
          f"{figures['stream_ttft_p50_s'] or float('nan'):.2f} s")
    print(f"throughput {figures['throughput_req_s']:.2f} req/s, "
          f"{figures['throughput_tok_s']:.1f} output tok/s over {wall:.1f} s; peak queue "
          f"{peak}; mask {figures['mask_step_mean_us']:.0f} us/step, decode "
          f"{figures['decode_step_mean_ms']:.1f} ms/step")
    print("checks: " + ("nothing lost or mixed up" if not problems else "; ".join(problems)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
