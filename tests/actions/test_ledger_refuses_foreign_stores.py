"""A store that is not a formcast ledger (another SQLite database, a file that is not SQLite, a
PostgreSQL table of someone else's, a newer schema version) is refused with a clear
ConfigurationError, never written to; a ledger reopened on its own store reads it back."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from formcast.actions.ledger import SCHEMA_VERSION, MemoryLedger, PostgresLedger, SqliteLedger
from formcast.errors import ConfigurationError, MissingDependencyError
from postgres_server import postgres_dsn  # noqa: F401  (the session fixture)


def test_sqlite_reopened_reads_its_entries_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SqliteLedger(path) as first:
        first.claim("k", "refund", {"amount": 5})
        first.record_executed("k", {"ok": True})
    with SqliteLedger(path) as again:
        entry = again.get("k")
        assert entry is not None
        assert (entry.state, entry.result) == ("executed", {"ok": True})
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    meta = dict(conn.execute("SELECT name, value FROM formcast_meta").fetchall())
    assert meta == {"application": "formcast-ledger", "schema_version": str(SCHEMA_VERSION)}
    conn.close()


def test_sqlite_refuses_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    with pytest.raises(ConfigurationError, match="is not a formcast ledger"):
        SqliteLedger(path)
    assert path.read_bytes().startswith(b"these are my notes")


def test_sqlite_refuses_another_applications_database(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    with pytest.raises(ConfigurationError, match=r"not a formcast ledger.*users"):
        SqliteLedger(path)


def test_sqlite_refuses_a_newer_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    SqliteLedger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE formcast_meta SET value = ? WHERE name = 'schema_version'",
                 (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(ConfigurationError, match="upgrade formcast"):
        SqliteLedger(path)


def test_sqlite_refuses_an_in_memory_database() -> None:
    with pytest.raises(ConfigurationError, match="MemoryLedger"):
        SqliteLedger(":memory:")


def test_memory_ledger_counts_its_entries() -> None:
    ledger = MemoryLedger()
    ledger.claim("a", "t", {})
    ledger.claim("a", "t", {})
    ledger.claim("b", "t", {})
    assert len(ledger) == 2


def test_postgres_refuses_a_bad_table_name() -> None:
    with pytest.raises(ConfigurationError, match="not a plain identifier"):
        PostgresLedger("dbname=x", table="actions; DROP TABLE users")


def test_postgres_without_psycopg_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import formcast.actions.ledger as ledger_module

    def missing(module: str) -> object:
        raise MissingDependencyError(f"{module} is not installed")

    monkeypatch.setattr(ledger_module, "require", missing)
    with pytest.raises(MissingDependencyError, match=r"formcast\[postgres\]"):
        PostgresLedger("dbname=x")


def test_postgres_creates_reopens_and_refuses_foreign_tables(
    postgres_dsn: str,  # noqa: F811  (the imported fixture)
) -> None:
    psycopg = pytest.importorskip("psycopg")
    table = f"t_{uuid.uuid4().hex}"
    with PostgresLedger(postgres_dsn, table=table) as first:
        first.claim("k", "refund", {"amount": 5})
        first.record_executed("k", {"ok": True})
    with PostgresLedger(postgres_dsn, table=table) as again:  # the table exists: reused
        entry = again.get("k")
        assert entry is not None
        assert (entry.state, entry.result) == ("executed", {"ok": True})
    foreign = f"users_{uuid.uuid4().hex}"
    newer = f"t_{uuid.uuid4().hex}"
    PostgresLedger(postgres_dsn, table=newer).close()
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE TABLE {foreign} (id int PRIMARY KEY)")
        admin.execute(f"COMMENT ON TABLE {newer} IS "
                      f"'formcast-ledger schema {SCHEMA_VERSION + 1}'")
    with pytest.raises(ConfigurationError, match="is not a formcast ledger"):
        PostgresLedger(postgres_dsn, table=foreign)
    with pytest.raises(ConfigurationError, match="upgrade formcast"):
        PostgresLedger(postgres_dsn, table=newer)
    # a schema-qualified name works too
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS ops")
    with PostgresLedger(postgres_dsn, table=f"ops.{table}") as qualified:
        assert qualified.get("k") is None
        assert qualified.claim("k", "refund", {}) is None
