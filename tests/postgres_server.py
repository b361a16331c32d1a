"""A throwaway PostgreSQL server for the tests: ``initdb`` into a temporary directory, started
with ``pg_ctl`` listening only on a unix socket there (no TCP port), trust authentication, one
database made with ``createdb``; stopped (``pg_ctl stop -m immediate``) and deleted at the end
of the pytest session.

Use the session-scoped fixture from a test module::

    from postgres_server import postgres_dsn  # noqa: F401  (the fixture)

    def test_x(postgres_dsn: str) -> None: ...

Every module that imports the fixture shares one server per pytest process (started on first
use, ~1-2 s).  The binaries are found on ``PATH``, then under ``/usr/lib/postgresql/*/bin``
(Debian's ``postgresql`` package; ``.ci/run`` installs it), or in ``$FORMCAST_PG_BIN``.  As
root (``initdb`` refuses root) the server runs as the ``postgres`` user (else ``nobody``)
through ``runuser``.  ``FORMCAST_TEST_POSTGRES_DSN`` points the tests at an existing server
instead.  When no server can be had the tests are skipped with the reason, except in CI
(``CI=true``), where they fail.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _assets import in_ci

__all__ = ["PostgresServer", "postgres_dsn", "shared_server"]

DSN_ENV = "FORMCAST_TEST_POSTGRES_DSN"
BIN_ENV = "FORMCAST_PG_BIN"
DBNAME = "formcast_test"


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server can be started here (the message says why and what to install)."""


def find_bindir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``createdb`` (raises with a reason)."""
    candidates: list[Path] = []
    if os.environ.get(BIN_ENV):
        candidates.append(Path(os.environ[BIN_ENV]))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                    key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parent.name
                                   .split(".")], reverse=True)
    candidates.extend(Path(p) for p in debian)
    for cand in candidates:
        if all((cand / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres", "createdb")):
            return cand
    raise ServerUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres, createdb) not found on PATH, in "
        f"${BIN_ENV} or under /usr/lib/postgresql/*/bin; install Debian's postgresql package "
        "(sudo apt-get install -y postgresql; .ci/run does it) or set "
        f"{DSN_ENV} to an existing server's DSN"
    )


class PostgresServer:
    """One server process in its own temporary directory (``start()`` / ``stop()``)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.user: str | None = None  # the OS user to run as (None: the current one)
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    pwd.getpwnam(name)
                except KeyError:
                    continue
                self.user = name
                break
            else:
                raise ServerUnavailable(
                    "running as root and neither a 'postgres' nor a 'nobody' user exists to "
                    "run initdb as (initdb refuses root)"
                )
            if shutil.which("runuser") is None:
                raise ServerUnavailable("running as root and runuser(1) is missing")
        # a short path: a unix socket's path is limited to ~107 bytes
        self.dir = Path(tempfile.mkdtemp(prefix="fcpg-", dir="/tmp"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.started = False
        self.startup_s = 0.0
        self.dsn = f"host={self.dir} port=5432 user=postgres dbname={DBNAME}"

    def _run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  cwd=self.dir, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ServerUnavailable(f"{' '.join(cmd)} timed out after {timeout} s") from exc
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise ServerUnavailable(
                f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
                + (f"\nserver log:\n{log}" if log else "")
            )
        return done

    def start(self) -> None:
        t0 = time.perf_counter()
        if self.user is not None:
            os.chown(self.dir, pwd.getpwnam(self.user).pw_uid, -1)
        os.chmod(self.dir, 0o755)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
        # only the unix socket in self.dir (listen_addresses=''), no fsync (throwaway data)
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "-o", f"-k {self.dir} -c listen_addresses='' -F -c max_connections=100",
                  "start")
        self.started = True
        self._run("createdb", "-h", str(self.dir), "-U", "postgres", DBNAME)
        self.startup_s = time.perf_counter() - t0

    def stop(self) -> None:
        if self.started:
            self.started = False
            with contextlib.suppress(ServerUnavailable):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop",
                          timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


_SHARED: PostgresServer | str | None = None  # the server, or why there is none


def shared_server(config: pytest.Config | None = None) -> PostgresServer:
    """This process's server, started on first call (raises :class:`ServerUnavailable`).

    It is stopped when pytest's ``config`` is cleaned up (session end), else at exit."""
    global _SHARED
    if isinstance(_SHARED, PostgresServer):
        return _SHARED
    if isinstance(_SHARED, str):
        raise ServerUnavailable(_SHARED)
    try:
        server = PostgresServer(find_bindir())
        try:
            server.start()
        except BaseException:
            server.stop()
            raise
    except ServerUnavailable as exc:
        _SHARED = str(exc)
        raise
    _SHARED = server

    def _stop() -> None:
        global _SHARED
        server.stop()
        _SHARED = None

    if config is not None:
        config.add_cleanup(_stop)
    atexit.register(server.stop)
    return server


@pytest.fixture(scope="session")
def postgres_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """The DSN of a database on a throwaway server (skip outside CI when none can start)."""
    external = os.environ.get(DSN_ENV)
    if external:
        yield external
        return
    try:
        server = shared_server(request.config)
    except ServerUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI is set and no PostgreSQL server could be started: {exc}")
        pytest.skip(f"no PostgreSQL server: {exc}")
    yield server.dsn
