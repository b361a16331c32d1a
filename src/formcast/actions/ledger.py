"""The idempotency ledgers: :class:`MemoryLedger`, :class:`SqliteLedger`, :class:`PostgresLedger`.

Each implements the :class:`~formcast.actions.types.Ledger` protocol: ``claim`` atomically
records ``pending`` for a new key (the caller now owns the one execution) or returns the
existing entry untouched; the owner then records ``executed`` (with the tool's result) or
``failed`` (with the error).  An entry changes state once, from ``pending``; a ``pending`` entry
that stays (a crash or a failed write between execute and the record) is *in doubt* and is
never claimed again: an operator decides.

Arguments and results are stored as JSON text (``json.dumps`` with ``ensure_ascii=True`` and
``allow_nan=False``: strict JSON, exact round-trip of every Unicode string, lone surrogates and
NUL included).  A value that is not JSON-serializable raises
:class:`~formcast.errors.ConfigurationError`: in ``claim`` before anything is written; in
``record_executed`` after recording the entry as ``failed`` with the reason (the side effect
did run: the key is consumed, a duplicate request gets the failure, not a second execution).
Dictionary keys come back as strings and tuples as lists (JSON has nothing else).

Errors of the store itself (a locked or vanished SQLite file, a lost PostgreSQL connection)
propagate as the driver's exception (``sqlite3.Error``, ``psycopg.Error``); the runner treats a
failed ``record_*`` as "in doubt".

Lifetime and cost:

* ``MemoryLedger``: one process, lives as long as the object; a ``claim`` costs a lock and a
  JSON round-trip of the arguments (microseconds).
* ``SqliteLedger``: one file, safe for threads and processes on one machine (WAL journal,
  ``BEGIN IMMEDIATE`` transactions, a busy timeout; not on a network file system).  One
  connection per thread (and per process: a forked child opens its own), opened on first use;
  a ``claim`` is one write transaction with a full ``fsync`` (about 0.1-2 ms on a local SSD).
* ``PostgresLedger``: a table in a PostgreSQL database, safe across machines.  One
  connection per thread, opened on first use and reopened after it breaks; a ``claim`` is one
  transaction (two statements at most), a network round-trip or two.  ``psycopg`` (3.x) is
  imported when the ledger is made: ``pip install "formcast[postgres]"``.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from .._optional import require
from ..errors import ConfigurationError, MissingDependencyError
from .types import LedgerEntry, LedgerState

__all__ = ["SCHEMA_VERSION", "MemoryLedger", "PostgresLedger", "SqliteLedger"]

#: The version of the stored layout (SQLite's ``formcast_meta`` table, PostgreSQL's table
#: comment).  A store written by a newer formcast is refused, not misread.
SCHEMA_VERSION = 1

_APPLICATION = "formcast-ledger"
_STATES: tuple[LedgerState, ...] = ("pending", "executed", "failed")


# --------------------------------------------------------------------------------------------
# JSON and the shared state rules


def _dumps_args(tool: str, args: Mapping[str, Any]) -> str:
    try:
        return json.dumps(dict(args), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"the arguments of tool {tool!r} are not JSON-serializable ({type(exc).__name__}: "
            f"{exc}); the ledger stores arguments as JSON: give it dicts, lists, str, int, "
            "float (finite), bool and None only. Nothing was recorded."
        ) from exc


def _dumps_result(tool: str, key: str, result: Any) -> tuple[str | None, str | None]:
    """The result's JSON text, or ``(None, reason)`` when it cannot be stored."""
    try:
        return json.dumps(result, ensure_ascii=True, allow_nan=False), None
    except (TypeError, ValueError) as exc:
        reason = (
            f"tool {tool!r} returned a result that is not JSON-serializable "
            f"({type(exc).__name__}: {exc}) for idempotency key {key!r}; the ledger stores "
            "results as JSON: make execute return dicts, lists, str, int, float (finite), bool "
            "and None only (e.g. datetime.isoformat(), str(decimal)). The entry was recorded "
            "as failed: the side effect ran, it will not run again for this key."
        )
        return None, reason


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _not_pending(key: str, entry: LedgerEntry | None, wanted: str) -> ConfigurationError:
    if entry is None:
        return ConfigurationError(
            f"ledger: cannot record key {key!r} as {wanted}: it was never claimed; call "
            "claim(key, tool, args) first and execute only when it returns None"
        )
    return ConfigurationError(
        f"ledger: cannot record key {key!r} as {wanted}: it is already {entry.state} "
        f"(tool {entry.tool!r}); an entry changes state once, from pending"
    )


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key:
        raise ConfigurationError(
            f"ledger: the idempotency key must be a non-empty str, got {key!r}"
        )


