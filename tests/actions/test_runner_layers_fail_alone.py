"""Each validation layer failing alone, with its own structured failures: syntax, schema,
business, facts, inspection, permission, execution.  A failing layer stops the attempt (the
later layers have no result), its failures are never folded into another layer's, and user
checks that raise or return nonsense become failures of their own layer, never crashes."""

from __future__ import annotations

from runner_helpers import (
    GOOD,
    TOO_MUCH,
    UNKNOWN_ORDER,
    Executions,
    ScriptedModel,
    refund_tool,
)

from formcast.actions import ActionRunner, Failure, LayerResult, Outcome, RetryPolicy

NO_RETRY = RetryPolicy(retry_on=())


def _run(answer: str, **tool_changes: object) -> tuple[Outcome, Executions]:
    ex = Executions()
    runner = ActionRunner(ScriptedModel([answer]), refund_tool(ex, **tool_changes),
                          max_tokens=80, retry=NO_RETRY)
    return runner.run("refund"), ex


def _layers(out: Outcome) -> list[str]:
    return [lr.layer for lr in out.layers]


def _only_last_fails(out: Outcome) -> LayerResult:
    *ok, last = out.layers
    assert all(lr.ok and not lr.failures for lr in ok)
    assert not last.ok
    assert last.failures
    assert all(f.layer == last.layer for f in last.failures)
    return last


def test_syntax_alone() -> None:
    ex = Executions()
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), max_tokens=12, retry=NO_RETRY)
    out = runner.run("refund")
    assert _layers(out) == ["syntax"]
    assert _only_last_fails(out).failures[0].code == "max_tokens"


def test_schema_alone_from_a_server_field() -> None:
    # the model cannot write a bad currency (it is not generated): the server's default can
    out, ex = _run(GOOD, defaults={"currency": "GBP"})
    assert _layers(out) == ["syntax", "schema"]
    last = _only_last_fails(out)
    assert [(f.code, f.pointer) for f in last.failures] == [("enum", "/currency")]
    assert ex.calls == []


def test_schema_lists_every_error_with_pointers() -> None:
    out, _ = _run('{"order_id":"A1","reason":"damaged"}', defaults={"currency": "GBP"},
                  derived=("amount",), derive=lambda a: {"amount": 0})
    codes = {(f.code, f.pointer) for f in out.failures}
    assert codes == {("enum", "/currency"), ("minimum", "/amount")}


def test_business_alone() -> None:
    out, ex = _run(TOO_MUCH)
    assert _layers(out) == ["syntax", "schema", "business"]
    f = _only_last_fails(out).failures[0]
    assert (f.layer, f.code, f.pointer) == ("business", "amount_exceeds_order", "/amount")
    assert "120" in f.message
    assert ex.calls == []


def test_business_collects_every_rule() -> None:
    def a(args: dict) -> Failure:
        return Failure("business", "a", "first")

    def b(args: dict) -> list[Failure]:
        return [Failure("business", "b1", "second"), Failure("business", "b2", "third")]

    out, _ = _run(GOOD, rules=[a, b])
    assert [f.code for f in out.failures] == ["a", "b1", "b2"]


def test_facts_alone() -> None:
    out, ex = _run(UNKNOWN_ORDER)
    assert _layers(out) == ["syntax", "schema", "business", "facts"]
    f = _only_last_fails(out).failures[0]
    assert (f.layer, f.code, f.pointer) == ("facts", "unknown_order", "/order_id")
    assert ex.calls == []


def test_inspection_alone_gets_every_model_string_with_its_pointer() -> None:
    seen: list[tuple[str, str]] = []

    def inspect(text: str, pointer: str) -> Failure | None:
        seen.append((pointer, text))
        if "damaged" in text:
            return Failure("inspection", "flagged", "looks suspicious")
        return None

    out, ex = _run(GOOD, inspect=inspect)
    assert _layers(out)[-1] == "inspection"
    f = _only_last_fails(out).failures[0]
    assert (f.code, f.pointer) == ("flagged", "/reason")  # the pointer is filled in
    assert seen == [("/order_id", "A1"), ("/reason", "damaged")]  # not the server's currency
    assert ex.calls == []


