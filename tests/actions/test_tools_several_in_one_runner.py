"""Several tools in one runner: the model writes ``{"tool": name, "arguments": {...}}`` under an
``anyOf`` discriminated by a ``const`` name; each tool keeps its own schema, checks and side
effect; local ``$ref`` s of each tool are re-rooted in the envelope."""

from __future__ import annotations

import json

from runner_helpers import GOOD, Executions, ScriptedModel, refund_tool

import jsonschema
from formcast.actions import ActionRunner, Tool, tools_generation_schema

TREE = {
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}},
    "required": ["root"],
    "additionalProperties": False,
    "$defs": {"node": {
        "type": "object",
        "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "maxItems": 3,
                                                          "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"],
        "additionalProperties": False,
    }},
}


def _tools() -> tuple[Tool, Tool, Executions, Executions]:
    ex_refund, ex_tree = Executions(), Executions()
    return refund_tool(ex_refund), Tool("plant", TREE, execute=ex_tree), ex_refund, ex_tree


def test_the_envelope_schema() -> None:
    refund, plant, _, _ = _tools()
    env = tools_generation_schema([refund, plant])
    assert [b["properties"]["tool"] for b in env["anyOf"]] == [
        {"const": "refund"}, {"const": "plant"},
    ]
    inner = env["$defs"]["formcast_tools"]["$defs"]["t1"]
    assert inner["properties"]["root"]["$ref"] == "#/$defs/formcast_tools/$defs/t1/$defs/node"
    # the envelope is a valid schema whose instances are exactly the tool calls
    call = {"tool": "plant", "arguments": {"root": {"v": 1, "kids": [{"v": 2}]}}}
    jsonschema.validate(call, env)
    bad = {"tool": "plant", "arguments": {"root": {"v": "x"}}}
    assert not jsonschema.Draft202012Validator(env).is_valid(bad)


def test_the_named_tool_runs_with_its_own_arguments() -> None:
    refund, plant, ex_refund, ex_tree = _tools()
    answer = json.dumps({"tool": "refund", "arguments": json.loads(GOOD)},
                        separators=(",", ":"))
    runner = ActionRunner(ScriptedModel([answer]), [refund, plant], max_tokens=120)
    out = runner.run("refund A1")
    assert out.status == "committed"
    assert out.tool == "refund"
    assert out.args is not None
    assert out.args["currency"] == "EUR"
    assert len(ex_refund.calls) == 1
    assert ex_tree.calls == []

    tree = '{"tool":"plant","arguments":{"root":{"v":1,"kids":[{"v":2,"kids":[]}]}}}'
    runner = ActionRunner(ScriptedModel([tree]), [refund, plant], max_tokens=120)
    out = runner.run("plant")
    assert out.status == "committed", out.failures
    assert out.text == tree
    assert ex_tree.calls[0][0] == {"root": {"v": 1, "kids": [{"v": 2, "kids": []}]}}


def test_the_checks_of_the_chosen_tool_apply() -> None:
    refund, plant, ex_refund, _ = _tools()
    answer = '{"tool":"refund","arguments":{"order_id":"A1","amount":120,"reason":"x"}}'
    out = ActionRunner(ScriptedModel([answer]), [refund, plant], max_tokens=120).run("x")
    assert out.failures[0].code == "amount_exceeds_order"
    assert out.tool == "refund"
    assert ex_refund.calls == []
