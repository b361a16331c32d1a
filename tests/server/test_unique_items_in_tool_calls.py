"""``uniqueItems`` in a tool's ``parameters`` and in ``response_format`` next to ``tools``
(#28): the server lowers both through ``constraints.json``, which carries the run-time check
since the grammar IR holds its marks.  Before, both were a 400 naming ``uniqueItems``.

The toy model wants a call whose ``tags`` repeat an item; the constraint must refuse the
repeat, so the call it returns has distinct tags (checked with ``jsonschema``).
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from server_harness import DEFAULT_REPLY, ToyModel, running_server

import jsonschema
from formcast.server import ServerConfig

TAGS = {
    "type": "object",
    # string items: a run-time check (an enum's few values would be spelled out in the grammar)
    "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 3},
                            "uniqueItems": True, "minItems": 2, "maxItems": 2}},
    "required": ["tags"],
    "additionalProperties": False,
}
TOOL = {"type": "function", "function": {"name": "tag", "parameters": TAGS}}
DUPLICATE = '<tool_call>\n{"name": "tag", "arguments": {"tags": ["a", "a"]}}\n</tool_call>'


def reply(prompt: str) -> str:
    return DUPLICATE if "tag it" in prompt else DEFAULT_REPLY


@pytest.fixture(scope="module")
def client() -> Any:
    with running_server(ToyModel(reply), ServerConfig(model_name="toy")) as srv:
        yield openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)


def test_a_tool_call_gets_distinct_items(client: Any) -> None:
    r = client.chat.completions.create(
        model="toy", messages=[{"role": "user", "content": "tag it"}], tools=[TOOL],
        tool_choice="required", temperature=0,
    )
    [call] = r.choices[0].message.tool_calls
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, TAGS)  # uniqueItems included
    assert args["tags"][0] == "a"  # the model's first item, then a different one


def test_response_format_with_unique_items_next_to_tools(client: Any) -> None:
    r = client.chat.completions.create(
        model="toy", messages=[{"role": "user", "content": "tag it"}], tools=[TOOL],
        tool_choice="required", temperature=0,
        response_format={"type": "json_schema",
                         # not "strict": OpenAI's strict mode has no uniqueItems (a 400 here)
                         "json_schema": {"name": "t", "schema": TAGS}},
    )
    [call] = r.choices[0].message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), TAGS)
