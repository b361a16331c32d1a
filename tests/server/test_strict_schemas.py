"""``strict`` (#30 item 6), through the real ``openai`` client:

* ``strict: true`` accepts the schemas OpenAI's strict mode accepts and refuses, with a 400
  naming the keyword and its JSON pointer, those it refuses (an open object, a property
  missing from ``required``, a root that is not an object, ``allOf``...);
* without ``strict``, an object schema with no ``additionalProperties`` gets its declared
  properties only (the server's default) -- the toy model *wants* to add a junk key and cannot;
  a server started with ``allow_extra_properties=True`` lets it (the specification's reading).

Oracle: the toy model's scripted reply and ``jsonschema``.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from server_harness import ToyModel, running_server

import jsonschema
from formcast.server import ServerConfig

OPEN = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
JUNK = '{"city":"Paris","type":"string"}'
MSG = [{"role": "user", "content": "hi"}]


def fmt(schema: Any, strict: bool | None) -> Any:
    spec: dict[str, Any] = {"name": "s", "schema": schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def serve(allow: bool) -> Any:
    config = ServerConfig(model_name="toy", allow_extra_properties=allow)
    return running_server(ToyModel(lambda prompt: JUNK), config)


@pytest.fixture(scope="module")
def client() -> Any:
    with serve(False) as srv:
        yield openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)


CLOSED = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
          "required": ["city"], "additionalProperties": False}


@pytest.mark.parametrize(
    ("schema", "keyword", "pointer"),
    [
        (OPEN, "additionalProperties", "#"),
        ({**CLOSED, "properties": {"city": {"type": "string"}, "b": {"type": "integer"}}},
         "required", "#"),
        ({**CLOSED, "properties": {"city": {"type": "object", "properties": {}}}},
         "additionalProperties", "#/properties/city"),
        ({"type": "array", "items": {"type": "string"}}, "type", "#"),
        ({"anyOf": [CLOSED]}, "anyOf", "#"),
        ({**CLOSED, "allOf": [CLOSED]}, "allOf", "#"),
        ({**CLOSED, "properties": {"city": {"type": "array", "uniqueItems": True}}},
         "uniqueItems", "#/properties/city"),
        ({**CLOSED, "$defs": {"x": {"type": "object", "properties": {"a": {}}}}},
         "additionalProperties", "#/$defs/x"),
    ],
)
def test_strict_refuses_what_openai_strict_mode_refuses(
    client: Any, schema: Any, keyword: str, pointer: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="toy", messages=MSG,
                                       response_format=fmt(schema, True))
    err = info.value.response.json()["error"]
    assert (err["code"], err["keyword"], err["pointer"]) == (
        "invalid_strict_schema", keyword, pointer)
    assert err["param"] == "response_format.json_schema.schema"
    assert keyword in err["message"]
    assert pointer in err["message"]


def test_strict_accepts_a_strict_schema_and_enforces_it(client: Any) -> None:
    schema = {"type": "object", "additionalProperties": False, "required": ["city", "n"],
              "properties": {"city": {"type": "string", "maxLength": 20},
                             "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
              "$defs": {"unused": {"type": "string"}}}
    r = client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                       response_format=fmt(schema, True))
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_a_strict_tool_is_checked_too(client: Any) -> None:
    tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": OPEN}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="toy", messages=MSG, tools=[tool])
    err = info.value.response.json()["error"]
    assert err["param"] == "tools[0].function.parameters"
    assert err["keyword"] == "additionalProperties"


def test_without_strict_undeclared_properties_are_not_generated(client: Any) -> None:
    for strict in (None, False):
        r = client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                           response_format=fmt(OPEN, strict))
        assert json.loads(r.choices[0].message.content) == {"city": "Paris"}
    tool = {"type": "function", "function": {"name": "f", "parameters": OPEN}}
    r = client.chat.completions.create(model="toy", messages=MSG, temperature=0, tools=[tool],
                                       tool_choice="required")
    assert set(json.loads(r.choices[0].message.tool_calls[0].function.arguments)) == {"city"}


def test_the_server_switch_allows_undeclared_properties() -> None:
    with serve(True) as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        r = c.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                      response_format=fmt(OPEN, None))
        assert json.loads(r.choices[0].message.content) == {"city": "Paris", "type": "string"}
        # strict schemas stay closed whatever the switch says
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model="toy", messages=MSG, response_format=fmt(OPEN, True))


def test_a_free_form_object_stays_free_form() -> None:
    """Declared properties only, but a ``{"type": "object"}`` that declares none (a dict
    field) is not reduced to ``{}``: the model writes the keys it wants there."""
    schema = {"type": "object", "properties": {"meta": {"type": "object"}},
              "required": ["meta"], "default": {"type": "object"}}
    want = '{"meta":{"a":1},"junk":2}'
    with running_server(ToyModel(lambda prompt: want), ServerConfig(model_name="toy")) as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        r = c.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                      response_format=fmt(schema, None))
    assert json.loads(r.choices[0].message.content) == {"meta": {"a": 1}}
    assert schema["properties"]["meta"] == {"type": "object"}  # the request's schema untouched
