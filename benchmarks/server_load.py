#!/usr/bin/env python3
"""Load test of ``formcast serve``: concurrent OpenAI-client requests against a real server on
the bundled SmolLM2-135M-Instruct (llama.cpp), measuring what continuous batching gives and
checking that nothing is lost or mixed up.

The script starts ``python -m formcast serve`` in a subprocess on a free 127.0.0.1 port with
the server's defaults (continuous batching, ``--max-batch 8``, the machine's cores; ``--threads
N`` passes ``--threads N``), then runs two parts.

**Batching** (issue #30's targets), ``--rounds`` rounds after a warm-up (every schema compiled,
every prompt seen once), each round interleaving three measurements of the same 8 streamed
greedy requests (``--batch`` of them, schema replies of ``--batch-tokens`` tokens at most):

* ``lone``: each request alone, one after another: time to first token (request sent -> first
  content chunk), p50 over the 8;
* ``model``: the model's own batched decode of the same work in this process, beside the
  server: a :class:`~formcast.model.llama_cpp_batched.LlamaCppBatchedDecoder` (same file, same
  threads, 8 slots) prefills 8 prompts of the requests' prompt lengths in one call, then decodes
  one greedy token per row per call until each row has produced as many tokens as its request
  did (the server idles meanwhile).  Output tokens / wall time;
* ``8 concurrent``: the 8 requests at once: time to first token p50, output tokens / wall time
  (first request sent -> last response ended).

Reported per round and as the median over rounds: ``ttft ratio`` = concurrent p50 / lone p50
(target <= 2) and ``throughput ratio`` = concurrent / model (target >= 0.8).  Beside the first
content chunk (which, with batching, may be the text the schema forces at the start, streamed
before any model call): the time to the first content past that forced start (the model's
first choice the client sees; the forced start computed here from the schema), p50 lone and
concurrent; the server's own time to first token (submit -> first token taken, the mean of
``formcast_time_to_first_token_seconds``); model calls per request (its share of
``formcast_batch_rows``) lone and concurrent; the load average.  The server runs the formcast
found through ``PYTHONPATH`` (printed first): run another checkout's with
``PYTHONPATH=/that/checkout/src``.

Other clients for the same requests, each round, beside the default mode (whose numbers keep
their meaning): ``--warm-pool`` (the openai client with a connection open for each request
first), ``--raw-client`` (bytes made and connections opened before the clock starts: the
server's share), and ``--client-processes``: one client *process* per request, each with the
openai SDK's own (sync) client and its connection kept alive, the 8 released together by a
barrier, lone = each process alone in turn.  Concurrent users are separate processes (each
builds its own request); the default mode's one ``AsyncOpenAI`` builds the 8 requests and
parses the 8 streams one after another in one Python thread, which lands in its concurrent
ttft.  On this 2-core machine the client processes share the cores with the server (their
sends spread over 10-60 ms at load 6-10).

**Load**: ``--requests`` chat requests at once with ``openai.AsyncOpenAI``:

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

    python benchmarks/server_load.py --threads 1           # docs/benchmarks_server.md
    python benchmarks/server_load.py --requests 8 --rounds 1 --json out.json
    python benchmarks/server_load.py --threads 1 --requests 0 --rounds 3 --warm-pool \
        --raw-client --client-processes                    # every client mode, side by side

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

import numpy as np
import openai

import jsonschema

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def schema_for(i: int, kinds: int) -> dict[str, Any]:
    """Request ``i``'s schema: one of ``kinds`` shapes, with the request's marker as a const."""
    marker = {"const": f"r{i}"}
    shapes: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {
                "req": marker,
                "name": {"type": "string", "maxLength": 24},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
            },
            "required": ["req", "name", "age"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "req": marker,
                "colors": {
                    "type": "array",
                    "items": {"enum": ["red", "green", "blue"]},
                    "maxItems": 3,
                },
            },
            "required": ["req", "colors"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "req": marker,
                "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
            },
            "required": ["req", "date"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "req": marker,
                "ok": {"type": "boolean"},
                "score": {"type": "number", "minimum": 0, "maximum": 1},
            },
            "required": ["req", "ok", "score"],
            "additionalProperties": False,
        },
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
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": f"s{i}", "schema": schema, "strict": True},
        },
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
        out.update(
            kind="stream",
            ids=sorted(ids),
            text=text,
            finish=finish,
            ext=ext,
            tokens=tokens,
            ttft=ttft,
            latency=time.perf_counter() - t0,
        )
        return out
    r = await client.chat.completions.create(**kwargs)
    c = r.choices[0]
    out.update(
        kind="plain",
        ids=[r.id],
        text=c.message.content,
        finish=c.finish_reason,
        ext=(c.model_extra or {}).get("formcast"),
        tokens=r.usage.completion_tokens,
        latency=time.perf_counter() - t0,
    )
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
    results = await asyncio.gather(
        *(one(client, i, args) for i in range(args.requests)), return_exceptions=True
    )
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


def batch_body(i: int, args: argparse.Namespace, case: int | None = None) -> dict[str, Any]:
    """Request ``i`` of the batching part: a schema reply, greedy, streamed with usage
    (``case``: the number in its prompt, ``i`` by default)."""
    case = i if case is None else case
    return {
        "model": "smollm2",
        "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)] + f" (case {case})"}],
        "temperature": 0,
        "max_tokens": args.batch_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": f"b{i}", "schema": schema_for(i, args.kinds), "strict": True},
        },
    }


async def streamed(client: Any, body: dict[str, Any], forced: str = "") -> dict[str, Any]:
    """One streamed request: time to first content, to the first content past ``forced``
    (the text its schema forces at the start: what the model chose first), end time, usage,
    text."""
    t0 = time.perf_counter()
    ttft = chosen = None
    text = first = ""
    usage = None
    stream = await client.chat.completions.create(**body)
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                    first = c.delta.content
                text += c.delta.content
                if chosen is None and len(text) > len(forced):
                    chosen = time.perf_counter() - t0
    assert usage is not None, "no usage chunk"
    end = time.perf_counter()
    return {
        "t0": t0,
        "end": end,
        "ttft": ttft,
        "chosen": chosen if chosen is not None else end - t0,
        "first_chunk": first,
        "text": text,
        "prompt_tokens": usage.prompt_tokens,
        "tokens": usage.completion_tokens,
    }


async def lone_and_concurrent(
    url: str,
    bodies: list[dict[str, Any]],
    together: bool,
    forced: list[str] | None = None,
    warm: bool = False,
) -> list[dict[str, Any]]:
    """The requests one after another (``together=False``) or all at once, with a new
    ``AsyncOpenAI`` client.  ``warm``: its connection pool is filled first, as an application
    that keeps its client has it -- one open connection before each lone request (``GET
    /v1/models`` on it), as many as requests before the burst (that many of those at once) --
    so that neither side's time holds a TCP connect.  Without it (``--fresh-connections``)
    the lone requests after the first ride the connection kept alive from the one before,
    while each of the concurrent ones opens its own: connects that only the concurrent side
    pays (client and server, on the same cores)."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    starts = forced if forced is not None else [""] * len(bodies)
    try:
        if together:
            if warm:
                await asyncio.gather(*(client.models.list() for _ in bodies))
            return list(
                await asyncio.gather(*(streamed(client, b, f) for b, f in zip(bodies, starts)))
            )
        out = []
        for b, f in zip(bodies, starts):
            if warm:
                await client.models.list()
            out.append(await streamed(client, b, f))
        return out
    finally:
        await client.close()


