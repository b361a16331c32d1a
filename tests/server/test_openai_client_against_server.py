"""The real ``openai`` client (sync, async, streaming, ``parse``) against a real uvicorn server
on 127.0.0.1, serving the deterministic toy model of :mod:`server_harness`.

Oracles: ``jsonschema`` validates each JSON reply against the schema sent; a streamed reply
must equal the same request answered in one body; a truncated reply must not parse.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import openai
import pytest
from pydantic import BaseModel, ConfigDict, Field
from server_harness import DEFAULT_REPLY

import jsonschema

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 10},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
MSG = [{"role": "user", "content": "Describe a person."}]


def schema_format(schema: Any, name: str = "person", strict: bool | None = True) -> Any:
    spec = {"name": name, "schema": schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def test_text_reply_and_usage(client: Any) -> None:
    r = client.chat.completions.create(model="toy", messages=MSG, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == DEFAULT_REPLY
    assert choice.finish_reason == "stop"
    assert r.usage.completion_tokens > 0
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.model == "toy"


def test_json_schema_reply_is_valid_for_the_schema(client: Any) -> None:
    r = client.chat.completions.create(
        model="toy", messages=MSG, temperature=0, response_format=schema_format(PERSON)
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    doc = json.loads(choice.message.content)
    jsonschema.validate(doc, PERSON)
    assert choice.model_extra["formcast"]["complete"] is True


def test_json_object_reply_is_an_object(client: Any) -> None:
    r = client.chat.completions.create(
        model="toy", messages=MSG, temperature=0, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_sampling_with_a_seed_is_reproducible_and_n_gives_n_choices(client: Any) -> None:
    kwargs: dict[str, Any] = {
        "model": "toy", "messages": MSG, "temperature": 1.5, "seed": 7, "n": 3,
        "response_format": schema_format(PERSON),
    }
    a = client.chat.completions.create(**kwargs)
    b = client.chat.completions.create(**kwargs)
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    for c in a.choices:
        jsonschema.validate(json.loads(c.message.content), PERSON)


def test_length_is_never_a_complete_document(client: Any) -> None:
    r = client.chat.completions.create(
        model="toy", messages=MSG, temperature=0, max_tokens=3,
        response_format=schema_format(PERSON),
    )
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert choice.model_extra["formcast"] == {"finish": "max_tokens", "complete": False}
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice.message.content)
    assert r.usage.completion_tokens == 3
    # max_completion_tokens is the same budget
    r2 = client.chat.completions.create(
        model="toy", messages=MSG, temperature=0, max_completion_tokens=3,
        response_format=schema_format(PERSON),
    )
    assert r2.choices[0].message.content == choice.message.content


def test_stop_string_cuts_the_text(client: Any) -> None:
    r = client.chat.completions.create(model="toy", messages=MSG, temperature=0, stop=[" am"])
    assert r.choices[0].message.content == DEFAULT_REPLY.split(" am")[0]
    assert r.choices[0].finish_reason == "stop"


def test_streaming_chunks_add_up_to_the_reply(client: Any) -> None:
    for fmt in (None, schema_format(PERSON)):
        extra = {} if fmt is None else {"response_format": fmt}
        whole = client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                               **extra)
        chunks = list(client.chat.completions.create(
            model="toy", messages=MSG, temperature=0, stream=True,
            stream_options={"include_usage": True}, **extra,
        ))
        assert all(c.object == "chat.completion.chunk" for c in chunks)
        assert len({c.id for c in chunks}) == 1
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == whole.choices[0].message.content
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert finishes[-1] == "stop"
        assert set(finishes[:-1]) == {None}
        assert chunks[-1].choices == []
        assert chunks[-1].usage.completion_tokens > 1
        assert len(chunks) > 3  # really streamed, piece by piece


def test_raw_stream_ends_with_done(toy_server: Any) -> None:
    body = json.dumps({"model": "toy", "messages": MSG, "stream": True, "temperature": 0})
    req = urllib.request.Request(f"{toy_server.base_url}/chat/completions", data=body.encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = [ln for ln in resp.read().decode().split("\n\n") if ln]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: {") for e in events[:-1])


def test_async_client_concurrent_requests(toy_server: Any) -> None:
    async def main() -> list[Any]:
        aclient = openai.AsyncOpenAI(base_url=toy_server.base_url, api_key="x", max_retries=0)
        schemas = [PERSON, {"type": "array", "items": {"type": "integer"}, "minItems": 2},
                   {"type": "string", "enum": ["red", "green"]}]
        tasks = [
            aclient.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                            response_format=schema_format(s, f"s{i}", strict=None))
            for i, s in enumerate(schemas)
        ]
        out = await asyncio.gather(*tasks)
        await aclient.close()
        return list(zip(schemas, out, strict=True))

    for schema, r in asyncio.run(main()):
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=8)
    age: int = Field(ge=1, le=120)


def test_parse_with_a_pydantic_model(client: Any) -> None:
    r = client.chat.completions.parse(model="toy", messages=MSG, temperature=0,
                                      response_format=Person)
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Person)
    assert Person.model_validate_json(r.choices[0].message.content) == parsed


def test_beta_parse_with_a_pydantic_model(client: Any) -> None:
    beta = getattr(getattr(client, "beta", None), "chat", None)
    if beta is None or not hasattr(beta.completions, "parse"):
        pytest.skip("this openai version has no client.beta.chat.completions.parse")
    r = beta.completions.parse(model="toy", messages=MSG, temperature=0, response_format=Person)
    assert isinstance(r.choices[0].message.parsed, Person)


def test_parse_refuses_a_truncated_reply(client: Any) -> None:
    with pytest.raises(openai.LengthFinishReasonError):
        client.chat.completions.parse(model="toy", messages=MSG, temperature=0, max_tokens=2,
                                      response_format=Person)


def test_models_health_and_metrics(client: Any, toy_server: Any) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["toy"]
    assert client.models.retrieve("toy").id == "toy"
    with urllib.request.urlopen(f"{toy_server.url}/health", timeout=10) as resp:
        health = json.loads(resp.read())
    assert health["status"] == "ok"
    assert health["model"] == "toy"
    with urllib.request.urlopen(f"{toy_server.url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in ("formcast_requests_total", "formcast_queue_depth", "formcast_mask_seconds",
                   "formcast_decode_step_seconds", "formcast_compile_seconds",
                   'formcast_generations_total{finish_reason="completed"}'):
        assert family in text, family


def test_text_completions_endpoint(client: Any) -> None:
    r = client.completions.create(model="toy", prompt="Say hello.", max_tokens=32, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text == DEFAULT_REPLY
    assert r.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(model="toy", prompt="Say hello.", max_tokens=32,
                                            temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == DEFAULT_REPLY
    r = client.completions.create(model="toy", prompt="x", max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length"
    # the response_format extension constrains a completion too
    r = client.completions.create(model="toy", prompt="x", temperature=0, max_tokens=64,
                                  extra_body={"response_format": schema_format(PERSON)})
    jsonschema.validate(json.loads(r.choices[0].text), PERSON)


def test_metrics_include_the_action_runners_per_layer_families() -> None:
    from server_harness import ToyModel, running_server

    from formcast.actions import Metrics
    from formcast.server import ServerConfig

    actions = Metrics()
    with running_server(ToyModel(), ServerConfig(model_name="toy"),
                        action_metrics=actions) as srv:

        def scrape() -> str:
            with urllib.request.urlopen(f"{srv.url}/metrics", timeout=10) as resp:
                return resp.read().decode()

        before = scrape()
        assert 'formcast_action_runs_total{status="committed"} 0.0' in before
        assert "formcast_requests_total" in before  # the server's own families too
        actions.record_pair(ttft_s=0.5, tpot_s=0.1, unconstrained_ttft_s=0.25,
                            unconstrained_tpot_s=0.05)
        after = scrape()
        assert after != before  # read at scrape time, not copied at start
