"""Every status and every finish reason of ``ActionRunner.run``, with a scripted byte-level
model: committed, rejected, handed_off, duplicate, not_committed; completed, max_tokens,
dead_end, stop, cancelled, timeout.  Nothing but a committed run executes."""

from __future__ import annotations

import pytest
from runner_helpers import GOOD, TOO_MUCH, Executions, ScriptedModel, refund_tool

from formcast.actions import (
    OUTCOME_FINISH_REASONS,
    STATUSES,
    ActionRunner,
    MemoryLedger,
    Metrics,
    RetryPolicy,
    Tool,
)

SEEN_STATUSES: set[str] = set()
SEEN_FINISH: set[str] = set()


def _seen(outcome):  # type: ignore[no-untyped-def]
    SEEN_STATUSES.add(outcome.status)
    SEEN_FINISH.add(outcome.finish_reason)
    return outcome


def test_committed_executes_once_with_the_server_fields() -> None:
    ex = Executions()
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), max_tokens=80)
    out = _seen(runner.run("refund order A1"))
    assert out.status == "committed"
    assert out.finish_reason == "completed"
    assert out.committed
    assert [lr.layer for lr in out.layers] == [
        "syntax", "schema", "business", "facts", "inspection", "permission", "execution",
    ]
    assert all(lr.ok for lr in out.layers)
    assert out.args == {"order_id": "A1", "amount": 80, "reason": "damaged", "currency": "EUR"}
    assert out.tool == "refund"
    assert out.result == {"refund_id": "R1"}
    assert out.attempts == 1
    assert len(ex.calls) == 1
    assert ex.calls[0][1] == out.idempotency_key
    assert out.text == GOOD
    assert out.history == (out.layers,)


def test_rejected_when_the_failing_layer_is_not_retried() -> None:
    ex = Executions()
    runner = ActionRunner(ScriptedModel([TOO_MUCH]), refund_tool(ex), max_tokens=80,
                          retry=RetryPolicy(retry_on=("syntax", "schema")))
    out = _seen(runner.run("refund"))
    assert out.status == "rejected"
    assert out.layers[-1].layer == "business"
    assert out.failures[0].code == "amount_exceeds_order"
    assert out.failures[0].pointer == "/amount"
    assert ex.calls == []


def test_handed_off_when_attempts_run_out_and_the_hook_gets_it() -> None:
    ex = Executions()
    got = []
    runner = ActionRunner(ScriptedModel([TOO_MUCH]), refund_tool(ex), max_tokens=80,
                          retry=RetryPolicy(max_attempts=2), on_hand_off=got.append)
    out = _seen(runner.run("refund"))
    assert out.status == "handed_off"
    assert out.attempts == 2
    assert len(out.history) == 2
    assert got == [out]
    assert ex.calls == []


def test_duplicate_returns_the_recorded_result_without_executing() -> None:
    ex = Executions()
    ledger = MemoryLedger()
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), ledger=ledger, max_tokens=80)
    first = runner.run("refund", idempotency_key="k-1")
    second = _seen(runner.run("refund", idempotency_key="k-1"))
    assert first.status == "committed"
    assert second.status == "duplicate"
    assert second.result == first.result
    assert second.attempts == 0  # answered from the ledger before any generation
    assert len(ex.calls) == 1


def test_max_tokens_is_a_syntax_failure_never_executed() -> None:
    ex = Executions()
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), max_tokens=10,
                          retry=RetryPolicy(retry_on=()))
    out = _seen(runner.run("refund"))
    assert out.finish_reason == "max_tokens"
    assert out.status == "rejected"
    assert out.layers == out.layers[:1]
    assert out.failures[0].layer == "syntax"
    assert out.failures[0].code == "max_tokens"
    assert out.text == GOOD[:10]
    assert out.args is None
    assert ex.calls == []


def test_dead_end_carries_the_diagnostic() -> None:
    schema = {"type": "object", "properties": {"code": {"const": "xq"}}, "required": ["code"],
              "additionalProperties": False}
    ex = Executions()
    tool = Tool("t", schema, execute=ex)
    runner = ActionRunner(ScriptedModel(['{"code":"xq"}'], missing=(ord("q"),)), tool,
                          max_tokens=40)
    out = _seen(runner.run("go"))
    assert out.finish_reason == "dead_end"
    assert out.status == "handed_off"  # syntax is retried by default; one attempt: exhausted
    assert out.failures[0].code == "dead_end"
    assert "no token" in out.failures[0].message
    assert ex.calls == []


def test_stop_string_is_a_syntax_failure() -> None:
    ex = Executions()
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), max_tokens=80, stop="A1",
                          retry=RetryPolicy(retry_on=()))
    out = _seen(runner.run("refund"))
    assert out.finish_reason == "stop"
    assert out.status == "rejected"
    assert out.failures[0].code == "stop"
    assert ex.calls == []


def test_cancelled_stream_is_not_committed_and_counted() -> None:
    ex = Executions()
    metrics = Metrics()
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), max_tokens=80, metrics=metrics)
    items = runner.stream("refund")
    first = next(items)
    assert isinstance(first, str)
    items.close()
    assert ex.calls == []
    d = metrics.as_dict()
    assert metrics.runs == 1
    assert d["finish_reasons"]["cancelled"] == 1
    assert d["statuses"]["not_committed"] == 1
    SEEN_STATUSES.add("not_committed")
    SEEN_FINISH.add("cancelled")


def test_timeout_is_not_committed() -> None:
    ex = Executions()
    model = ScriptedModel([GOOD], delay=lambda done: 0.3 if len(done) > 5 else 0.0)
    runner = ActionRunner(model, refund_tool(ex), max_tokens=80, timeout_s=0.1)
    out = _seen(runner.run("refund"))
    assert out.finish_reason == "timeout"
    assert out.status == "not_committed"
    assert out.layers == ()
    assert out.attempts == 1
    assert ex.calls == []
    assert 5 < len(out.text) < len(GOOD)


def test_every_status_and_finish_reason_was_seen() -> None:
    # runs last in this file (pytest keeps the file's order)
    assert set(STATUSES) <= SEEN_STATUSES
    assert set(OUTCOME_FINISH_REASONS) <= SEEN_FINISH


@pytest.mark.parametrize("bad", [{"max_tokens": -1}, {"temperature": -1.0}, {"timeout_s": 0},
                                 {"seed": "x"}, {"chat": "yes"}])
def test_bad_options_fail_at_construction(bad: dict) -> None:
    from formcast import ConfigurationError

    with pytest.raises(ConfigurationError):
        ActionRunner(ScriptedModel([GOOD]), refund_tool(), **bad)


def test_unknown_override_fails_before_anything_runs() -> None:
    from formcast import ConfigurationError

    model = ScriptedModel([GOOD])
    runner = ActionRunner(model, refund_tool(), max_tokens=80)
    with pytest.raises(ConfigurationError, match="unknown options"):
        runner.run("refund", max_token=3)
    with pytest.raises(ConfigurationError, match="idempotency_key"):
        runner.run("refund", idempotency_key="")
    assert model.prompts == []
    assert runner.run("refund", max_tokens=5).finish_reason == "max_tokens"
