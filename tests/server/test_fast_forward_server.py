"""``ServerConfig.fast_forward`` (``formcast serve --fast-forward``), on a real uvicorn server on
127.0.0.1 serving a :class:`CallableModel` on SmolLM2's vocabulary (a logits function of the
whole sequence, with a greedy longest-match tokenizer as its ``encode_bytes``).

The oracles: the same schema requests to a server without fast-forward; every reply validates
against its schema (``jsonschema``) on both; the fast-forward server asks the model fewer times
(the logits function counts its calls), batched or one request after another; a request for
``logprobs`` is answered with them (decoded with plain masking); a model without a raw
tokenizer is refused when the server is made, naming the option.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from server_harness import ToyModel, running_server, smollm2_vocab
from test_continuous_batching import TokenFunction

import jsonschema
from formcast import ConfigurationError
from formcast.model.callable import CallableModel
from formcast.model.chat import SMOLLM2_CHAT
from formcast.server import ServerConfig, create_app

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "country": {"enum": ["France", "Japan", "Peru"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["city", "country", "n"],
    "additionalProperties": False,
}


def model_of(fn: TokenFunction, *, encode: bool = True) -> CallableModel:
    toy = ToyModel()

    def encode_bytes(data: bytes) -> list[int] | None:
        try:
            return toy.tokenize(data.decode("utf-8"))
        except UnicodeDecodeError:
            return None

    return CallableModel(
        fn,
        smollm2_vocab(),
        tokenize=toy.tokenize,
        encode_bytes=encode_bytes if encode else None,
        chat_template=SMOLLM2_CHAT,
        max_context=4096,
        name="toy",
    )


def ask(base_url: str, i: int, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
    return client.chat.completions.create(
        model="toy",
        messages=[{"role": "user", "content": f"city {i}?"}],
        temperature=0,
        max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
        **extra,
    )


TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def tool_call(client: Any, stream: bool) -> tuple[str, str]:
    """``(name, arguments)`` of the one call a forced ``tool_choice`` gives."""
    kwargs: dict[str, Any] = {
        "model": "toy",
        "messages": [{"role": "user", "content": "weather in Paris?"}],
        "temperature": 0,
        "max_tokens": 120,
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }
    if not stream:
        calls = client.chat.completions.create(**kwargs).choices[0].message.tool_calls
        assert len(calls) == 1
        return calls[0].function.name, calls[0].function.arguments
    name, args = "", ""
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for c in chunk.choices:
            for t in c.delta.tool_calls or []:
                assert t.index == 0
                name += (t.function.name or "") if t.function else ""
                args += (t.function.arguments or "") if t.function else ""
    return name, args


@pytest.mark.parametrize("batching", [True, False])
def test_fast_forward_replies_are_valid_with_fewer_model_calls(batching: bool) -> None:
    calls: dict[bool, int] = {}
    for ff in (False, True):
        fn = TokenFunction()
        config = ServerConfig(
            model_name="toy", compile_workers=0, batching=batching, fast_forward=ff
        )
        with running_server(model_of(fn), config) as srv:
            for i in range(4):
                r = ask(srv.base_url, i)
                choice = r.choices[0]
                assert choice.finish_reason == "stop"
                jsonschema.validate(json.loads(choice.message.content), SCHEMA)
            # logprobs: plain masking for this request, every token with its entry
            r = ask(srv.base_url, 9, logprobs=True, top_logprobs=2)
            jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
            assert r.choices[0].logprobs is not None
            assert r.choices[0].logprobs.content
            assert r.usage.completion_tokens == len(r.choices[0].logprobs.content)
            # a forced tool call, plain and streamed: its wrapper is forced text too
            client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
            for stream in (False, True):
                got = tool_call(client, stream)
                assert got[0] == "get_weather"
                jsonschema.validate(json.loads(got[1]), TOOL["function"]["parameters"])
        calls[ff] = fn.calls
    assert calls[True] < 0.8 * calls[False], calls


def test_a_model_without_a_raw_tokenizer_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="fast_forward"):
        create_app(
            model_of(TokenFunction(), encode=False),
            ServerConfig(model_name="toy", compile_workers=0, fast_forward=True),
        )
    with pytest.raises(ConfigurationError, match="fast_forward"):
        ServerConfig(fast_forward=1)  # type: ignore[arg-type]
