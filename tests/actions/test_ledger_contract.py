"""The Ledger contract, one parametrized suite for MemoryLedger, SqliteLedger and PostgresLedger
(the last against a real server the tests start: tests/postgres_server.py)."""

from __future__ import annotations

import datetime
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from formcast.actions.ledger import MemoryLedger, PostgresLedger, SqliteLedger
from formcast.actions.types import Ledger
from formcast.errors import ConfigurationError
from postgres_server import postgres_dsn  # noqa: F401  (the session fixture)

KINDS = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=KINDS)
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryLedger()
    elif request.param == "sqlite":
        with SqliteLedger(tmp_path / "ledger.db") as led:
            yield led
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        with PostgresLedger(dsn, table=f"t_{uuid.uuid4().hex}") as led:
            yield led


def test_every_ledger_is_a_ledger(ledger: Any) -> None:
    assert isinstance(ledger, Ledger)


def test_claim_a_new_key_returns_none_and_records_pending(ledger: Any) -> None:
    assert ledger.get("k1") is None
    assert ledger.claim("k1", "refund", {"order": "A-1", "amount": 5}) is None
    entry = ledger.get("k1")
    assert entry is not None
    assert (entry.key, entry.tool, entry.state) == ("k1", "refund", "pending")
    assert dict(entry.args) == {"order": "A-1", "amount": 5}
    assert entry.result is None
    assert entry.error is None
    assert entry.created_at > 0
    assert entry.updated_at >= entry.created_at


def test_a_duplicate_claim_returns_the_existing_entry_untouched(ledger: Any) -> None:
    assert ledger.claim("k", "refund", {"amount": 1}) is None
    again = ledger.claim("k", "other_tool", {"amount": 999})
    assert again is not None
    assert again.state == "pending"
    # the first claim's record stands: the second's tool and args were not written
    assert again.tool == "refund"
    assert dict(again.args) == {"amount": 1}


def test_executed_records_the_result_and_duplicates_see_it(ledger: Any) -> None:
    ledger.claim("k", "refund", {"amount": 1})
    ledger.record_executed("k", {"refund_id": "R-9", "ok": True, "n": [1, 2.5, None]})
    entry = ledger.claim("k", "refund", {"amount": 1})
    assert entry is not None
    assert entry.state == "executed"
    assert entry.result == {"refund_id": "R-9", "ok": True, "n": [1, 2.5, None]}
    assert ledger.get("k") == entry


def test_failed_records_the_error_and_duplicates_see_it(ledger: Any) -> None:
    ledger.claim("k", "refund", {})
    ledger.record_failed("k", "PaymentDeclined: card expired")
    entry = ledger.claim("k", "refund", {})
    assert entry is not None
    assert entry.state == "failed"
    assert entry.error == "PaymentDeclined: card expired"
    assert entry.result is None
    ledger.record_failed("k", "a second error")  # idempotent: the first error is kept
    got = ledger.get("k")
    assert got is not None
    assert got.error == "PaymentDeclined: card expired"


def test_an_entry_changes_state_once(ledger: Any) -> None:
    ledger.claim("k", "refund", {})
    ledger.record_executed("k", 1)
    with pytest.raises(ConfigurationError, match="already executed"):
        ledger.record_executed("k", 2)
    with pytest.raises(ConfigurationError, match="already executed"):
        ledger.record_failed("k", "late")
    got = ledger.get("k")
    assert got is not None
    assert (got.state, got.result) == ("executed", 1)


def test_recording_an_unclaimed_key_is_a_configuration_error(ledger: Any) -> None:
    with pytest.raises(ConfigurationError, match="never claimed"):
        ledger.record_executed("nope", 1)
    with pytest.raises(ConfigurationError, match="never claimed"):
        ledger.record_failed("nope", "x")
    assert ledger.get("nope") is None


UNICODE_ARGS = {
    "name": "Zoë 李 🦀 ﬁ \u200d",
    "escapes": "quote\" backslash\\ newline\n tab\t nul\x00 bell\x07 \u2028",
    "lone_surrogate": "\ud800",
    "nested": {"a": [{"b": []}, {}], "ключ": "значение"},
    "numbers": [0, -1, 1.5e300, -0.0, 12345678901234567890],
    "flags": [True, False, None],
}


def test_args_and_results_round_trip_as_json_unicode_included(ledger: Any) -> None:
    key = "ключ-🔑-\u00e9"
    assert ledger.claim(key, "tööl", UNICODE_ARGS) is None
    ledger.record_executed(key, {"echo": UNICODE_ARGS, "text": "✓ done"})
    entry = ledger.get(key)
    assert entry is not None
    assert entry.key == key
    assert entry.tool == "tööl"
    assert dict(entry.args) == UNICODE_ARGS
    assert entry.result == {"echo": UNICODE_ARGS, "text": "✓ done"}
    for scalar in (None, 0, "plain", [1, "two"]):
        k = f"scalar-{scalar!r}"
        ledger.claim(k, "t", {})
        ledger.record_executed(k, scalar)
        got = ledger.get(k)
        assert got is not None
        assert got.result == scalar


def test_the_record_is_a_copy_of_the_callers_objects(ledger: Any) -> None:
    args: dict[str, Any] = {"items": [1]}
    ledger.claim("k", "t", args)
    args["items"].append(2)
    got = ledger.get("k")
    assert got is not None
    assert dict(got.args) == {"items": [1]}


def test_non_serializable_args_are_refused_before_anything_is_written(ledger: Any) -> None:
    with pytest.raises(ConfigurationError, match="arguments of tool 'refund'"):
        ledger.claim("k", "refund", {"when": datetime.date(2026, 1, 1)})
    assert ledger.get("k") is None
    with pytest.raises(ConfigurationError, match="not JSON-serializable"):
        ledger.claim("k", "refund", {"x": float("nan")})
    assert ledger.get("k") is None


def test_a_non_serializable_result_records_failed_and_names_the_tool(ledger: Any) -> None:
    ledger.claim("k", "refund", {})
    with pytest.raises(ConfigurationError) as info:
        ledger.record_executed("k", {"at": datetime.datetime(2026, 1, 1)})
    message = str(info.value)
    assert "'refund'" in message
    assert "isoformat" in message
    assert "failed" in message
    entry = ledger.get("k")
    assert entry is not None
    assert entry.state == "failed"
    assert entry.error is not None
    assert "not JSON-serializable" in entry.error
    # the side effect ran: a duplicate request gets the failure, never a second execution
    again = ledger.claim("k", "refund", {})
    assert again is not None
    assert again.state == "failed"


def test_an_empty_key_is_refused(ledger: Any) -> None:
    with pytest.raises(ConfigurationError, match="non-empty str"):
        ledger.claim("", "t", {})


def test_threads_racing_for_one_key_make_one_owner(ledger: Any) -> None:
    n = 8
    barrier = threading.Barrier(n)
    owners: list[int] = []
    seen: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        barrier.wait(timeout=30)
        entry = ledger.claim("race", "t", {"i": i})
        with lock:
            if entry is None:
                owners.append(i)
            else:
                seen.append(entry.state)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(owners) == 1, owners
    assert len(seen) == n - 1
    assert set(seen) == {"pending"}
    got = ledger.get("race")
    assert got is not None
    assert dict(got.args) == {"i": owners[0]}
