"""``POST /v1/responses`` (#30 item 2) through the real ``openai`` client: ``responses.create``
(text, ``text.format`` json_schema / json_object, function tools, a tool-result round trip,
``max_output_tokens``), ``responses.parse`` end to end, and streaming -- every body and every
event validated against the SDK's own types (``openai.types.responses``).

Oracles: the toy model's scripted reply, ``jsonschema``, the SDK's pydantic types, and the
streamed events adding up to the response answered in one body.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter
from server_harness import ToyModel, running_server

import jsonschema
from formcast.server import ServerConfig

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}},
          "required": ["city"], "additionalProperties": False}
TOOL = {"type": "function", "name": "get_weather", "description": "weather of a city",
        "parameters": PARAMS, "strict": True}
ARGS = '{"city": "Paris"}'
CALL = '<tool_call>\n{"name": "get_weather", "arguments": ' + ARGS + "}\n</tool_call>"


def reply(prompt: str) -> str:
    if "21 degrees" in prompt:  # the tool's result came back
        return "It is 21 degrees in Paris."
    if "weather?" in prompt:
        return "Let me check. " + CALL
    if "person" in prompt:
        return '{"name":"Ada","age":36}'
    return "Hello there."


@pytest.fixture(scope="module")
def server() -> Any:
    with running_server(ToyModel(reply), ServerConfig(model_name="toy")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Any) -> Any:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)


def raw(server: Any, body: dict[str, Any]) -> tuple[int, str]:
    req = urllib.request.Request(f"{server.base_url}/responses", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_text_and_instructions(server: Any, client: Any) -> None:
    r = client.responses.create(model="toy", input="hi", instructions="Be brief.",
                                temperature=0)
    assert r.status == "completed"
    assert r.output_text == "Hello there."
    assert r.usage.output_tokens > 0
    status, body = raw(server, {"model": "toy", "input": "hi", "temperature": 0})
    assert status == 200
    Response.model_validate_json(body)  # the SDK's own type, every required field present


class Person(BaseModel):
    name: str
    age: int


def test_parse_end_to_end_and_json_schema(client: Any) -> None:
    r = client.responses.parse(model="toy", input="a person", text_format=Person, temperature=0)
    assert r.output_parsed == Person(name="Ada", age=36)
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 2}},
              "required": ["name"], "additionalProperties": False}
    r = client.responses.create(model="toy", input="a person", temperature=0, text={
        "format": {"type": "json_schema", "name": "p", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), schema)
    r = client.responses.create(model="toy", input="a person", temperature=0,
                                text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(r.output_text), dict)


def test_function_call_and_its_result(client: Any) -> None:
    r = client.responses.create(model="toy", input="weather?", tools=[TOOL], temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather",
                                                                    {"city": "Paris"})]
    assert calls[0].call_id.startswith("call_")
    assert r.output[0].type == "message"
    assert r.output_text == "Let me check."
    history: list[Any] = [{"role": "user", "content": "weather?"}]
    history += [{"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                 "arguments": calls[0].arguments},
                {"type": "function_call_output", "call_id": calls[0].call_id,
                 "output": "21 degrees"}]
    r2 = client.responses.create(model="toy", input=history, tools=[TOOL], temperature=0)
    assert r2.output_text == "It is 21 degrees in Paris."


def test_named_tool_choice_gives_one_call(client: Any) -> None:
    r = client.responses.create(model="toy", input="hi", tools=[TOOL], temperature=0,
                                tool_choice={"type": "function", "name": "get_weather"})
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1
    jsonschema.validate(json.loads(calls[0].arguments), PARAMS)


def test_max_output_tokens_is_incomplete_never_markup(client: Any) -> None:
    r = client.responses.create(model="toy", input="weather?", tools=[TOOL], temperature=0,
                                max_output_tokens=12)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert "<tool" not in r.output_text
    for o in r.output:
        if o.type == "function_call":
            assert ARGS.startswith(o.arguments)


def test_streaming_events_are_the_sdks_and_add_up(server: Any, client: Any) -> None:
    whole = client.responses.create(model="toy", input="weather?", tools=[TOOL], temperature=0)
    events = list(client.responses.create(model="toy", input="weather?", tools=[TOOL],
                                          temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    args = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(args) >= 3  # streamed as generated
    assert "".join(args) == ARGS
    assert text.strip() == whole.output_text
    final = events[-1].response
    assert [o.type for o in final.output] == [o.type for o in whole.output]
    assert "response.function_call_arguments.done" in kinds
    assert "response.output_item.done" in kinds
    # every event of the raw stream is one of the SDK's event types
    status, body = raw(server, {"model": "toy", "input": "weather?", "temperature": 0,
                                "tools": [TOOL], "stream": True})
    assert status == 200
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    datas = [ln[len("data: "):] for ln in body.splitlines() if ln.startswith("data: ")]
    assert len(datas) == len(events)
    for d in datas:
        adapter.validate_json(d)


def test_stream_parse_with_text_format(client: Any) -> None:
    with client.responses.stream(model="toy", input="a person", text_format=Person,
                                 temperature=0) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 1
    assert final.output_parsed == Person(name="Ada", age=36)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"extra_body": {"background": True}}, "background"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
        ({"truncation": "auto"}, "truncation"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input[0].content[0]"),
    ],
)
def test_what_a_stateless_server_cannot_do_is_refused_by_name(
    client: Any, extra: dict[str, Any], param: str
) -> None:
    kwargs: dict[str, Any] = {"model": "toy", "input": "hi", **extra}
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(**kwargs)
    assert info.value.response.json()["error"]["param"] == param


def test_ids_are_in_openais_style(client: Any) -> None:
    r = client.responses.create(model="toy", input="weather?", tools=[TOOL], temperature=0)
    assert r.id.startswith("resp_")
    assert [o.id.split("_")[0] for o in r.output] == ["msg", "fc"]
