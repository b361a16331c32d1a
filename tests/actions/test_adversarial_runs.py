"""The adversarial regression set, through the whole runner (seed 001: "Unicode and escaping,
extremely deep nesting, empty arrays, long enums, streaming disconnections, and keywords not
supported by the implementation"; plus a timeout mid-number, a rule that raises and a ledger
that fails).  Each case says which layer it strikes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from runner_helpers import GOOD, Executions, ScriptedModel, refund_tool

from formcast import UnsupportedFeatureError
from formcast.actions import ActionRunner, Failure, LedgerEntry, MemoryLedger, RetryPolicy, Tool

NOTE = {"type": "object", "properties": {"note": {"type": "string", "maxLength": 80}},
        "required": ["note"], "additionalProperties": False}


# -- Unicode and escapes: the parser and the inspection layer see the decoded value -------------
@pytest.mark.parametrize(("written", "value"), [
    (r'{"note":"na\u00efve \"quoted\" back\\slash"}', 'naïve "quoted" back\\slash'),
    ('{"note":"emoji 😀 and ünïcödé"}', "emoji 😀 and ünïcödé"),
    (r'{"note":"pair \ud83d\ude00 tab\t nl\n"}', "pair 😀 tab\t nl\n"),
    (r'{"note":"\u003c/untrusted\u003e"}', "</untrusted>"),
])
def test_unicode_and_escapes(written: str, value: str) -> None:
    ex = Executions()
    seen: list[tuple[str, str]] = []
    tool = Tool("note", NOTE, execute=ex,
                inspect=lambda text, pointer: seen.append((pointer, text)))
    model = ScriptedModel([written.encode("utf-8")])
    pieces = [p for p in ActionRunner(model, tool, max_tokens=120).stream("x")]
    out = pieces[-1]
    assert out.status == "committed", out.failures
    assert out.args == {"note": value}
    assert seen == [("/note", value)]
    assert ex.calls[0][0] == {"note": value}
    assert "".join(p for p in pieces[:-1] if isinstance(p, str)) == written


# -- deep nesting: state size, recursion through $ref --------------------------------------------
DEEP = {
    "type": "object",
    "properties": {"n": {"$ref": "#/$defs/n"}},
    "required": ["n"],
    "additionalProperties": False,
    "$defs": {"n": {"type": "object", "properties": {"n": {"$ref": "#/$defs/n"},
                                                     "leaf": {"type": "boolean"}},
                    "additionalProperties": False}},
}


def _depth(value: Any) -> int:
    return 1 + _depth(value["n"]) if isinstance(value, dict) and "n" in value else 0


def test_deep_nesting() -> None:
    depth = 40
    text = '{"n":' * depth + '{"leaf":true}' + "}" * depth
    ex = Executions()
    limits: list[int] = []

    def not_too_deep(args: dict) -> Failure | None:
        limits.append(_depth(args))
        return None if _depth(args) <= 50 else Failure("business", "too_deep", "nesting > 50")

    tool = Tool("deep", DEEP, rules=[not_too_deep], execute=ex)
    out = ActionRunner(ScriptedModel([text]), tool, max_tokens=400).run("x")
    assert out.status == "committed", out.failures
    assert limits == [depth]
    assert json.dumps(ex.calls[0][0], separators=(",", ":")) == text


# -- empty arrays: bounds -------------------------------------------------------------------------
ITEMS = {"type": "object",
         "properties": {"items": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}},
         "required": ["items"], "additionalProperties": False}


def test_empty_array_is_a_value_and_a_rule_can_refuse_it() -> None:
    ex = Executions()
    ok = ActionRunner(ScriptedModel(['{"items":[]}']), Tool("t", ITEMS, execute=ex),
                      max_tokens=40).run("x")
    assert ok.status == "committed"
    assert ex.calls[0][0] == {"items": []}

    def non_empty(args: dict) -> Failure | None:
        return Failure("business", "empty", "nothing to do", "/items") if not args["items"] \
            else None

    out = ActionRunner(ScriptedModel(['{"items":[]}']),
                       Tool("t", ITEMS, rules=[non_empty], execute=Executions()),
                       max_tokens=40, retry=RetryPolicy(retry_on=())).run("x")
    assert (out.status, out.failures[0].pointer) == ("rejected", "/items")


def test_array_beyond_its_bound_cannot_be_written() -> None:
    ex = Executions()
    out = ActionRunner(ScriptedModel(['{"items":[1,2,3,4,5]}']), Tool("t", ITEMS, execute=ex),
                       max_tokens=40).run("x")
    assert out.status == "committed"
    assert out.args is not None
    items = out.args["items"]
    assert len(items) == 4  # no fifth element could be written: the grammar closed the array
    assert items[:3] == [1, 2, 3]


# -- long enums: state size ----------------------------------------------------------------------
def test_long_enum() -> None:
    codes = [f"SKU-{i:04d}" for i in range(600)]
    schema = {"type": "object", "properties": {"sku": {"enum": codes}}, "required": ["sku"],
              "additionalProperties": False}
    ex = Executions()
    runner = ActionRunner(ScriptedModel(['{"sku":"SKU-0599"}']), Tool("t", schema, execute=ex),
                          max_tokens=40)
    out = runner.run("x")
    assert out.status == "committed"
    assert out.args == {"sku": "SKU-0599"}
    off = ActionRunner(ScriptedModel(['{"sku":"SKU-0600"}']), Tool("t", schema, execute=ex),
                       max_tokens=40).run("x")
    assert off.args is not None
    assert off.args["sku"] in codes  # never outside the enum


# -- streaming disconnection: the commit boundary ------------------------------------------------
def test_stream_closed_mid_string_value() -> None:
    ex = Executions()
    ledger = MemoryLedger()
    runner = ActionRunner(ScriptedModel(['{"note":"ünïcödé text"}']),
                          Tool("note", NOTE, execute=ex), ledger=ledger, max_tokens=80)
    gen = runner.stream("x", idempotency_key="k")
    text = ""
    for piece in gen:
        assert isinstance(piece, str)
        text += piece
        if "cöd" in text:
            break
    gen.close()
    assert ex.calls == []
    assert ledger.get("k") is None


# -- a deadline mid-number -----------------------------------------------------------------------
def test_timeout_mid_number() -> None:
    ex = Executions()
    answer = '{"order_id":"A1","amount":80,"reason":"x"}'

    def slow_in_number(done: bytes) -> float:
        return 0.4 if done.endswith(b'"amount":8') else 0.0

    runner = ActionRunner(ScriptedModel([answer], delay=slow_in_number), refund_tool(ex),
                          max_tokens=80, timeout_s=0.2, retry=RetryPolicy(max_attempts=3))
    out = runner.run("x")
    assert (out.status, out.finish_reason, out.attempts) == ("not_committed", "timeout", 1)
    assert out.text.endswith('"amount":80')  # cut inside the number: never completed
    assert out.args is None
    assert ex.calls == []


# -- unsupported keywords: compilation compatibility ---------------------------------------------
@pytest.mark.parametrize("keyword", [
    {"uniqueItems": True, "contains": {"minimum": 3}},  # run-time uniqueItems, not with contains
    {"$dynamicRef": "#meta"},
])
def test_unsupported_keyword_is_refused_at_construction(keyword: dict) -> None:
    prop = {"type": "array", "items": {"type": "integer"}, **keyword}
    tool = Tool("t", {"type": "object", "properties": {"xs": prop}}, execute=Executions())
    with pytest.raises(UnsupportedFeatureError) as info:
        ActionRunner(ScriptedModel(["{}"]), tool)
    assert "tool(s) ['t']" in "".join(getattr(info.value, "__notes__", []))


# -- a rule that raises, a ledger that fails -----------------------------------------------------
def test_a_rule_that_raises_is_reported_not_propagated() -> None:
    def rule(args: dict) -> None:
        raise ZeroDivisionError("division by zero")

    ex = Executions()
    out = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex, rules=[rule]), max_tokens=80,
                       retry=RetryPolicy(max_attempts=2)).run("x")
    assert out.status == "handed_off"
    assert out.attempts == 2
    assert {(f.layer, f.code) for f in out.failures} == {("business", "raised")}
    assert ex.calls == []


class _BrokenLedger(MemoryLedger):
    def claim(self, key: str, tool: str, args: Any) -> LedgerEntry | None:
        raise ConnectionError("ledger unreachable")


def test_a_ledger_that_fails() -> None:
    ex = Executions()
    out = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), ledger=_BrokenLedger(),
                       max_tokens=80).run("x")
    assert out.status == "rejected"
    assert out.failures[-1].code == "ledger_error"
    assert "unreachable" in out.failures[-1].message
    assert ex.calls == []
