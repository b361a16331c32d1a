"""Many concurrent requests -- mixed schemas, some streamed, some abandoned mid-way -- each get
THEIR answer: every completed reply is valid for the schema of its own request (``jsonschema``)
and echoes that request's own marker; ids are unique; nothing is lost (every request not
abandoned is answered); abandoned ones are counted as cancelled.  The load test
(benchmarks/server_load.py) is the same check at 32 requests on the real model."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from typing import Any

import openai
from server_harness import ToyModel, running_server

import jsonschema
from formcast.server import ServerConfig


def reply(prompt: str) -> str:
    """The toy writes the request's marker into every string it is allowed to."""
    m = re.findall(r"marker (m\d+)", prompt)
    return m[-1] if m else "?"


def schema_for(i: int) -> dict[str, Any]:
    kinds = [
        {"type": "object", "properties": {"id": {"const": f"m{i}"}, "n": {"type": "integer"}},
         "required": ["id", "n"], "additionalProperties": False},
        {"type": "array", "items": {"type": "string", "enum": [f"m{i}", "other"]},
         "minItems": 1, "maxItems": 3},
        {"type": "object", "properties": {"tag": {"type": "string", "pattern": f"^m{i}$"}},
         "required": ["tag"]},
    ]
    return kinds[i % len(kinds)]


def test_concurrent_mixed_requests_each_get_their_own_answer() -> None:
    model = ToyModel(reply, delay_s=0.002)
    with running_server(model, ServerConfig(model_name="toy", max_queue=32)) as srv:

        async def one(client: Any, i: int) -> tuple[int, str, Any]:
            schema = schema_for(i)
            kwargs: dict[str, Any] = {
                "model": "toy", "temperature": 0,
                "messages": [{"role": "user", "content": f"Answer for marker m{i}."}],
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": f"s{i}", "schema": schema}},
            }
            if i % 4 == 3:  # abandoned: read two chunks and leave
                stream = await client.chat.completions.create(stream=True, **kwargs)
                seen = 0
                async for _chunk in stream:
                    seen += 1
                    if seen == 2:
                        break
                await stream.close()
                return i, "cancelled", None
            if i % 2 == 1:
                stream = await client.chat.completions.create(stream=True, **kwargs)
                ids, text, finish = set(), "", None
                async for chunk in stream:
                    ids.add(chunk.id)
                    if chunk.choices:
                        text += chunk.choices[0].delta.content or ""
                        finish = chunk.choices[0].finish_reason or finish
                assert len(ids) == 1
                return i, finish or "", (ids.pop(), text)
            r = await client.chat.completions.create(**kwargs)
            return i, r.choices[0].finish_reason, (r.id, r.choices[0].message.content)

        async def main() -> list[tuple[int, str, Any]]:
            client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0,
                                        timeout=120)
            out = await asyncio.gather(*(one(client, i) for i in range(16)))
            await client.close()
            return list(out)

        results = asyncio.run(main())
        assert sorted(i for i, _, _ in results) == list(range(16))  # nothing lost
        answered = [(i, f, v) for i, f, v in results if f != "cancelled"]
        assert len(answered) == 12
        ids = [v[0] for _, _, v in answered]
        assert len(set(ids)) == len(ids)
        for i, finish, (_, text) in answered:
            assert finish == "stop", (i, finish, text)
            doc = json.loads(text)
            jsonschema.validate(doc, schema_for(i))  # ITS schema
            assert f"m{i}" in text, (i, text)  # ITS prompt's marker
            others = set(re.findall(r"m\d+", text)) - {f"m{i}"}
            assert not others, (i, text)
        with urllib.request.urlopen(f"{srv.url}/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        done = re.search(r'formcast_generations_total\{finish_reason="completed"\} (\S+)', metrics)
        assert done is not None
        assert float(done.group(1)) >= 12