class _RawConnection:
    """A connection opened before its request is sent, and the request's bytes made before
    (h11, no client library): what :func:`raw_streamed` times is the server's part."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        import h11

        self.host, _, port = url.removeprefix("http://").partition(":")
        self.port = int(port)
        self.conn = h11.Connection(h11.CLIENT)
        payload = json.dumps(body).encode()
        headers = [
            ("Host", f"{self.host}:{self.port}"),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(payload))),
            ("Connection", "close"),
        ]
        self.request = (
            self.conn.send(
                h11.Request(method="POST", target="/v1/chat/completions", headers=headers)
            )
            + self.conn.send(h11.Data(data=payload))
            + self.conn.send(h11.EndOfMessage())
        )
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)


async def raw_streamed(c: _RawConnection, forced: str = "") -> dict[str, Any]:
    """:func:`streamed` over a connection opened beforehand with the request's bytes made
    beforehand: ``t0`` is taken just before the bytes are written, so the client's own work
    before the send (building the request, connecting) is not in the times."""
    import h11

    assert c.reader is not None
    assert c.writer is not None
    t0 = time.perf_counter()
    c.writer.write(c.request)
    ttft = chosen = None
    text = first = ""
    usage: dict[str, Any] | None = None
    buf = b""
    while True:
        event = c.conn.next_event()
        if event is h11.NEED_DATA:
            c.conn.receive_data(await c.reader.read(65536))
            continue
        if isinstance(event, h11.Response):
            assert event.status_code == 200, f"status {event.status_code}"
        elif isinstance(event, h11.Data):
            buf = (buf + bytes(event.data)).replace(b"\r\n", b"\n")
            while b"\n\n" in buf:
                sse, buf = buf.split(b"\n\n", 1)
                for line in sse.split(b"\n"):
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    obj = json.loads(line[6:])
                    if obj.get("usage"):
                        usage = obj["usage"]
                    for ch in obj.get("choices") or ():
                        piece = (ch.get("delta") or {}).get("content")
                        if piece:
                            if ttft is None:
                                ttft = time.perf_counter() - t0
                                first = piece
                            text += piece
                            if chosen is None and len(text) > len(forced):
                                chosen = time.perf_counter() - t0
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            break
    end = time.perf_counter()
    c.writer.close()
    assert usage is not None, "no usage chunk"
    return {
        "t0": t0,
        "end": end,
        "ttft": ttft,
        "chosen": chosen if chosen is not None else end - t0,
        "first_chunk": first,
        "text": text,
        "prompt_tokens": usage["prompt_tokens"],
        "tokens": usage["completion_tokens"],
    }


async def raw_lone_and_concurrent(
    url: str, bodies: list[dict[str, Any]], together: bool, forced: list[str]
) -> list[dict[str, Any]]:
    """:func:`lone_and_concurrent` with :func:`raw_streamed`: every connection is opened
    first; together, the 8 requests' bytes are then written back to back (microseconds apart)."""
    conns = [_RawConnection(url, b) for b in bodies]
    await asyncio.gather(*(c.open() for c in conns))
    if together:
        return list(await asyncio.gather(*(raw_streamed(c, f) for c, f in zip(conns, forced))))
    return [await raw_streamed(c, f) for c, f in zip(conns, forced)]


