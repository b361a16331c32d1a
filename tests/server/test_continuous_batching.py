"""Continuous batching in the server (``ServerConfig.batching``), on a real uvicorn server on
127.0.0.1 serving a :class:`CallableModel` (a logits function of the whole sequence on
SmolLM2's vocabulary: formcast has a batched decoder for it, and its logits are exact, so a
batched row is bit-for-bit what the same sequence gives alone).

The oracle: the same requests sent to a server that serves one request after another
(``batching=False``, the ``generate`` loop on one model thread) give the same answers --
content, finish reason, usage, logprobs, seeded sampling, ``n`` -- while on the batched server
they were decoded together (several rows per model call, counted on ``GET /metrics``).  Also:
the 429 past ``max_batch + max_queue``; a client that leaves frees its slot for the next
request; a deadline ends a batched generation with ``finish_reason "timeout"``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
import zlib
from typing import Any

import numpy as np
import openai
from server_harness import ToyModel, metric, running_server, smollm2_vocab

from formcast.model.callable import CallableModel
from formcast.model.chat import SMOLLM2_CHAT
from formcast.server import ServerConfig


class TokenFunction:
    """Logits of the whole sequence: short text tokens preferred, closing JSON bytes and ``0``
    liked (under a constraint greedy decoding writes a short valid document), a word chosen by
    a hash of the last tokens boosted (different prompts, different outputs), stop tokens
    never chosen unless the constraint allows nothing else.  ``delay_s`` sleeps per call."""

    def __init__(self, delay_s: float = 0.0) -> None:
        v = smollm2_vocab()
        lengths = np.array([len(t) for t in v.tokens], dtype=np.float64)
        base = -lengths
        words: list[int] = []
        for i, t in enumerate(v.tokens):
            if not v.is_text_token(i):
                base[i] = -100.0
            elif t in (b'"', b"}", b"]"):
                base[i] = 10.0
            elif t == b"0":
                base[i] = 5.0
            elif len(t) in (3, 4) and t[:1] == b" " and t[1:].isalpha() and t[1:].islower():
                words.append(i)
        for s in v.stop_token_ids:
            base[s] = -60.0
        self.base = base
        self.words = np.array(words[:64])
        self.delay_s = delay_s
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, ids: list[int]) -> np.ndarray:
        with self.lock:
            self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        logits = self.base.copy()
        h = zlib.crc32(np.asarray(ids[-6:], dtype=np.int64).tobytes())
        logits[self.words[h % len(self.words)]] += 30.0
        logits[self.words[(h >> 8) % len(self.words)]] += 29.5  # a close second: sampling varies
        return logits


def callable_model(fn: TokenFunction) -> CallableModel:
    toy = ToyModel()  # its greedy longest-match tokenizer of SmolLM2's vocabulary
    return CallableModel(fn, smollm2_vocab(), tokenize=toy.tokenize, chat_template=SMOLLM2_CHAT,
                         max_context=4096, name="toy")


def health(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/health", timeout=10) as resp:
        return dict(json.loads(resp.read()))


SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 14},
                                           "n": {"type": "integer"}},
          "required": ["city", "n"], "additionalProperties": False}


def requests() -> list[dict[str, Any]]:
    """Nine different requests: schemas, free text, stop strings, seeded sampling, n=2,
    logprobs, a stream, streamed tool calls."""
    out: list[dict[str, Any]] = []
    for i in range(8):
        body: dict[str, Any] = {
            "model": "toy", "messages": [{"role": "user", "content": f"question {i}: where?"}],
            "temperature": 0, "max_tokens": 12 + 3 * i,
        }
        if i % 2 == 0:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "s", "schema": SCHEMA}}
        if i == 1:
            body["stop"] = [" the"]
        if i in (3, 6):
            body.update(temperature=0.9, seed=100 + i)
        if i == 5:
            body["n"] = 2
            body["temperature"] = 0.7
            body["seed"] = 7
        if i in (2, 3):
            body.update(logprobs=True, top_logprobs=3)
        if i == 7:
            body["stream"] = True
        out.append(body)
    out.append({  # streamed tool-call arguments
        "model": "toy", "messages": [{"role": "user", "content": "weather in Paris?"}],
        "temperature": 0, "max_tokens": 120, "stream": True, "tool_choice": "required",
        "parallel_tool_calls": False,
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"], "additionalProperties": False}}}],
    })
    return out


async def send(client: Any, body: dict[str, Any]) -> Any:
    if body.get("stream"):
        texts: dict[int, str] = {}
        finish: dict[int, str | None] = {}
        calls: list[tuple[int, str | None, str | None]] = []
        stream = await client.chat.completions.create(**body)
        async for chunk in stream:
            for c in chunk.choices:
                texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
                for t in c.delta.tool_calls or []:
                    calls.append((t.index, t.function.name if t.function else None,
                                  t.function.arguments if t.function else None))
                if c.finish_reason:
                    finish[c.index] = c.finish_reason
        # the calls as sent, joined per call: how the text is cut into chunks is not the
        # answer (the batcher streams a request's forced start before its first model call)
        joined: dict[int, list[str]] = {}
        for index, name, args in calls:
            entry = joined.setdefault(index, ["", ""])
            entry[0] += name or ""
            entry[1] += args or ""
        return {"texts": texts, "finish": finish,
                "calls": {i: tuple(v) for i, v in joined.items()}, "deltas": len(calls)}
    r = await client.chat.completions.create(**body)
    return {
        "choices": [(c.index, c.message.content, c.finish_reason,
                     None if c.logprobs is None else c.logprobs.model_dump())
                    for c in r.choices],
        "usage": (r.usage.prompt_tokens, r.usage.completion_tokens),
    }


def test_concurrent_requests_are_decoded_together_and_answered_as_served_one_by_one() -> None:
    fn = TokenFunction(delay_s=0.003)  # steps long enough for the requests to overlap
    bodies = requests()
    with running_server(callable_model(fn), ServerConfig(model_name="toy", n_threads=1)) as srv:
        assert health(srv.url)["batching"] is True
        assert health(srv.url)["slots"] == 8

        async def together() -> list[Any]:
            client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
            out = await asyncio.gather(*(send(client, b) for b in bodies))
            await client.close()
            return list(out)

        batched = asyncio.run(together())
        steps = metric(srv.url, "formcast_batch_steps")
        rows = metric(srv.url, "formcast_batch_rows")
        assert health(srv.url)["running"] == 0
        assert metric(srv.url, "formcast_requests_in_flight") == 0
    # decoded together: 10 choices of 12..33 tokens in far fewer model calls than rows
    assert steps > 0
    assert rows / steps >= 2.0, (rows, steps)

    sequential_cfg = ServerConfig(model_name="toy", batching=False)
    with running_server(callable_model(TokenFunction()), sequential_cfg) as srv:
        assert health(srv.url)["batching"] is False
        assert health(srv.url)["batching_off"] == "ServerConfig.batching is False"

        async def one_by_one() -> list[Any]:
            client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
            out = [await send(client, b) for b in bodies]
            await client.close()
            return out

        alone = asyncio.run(one_by_one())
    deltas = [a.pop("deltas", None) for a in alone]
    for b in batched:
        b.pop("deltas", None)
    assert batched == alone
    # the oracle can fail: the requests gave different answers, logprobs included
    assert len({json.dumps(a, sort_keys=True) for a in alone}) == len(alone)
    assert alone[2]["choices"][0][3] is not None
    assert len(alone[5]["choices"]) == 2
    assert alone[8]["finish"] == {0: "tool_calls"}, alone[8]
    assert alone[8]["calls"][0][0] == "get_weather"
    assert deltas[8] > 2  # the arguments arrived in several deltas
    json.loads(alone[8]["calls"][0][1])


def test_past_max_batch_plus_max_queue_is_429() -> None:
    fn = TokenFunction(delay_s=0.02)
    config = ServerConfig(model_name="toy", max_batch=2, max_queue=1, n_threads=1)
    with running_server(callable_model(fn), config) as srv:

        async def main() -> list[Any]:
            client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
            calls = [client.chat.completions.create(
                model="toy", messages=[{"role": "user", "content": f"hi {i}"}],
                temperature=0, max_tokens=30) for i in range(5)]
            out = await asyncio.gather(*calls, return_exceptions=True)
            await client.close()
            return list(out)

        out = asyncio.run(main())
        refused = [r for r in out if isinstance(r, openai.RateLimitError)]
        answered = [r for r in out if not isinstance(r, Exception)]
        assert len(answered) == 3, out  # 2 slots + 1 waiting
        assert len(refused) == 2
        for exc in refused:
            assert exc.status_code == 429
            assert int(exc.response.headers["retry-after"]) >= 1
            message = exc.response.json()["error"]["message"]
            assert "max_batch=2" in message
            assert "max_queue=1" in message
        assert all(r.choices[0].finish_reason == "length" for r in answered)


def test_a_client_that_leaves_frees_its_slot_for_the_next_request() -> None:
    fn = TokenFunction(delay_s=0.02)  # 400 tokens: 8 s if nobody stops it
    config = ServerConfig(model_name="toy", max_batch=1, n_threads=1)
    with running_server(callable_model(fn), config) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=30)
        stream = client.chat.completions.create(
            model="toy", messages=[{"role": "user", "content": "long"}], temperature=0,
            max_tokens=400, stream=True)
        got = 0
        for chunk in stream:
            got += bool(chunk.choices and chunk.choices[0].delta.content)
            if got == 5:
                break
        stream.close()  # the client goes away mid-generation
        t0 = time.monotonic()
        r = client.chat.completions.create(
            model="toy", messages=[{"role": "user", "content": "short"}], temperature=0,
            max_tokens=5)
        waited = time.monotonic() - t0
        assert r.choices[0].finish_reason == "length"
        assert waited < 6, waited  # the one slot was freed, not held for the 400 tokens
        deadline = time.monotonic() + 10
        while metric(srv.url, 'formcast_generations_total{finish_reason="cancelled"}') < 1:
            assert time.monotonic() < deadline, "the abandoned generation was not cancelled"
            time.sleep(0.05)
        calls = fn.calls
        time.sleep(0.5)
        assert fn.calls == calls  # nothing runs any more
        assert calls < 200, calls
        assert health(srv.url)["running"] == 0


def test_a_deadline_ends_a_batched_generation_with_timeout() -> None:
    fn = TokenFunction(delay_s=0.02)
    config = ServerConfig(model_name="toy", request_timeout_s=0.5, n_threads=1)
    with running_server(callable_model(fn), config) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        full = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="toy", messages=[{"role": "user", "content": "x"}], temperature=0,
            max_tokens=10, stream=True) if c.choices)
        t0 = time.monotonic()
        r = client.chat.completions.create(
            model="toy", messages=[{"role": "user", "content": "x"}], temperature=0,
            max_tokens=400)
        assert time.monotonic() - t0 < 6
        choice = r.choices[0]
        assert choice.finish_reason == "timeout"
        assert choice.model_extra["formcast"] == {"finish": "timeout", "complete": False}
        text = choice.message.content
        assert text
        assert text.startswith(full) or full.startswith(text)
        assert r.usage.completion_tokens < 400
        assert health(srv.url)["running"] == 0
