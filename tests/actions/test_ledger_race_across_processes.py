"""N=8 processes (multiprocessing, spawn) race to claim one key and "execute" it (append a line
to a file): exactly one execution per key, and every other process sees the entry.  SQLite (one
file) and PostgreSQL (a real server the tests start).  Several rounds, each behind a barrier,
so that a non-atomic claim (read, then write) is caught, not just possible.  The store does not
exist before the race: the processes also race to create it."""

from __future__ import annotations

import json
import multiprocessing
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from formcast.actions.ledger import PostgresLedger, SqliteLedger
from postgres_server import postgres_dsn  # noqa: F401  (the session fixture)

N_PROCESSES = 8
ROUNDS = 6


def _open(kind: str, target: str, table: str) -> Any:
    return SqliteLedger(target) if kind == "sqlite" else PostgresLedger(target, table=table)


def _worker(kind: str, target: str, table: str, keys: list[str], barrier: Any,
            out: str, wid: int) -> None:
    """One racing process: for each key, wait for all, claim, execute when it owns the key.

    Errors are reported (not raised) so that every round still runs and the parent's check of
    the executions says what went wrong."""
    ledger = _open(kind, target, table)
    seen: dict[str, str | None] = {}
    errors: list[str] = []
    for key in keys:
        barrier.wait(timeout=120)
        try:
            entry = ledger.claim(key, "append", {"key": key, "worker": wid})
            if entry is None:
                with open(Path(out) / f"{key}.executions", "a", encoding="utf-8") as fh:
                    fh.write(f"{wid}\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                seen[key] = None
                ledger.record_executed(key, {"by": wid})
            else:
                seen[key] = entry.state
        except Exception as exc:
            errors.append(f"{key}: {type(exc).__name__}: {exc}")
    report = {"seen": seen, "errors": errors}
    (Path(out) / f"worker{wid}.json").write_text(json.dumps(report), encoding="utf-8")
    ledger.close()


def _race(kind: str, target: str, tmp_path: Path) -> None:
    table = f"race_{uuid.uuid4().hex}"
    out = tmp_path / "out"
    out.mkdir()
    keys = [f"key-{r}-{uuid.uuid4().hex[:8]}" for r in range(ROUNDS)]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(N_PROCESSES)
    procs = [ctx.Process(target=_worker, args=(kind, target, table, keys, barrier, str(out), i))
             for i in range(N_PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    for p in procs:
        if p.is_alive():
            p.kill()
    for key in keys:
        path = out / f"{key}.executions"
        lines = path.read_text(encoding="utf-8").split() if path.exists() else []
        assert len(lines) == 1, f"{key} executed {len(lines)} times, by workers {lines}"
    assert [p.exitcode for p in procs] == [0] * N_PROCESSES, "a racing process failed"
    reports = [json.loads((out / f"worker{i}.json").read_text(encoding="utf-8"))
               for i in range(N_PROCESSES)]
    assert [r["errors"] for r in reports] == [[]] * N_PROCESSES
    seen = [r["seen"] for r in reports]
    ledger = _open(kind, target, table)
    try:
        for key in keys:
            lines = (out / f"{key}.executions").read_text(encoding="utf-8").split()
            assert len(lines) == 1, f"{key} executed {len(lines)} times, by workers {lines}"
            owners = [i for i, rep in enumerate(seen) if rep[key] is None]
            assert owners == [int(lines[0])]
            # every other process got the entry (pending while the owner ran, or executed)
            others = [rep[key] for i, rep in enumerate(seen) if i != owners[0]]
            assert len(others) == N_PROCESSES - 1
            assert set(others) <= {"pending", "executed"}
            entry = ledger.get(key)
            assert entry is not None
            assert entry.state == "executed"
            assert entry.result == {"by": owners[0]}
            assert dict(entry.args) == {"key": key, "worker": owners[0]}
    finally:
        ledger.close()


@pytest.mark.slow
def test_sqlite_processes_racing_for_one_key_execute_it_once(tmp_path: Path) -> None:
    _race("sqlite", str(tmp_path / "ledger.db"), tmp_path)


@pytest.mark.slow
def test_postgres_processes_racing_for_one_key_execute_it_once(
    postgres_dsn: str, tmp_path: Path,  # noqa: F811  (the imported fixture)
) -> None:
    _race("postgres", postgres_dsn, tmp_path)
