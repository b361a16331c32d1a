"""Tool calls as OpenAI answers them, through the real ``openai`` client (#30 items 3-5):

* a call cut by ``max_tokens`` is a *partial* call in ``tool_calls`` (its arguments a prefix of
  the JSON the model was writing) with ``finish_reason: "length"`` -- the model's call markup
  (``<tool_call>``) never reaches ``content``, streamed or not;
* streamed, a call's arguments arrive in fragments as the tokens are generated (several
  ``tool_calls`` deltas per call), adding up to the arguments of the same request answered in
  one body;
* the legacy ``functions`` / ``function_call`` are honoured: ``message.function_call``,
  ``finish_reason: "function_call"``; legacy ``function`` messages render.

Oracle: the toy model's scripted reply (what it *wants* to write) and ``jsonschema``.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from server_harness import ToyModel, running_server

import jsonschema
from formcast.server import ServerConfig

PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
ARGS = '{"city": "Paris", "unit": "C"}'
CALL = '<tool_call>\n{"name": "get_weather", "arguments": ' + ARGS + "}\n</tool_call>"


def reply(prompt: str) -> str:
    if "weather?" in prompt:
        return "Let me check. " + CALL
    if "forced" in prompt:
        return CALL
    return "Hello there."


@pytest.fixture(scope="module")
def client() -> Any:
    with running_server(ToyModel(reply), ServerConfig(model_name="toy")) as srv:
        yield openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)


def ask(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def whole_tokens(client: Any) -> int:
    r = client.chat.completions.create(model="toy", messages=ask("weather?"), tools=[WEATHER],
                                       temperature=0)
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.choices[0].message.tool_calls[0].function.arguments == ARGS
    return int(r.usage.completion_tokens)


def test_a_call_cut_by_max_tokens_is_a_partial_call_never_markup(client: Any) -> None:
    n = whole_tokens(client)
    seen_partial = False
    for budget in range(1, n):
        r = client.chat.completions.create(model="toy", messages=ask("weather?"),
                                           tools=[WEATHER], temperature=0, max_tokens=budget)
        choice = r.choices[0]
        assert choice.finish_reason == "length"
        content = choice.message.content or ""
        assert "<tool" not in content, (budget, content)
        assert '"name"' not in content, (budget, content)
        assert "Let me check.".startswith(content.strip()), (budget, content)
        for call in choice.message.tool_calls or []:
            assert call.function.name == "get_weather"
            assert ARGS.startswith(call.function.arguments), call.function.arguments
            assert call.id.startswith("call_")
            seen_partial = seen_partial or len(call.function.arguments) > 0
        if choice.message.tool_calls:
            assert choice.message.content == "Let me check."
    assert seen_partial


def test_a_streamed_call_cut_by_max_tokens_never_streams_markup(client: Any) -> None:
    n = whole_tokens(client)
    for budget in (n // 2, n - 2):
        chunks = list(client.chat.completions.create(
            model="toy", messages=ask("weather?"), tools=[WEATHER], temperature=0,
            max_tokens=budget, stream=True))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "<tool" not in content
        args = "".join(d.function.arguments or "" for c in chunks if c.choices
                       for d in c.choices[0].delta.tool_calls or [])
        assert ARGS.startswith(args)
        assert chunks[-1].choices[0].finish_reason == "length"


def test_arguments_are_streamed_in_fragments_as_generated(client: Any) -> None:
    chunks = list(client.chat.completions.create(
        model="toy", messages=ask("weather?"), tools=[WEATHER], temperature=0, stream=True))
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    first = deltas[0]
    assert first.id.startswith("call_")
    assert first.function.name == "get_weather"
    fragments = [d.function.arguments for d in deltas[1:] if d.function.arguments]
    assert len(fragments) >= 4  # token by token, not one piece at the end
    assert "".join(fragments) == ARGS
    jsonschema.validate(json.loads("".join(fragments)), PARAMS)
    # the header of the call comes before its arguments, the finish after everything
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content.strip() == "Let me check."


def test_legacy_functions_are_answered_in_function_call(client: Any) -> None:
    fn = WEATHER["function"]
    r = client.chat.completions.create(model="toy", messages=ask("forced"), functions=[fn],
                                       function_call={"name": "get_weather"}, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "function_call"
    assert choice.message.tool_calls is None
    assert choice.message.function_call.name == "get_weather"
    assert json.loads(choice.message.function_call.arguments) == {"city": "Paris", "unit": "C"}
    # auto: the model may answer in text
    r = client.chat.completions.create(model="toy", messages=ask("hi"), functions=[fn],
                                       temperature=0)
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == "Hello there."
    assert r.choices[0].message.function_call is None
    # streamed
    chunks = list(client.chat.completions.create(
        model="toy", messages=ask("forced"), functions=[fn], function_call={"name": "get_weather"},
        temperature=0, stream=True))
    name = "".join(c.choices[0].delta.function_call.name or "" for c in chunks
                   if c.choices and c.choices[0].delta.function_call)
    args = "".join(c.choices[0].delta.function_call.arguments or "" for c in chunks
                   if c.choices and c.choices[0].delta.function_call)
    assert (name, args) == ("get_weather", ARGS)
    assert chunks[-1].choices[0].finish_reason == "function_call"


def test_a_legacy_function_conversation_renders(client: Any) -> None:
    fn = WEATHER["function"]
    messages = [
        *ask("hi"),
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": ARGS}},
        {"role": "function", "name": "get_weather", "content": '{"temp": 21}'},
    ]
    r = client.chat.completions.create(model="toy", messages=messages, functions=[fn],
                                       temperature=0)
    assert r.choices[0].finish_reason in ("stop", "function_call")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"functions": [WEATHER["function"]], "tools": [WEATHER]}, "functions"),
        ({"function_call": "auto"}, "function_call"),
        ({"extra_body": {"guided_json": {"type": "object"}}}, "guided_json"),
        ({"extra_body": {"top_k": 5}}, "top_k"),
        ({"store": True}, "store"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"logit_bias": {"1": 2.0}}, "logit_bias"),
    ],
)
def test_parameters_that_cannot_be_honoured_are_refused_by_name(
    client: Any, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="toy", messages=ask("hi"), **extra)
    err = info.value.response.json()["error"]
    assert err["param"] == param
    assert param in err["message"]


def test_parameters_asking_for_nothing_are_accepted(client: Any) -> None:
    r = client.chat.completions.create(model="toy", messages=ask("hi"), temperature=0,
                                       store=False, modalities=["text"], user="u1",
                                       extra_body={"top_k": -1})
    assert r.choices[0].message.content == "Hello there."


def raw_post(client: Any, body: dict[str, Any]) -> str:
    import urllib.request

    req = urllib.request.Request(f"{client.base_url}chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return str(resp.read().decode())


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [WEATHER]},
        {"tools": [WEATHER], "max_tokens": 14},
        {"functions": [WEATHER["function"]], "function_call": {"name": "get_weather"}},
    ],
)
def test_bodies_and_chunks_are_the_sdks_types(client: Any, extra: dict[str, Any]) -> None:
    """Every body and chunk validates against openai.types.chat (what any client reads)."""
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    body = {"model": "toy", "messages": ask("weather?"), "temperature": 0, **extra}
    whole = ChatCompletion.model_validate_json(raw_post(client, body))
    assert whole.choices[0].finish_reason in ("tool_calls", "length", "function_call")
    stream = raw_post(client, {**body, "stream": True})
    datas = [ln[6:] for ln in stream.splitlines() if ln.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    for d in datas[:-1]:
        ChatCompletionChunk.model_validate_json(d)
