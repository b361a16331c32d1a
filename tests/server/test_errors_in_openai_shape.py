"""Errors come back in OpenAI's error JSON (``{"error": {"message", "type", "param", "code"}}``),
read by the real ``openai`` client as ``BadRequestError`` & co, with the status that says what
happened: an unsupported schema keyword names the keyword and its JSON pointer, a schema over a
compile limit names the limit, a bad body names the parameter."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
from server_harness import ToyModel, running_server

from formcast.limits import CompileLimits
from formcast.server import ServerConfig

MSG = [{"role": "user", "content": "hi"}]


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.response.json()
    assert set(body) == {"error"}
    err: dict[str, Any] = body["error"]
    assert {"message", "type", "param", "code"} <= set(err)
    return err


def fmt(schema: Any, strict: bool | None = None) -> Any:
    spec: dict[str, Any] = {"name": "s", "schema": schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def test_unsupported_keyword_names_keyword_and_pointer(client: Any) -> None:
    schema = {"type": "object", "properties": {"a": {"$dynamicRef": "#meta"}}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="toy", messages=MSG, response_format=fmt(schema))
    err = error_of(info.value)
    assert info.value.status_code == 400
    assert err["code"] == "unsupported_schema_feature"
    assert err["keyword"] == "$dynamicRef"
    assert err["pointer"] == "#/properties/a"
    assert "$dynamicRef" in err["message"]
    assert "#/properties/a" in err["message"]
    assert err["param"] == "response_format.json_schema.schema"
    assert err["type"] == "invalid_request_error"


def test_strict_false_ignores_what_cannot_be_enforced(client: Any) -> None:
    schema = {"type": "object", "properties": {"a": {"$dynamicRef": "#meta"}}}
    r = client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                       response_format=fmt(schema, strict=False))
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    assert r.choices[0].model_extra["formcast"]["warnings"]


def test_schema_over_the_compile_budget_names_the_limit(toy_model: ToyModel) -> None:
    config = ServerConfig(model_name="toy", compile_limits=CompileLimits(max_compile_work=2000))
    with running_server(toy_model, config) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        schema = {"type": "object", "properties": {f"k{i}": {"type": "string"}
                                                   for i in range(30)}}
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="toy", messages=MSG, response_format=fmt(schema))
        err = error_of(info.value)
        assert err["code"] == "schema_too_complex"
        assert err["limit"] == "max_compile_work"
        assert err["value"] == 2000
        assert "max_compile_work" in err["message"]
        # the server is still fine afterwards
        r = client.chat.completions.create(model="toy", messages=MSG, temperature=0)
        assert r.choices[0].finish_reason == "stop"


def test_malformed_schema_and_bad_regex_pattern_are_400(client: Any) -> None:
    bad = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=x)y"}}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="toy", messages=MSG, response_format=fmt(bad))
    err = error_of(info.value)
    assert err["pointer"] == "#/properties/a/pattern"


def test_bad_body_names_the_parameter(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="toy", messages=[{"role": "wizard", "content": "x"}])
    err = error_of(info.value)
    assert err["param"] == "messages[0].role"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="toy", messages=MSG, temperature=5)
    assert error_of(info.value)["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="toy", messages=[])
    assert error_of(info.value)["param"] == "messages"


def test_invalid_json_body(toy_server: Any) -> None:
    req = urllib.request.Request(f"{toy_server.base_url}/chat/completions", data=b"{not json",
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 400
    err = json.loads(info.value.read())["error"]
    assert "not valid JSON" in err["message"]
    assert err["type"] == "invalid_request_error"


def test_unknown_model_is_404(client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=MSG)
    err = error_of(info.value)
    assert err["code"] == "model_not_found"
    assert err["param"] == "model"
    assert "'toy'" in err["message"]


def test_unsupported_parameters_are_refused_not_dropped(client: Any) -> None:
    for kwargs, param in (
        ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs: true
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"logit_bias": {"17": 5}}, "logit_bias"),
    ):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="toy", messages=MSG, **kwargs)
        err = error_of(info.value)
        assert err["param"] == param
        assert err["code"] == "unsupported_parameter"
    # their default values are fine
    r = client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                       presence_penalty=0, logprobs=False, frequency_penalty=0)
    assert r.choices[0].finish_reason == "stop"


def test_prompt_longer_than_the_context_is_400_before_any_stream(toy_model: ToyModel) -> None:
    small = ToyModel(max_context=40)
    with running_server(small, ServerConfig(model_name="toy")) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        long = [{"role": "user", "content": "word " * 100}]
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as info:
                client.chat.completions.create(model="toy", messages=long, stream=stream)
            assert error_of(info.value)["code"] == "context_length_exceeded"


def test_unknown_route_is_an_openai_shaped_404(toy_server: Any) -> None:
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{toy_server.base_url}/embeddings", timeout=10)
    assert info.value.code == 404
    assert set(json.loads(info.value.read())["error"]) >= {"message", "type", "param", "code"}
