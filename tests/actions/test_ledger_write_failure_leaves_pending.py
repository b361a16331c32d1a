"""A ledger write that fails after ``execute`` ran (the store locked, the connection lost) leaves
the entry ``pending``: ``get`` shows it, a second ``claim`` returns it instead of handing out a
second execution (the runner reports the key "in doubt")."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from formcast.actions.ledger import MemoryLedger, PostgresLedger, SqliteLedger
from postgres_server import postgres_dsn  # noqa: F401  (the session fixture)


def _assert_in_doubt(ledger: Any, key: str) -> None:
    entry = ledger.get(key)
    assert entry is not None
    assert entry.state == "pending"
    assert entry.result is None
    again = ledger.claim(key, "refund", {"amount": 5})
    assert again is not None, "a pending key was handed out for a second execution"
    assert again.state == "pending"


def test_memory_write_failure_leaves_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = MemoryLedger()
    assert ledger.claim("k", "refund", {"amount": 5}) is None

    def broken(*args: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(ledger, "_update", broken)
    with pytest.raises(OSError, match="disk on fire"):
        ledger.record_executed("k", {"refund_id": "R-1"})
    monkeypatch.undo()
    _assert_in_doubt(ledger, "k")


def test_sqlite_write_failure_on_a_locked_file_leaves_pending(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    ledger = SqliteLedger(path, busy_timeout_s=0.2)
    assert ledger.claim("k", "refund", {"amount": 5}) is None
    # another process holds the write lock past the busy timeout (the file is wedged)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            ledger.record_executed("k", {"refund_id": "R-1"})
    finally:
        other.execute("ROLLBACK")
        other.close()
    _assert_in_doubt(ledger, "k")
    ledger.close()


def test_sqlite_write_failure_on_a_closed_connection_leaves_pending(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    ledger = SqliteLedger(path)
    assert ledger.claim("k", "refund", {"amount": 5}) is None
    ledger._conn().close()  # the connection dies between execute and the record
    with pytest.raises(sqlite3.ProgrammingError):
        ledger.record_executed("k", {"refund_id": "R-1"})
    _assert_in_doubt(SqliteLedger(path), "k")  # what every other process sees


def test_postgres_write_failure_on_a_lost_connection_leaves_pending(
    postgres_dsn: str,  # noqa: F811  (the imported fixture)
) -> None:
    psycopg = pytest.importorskip("psycopg")
    ledger = PostgresLedger(postgres_dsn, table=f"t_{uuid.uuid4().hex}")
    assert ledger.claim("k", "refund", {"amount": 5}) is None
    pid = ledger._conn().info.backend_pid
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        ledger.record_executed("k", {"refund_id": "R-1"})
    _assert_in_doubt(ledger, "k")  # the ledger reconnects for the next call
    ledger.close()
