"""Idempotency at the commit boundary: one key per logical action, a duplicate never executes,
a pending key is in doubt (reported, never re-executed), the permission is re-checked right
before execute, and a ledger that fails is reported as an execution failure with nothing
half-done hidden."""

from __future__ import annotations

from typing import Any

from runner_helpers import GOOD, Executions, ScriptedModel, refund_tool

from formcast.actions import ActionRunner, Failure, Ledger, LedgerEntry, MemoryLedger, Outcome


def _runner(ex: Executions, ledger: Any = None, **tool_changes: Any) -> ActionRunner:
    return ActionRunner(ScriptedModel([GOOD]), refund_tool(ex, **tool_changes), ledger=ledger,
                        max_tokens=80)


def test_same_key_twice_executes_once() -> None:
    ex = Executions()
    runner = _runner(ex)
    a = runner.run("refund", idempotency_key="order-A1-refund")
    b = runner.run("refund", idempotency_key="order-A1-refund")
    assert (a.status, b.status) == ("committed", "duplicate")
    assert b.result == a.result
    assert b.args == a.args
    assert b.tool == "refund"
    assert len(ex.calls) == 1


class _GetBlind(MemoryLedger):
    """A ledger whose ``get`` sees nothing: the key is only found by ``claim`` (a concurrent
    request that claimed it between our check and our commit)."""

    def get(self, key: str) -> LedgerEntry | None:
        return None


def test_duplicate_found_at_claim_time() -> None:
    ex = Executions()
    ledger = _GetBlind()
    ledger.claim("k", "refund", {"order_id": "A1"})
    ledger.record_executed("k", {"refund_id": "R-earlier"})
    out = _runner(ex, ledger).run("refund", idempotency_key="k")
    assert out.status == "duplicate"
    assert out.attempts == 1
    assert out.result == {"refund_id": "R-earlier"}
    assert ex.calls == []


def test_pending_key_is_in_doubt_and_handed_off() -> None:
    ex = Executions()
    ledger = MemoryLedger()
    ledger.claim("k", "refund", {"order_id": "A1"})  # a crash after claim, before the record
    got: list[Outcome] = []
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), ledger=ledger,
                          max_tokens=80, on_hand_off=got.append)
    out = runner.run("refund", idempotency_key="k")
    assert out.status == "handed_off"
    assert out.in_doubt
    assert out.failures[-1].code == "in_doubt"
    assert got == [out]
    assert ex.calls == []
    blind = _runner(ex, _with_pending(_GetBlind(), "k")).run("refund", idempotency_key="k")
    assert (blind.status, blind.in_doubt, blind.attempts) == ("handed_off", True, 1)
    assert ex.calls == []


def _with_pending(ledger: MemoryLedger, key: str) -> MemoryLedger:
    ledger.claim(key, "refund", {})
    return ledger


def test_permission_is_rechecked_right_before_execute() -> None:
    verdicts = iter([None, Failure("permission", "revoked", "access revoked meanwhile")])
    order: list[str] = []

    def permission(principal: Any, args: Any) -> Failure | None:
        order.append("permission")
        return next(verdicts)

    ex = Executions()
    ledger = MemoryLedger()
    out = _runner(ex, ledger, permission=permission).run("refund", principal="u",
                                                          idempotency_key="k")
    assert order == ["permission", "permission"]
    assert out.status == "handed_off"
    assert out.layers[-1].layer == "permission"
    assert out.failures[-1].code == "revoked"
    assert [lr.layer for lr in out.layers].count("permission") == 1
    assert ex.calls == []
    entry = ledger.get("k")
    assert entry is not None
    assert entry.state == "failed"
    assert "not executed" in (entry.error or "")


def test_permission_recheck_happens_after_the_claim() -> None:
    events: list[str] = []

    class Spy(MemoryLedger):
        def claim(self, key: str, tool: str, args: Any) -> LedgerEntry | None:
            events.append("claim")
            return super().claim(key, tool, args)

        def record_executed(self, key: str, result: Any) -> None:
            events.append("record")
            super().record_executed(key, result)

    def permission(principal: Any, args: Any) -> None:
        events.append("permission")

    def execute(args: Any, key: str) -> dict:
        events.append("execute")
        return {}

    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(execute, permission=permission),  # type: ignore[arg-type]
                          ledger=Spy(), max_tokens=80)
    assert runner.run("refund").status == "committed"
    assert events == ["permission", "claim", "permission", "execute", "record"]


class FailingLedger:
    """A ledger whose chosen method raises."""

    def __init__(self, failing: str) -> None:
        self.inner = MemoryLedger()
        self.failing = failing

    def _maybe_fail(self, name: str) -> None:
        if name == self.failing:
            raise OSError(f"disk full in {name}")

    def claim(self, key: str, tool: str, args: Any) -> LedgerEntry | None:
        self._maybe_fail("claim")
        return self.inner.claim(key, tool, args)

    def record_executed(self, key: str, result: Any) -> None:
        self._maybe_fail("record_executed")
        self.inner.record_executed(key, result)

    def record_failed(self, key: str, error: str) -> None:
        self._maybe_fail("record_failed")
        self.inner.record_failed(key, error)

    def get(self, key: str) -> LedgerEntry | None:
        self._maybe_fail("get")
        return self.inner.get(key)


def test_failing_ledger_is_a_ledger() -> None:
    assert isinstance(FailingLedger("x"), Ledger)


def test_claim_failure_executes_nothing() -> None:
    ex = Executions()
    out = _runner(ex, FailingLedger("claim")).run("refund")
    assert out.status == "rejected"
    f = out.failures[-1]
    assert (f.layer, f.code) == ("execution", "ledger_error")
    assert "disk full" in f.message
    assert "nothing was executed" in f.message
    assert ex.calls == []


def test_get_failure_falls_through_to_the_claim() -> None:
    ex = Executions()
    assert _runner(ex, FailingLedger("get")).run("refund").status == "committed"
    assert len(ex.calls) == 1


def test_record_failure_after_execute_is_in_doubt_with_the_result() -> None:
    ex = Executions()
    ledger = FailingLedger("record_executed")
    got: list[Outcome] = []
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), ledger=ledger,
                          max_tokens=80, on_hand_off=got.append)
    out = runner.run("refund", idempotency_key="k")
    assert out.status == "handed_off"
    assert out.in_doubt
    assert out.result == {"refund_id": "R1"}  # the side effect ran: not hidden
    assert out.failures[-1].code == "ledger_write_failed"
    assert got == [out]
    assert len(ex.calls) == 1
    entry = ledger.inner.get("k")
    assert entry is not None
    assert entry.state == "pending"
    again = runner.run("refund", idempotency_key="k")  # never re-executed blindly
    assert (again.status, again.in_doubt) == ("handed_off", True)
    assert len(ex.calls) == 1


def test_record_failed_failure_after_a_raising_tool_is_in_doubt() -> None:
    ex = Executions(error=RuntimeError("gateway"))
    out = _runner(ex, FailingLedger("record_failed")).run("refund")
    assert out.status == "handed_off"
    assert out.in_doubt
    assert [f.code for f in out.failures if f.layer == "execution"] == [
        "raised", "ledger_write_failed",
    ]


def test_unserializable_result_is_recorded_as_failed_and_handed_off() -> None:
    ex = Executions(result={"when": object()})
    ledger = MemoryLedger()
    out = _runner(ex, ledger).run("refund", idempotency_key="k")
    assert out.status == "handed_off"
    assert out.failures[-1].code == "unserializable_result"
    entry = ledger.get("k")
    assert entry is not None
    assert entry.state == "failed"
    assert len(ex.calls) == 1
