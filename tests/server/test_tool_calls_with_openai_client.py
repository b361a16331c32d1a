"""``tools`` / ``tool_choice`` / ``parallel_tool_calls`` through the real ``openai`` client: the
reply's ``message.tool_calls`` name one of the tools and carry arguments valid for THAT tool's
``parameters`` (checked with ``jsonschema``, an oracle independent of formcast), with
``finish_reason: "tool_calls"``; streamed tool-call deltas add up to the same calls.

The toy model (Hermes format, as SmolLM2's ChatML) follows a scripted reply while the
constraint allows it, so the tests can make it *want* a wrong call and see the constraint win.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from server_harness import DEFAULT_REPLY, ToyModel, running_server

import jsonschema
from formcast.server import ServerConfig

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "minLength": 1},
                           "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}},
            "required": ["zone"],
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n'
    "</tool_call>"
)
BAD_CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": 7, "unit": "K"}}\n</tool_call>'
)


def reply(prompt: str) -> str:
    if "two calls at once" in prompt:  # calls from the first token: what a forced call wants
        return CALL + "\n" + CALL.replace("Paris", "Rome")
    if "two calls" in prompt:
        return "Sure. " + CALL + "\n" + CALL.replace("Paris", "Rome")
    if "bad call" in prompt:
        return BAD_CALL
    if "weather in Paris?" in prompt:
        return "Let me check. " + CALL
    return DEFAULT_REPLY


@pytest.fixture(scope="module")
def tool_client() -> Any:
    with running_server(ToyModel(reply), ServerConfig(model_name="toy")) as srv:
        yield openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def check_calls(calls: Any) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for c in calls:
        assert c.type == "function"
        assert c.id.startswith("call_")
        args = json.loads(c.function.arguments)
        jsonschema.validate(args, SCHEMAS[c.function.name])
        out.append((c.function.name, args))
    return out


def test_auto_lets_the_model_call_a_tool(tool_client: Any) -> None:
    r = tool_client.chat.completions.create(model="toy", messages=ask("weather in Paris?"),
                                            tools=TOOLS, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert check_calls(choice.message.tool_calls) == [
        ("get_weather", {"city": "Paris", "unit": "C"})
    ]
    assert choice.message.content == "Let me check."


def test_auto_lets_the_model_answer_in_text(tool_client: Any) -> None:
    r = tool_client.chat.completions.create(model="toy", messages=ask("hello"), tools=TOOLS,
                                            temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.tool_calls is None
    assert choice.message.content == DEFAULT_REPLY


def test_required_forces_a_valid_call_the_model_did_not_want(tool_client: Any) -> None:
    r = tool_client.chat.completions.create(model="toy", messages=ask("hello"), tools=TOOLS,
                                            tool_choice="required", temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(check_calls(choice.message.tool_calls)) >= 1


def test_named_function_is_the_one_called(tool_client: Any) -> None:
    r = tool_client.chat.completions.create(
        model="toy", messages=ask("weather in Paris?"), tools=TOOLS, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    calls = check_calls(r.choices[0].message.tool_calls)
    assert calls
    assert {name for name, _ in calls} == {"get_time"}


@pytest.mark.parametrize("parallel", [None, True, False])
def test_named_function_is_called_exactly_once(tool_client: Any, parallel: bool | None) -> None:
    """OpenAI's contract (what instructor's TOOLS mode relies on): forcing a function gives
    ONE call of it, even where the model wants two and parallel_tool_calls is true."""
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    r = tool_client.chat.completions.create(
        model="toy", messages=ask("two calls at once"), tools=TOOLS, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, **extra,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert check_calls(choice.message.tool_calls) == [
        ("get_weather", {"city": "Paris", "unit": "C"})
    ]


def test_invalid_arguments_the_model_wants_are_masked_away(tool_client: Any) -> None:
    r = tool_client.chat.completions.create(model="toy", messages=ask("bad call"), tools=TOOLS,
                                            tool_choice="required", temperature=0)
    [(name, args)] = check_calls(r.choices[0].message.tool_calls)  # valid, by jsonschema
    assert name == "get_weather"
    assert args["unit"] in ("C", "F")


def test_parallel_tool_calls(tool_client: Any) -> None:
    two = tool_client.chat.completions.create(model="toy", messages=ask("two calls"),
                                              tools=TOOLS, temperature=0)
    assert [a["city"] for _, a in check_calls(two.choices[0].message.tool_calls)] == [
        "Paris", "Rome"
    ]
    one = tool_client.chat.completions.create(model="toy", messages=ask("two calls"),
                                              tools=TOOLS, temperature=0,
                                              parallel_tool_calls=False)
    assert [a["city"] for _, a in check_calls(one.choices[0].message.tool_calls)] == ["Paris"]
    assert one.choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_gives_text_without_calls(tool_client: Any) -> None:
    r = tool_client.chat.completions.create(model="toy", messages=ask("weather in Paris?"),
                                            tools=TOOLS, tool_choice="none", temperature=0)
    choice = r.choices[0]
    assert choice.message.tool_calls is None
    assert "<tool_call>" not in (choice.message.content or "")


def test_streamed_tool_call_deltas_add_up_to_the_calls(tool_client: Any) -> None:
    whole = tool_client.chat.completions.create(model="toy", messages=ask("two calls"),
                                                tools=TOOLS, temperature=0)
    chunks = list(tool_client.chat.completions.create(
        model="toy", messages=ask("two calls"), tools=TOOLS, temperature=0, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content.strip() == whole.choices[0].message.content
    calls: dict[int, dict[str, str]] = {}
    for c in chunks:
        for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            entry = calls.setdefault(d.index, {"name": "", "arguments": ""})
            if d.function.name:
                entry["name"] = d.function.name
            entry["arguments"] += d.function.arguments or ""
    expected = [(c.function.name, json.loads(c.function.arguments))
                for c in whole.choices[0].message.tool_calls]
    assert [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)] == (
        expected
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_a_tool_result_conversation_renders(tool_client: Any) -> None:
    messages = [
        *ask("weather in Paris?"),
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]
    r = tool_client.chat.completions.create(model="toy", messages=messages, tools=TOOLS,
                                            temperature=0)
    assert r.choices[0].finish_reason in ("stop", "tool_calls")


def test_tool_choice_naming_an_unknown_function_is_400(tool_client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        tool_client.chat.completions.create(
            model="toy", messages=ask("x"), tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "nope"}})
    assert info.value.response.json()["error"]["param"] == "tool_choice"


def test_unsupported_keyword_in_tool_parameters_is_400(tool_client: Any) -> None:
    bad = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$dynamicRef": "#x"}}}}}
    with pytest.raises(openai.BadRequestError) as info:
        tool_client.chat.completions.create(model="toy", messages=ask("x"), tools=[bad],
                                            tool_choice="required")
    err = info.value.response.json()["error"]
    assert err["keyword"] == "$dynamicRef"
    assert err["param"] == "tools"