def _make_entry(
    key: str, tool: str, args: str, state: str, result: str | None, error: str | None,
    created_at: float, updated_at: float,
) -> LedgerEntry:
    if state not in _STATES:
        raise ConfigurationError(
            f"ledger: key {key!r} has the unknown state {state!r} (expected one of "
            f"{', '.join(_STATES)}); the store was changed by something other than formcast"
        )
    st: LedgerState = "pending" if state == "pending" else (
        "executed" if state == "executed" else "failed")
    return LedgerEntry(
        key=key, tool=tool, args=json.loads(args), state=st, result=_loads(result),
        error=error, created_at=float(created_at), updated_at=float(updated_at),
    )


# --------------------------------------------------------------------------------------------
# MemoryLedger


class MemoryLedger:
    """A ledger in a dictionary: thread-safe, one process, gone with the object.

    Values are stored as JSON (copies: later changes to the caller's objects do not reach the
    record) so that it behaves exactly like the persistent ledgers.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # key -> (tool, args json, state, result json, error, created, updated)
        self._rows: dict[str, tuple[str, str, str, str | None, str | None, float, float]] = {}

    def _entry(self, key: str) -> LedgerEntry | None:
        row = self._rows.get(key)
        return None if row is None else _make_entry(key, *row)

    def claim(self, key: str, tool: str, args: Mapping[str, Any]) -> LedgerEntry | None:
        _check_key(key)
        text = _dumps_args(tool, args)
        with self._lock:
            if key in self._rows:
                return self._entry(key)
            now = time.time()
            self._rows[key] = (tool, text, "pending", None, None, now, now)
            return None

    def _update(self, key: str, state: str, result: str | None, error: str | None) -> None:
        """Move a pending entry to ``state`` (the caller holds the lock)."""
        tool, args, _, _, _, created, _ = self._rows[key]
        self._rows[key] = (tool, args, state, result, error, created, time.time())

    def record_executed(self, key: str, result: Any) -> None:
        with self._lock:
            entry = self._entry(key)
            if entry is None or entry.state != "pending":
                raise _not_pending(key, entry, "executed")
            text, reason = _dumps_result(entry.tool, key, result)
            if text is None:
                self._update(key, "failed", None, reason)
                raise ConfigurationError(reason)
            self._update(key, "executed", text, None)

    def record_failed(self, key: str, error: str) -> None:
        with self._lock:
            entry = self._entry(key)
            if entry is not None and entry.state == "failed":
                return  # idempotent: the first error is kept
            if entry is None or entry.state != "pending":
                raise _not_pending(key, entry, "failed")
            self._update(key, "failed", None, str(error))

    def get(self, key: str) -> LedgerEntry | None:
        with self._lock:
            return self._entry(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)


# --------------------------------------------------------------------------------------------
# SqliteLedger

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS formcast_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS formcast_actions (
    key        TEXT PRIMARY KEY,
    tool       TEXT NOT NULL,
    args       TEXT NOT NULL,              -- JSON
    state      TEXT NOT NULL CHECK (state IN ('pending', 'executed', 'failed')),
    result     TEXT,                       -- JSON (executed)
    error      TEXT,                       -- failed
    created_at REAL NOT NULL,              -- Unix time, seconds
    updated_at REAL NOT NULL
);
"""
_SQLITE_COLUMNS = "key, tool, args, state, result, error, created_at, updated_at"


_L = TypeVar("_L", bound="_StoreLedger")


