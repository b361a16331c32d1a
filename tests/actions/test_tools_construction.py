"""``Tool`` is checked at construction (clear ConfigurationErrors) and ``ActionRunner`` compiles
the generation schema at construction: an unsupported keyword fails there, naming the tool."""

from __future__ import annotations

from typing import Any

import pytest
from runner_helpers import REFUND_SCHEMA, Executions, ScriptedModel, refund_tool

from formcast import ConfigurationError, UnsupportedFeatureError
from formcast.actions import ActionRunner, MemoryLedger, Tool


def _ok(**changes: Any) -> Tool:
    options: dict[str, Any] = {"name": "t", "schema": REFUND_SCHEMA, "execute": Executions()}
    options.update(changes)
    return Tool(**options)


@pytest.mark.parametrize(("changes", "match"), [
    ({"name": ""}, "name"),
    ({"name": 3}, "name"),
    ({"schema": "refund"}, "JSON Schema dict or a Pydantic"),
    ({"schema": {"type": "string"}}, "must describe an object"),
    ({"schema": {"type": "object", "properties": {"a": {"type": 7}}}}, "not a valid JSON Schema"),
    ({"execute": None}, "execute is required"),
    ({"execute": "run"}, "execute must be callable"),
    ({"rules": [print, "x"]}, r"rules\[1\] is not callable"),
    ({"rules": "x"}, "rules must be a list"),
    ({"facts": 3}, "facts must be a list"),
    ({"permission": True}, "permission must be callable"),
    ({"inspect": 1}, "inspect must be callable"),
    ({"defaults": {"currancy": "EUR"}}, "not declared"),
    ({"defaults": ["EUR"]}, "defaults must be a mapping"),
    ({"defaults": {"currency": object()}}, "JSON values"),
    ({"derive": lambda a: {}}, "no derived field is declared"),
    ({"derived": "amount", "derive": lambda a: {}}, "list of field names"),
    ({"derived": ("total",), "derive": lambda a: {}}, "not declared"),
])
def test_bad_tools_are_refused_with_the_reason(changes: dict, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        _ok(**changes)


def test_a_tool_is_frozen_and_keeps_its_schemas() -> None:
    tool = refund_tool()
    assert tool.full_schema == REFUND_SCHEMA
    assert tool.full_schema is not REFUND_SCHEMA  # a copy: later edits do not reach it
    assert "currency" not in tool.generation_schema["properties"]
    assert tool.server_fields == ("currency",)
    assert isinstance(tool.rules, tuple)
    with pytest.raises(AttributeError):
        tool.name = "other"  # type: ignore[misc]


def test_unsupported_keyword_fails_at_runner_construction_naming_the_tool() -> None:
    schema = {"type": "object", "properties": {
        # uniqueItems is checked at run time, but not beside `contains`: still unsupported
        "tags": {"type": "array", "items": {"type": "number"}, "uniqueItems": True,
                 "contains": {"minimum": 5}}}}
    tool = Tool("tagger", schema, execute=Executions())  # a valid JSON Schema: Tool accepts it
    with pytest.raises(UnsupportedFeatureError) as info:
        ActionRunner(ScriptedModel(["{}"]), tool)
    assert info.value.feature == "uniqueItems"
    assert "tagger" in "".join(getattr(info.value, "__notes__", []))


def test_unsupported_keyword_in_one_of_several_tools_names_that_tool() -> None:
    bad = Tool("bad", {"type": "object", "properties": {
        "x": {"type": "array", "uniqueItems": True, "contains": {"type": "string"}}}},
        execute=Executions())
    with pytest.raises(UnsupportedFeatureError) as info:
        ActionRunner(ScriptedModel(["{}"]), [refund_tool(), bad])
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "'bad'" in notes
    assert "'refund'" not in notes


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"tools": []}, "non-empty"),
    ({"tools": [object()]}, "actions.Tool"),
    ({"tools": [refund_tool(), refund_tool()]}, "distinct"),
    ({"ledger": {}}, "ledger must implement"),
    ({"retry": 3}, "RetryPolicy"),
    ({"metrics": object()}, "metrics must have record"),
    ({"on_hand_off": 1}, "on_hand_off"),
])
def test_runner_arguments_are_checked(kwargs: dict, match: str) -> None:
    options: dict[str, Any] = {"tools": [refund_tool()]}
    options.update(kwargs)
    with pytest.raises(ConfigurationError, match=match):
        ActionRunner(ScriptedModel(["{}"]), **options)


def test_default_ledger_is_a_memory_ledger() -> None:
    assert isinstance(ActionRunner(ScriptedModel(["{}"]), refund_tool()).ledger, MemoryLedger)


def test_model_must_be_a_wrapper() -> None:
    with pytest.raises(ConfigurationError, match="model wrapper"):
        ActionRunner(object(), refund_tool())  # type: ignore[arg-type]


def test_pydantic_class_schema_and_its_validators() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Refund(pydantic.BaseModel):
        order_id: str
        amount: int

        @pydantic.field_validator("order_id")
        @classmethod
        def upper(cls, v: str) -> str:
            if not v.isupper():
                raise ValueError("order ids are upper case")
            return v

    ex = Executions()
    tool = Tool("refund", Refund, execute=ex)
    assert tool.full_schema["required"] == ["order_id", "amount"]
    runner = ActionRunner(ScriptedModel(['{"order_id":"a1","amount":3}']), tool, max_tokens=60)
    out = runner.run("x")
    assert out.layers[-1].layer == "schema"
    assert out.failures[0].pointer == "/order_id"
    assert "upper case" in out.failures[0].message
    ok = ActionRunner(ScriptedModel(['{"order_id":"A1","amount":3}']), tool, max_tokens=60)
    assert ok.run("x").status == "committed"
    assert ex.calls[0][0] == {"order_id": "A1", "amount": 3}
