"""``generation_schema``: the server-filled fields (``defaults``, schema ``default``s,
``derived`` names, ``readOnly`` properties) leave the generated schema; the runner fills them
(server values win) and validates the full schema."""

from __future__ import annotations

import pytest
from runner_helpers import Executions, ScriptedModel

from formcast import ConfigurationError, GrammarCompiler
from formcast.actions import (
    ActionRunner,
    Tool,
    generation_schema,
    read_only_fields,
    schema_defaults,
    server_fields,
)

FULL = {
    "type": "object",
    "properties": {
        "item": {"type": "string", "maxLength": 10},
        "qty": {"type": "integer", "minimum": 1, "maximum": 9},
        "channel": {"type": "string", "default": "web"},
        "currency": {"type": "string", "enum": ["EUR"]},
        "total": {"type": "integer", "readOnly": True},
        "created": {"type": "string"},
    },
    "required": ["item", "qty", "channel", "currency", "total", "created"],
    "dependentRequired": {"created": ["total", "item"]},
    "minProperties": 6,
    "maxProperties": 6,
    "additionalProperties": False,
}


def test_the_split_removes_every_kind_of_server_field() -> None:
    gen = generation_schema(FULL, {"currency": "EUR"}, ["created"])
    assert list(gen["properties"]) == ["item", "qty"]
    assert gen["required"] == ["item", "qty"]
    assert gen["dependentRequired"] == {}
    assert (gen["minProperties"], gen["maxProperties"]) == (2, 2)
    assert FULL["required"][-1] == "created"  # the input is not modified
    assert schema_defaults(FULL) == {"channel": "web"}
    assert read_only_fields(FULL) == ("total",)
    assert server_fields(FULL, {"currency": "EUR"}, ["created"]) == (
        "channel", "currency", "total", "created",
    )


def test_unknown_server_fields_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="not declared"):
        generation_schema(FULL, {"curency": "EUR"})


def test_without_server_fields_the_schema_is_unchanged() -> None:
    plain = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert generation_schema(plain) == plain


def test_the_runner_fills_then_validates_the_full_schema() -> None:
    ex = Executions()
    tool = Tool(
        "order", FULL, defaults={"currency": "EUR"}, derived=("created",),
        derive=lambda a: {"total": a["qty"] * 3, "created": "2026-12-01"}, execute=ex,
    )
    runner = ActionRunner(ScriptedModel(['{"item":"pen","qty":4}']), tool, max_tokens=40)
    out = runner.run("order 4 pens")
    assert out.status == "committed", out.failures
    assert out.args == {"item": "pen", "qty": 4, "channel": "web", "currency": "EUR",
                        "total": 12, "created": "2026-12-01"}
    assert out.text == '{"item":"pen","qty":4}'


def test_server_values_replace_what_the_model_wrote() -> None:
    open_schema = {"type": "object", "properties": {
        "note": {"type": "string"}, "approved_by": {"type": "string"}}}
    ex = Executions()
    tool = Tool("t", open_schema, defaults={"approved_by": "system"}, execute=ex)
    assert "approved_by" not in tool.generation_schema["properties"]
    runner = ActionRunner(ScriptedModel(['{"approved_by":"model"}']), tool, max_tokens=40)
    out = runner.run("x")
    assert out.status == "committed"
    assert ex.calls[0][0]["approved_by"] == "system"


def test_the_minimal_schema_compiles_with_less_work() -> None:
    from runner_helpers import byte_vocab

    comp = GrammarCompiler(byte_vocab())
    full = comp.compile_json_schema({k: v for k, v in FULL.items() if k != "dependentRequired"})
    small = comp.compile_json_schema(generation_schema(FULL, {"currency": "EUR"}, ["created"]))
    assert small.compile_work < full.compile_work  # the deterministic compile fuel
