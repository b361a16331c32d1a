"""A response format repeated by later requests is planned once per app
(:class:`formcast.server.constraints.PlanMemo`): the same plan, its spec read and keyed once;
any difference in the key (the schema's JSON text, ``strict``, the parameter, the options)
gives a plan of its own; a format that fails is checked again every time; the memo stays
within its bounds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from server_harness import ToyModel, running_server

from formcast.index.spec import JsonSchemaSpec
from formcast.server import ServerConfig
from formcast.server import constraints as cons
from formcast.server.api_errors import APIError
from formcast.server.constraints import PlanMemo, json_schema_plan

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "maximum": 5},
                                           "b": {"type": "string"}},
          "required": ["a", "b"], "additionalProperties": False}


def plan(schema: Any, memo: PlanMemo | None, strict: bool | None = True,
         param: str = "response_format.json_schema.schema", kind: str = "json_schema") -> Any:
    return json_schema_plan(kind, schema, strict, param=param, compile_timeout_s=30.0,
                            allow_extra_properties=False, memo=memo)


def test_same_format_same_plan_any_difference_another() -> None:
    memo = PlanMemo()
    first = plan(SCHEMA, memo)
    assert plan(json.loads(json.dumps(SCHEMA)), memo) is first  # a new dict, the same text
    reordered = {"required": SCHEMA["required"], **SCHEMA}
    one_point_o = json.loads(json.dumps(SCHEMA).replace('"maximum": 5', '"maximum": 5.0'))
    others = [plan(reordered, memo), plan(one_point_o, memo), plan(SCHEMA, memo, strict=None),
              plan(SCHEMA, memo, param="text.format.schema"),
              plan(SCHEMA, memo, kind="json_object")]
    assert all(p is not first for p in others)
    assert len({id(p) for p in others}) == len(others)
    assert len(memo) == 1 + len(others)
    # and each is what a plan made without the memo is
    for got, (schema, strict, param, kind) in zip(
        [first, *others],
        [(SCHEMA, True, "response_format.json_schema.schema", "json_schema"),
         (reordered, True, "response_format.json_schema.schema", "json_schema"),
         (one_point_o, True, "response_format.json_schema.schema", "json_schema"),
         (SCHEMA, None, "response_format.json_schema.schema", "json_schema"),
         (SCHEMA, True, "text.format.schema", "json_schema"),
         (SCHEMA, True, "response_format.json_schema.schema", "json_object")], strict=True):
        assert got == plan(schema, None, strict=strict, param=param, kind=kind)


def test_a_failing_format_is_checked_every_time() -> None:
    memo = PlanMemo()
    bad = {"type": "object", "properties": {"a": {"type": "integer"}}}  # strict: not closed
    for _ in range(2):
        with pytest.raises(APIError):
            plan(bad, memo)
    assert len(memo) == 0
    assert plan({"x": {1, 2}}, memo, strict=False) is not None  # not JSON: not memoized
    assert len(memo) == 0


def test_memo_bounds_least_recently_used_first() -> None:
    memo = PlanMemo(max_entries=2)
    schemas = [{**SCHEMA, "title": f"t{i}"} for i in range(3)]
    p0, p1 = plan(schemas[0], memo), plan(schemas[1], memo)
    assert plan(schemas[0], memo) is p0  # now the most recently used
    plan(schemas[2], memo)
    assert len(memo) == 2
    assert plan(schemas[0], memo) is p0
    assert plan(schemas[1], memo) is not p1  # dropped, planned again
    size = len(json.dumps(schemas[0]))
    small = PlanMemo(max_chars=size * 2)
    plan(schemas[0], small), plan(schemas[1], small), plan(schemas[2], small)
    assert len(small) == 2
    tiny = PlanMemo(max_chars=size - 1)
    plan(schemas[0], tiny)
    assert len(tiny) == 0


def test_keyed_once_per_plan_and_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    from formcast.index.compiler import GrammarCompiler
    from formcast.vocab.loaders import load_vocabulary

    reads: list[Any] = []
    of = JsonSchemaSpec.of

    def counted(*args: Any, **kwargs: Any) -> JsonSchemaSpec:
        reads.append(args[0])
        return of(*args, **kwargs)

    monkeypatch.setattr(cons.JsonSchemaSpec, "of", counted)
    compiler = GrammarCompiler(load_vocabulary("smollm2"))
    try:
        p = plan(SCHEMA, PlanMemo())
        k1 = p.keyed(compiler)
        assert p.keyed(compiler) is k1
        assert len(reads) == 1
        assert k1 == compiler.keyed(JsonSchemaSpec.of(p.schema, p.options))
    finally:
        compiler.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with running_server(ToyModel(), ServerConfig(model_name="toy", compile_workers=0)) as srv:
        yield srv


def test_repeated_schema_requests_read_it_once(server: Any, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    import openai

    checks: list[Any] = []
    reads: list[Any] = []
    check, of = cons.check_strict_schema, JsonSchemaSpec.of

    def counted_check(schema: Any, **kwargs: Any) -> None:
        checks.append(schema)
        check(schema, **kwargs)

    def counted_of(*args: Any, **kwargs: Any) -> JsonSchemaSpec:
        reads.append(args[0])
        return of(*args, **kwargs)

    monkeypatch.setattr(cons, "check_strict_schema", counted_check)
    monkeypatch.setattr(cons.JsonSchemaSpec, "of", counted_of)
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)
    schema = {**SCHEMA, "title": "repeated"}
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}
    texts = []
    for stream in (False, True, False):
        msg = [{"role": "user", "content": f"hi {len(texts)}"}]
        if stream:
            parts = client.chat.completions.create(model="toy", messages=msg, temperature=0,
                                                   response_format=fmt, stream=True)
            texts.append("".join(c.choices[0].delta.content or "" for c in parts if c.choices))
        else:
            r = client.chat.completions.create(model="toy", messages=msg, temperature=0,
                                               response_format=fmt)
            texts.append(r.choices[0].message.content)
    assert len(checks) == 1
    assert len(reads) == 1
    for text in texts:
        assert set(json.loads(text)) == {"a", "b"}
    other = {**schema, "title": "another"}
    client.completions.create(model="toy", prompt="x", temperature=0, extra_body={
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "s", "schema": other, "strict": True}}})
    assert len(checks) == 2
    assert len(reads) == 2