class _StoreLedger:
    """What the SQL ledgers share: ``record_executed`` / ``record_failed`` / ``get`` on top of
    a subclass's ``_conn`` (a connection for this thread), ``_select`` (read one entry) and
    ``_update`` (pending → ``state`` atomically; returns the entry that prevented it, else
    None).  Each call is one or two short transactions."""

    _all_lock: threading.Lock
    _all: list[Any]
    _local: threading.local

    def close(self) -> None:
        """Close every connection this ledger opened (in any thread)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    def __enter__(self: _L) -> _L:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _conn(self) -> Any:
        raise NotImplementedError

    def _select(self, conn: Any, key: str) -> LedgerEntry | None:
        raise NotImplementedError

    def _update(
        self, key: str, state: str, result: str | None, error: str | None
    ) -> LedgerEntry | None:
        raise NotImplementedError

    def record_executed(self, key: str, result: Any) -> None:
        entry = self.get(key)
        if entry is None or entry.state != "pending":
            raise _not_pending(key, entry, "executed")
        text, reason = _dumps_result(entry.tool, key, result)
        if text is None:
            self._update(key, "failed", None, reason)
            raise ConfigurationError(reason)
        clash = self._update(key, "executed", text, None)
        if clash is not None:
            raise _not_pending(key, clash, "executed")

    def record_failed(self, key: str, error: str) -> None:
        clash = self._update(key, "failed", None, str(error))
        if clash is not None and clash.state != "failed":
            raise _not_pending(key, clash, "failed")

    def get(self, key: str) -> LedgerEntry | None:
        return self._select(self._conn(), key)


class SqliteLedger(_StoreLedger):
    """A ledger in an SQLite file: safe across threads and processes on one machine.

    Args:
        path: the database file (created with its directory's permissions when missing).  A
            file that is not a formcast ledger (another SQLite database, or not SQLite at all)
            raises :class:`~formcast.errors.ConfigurationError`.
        busy_timeout_s: how long a writer waits for another process's transaction before
            ``sqlite3.OperationalError: database is locked`` (default 30 s).

    Every write is one ``BEGIN IMMEDIATE`` transaction in WAL mode with ``synchronous=FULL``
    (a recorded claim survives a power cut).  ``close()`` closes every connection this object
    opened; the object is also a context manager.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0) -> None:
        text = os.fspath(path)
        if text == "" or text == ":memory:" or text.startswith("file::memory:"):
            raise ConfigurationError(
                f"SqliteLedger({text!r}): an in-memory SQLite database is private to one "
                "connection, and this ledger opens one per thread; use MemoryLedger() for an "
                "in-process ledger, or give a file path"
            )
        if busy_timeout_s <= 0:
            raise ConfigurationError(
                f"SqliteLedger: busy_timeout_s must be > 0, got {busy_timeout_s!r}"
            )
        self.path = Path(text)
        self.busy_timeout_s = float(busy_timeout_s)
        self._local = threading.local()
        self._all_lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []
        self._init_schema(self._conn())

    # -- connections --------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            return conn
        conn = self._open()
        self._local.conn = conn
        self._local.pid = os.getpid()
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_s, isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.OperationalError as exc:
            raise ConfigurationError(
                f"SqliteLedger: cannot open {str(self.path)!r} ({exc}); check that the "
                "directory exists and is writable"
            ) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.DatabaseError as exc:
            conn.close()
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise
            raise self._not_a_ledger(f"SQLite says: {exc}") from exc
        if mode is None or str(mode[0]).lower() != "wal":
            conn.close()
            raise ConfigurationError(
                f"SqliteLedger: {str(self.path)!r} cannot use the WAL journal (got "
                f"{mode!r}); the ledger needs a local file system"
            )
        return conn

    def _not_a_ledger(self, why: str) -> ConfigurationError:
        return ConfigurationError(
            f"SqliteLedger: {str(self.path)!r} is not a formcast ledger ({why}); give the "
            "path of a new file or of a file an SqliteLedger created"
        )

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "formcast_meta" not in tables:
                if tables:
                    raise self._not_a_ledger(
                        f"it holds the tables {', '.join(sorted(tables))} and no formcast_meta"
                    )
                for stmt in _SQLITE_SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.executemany(
                    "INSERT INTO formcast_meta (name, value) VALUES (?, ?)",
                    [("application", _APPLICATION), ("schema_version", str(SCHEMA_VERSION))],
                )
            else:
                meta = dict(conn.execute("SELECT name, value FROM formcast_meta").fetchall())
                if meta.get("application") != _APPLICATION:
                    raise self._not_a_ledger(
                        f"formcast_meta names the application {meta.get('application')!r}"
                    )
                version = meta.get("schema_version", "")
                if not version.isdigit() or int(version) > SCHEMA_VERSION:
                    raise ConfigurationError(
                        f"SqliteLedger: {str(self.path)!r} has ledger schema version "
                        f"{version!r}; this formcast reads version {SCHEMA_VERSION} and "
                        "older: upgrade formcast"
                    )
                if "formcast_actions" not in tables:
                    raise self._not_a_ledger("formcast_actions table missing")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # -- the protocol -------------------------------------------------------------------------

    def _select(self, conn: sqlite3.Connection, key: str) -> LedgerEntry | None:
        row = conn.execute(
            f"SELECT {_SQLITE_COLUMNS} FROM formcast_actions WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else _make_entry(*row)

    def claim(self, key: str, tool: str, args: Mapping[str, Any]) -> LedgerEntry | None:
        _check_key(key)
        text = _dumps_args(tool, args)
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            now = time.time()
            cur = conn.execute(
                "INSERT INTO formcast_actions (key, tool, args, state, created_at, updated_at) "
                "VALUES (?, ?, ?, 'pending', ?, ?) ON CONFLICT (key) DO NOTHING",
                (key, tool, text, now, now),
            )
            existing = None if cur.rowcount == 1 else self._select(conn, key)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return existing

    def _update(self, key: str, state: str, result: str | None, error: str | None
                ) -> LedgerEntry | None:
        """Move a pending entry to ``state`` in one transaction: ``None`` when done, else the
        entry as it is (not pending); a key never claimed raises ConfigurationError."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(
                "UPDATE formcast_actions SET state = ?, result = ?, error = ?, updated_at = ? "
                "WHERE key = ? AND state = 'pending'",
                (state, result, error, time.time(), key),
            )
            clash = None if cur.rowcount == 1 else self._select(conn, key)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if cur.rowcount != 1 and clash is None:
            raise _not_pending(key, None, state)
        return clash


# --------------------------------------------------------------------------------------------
# PostgresLedger

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_PG_COMMENT = f"{_APPLICATION} schema {SCHEMA_VERSION}"
_PG_COMMENT_RE = re.compile(rf"^{_APPLICATION} schema (\d+)$")


def _require_psycopg() -> Any:
    try:
        return require("psycopg")
    except MissingDependencyError as exc:
        raise MissingDependencyError(
            f"PostgresLedger needs psycopg 3 ({exc}); install it: "
            "pip install \"formcast[postgres]\" (or pip install \"psycopg[binary]>=3.2\")"
        ) from exc


class PostgresLedger(_StoreLedger):
    """A ledger in a PostgreSQL table: safe across processes and machines.

    Args:
        dsn: a libpq connection string or URI (``"postgresql://user@host/db"``,
            ``"host=/run/postgresql dbname=app"``).
        table: the table's name, optionally schema-qualified (``"ops.formcast_actions"``);
            created (with a comment recording the schema version) when missing.  An existing
            table without that comment raises :class:`~formcast.errors.ConfigurationError`.
        connect_timeout_s: libpq's ``connect_timeout``.

    ``claim`` is one transaction: ``INSERT ... ON CONFLICT (key) DO NOTHING RETURNING key``,
    then, when nothing was inserted, a ``SELECT`` of the winner's row (READ COMMITTED: it
    sees the row the conflicting transaction committed).  ``args``/``result`` are ``text``
    columns holding JSON (``args::jsonb`` queries them), timestamps ``timestamptz`` from the
    server's clock.
    """

    def __init__(self, dsn: str, table: str = "formcast_actions", *,
                 connect_timeout_s: float = 10.0) -> None:
        parts = table.split(".")
        if not 1 <= len(parts) <= 2 or not all(_IDENT.match(p) for p in parts):
            raise ConfigurationError(
                f"PostgresLedger: table {table!r} is not a plain identifier (letters, digits, "
                "'_', at most 63 characters, optionally 'schema.table')"
            )
        self._psycopg = _require_psycopg()
        self._sql = require("psycopg.sql")
        self.dsn = dsn
        self.table = table
        self.connect_timeout_s = float(connect_timeout_s)
        self._ident = self._sql.Identifier(*parts)
        self._local = threading.local()
        self._all_lock = threading.Lock()
        self._all: list[Any] = []
        self._init_table()

    # -- connections --------------------------------------------------------------------------

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if (conn is not None and getattr(self._local, "pid", None) == os.getpid()
                and not conn.closed and not conn.broken):
            return conn
        conn = self._psycopg.connect(
            self.dsn, autocommit=True, connect_timeout=max(1, round(self.connect_timeout_s)),
        )
        # claim relies on READ COMMITTED (its SELECT sees the conflicting row once committed),
        # whatever the server's default_transaction_isolation says
        conn.isolation_level = self._psycopg.IsolationLevel.READ_COMMITTED
        self._local.conn = conn
        self._local.pid = os.getpid()
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _q(self, template: str) -> Any:
        return self._sql.SQL(template).format(table=self._ident)

    def _init_table(self) -> None:
        conn = self._conn()
        with conn.transaction():
            # concurrent creators queue here (CREATE TABLE IF NOT EXISTS alone can race)
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                         (f"{_APPLICATION}:{self.table}",))
            reg = conn.execute("SELECT to_regclass(%s)", (self._ident.as_string(conn),)
                               ).fetchone()[0]
            if reg is None:
                conn.execute(self._q(
                    "CREATE TABLE {table} ("
                    " key text PRIMARY KEY,"
                    " tool text NOT NULL,"
                    " args text NOT NULL,"
                    " state text NOT NULL CHECK (state IN ('pending', 'executed', 'failed')),"
                    " result text,"
                    " error text,"
                    " created_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
                    " updated_at timestamptz NOT NULL DEFAULT clock_timestamp())"))
                conn.execute(self._q("COMMENT ON TABLE {table} IS ")
                             + self._sql.Literal(_PG_COMMENT))
                return
            comment = conn.execute("SELECT obj_description(%s::regclass, 'pg_class')",
                                   (self._ident.as_string(conn),)).fetchone()[0]
        match = _PG_COMMENT_RE.match(comment or "")
        if match is None:
            raise ConfigurationError(
                f"PostgresLedger: table {self.table!r} exists and is not a formcast ledger "
                f"(its comment is {comment!r}, expected {_PG_COMMENT!r}); give another "
                "table= name"
            )
        if int(match.group(1)) > SCHEMA_VERSION:
            raise ConfigurationError(
                f"PostgresLedger: table {self.table!r} has ledger schema version "
                f"{match.group(1)}; this formcast reads version {SCHEMA_VERSION} and older: "
                "upgrade formcast"
            )

    # -- the protocol -------------------------------------------------------------------------

    _SELECT = ("SELECT key, tool, args, state, result, error, extract(epoch FROM created_at), "
               "extract(epoch FROM updated_at) FROM {table} WHERE key = %s")

    def _select(self, conn: Any, key: str) -> LedgerEntry | None:
        row = conn.execute(self._q(self._SELECT), (key,)).fetchone()
        return None if row is None else _make_entry(*row)

    def claim(self, key: str, tool: str, args: Mapping[str, Any]) -> LedgerEntry | None:
        _check_key(key)
        text = _dumps_args(tool, args)
        conn = self._conn()
        with conn.transaction():
            won = conn.execute(self._q(
                "INSERT INTO {table} (key, tool, args, state) VALUES (%s, %s, %s, 'pending') "
                "ON CONFLICT (key) DO NOTHING RETURNING key"), (key, tool, text)).fetchone()
            return None if won is not None else self._select(conn, key)

    def _update(self, key: str, state: str, result: str | None, error: str | None
                ) -> LedgerEntry | None:
        conn = self._conn()
        with conn.transaction():
            done = conn.execute(self._q(
                "UPDATE {table} SET state = %s, result = %s, error = %s, "
                "updated_at = clock_timestamp() WHERE key = %s AND state = 'pending' "
                "RETURNING key"), (state, result, error, key)).fetchone()
            if done is not None:
                return None
            clash = self._select(conn, key)
        if clash is None:
            raise _not_pending(key, None, state)
        return clash

