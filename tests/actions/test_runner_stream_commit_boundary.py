"""``runner.stream``: text pieces as they are generated, the Outcome last, nothing executed
before the end; a stream closed mid-value ends the run cancelled with nothing executed and the
ledger untouched; metrics see every finished run once."""

from __future__ import annotations

import pytest
from runner_helpers import GOOD, TOO_MUCH, Executions, ScriptedModel, refund_tool

from formcast.actions import ActionRunner, MemoryLedger, Metrics, Outcome, RetryPolicy


def test_pieces_then_the_outcome_and_execution_only_at_the_end() -> None:
    ex = Executions()
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), max_tokens=80)
    items = list(_watch(runner.stream("refund"), ex))
    *pieces, last = items
    assert all(isinstance(p, str) and p for p in pieces)
    assert "".join(pieces) == GOOD
    assert isinstance(last, Outcome)
    assert last.status == "committed"
    assert len(ex.calls) == 1


def _watch(gen, ex: Executions):  # type: ignore[no-untyped-def]
    for item in gen:
        if isinstance(item, str):
            assert ex.calls == [], "executed before the stream ended"
        yield item


def test_stream_shows_every_attempt() -> None:
    runner = ActionRunner(ScriptedModel([TOO_MUCH, GOOD]), refund_tool(), max_tokens=80,
                          retry=RetryPolicy(max_attempts=2))
    items = list(runner.stream("refund"))
    assert "".join(i for i in items if isinstance(i, str)) == TOO_MUCH + GOOD
    assert items[-1].attempts == 2


def test_closed_mid_value_is_cancelled_and_nothing_executes() -> None:
    ex = Executions()
    ledger = MemoryLedger()
    metrics = Metrics()
    runner = ActionRunner(ScriptedModel([GOOD]), refund_tool(ex), ledger=ledger,
                          metrics=metrics, max_tokens=80)
    seen = ""
    gen = runner.stream("refund", idempotency_key="k")
    for piece in gen:
        assert isinstance(piece, str)
        seen += piece
        if seen.endswith('"amount":8'):  # mid-number: 8 of 80
            break
    gen.close()
    assert ex.calls == []
    assert ledger.get("k") is None
    d = metrics.as_dict()
    assert d["runs"] == 1
    assert d["statuses"]["not_committed"] == 1
    assert d["finish_reasons"]["cancelled"] == 1


def test_metrics_record_each_run_once_with_timings() -> None:
    metrics = Metrics()
    runner = ActionRunner(ScriptedModel([TOO_MUCH, GOOD]), refund_tool(), max_tokens=80,
                          metrics=metrics, retry=RetryPolicy(max_attempts=2))
    runner.run("refund")
    d = metrics.as_dict()
    assert d["runs"] == 1
    assert d["attempts"] == 2
    assert d["retries"] == 1
    assert d["statuses"]["committed"] == 1
    assert d["latency"]["ttft_s"]["count"] == 1


def test_the_outcome_is_the_generators_return_value() -> None:
    gen = ActionRunner(ScriptedModel([GOOD]), refund_tool(), max_tokens=80).stream("refund")
    items = [next(gen) for _ in range(len(GOOD) + 1)]  # one piece per byte, then the Outcome
    assert isinstance(items[-1], Outcome)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value is items[-1]
