"""Parsing tool calls: render → parse round trips in every format (random calls), content
kept, arguments validated against the named tool's schema, errors that say which call and why,
and the format lookup from names, model paths and chat templates."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from formcast.errors import ConfigurationError, ToolCallError
from formcast.tools import (
    HERMES,
    LLAMA3,
    MISTRAL,
    FunctionTool,
    ToolCall,
    ToolCallFormat,
    get_tool_call_format,
    parse_tool_calls,
)

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}},
           "required": ["city"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         FunctionTool("add", ADD)]
FORMATS = [HERMES, LLAMA3, MISTRAL]


def _random_args(rng: random.Random, name: str) -> dict[str, Any]:
    if name == "add":
        return {"a": rng.randint(-99, 99), "b": rng.randint(0, 9)}
    city = "".join(rng.choice('abc é"\\</>{}\n') for _ in range(rng.randint(0, 8)))
    return {"city": city}


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_render_then_parse_round_trips(fmt: ToolCallFormat) -> None:
    rng = random.Random(fmt.name)
    for _ in range(200):
        calls = [ToolCall(n, _random_args(rng, n)) for n in
                 rng.choices(["get_weather", "add"], k=rng.randint(0, 3))]
        content = rng.choice(["", "Sure.", "Let me look that up"])
        text = (content + " " if content else "") + fmt.render(calls)
        got_content, got = parse_tool_calls(text, TOOLS, fmt, ids=[c.id for c in calls])
        assert got == calls, text
        assert got_content == content, text


def test_openai_shape_and_ids() -> None:
    content, calls = parse_tool_calls(HERMES.render([("add", {"a": 1, "b": 2})]), TOOLS)
    assert content == ""
    (call,) = calls
    assert call.id.startswith("call_")
    assert len(call.id) == 29
    assert call.to_openai() == {"id": call.id, "type": "function",
                                "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    assert json.loads(call.arguments_json()) == {"a": 1, "b": 2}


def test_llama3_python_tag_and_string_arguments() -> None:
    text = '<|python_tag|>{"name": "add", "parameters": "{\\"a\\": 5, \\"b\\": 6}"}'
    _, calls = parse_tool_calls(text, TOOLS, LLAMA3)
    assert [(c.name, c.arguments) for c in calls] == [("add", {"a": 5, "b": 6})]
    # JSON that is not a call is content, not an error, in the Llama format
    content, calls = parse_tool_calls('The answer is {"x": 1}.', TOOLS, LLAMA3)
    assert calls == []
    assert content == 'The answer is {"x": 1}.'


@pytest.mark.parametrize(
    ("fmt", "text", "match", "index"),
    [
        (HERMES, '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>', "not among", 0),
        (HERMES, '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',
         "'b' is a required property", 0),
        (HERMES, HERMES.render([("add", {"a": 1, "b": 2})]) +
         '<tool_call>\n{"name": "get_weather", "arguments": {"city": 3}}\n</tool_call>',
         "at /city", 1),
        (HERMES, '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}', "not closed", 0),
        (HERMES, "<tool_call>\nnot json</tool_call>", "no {'name'", 0),
        (MISTRAL, "[TOOL_CALLS][{\"name\": \"add\"", "not JSON", 0),
        (MISTRAL, '[TOOL_CALLS][{"name": "add", "arguments": {"a": "1", "b": 2}}]',
         "is not of type 'integer'", 0),
    ],
)
def test_bad_calls_raise_tool_call_error(
    fmt: ToolCallFormat, text: str, match: str, index: int
) -> None:
    with pytest.raises(ToolCallError, match=match) as info:
        parse_tool_calls(text, TOOLS, fmt)
    assert info.value.index == index
    assert isinstance(info.value, ValueError)


def test_without_tools_calls_are_returned_unchecked() -> None:
    _, calls = parse_tool_calls(HERMES.render([("anything", {"x": [1]})]))
    assert calls[0].name == "anything"
    assert calls[0].arguments == {"x": [1]}


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("hermes", HERMES), ("Qwen", HERMES), ("qwen3", HERMES), ("llama3_json", LLAMA3),
        ("mistral", MISTRAL), ("Qwen/Qwen2.5-7B-Instruct", HERMES),
        ("meta-llama/Llama-3.1-8B-Instruct", LLAMA3),
        ("/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", LLAMA3),
        ("mistralai/Mistral-7B-Instruct-v0.3", MISTRAL), ("smollm2", HERMES),
        ("{% for m in messages %}<tool_call>{{ m }}</tool_call>{% endfor %}", HERMES),
        ("{{ '[TOOL_CALLS]' }}", MISTRAL), ("{%- if x %}<|python_tag|>{% endif %}", LLAMA3),
    ],
)
def test_format_lookup(spec: str, want: ToolCallFormat) -> None:
    assert get_tool_call_format(spec) is want


def test_format_lookup_unknown() -> None:
    with pytest.raises(ConfigurationError, match="no tool-call format"):
        get_tool_call_format("gpt-2")
    assert get_tool_call_format("gpt-2", default=HERMES) is HERMES