def test_permission_alone_is_handed_off_never_retried() -> None:
    ex = Executions()
    got: list[Outcome] = []
    runner = ActionRunner(
        ScriptedModel([GOOD]),
        refund_tool(ex, permission=lambda who, args: None if who == "admin" else Failure(
            "permission", "forbidden", f"{who} may not refund")),
        max_tokens=80, retry=RetryPolicy(max_attempts=3), on_hand_off=got.append,
    )
    out = runner.run("refund", principal="mallory")
    assert out.status == "handed_off"
    assert out.attempts == 1
    assert _layers(out)[-1] == "permission"
    assert _only_last_fails(out).failures[0].code == "forbidden"
    assert got == [out]
    assert ex.calls == []
    assert runner.run("refund", principal="admin").status == "committed"


def test_execution_alone_is_recorded_as_failed() -> None:
    ex = Executions(error=RuntimeError("payment gateway down"))
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), max_tokens=80)
    out = runner.run("refund", idempotency_key="k")
    assert out.status == "rejected"
    last = _only_last_fails(out)
    assert last.layer == "execution"
    assert last.failures[0].code == "raised"
    assert "payment gateway down" in last.failures[0].message
    assert len(ex.calls) == 1
    entry = runner.ledger.get("k")
    assert entry is not None
    assert entry.state == "failed"
    assert "payment gateway down" in (entry.error or "")
    again = runner.run("refund", idempotency_key="k")
    assert again.status == "duplicate"
    assert again.failures[0].code == "recorded_failure"
    assert len(ex.calls) == 1


def test_a_rule_that_raises_is_a_failure_of_its_layer() -> None:
    def broken(args: dict) -> None:
        raise KeyError("missing column")

    out, ex = _run(GOOD, rules=[broken])
    f = out.failures[0]
    assert (out.status, f.layer, f.code) == ("rejected", "business", "raised")
    assert "KeyError" in f.message
    assert "missing column" in f.message
    assert ex.calls == []


def test_checks_that_return_nonsense_fail_closed() -> None:
    out, _ = _run(GOOD, facts=[lambda args: False])
    assert out.failures[0].code == "bad_return"
    assert out.failures[0].layer == "facts"
    out, _ = _run(GOOD, rules=[lambda args: "fine"])
    assert out.failures[0].code == "bad_return"


def test_a_failure_labelled_for_another_layer_stays_in_the_layer_that_ran_it() -> None:
    out, _ = _run(GOOD, rules=[lambda args: Failure("facts", "x", "mislabelled")])
    assert out.layers[-1].layer == "business"
    assert out.failures[0].layer == "business"


def test_checks_cannot_change_what_is_executed() -> None:
    def meddle(args: dict) -> None:
        args["amount"] = 999

    out, ex = _run(GOOD, rules=[meddle], facts=[meddle])
    assert out.status == "committed"
    assert ex.calls[0][0]["amount"] == 80


NO_REASON = '{"order_id":"A1","amount":80}'


def test_derive_fills_server_fields_and_its_errors_are_schema_failures() -> None:
    out, ex = _run(NO_REASON, derived=("reason",),
                   derive=lambda a: {"reason": a["order_id"] + "!"})
    assert out.text == NO_REASON  # the model did not write the derived field
    assert out.status == "committed"
    assert ex.calls[0][0]["reason"] == "A1!"

    def boom(args: dict) -> dict:
        raise ValueError("clock")

    out, _ = _run(NO_REASON, derived=("reason",), derive=boom)
    assert (out.failures[0].layer, out.failures[0].code) == ("schema", "derive_raised")
    out, _ = _run(NO_REASON, derived=("reason",), derive=lambda a: {"amount": 3})
    assert out.failures[0].code == "derive_undeclared"