def _client_process(url: str, conn: Any, barrier: Any) -> None:
    """One client process of ``--client-processes`` (a user of its own, with the real openai
    SDK: a sync ``openai.OpenAI`` kept for the whole run, its connection kept alive between
    requests).  Commands from ``conn``: ``("warm", body)`` sends ``body`` once untimed (its
    connection opened); ``("lone", body, forced)`` sends it now; ``("together", body,
    forced)`` sends it when ``barrier`` releases (every client process and the parent waiting
    on it); ``None`` ends.  Answers each timed request with :func:`streamed`'s dict (``t0``
    taken at the ``create`` call, after the barrier)."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    try:
        while True:
            command = conn.recv()
            if command is None:
                return
            kind, body = command[0], command[1]
            forced = command[2] if len(command) > 2 else ""
            if kind == "together":
                barrier.wait()
            conn.send(_sync_streamed(client, body, forced))
    finally:
        client.close()


def _sync_streamed(client: Any, body: dict[str, Any], forced: str) -> dict[str, Any]:
    """:func:`streamed` with the sync openai client."""
    t0 = time.perf_counter()
    ttft = chosen = None
    text = first = ""
    usage = None
    for chunk in client.chat.completions.create(**body):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                    first = c.delta.content
                text += c.delta.content
                if chosen is None and len(text) > len(forced):
                    chosen = time.perf_counter() - t0
    end = time.perf_counter()
    return {
        "t0": t0,
        "end": end,
        "ttft": ttft,
        "chosen": chosen if chosen is not None else end - t0,
        "first_chunk": first,
        "text": text,
        "prompt_tokens": usage.prompt_tokens if usage is not None else 0,
        "tokens": usage.completion_tokens if usage is not None else 0,
    }


class ClientProcesses:
    """``n`` client processes (:func:`_client_process`, spawned: no llama.cpp state
    inherited), started once and kept for every round: each is one user with the openai SDK,
    as concurrent users are (separate processes, each building its own request), where the
    default mode's 8 requests are built one after another by one client in one process.
    Here the client processes share this machine's cores with the server."""

    def __init__(self, url: str, n: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.barrier = ctx.Barrier(n + 1)
        self.pipes = []
        self.procs = []
        for _ in range(n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_client_process, args=(url, child, self.barrier),
                               daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)

    def warm(self, bodies: list[dict[str, Any]]) -> None:
        """Each process sends its body once (untimed): connection open, SDK warm."""
        for conn, b in zip(self.pipes, bodies):
            conn.send(("warm", b))
        for conn in self.pipes:
            conn.recv()

    def lone(self, bodies: list[dict[str, Any]], forced: list[str]) -> list[dict[str, Any]]:
        """Process k sends body k alone, one process after another."""
        out = []
        for conn, b, f in zip(self.pipes, bodies, forced):
            conn.send(("lone", b, f))
            out.append(conn.recv())
        return out

    def together(self, bodies: list[dict[str, Any]], forced: list[str]) -> list[dict[str, Any]]:
        """Every process sends its body when the barrier releases them all at once."""
        for conn, b, f in zip(self.pipes, bodies, forced):
            conn.send(("together", b, f))
        time.sleep(0.05)  # let every process reach the barrier
        self.barrier.wait()
        return [conn.recv() for conn in self.pipes]

    def close(self) -> None:
        for conn in self.pipes:
            conn.send(None)
        for proc in self.procs:
            proc.join(10)


def forced_start(model: Any, schema: dict[str, Any]) -> str:
    """The text ``schema`` forces at the start of a reply (as the server compiles a strict
    ``response_format``): every reply starts with it, whichever tokens spell it."""
    from formcast.index.compiler import GrammarCompiler
    from formcast.index.spec import JsonSchemaSpec
    from formcast.runtime.matcher import GrammarMatcher
    from formcast.server.constraints import schema_options

    options = schema_options(True, compile_timeout_s=600, allow_extra_properties=False)
    compiled = GrammarCompiler(model.vocab).compile(JsonSchemaSpec.of(schema, options))
    return GrammarMatcher(compiled).find_jump_forward_bytes().decode("utf-8", errors="ignore")


def server_ttft(url: str) -> tuple[float, float]:
    """``(sum, count)`` of the server's time to first token (submit -> first token taken)."""
    return (
        scrape(url, "formcast_time_to_first_token_seconds_sum"),
        scrape(url, "formcast_time_to_first_token_seconds_count"),
    )


def model_reference(
    decoder: Any, prompt_lens: list[int], out_lens: list[int], filler: list[int]
) -> tuple[float, int]:
    """The model's own batched decode of the same work: ``(wall seconds, output tokens)``."""
    decoder.reset()
    prompts = [(filler * (n // len(filler) + 1))[:n] for n in prompt_lens]
    t0 = time.perf_counter()
    rows = decoder.decode(list(enumerate(prompts)))
    made = [1] * len(prompts)  # the prefill's logits give each row its first token
    live = [s for s in range(len(prompts)) if made[s] < out_lens[s]]
    last = {s: int(np.argmax(rows[s])) for s in range(len(prompts))}
    while live:
        rows = decoder.decode([(s, [last[s]]) for s in live])
        for k, s in enumerate(live):
            last[s] = int(np.argmax(rows[k]))
            made[s] += 1
        live = [s for s in live if made[s] < out_lens[s]]
    return time.perf_counter() - t0, sum(out_lens)


def call_floor(decoder: Any, n_rows: int, filler: list[int], reps: int = 9) -> dict[str, float]:
    """Thread time of one model call of ``n_rows`` rows x 1 token against one of 1 row x 1
    token (each row after a 40-token prompt), median of ``reps``: with every prompt already
    cached, the first tokens of ``n_rows`` simultaneous requests cost at least the former, a
    lone request's the latter."""
    prompt = (filler * (40 // len(filler) + 1))[:40]

    def one_call(rows: int) -> float:
        times = []
        for _ in range(reps):
            decoder.reset()
            decoder.decode([(s, prompt) for s in range(n_rows)])
            t0 = time.thread_time()
            decoder.decode([(s, [prompt[-1]]) for s in range(rows)])
            times.append(time.thread_time() - t0)
        return statistics.median(times)

    lone, together = one_call(1), one_call(n_rows)
    print(
        f"model call floor: {n_rows} rows x 1 token {together * 1e3:.1f} ms, 1 row x 1 token "
        f"{lone * 1e3:.1f} ms (x{together / lone:.2f}, thread time)",
        flush=True,
    )
    return {"rows_call_ms": together * 1e3, "one_row_call_ms": lone * 1e3,
            "ratio": together / lone}  # fmt: skip


def prefill_floor(
    decoder: Any, n_rows: int, n_tokens: int, filler: list[int], reps: int = 5
) -> dict[str, float]:
    """Thread time of the model's own prefill of ``n_rows`` prompts of ``n_tokens`` tokens in
    one call against one such prompt (empty caches), median of ``reps``: what the first
    *model* tokens of that many requests arriving together cost at least when nothing of
    their prompts is cached (the first content chunk, the forced start, needs no model call
    at all)."""
    prompt = (filler * (n_tokens // len(filler) + 1))[:n_tokens]

    def one_call(rows: int) -> float:
        times = []
        for _ in range(reps):
            decoder.reset()
            t0 = time.thread_time()
            decoder.decode([(s, prompt) for s in range(rows)])
            times.append(time.thread_time() - t0)
        return statistics.median(times)

    lone, together = one_call(1), one_call(n_rows)
    print(
        f"model prefill floor: {n_rows} prompts x {n_tokens} tokens in one call "
        f"{together * 1e3:.1f} ms, 1 prompt {lone * 1e3:.1f} ms (x{together / lone:.2f}, "
        "thread time)",
        flush=True,
    )
    return {"rows_prefill_ms": together * 1e3, "one_row_prefill_ms": lone * 1e3,
            "ratio": together / lone, "tokens": n_tokens}  # fmt: skip


def batching_part(url: str, args: argparse.Namespace, threads: int) -> dict[str, Any]:
    from formcast.generation.inputs import _prompt_ids
    from formcast.model.llama_cpp_batched import LlamaCppBatchedDecoder
    from formcast.model.loading import load_model

    bodies = [batch_body(i, args) for i in range(args.batch)]
    asyncio.run(lone_and_concurrent(url, bodies, together=False))  # warm-up: compiles, caches
    model = load_model("smollm2", n_threads=threads)
    decoder = LlamaCppBatchedDecoder(model, n_slots=args.batch, n_threads=threads)
    filler = _prompt_ids(model, bodies[0]["messages"], chat=True, system=None)
    forced = [forced_start(model, schema_for(i, args.kinds)) for i in range(args.batch)]
    rounds = []
    procs = None
    if args.client_processes:
        procs = ClientProcesses(url, args.batch)
        procs.warm(bodies)
    try:
        floor: dict[str, Any] = dict(call_floor(decoder, args.batch, filler))
        floor["prefill"] = prefill_floor(decoder, args.batch, len(filler), filler)
        for k in range(args.rounds):
            lone_bodies = conc_bodies = bodies
            if args.fresh_prompts:  # prompts no request sent before: no whole-prompt cache hit
                lone_bodies = [
                    batch_body(i, args, 1000 * (2 * k + 1) + i) for i in range(args.batch)
                ]
                conc_bodies = [
                    batch_body(i, args, 1000 * (2 * k + 2) + i) for i in range(args.batch)
                ]
            rows0 = scrape(url, "formcast_batch_rows")
            evaluated0 = scrape(url, "formcast_batch_prompt_tokens_evaluated")
            st0 = server_ttft(url)
            lone = asyncio.run(lone_and_concurrent(url, lone_bodies, False, forced))
            st1 = server_ttft(url)
            lone_calls = (scrape(url, "formcast_batch_rows") - rows0) / len(lone)
            lone_prefill = (
                scrape(url, "formcast_batch_prompt_tokens_evaluated") - evaluated0
            ) / len(lone)
            ref_s, ref_tokens = model_reference(
                decoder,
                [r["prompt_tokens"] for r in lone],
                [max(1, r["tokens"]) for r in lone],
                filler,
            )
            rows1 = scrape(url, "formcast_batch_rows")
            st2 = server_ttft(url)
            conc = asyncio.run(lone_and_concurrent(url, conc_bodies, True, forced))
            st3 = server_ttft(url)
            conc_calls = (scrape(url, "formcast_batch_rows") - rows1) / len(conc)
            raw: dict[str, Any] = {}
            if args.warm_pool:  # the same, every request on a connection opened before
                warm_lone = asyncio.run(lone_and_concurrent(url, lone_bodies, False, forced, True))
                warm_conc = asyncio.run(lone_and_concurrent(url, conc_bodies, True, forced, True))
                wl = statistics.median(r["ttft"] for r in warm_lone)
                wc = statistics.median(r["ttft"] for r in warm_conc)
                raw.update(
                    warm_lone_ttft_p50_s=wl,
                    warm_concurrent_ttft_p50_s=wc,
                    warm_ttft_ratio=wc / wl,
                    warm_concurrent_send_spread_s=max(r["t0"] for r in warm_conc)
                    - min(r["t0"] for r in warm_conc),
                )
            if args.raw_client:  # the same requests, timed from the bytes' send
                raw_lone = asyncio.run(raw_lone_and_concurrent(url, lone_bodies, False, forced))
                raw_conc = asyncio.run(raw_lone_and_concurrent(url, conc_bodies, True, forced))
                rl = statistics.median(r["ttft"] for r in raw_lone)
                rc = statistics.median(r["ttft"] for r in raw_conc)
                raw |= {
                    "raw_lone_ttft_p50_s": rl,
                    "raw_concurrent_ttft_p50_s": rc,
                    "raw_ttft_ratio": rc / rl,
                    "raw_concurrent_send_spread_s": max(r["t0"] for r in raw_conc)
                    - min(r["t0"] for r in raw_conc),
                    "raw_lone_first_chosen_p50_s": statistics.median(r["chosen"] for r in raw_lone),
                    "raw_concurrent_first_chosen_p50_s": statistics.median(
                        r["chosen"] for r in raw_conc
                    ),
                }
            if procs is not None:  # the same, one client process per request
                proc_lone = procs.lone(lone_bodies, forced)
                proc_conc = procs.together(conc_bodies, forced)
                pl = statistics.median(r["ttft"] for r in proc_lone)
                pc = statistics.median(r["ttft"] for r in proc_conc)
                raw |= {
                    "proc_lone_ttft_p50_s": pl,
                    "proc_concurrent_ttft_p50_s": pc,
                    "proc_ttft_ratio": pc / pl,
                    "proc_concurrent_send_spread_s": max(r["t0"] for r in proc_conc)
                    - min(r["t0"] for r in proc_conc),
                    "proc_concurrent_ttft_max_s": max(r["ttft"] for r in proc_conc),
                }
            send_spread = max(r["t0"] for r in conc) - min(r["t0"] for r in conc)
            wall = max(r["end"] for r in conc) - min(r["t0"] for r in conc)
            lone_ttft = statistics.median(r["ttft"] for r in lone)
            conc_ttft = statistics.median(r["ttft"] for r in conc)
            lone_chosen = statistics.median(r["chosen"] for r in lone)
            conc_chosen = statistics.median(r["chosen"] for r in conc)
            lone_server = (st1[0] - st0[0]) / max(1.0, st1[1] - st0[1])
            conc_server = (st3[0] - st2[0]) / max(1.0, st3[1] - st2[1])
            tok_s = sum(r["tokens"] for r in conc) / wall
            ref_tok_s = ref_tokens / ref_s
            same = sum(a["text"] == b["text"] for a, b in zip(lone, conc))
            rounds.append(
                {
                    "lone_ttft_p50_s": lone_ttft,
                    "concurrent_ttft_p50_s": conc_ttft,
                    "concurrent_ttft_max_s": max(r["ttft"] for r in conc),
                    "ttft_ratio": conc_ttft / lone_ttft,
                    "lone_total_s": sum(r["end"] - r["t0"] for r in lone),
                    "concurrent_wall_s": wall,
                    "concurrent_tok_s": tok_s,
                    "model_batched_tok_s": ref_tok_s,
                    "throughput_ratio": tok_s / ref_tok_s,
                    "output_tokens": sum(r["tokens"] for r in conc),
                    "same_text_as_lone": same,
                    "lone_model_calls_per_request": lone_calls,
                    "concurrent_model_calls_per_request": conc_calls,
                    "lone_first_chosen_p50_s": lone_chosen,
                    "concurrent_first_chosen_p50_s": conc_chosen,
                    "first_chosen_ratio": conc_chosen / lone_chosen,
                    "lone_server_first_token_mean_s": lone_server,
                    "concurrent_server_first_token_mean_s": conc_server,
                    "first_token_server_ratio": conc_server / lone_server if lone_server else None,
                    "first_chunk": lone[0]["first_chunk"],
                    "forced_start": forced[0],
                    "load_average": os.getloadavg()[0],
                    "concurrent_send_spread_s": send_spread,
                    **raw,
                    "lone_prompt_tokens_evaluated_per_request": lone_prefill,
                    "lone_prompt_tokens_per_request": statistics.mean(
                        r["prompt_tokens"] for r in lone
                    ),
                }
            )
            r = rounds[-1]
            print(
                f"round {len(rounds)}: ttft p50 lone {lone_ttft * 1e3:.0f} ms, 8 concurrent "
                f"{conc_ttft * 1e3:.0f} ms (x{r['ttft_ratio']:.2f}); throughput 8 concurrent "
                f"{tok_s:.1f} tok/s, model batched {ref_tok_s:.1f} tok/s "
                f"(x{r['throughput_ratio']:.2f}); lone one after another "
                f"{r['lone_total_s']:.1f} s vs {wall:.1f} s together; "
                f"{same}/{len(bodies)} texts as alone; lone: {lone_calls:.1f} model calls, "
                f"{lone_prefill:.1f} of {r['lone_prompt_tokens_per_request']:.1f} prompt "
                "tokens evaluated per request",
                flush=True,
            )
            fs = r["first_token_server_ratio"]
            print(
                f"  first content past the forced start {forced[0]!r} (the model's first "
                f"choice seen): p50 lone {lone_chosen * 1e3:.0f} ms, 8 concurrent "
                f"{conc_chosen * 1e3:.0f} ms (x{r['first_chosen_ratio']:.2f}); server's first "
                f"token (submit -> first token taken), mean: lone {lone_server * 1e3:.0f} ms, "
                f"8 concurrent {conc_server * 1e3:.0f} ms (x{fs or float('nan'):.2f}); model "
                f"calls per request: lone {lone_calls:.1f}, concurrent {conc_calls:.1f}; first "
                f"chunk {r['first_chunk']!r}; load average {r['load_average']:.1f}",
                flush=True,
            )
            if args.warm_pool:
                print(
                    f"  openai client, warm pool (every request on a connection opened before; "
                    f"the 8 sent within {raw['warm_concurrent_send_spread_s'] * 1e3:.0f} ms): "
                    f"ttft p50 lone {raw['warm_lone_ttft_p50_s'] * 1e3:.0f} ms, 8 concurrent "
                    f"{raw['warm_concurrent_ttft_p50_s'] * 1e3:.0f} ms "
                    f"(x{raw['warm_ttft_ratio']:.2f})",
                    flush=True,
                )
            if procs is not None:
                print(
                    f"  {args.batch} client processes (openai SDK each, connection kept "
                    f"alive, released together: the 8 sent within "
                    f"{raw['proc_concurrent_send_spread_s'] * 1e3:.1f} ms): ttft p50 lone "
                    f"{raw['proc_lone_ttft_p50_s'] * 1e3:.1f} ms, 8 concurrent "
                    f"{raw['proc_concurrent_ttft_p50_s'] * 1e3:.1f} ms "
                    f"(x{raw['proc_ttft_ratio']:.2f})",
                    flush=True,
                )
            if args.raw_client:
                print(
                    f"  raw client (connections opened and bytes made before t0; the 8 "
                    f"written within {raw['raw_concurrent_send_spread_s'] * 1e3:.1f} ms, the "
                    f"openai client's 8 within {send_spread * 1e3:.0f} ms): ttft p50 lone "
                    f"{raw['raw_lone_ttft_p50_s'] * 1e3:.0f} ms, 8 concurrent "
                    f"{raw['raw_concurrent_ttft_p50_s'] * 1e3:.0f} ms "
                    f"(x{raw['raw_ttft_ratio']:.2f})",
                    flush=True,
                )
    finally:
        decoder.close()
        if procs is not None:
            procs.close()
    out = {
        "model_call_floor": floor,
        "rounds": rounds,
        "ttft_ratio_median": statistics.median(r["ttft_ratio"] for r in rounds),
        "first_chosen_ratio_median": statistics.median(r["first_chosen_ratio"] for r in rounds),
        "throughput_ratio_median": statistics.median(r["throughput_ratio"] for r in rounds),
    }
    if args.warm_pool:
        out["warm_ttft_ratio_median"] = statistics.median(r["warm_ttft_ratio"] for r in rounds)
        print(
            f"openai client, warm pool ({args.rounds} rounds, median): ttft ratio "
            f"{out['warm_ttft_ratio_median']:.2f}",
            flush=True,
        )
    if args.client_processes:
        out["proc_ttft_ratio_median"] = statistics.median(r["proc_ttft_ratio"] for r in rounds)
        print(
            f"{args.batch} client processes ({args.rounds} rounds, median): ttft ratio "
            f"{out['proc_ttft_ratio_median']:.2f} (one openai client per process, as separate "
            "users; beside the default mode's one client for all 8, not instead of it)",
            flush=True,
        )
    if args.raw_client:
        out["raw_ttft_ratio_median"] = statistics.median(r["raw_ttft_ratio"] for r in rounds)
        print(
            f"raw client ({args.rounds} rounds, median): ttft ratio "
            f"{out['raw_ttft_ratio_median']:.2f} (the server's share; the target is judged "
            "on the openai client's)",
            flush=True,
        )
    print(
        f"batching ({args.rounds} rounds, median): ttft ratio {out['ttft_ratio_median']:.2f} "
        f"(target <= 2), first-chosen ratio {out['first_chosen_ratio_median']:.2f}, "
        f"throughput ratio {out['throughput_ratio_median']:.2f} (target >= 0.8)",
        flush=True,
    )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=32, help="requests of the load part")
    p.add_argument("--max-tokens", type=int, default=48, help="max_tokens in the load part")
    p.add_argument("--kinds", type=int, default=4, help="schema shapes used (1-4)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="the server's --threads (default: the server's default, the cores)",
    )
    p.add_argument(
        "--serve-args",
        default="",
        help="more options for formcast serve, e.g. '--prefill-tokens 32'",
    )
    p.add_argument("--batch", type=int, default=8, help="requests of the batching part")
    p.add_argument("--batch-tokens", type=int, default=48, help="max_tokens there")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the batching part (0: off)")
    p.add_argument(
        "--fresh-prompts",
        action="store_true",
        help="batching part: every round's lone and concurrent requests carry case "
        "numbers not sent before (the server's prompt cache then keeps only the "
        "shared starts; 'texts as alone' compares different prompts)",
    )
    p.add_argument(
        "--raw-client",
        action="store_true",
        help="batching part: each round also sends the same requests, alone and together, "
        "over connections opened beforehand with bytes made beforehand (h11): time to first "
        "content from the bytes' send (the server's share, without the client's own work)",
    )
    p.add_argument(
        "--warm-pool",
        action="store_true",
        help="batching part: each round also sends the same requests, alone and together, "
        "with the openai client's pool holding an open connection for each first (no TCP "
        "connect on either side; by default the concurrent requests open theirs, the lone "
        "ones after the first reuse one)",
    )
    p.add_argument(
        "--client-processes",
        action="store_true",
        help="batching part: each round also sends the same requests, alone and together, "
        "from --batch client processes, one request each (the openai SDK's sync client in "
        "each, connections kept alive, released together by a barrier): concurrent users "
        "are separate processes, where the default mode builds the 8 requests one after "
        "another in one client; reported beside the default mode's ratio",
    )
    p.add_argument("--json", default=None, help="write the figures to this file")
    args = p.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    from formcast.model.batched import default_threads

    threads = args.threads if args.threads is not None else default_threads()
    command = [
        sys.executable,
        "-m",
        "formcast",
        "serve",
        "--model",
        "smollm2",
        "--port",
        str(port),
        "--max-queue",
        str(args.requests + 4),
        "--compile-workers",
        "1",
        "--timeout",
        "600",
        "--log-level",
        "warning",
    ]
    if args.threads is not None:
        command += ["--threads", str(args.threads)]
    command += args.serve_args.split()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    where = subprocess.run(  # the server runs the formcast of PYTHONPATH, not this file's
        [sys.executable, "-c", "import formcast; print(formcast.__file__)"],
        env=env, capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    print(f"server: {where}; load average {os.getloadavg()[0]:.1f}", flush=True)
    server = subprocess.Popen(command, env=env)
    batching: dict[str, Any] | None = None
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
        if args.rounds:
            batching = batching_part(url, args, threads)
        if not args.requests:  # the batching part only
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(
                        {
                            "threads": threads,
                            "batching": batching,
                            "command": " ".join(["python", *sys.argv]),
                        },
                        f,
                        indent=2,
                    )
            return 0
        results, wall, peak = asyncio.run(run_load(url, args))
        problems = check(results, url)
        mask = scrape(url, "formcast_mask_seconds_sum") / max(
            1.0, scrape(url, "formcast_mask_seconds_count")
        )
        decode = scrape(url, "formcast_decode_step_seconds_sum") / max(
            1.0, scrape(url, "formcast_decode_step_seconds_count")
        )
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
        "threads": threads,
        "batching": batching,
        "command": " ".join(["python", *sys.argv]),
    }
    print(
        f"{figures['answered']}/{args.requests - figures['abandoned']} answered "
        f"({figures['streamed']} streamed), {figures['abandoned']} abandoned "
        f"({int(cancelled)} cancelled by the server); finish stop {figures['finish_stop']}, "
        f"length {figures['finish_length']}"
    )
    print(
        f"latency p50 {figures['latency_p50_s']:.2f} s, p99 {figures['latency_p99_s']:.2f} s, "
        f"max {figures['latency_max_s']:.2f} s; stream first chunk p50 "
        f"{figures['stream_ttft_p50_s'] or float('nan'):.2f} s"
    )
    print(
        f"throughput {figures['throughput_req_s']:.2f} req/s, "
        f"{figures['throughput_tok_s']:.1f} output tok/s over {wall:.1f} s; peak queue "
        f"{peak}; mask {figures['mask_step_mean_us']:.0f} us/step, decode "
        f"{figures['decode_step_mean_ms']:.1f} ms/step"
    )
    print("checks: " + ("nothing lost or mixed up" if not problems else "; ".join(problems)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
