"""Compile in worker processes: :class:`CompilePool`, behind ``GrammarCompiler(workers=N)``.

A long compile (hundreds of milliseconds of pure Python) holds the GIL and stalls every other
request of a serving process.  A pool of ``N`` worker processes compiles instead: each worker
holds its own :class:`~formcast.index.compiler.GrammarCompiler` for the same vocabulary (and
its process-wide caches, which warm up across jobs), compiles the job's
:class:`~formcast.index.spec.ConstraintSpec` (pickled), computes the first mask and
returns the *serialized* grammar (:meth:`CompiledGrammar.serialize`); the calling thread waits
on a pipe (the GIL released) and loads the bytes (milliseconds).

* A job can be cancelled (:meth:`CompilePool.run`'s ``cancel`` event, set by
  ``GrammarCompiler.compile_async`` when its task is cancelled): the worker is killed and
  replaced on the next job, and nothing is written anywhere.
* A worker that dies (killed, out of memory, a crash in a native library) raises
  :class:`~formcast.errors.CompileWorkerError` with its pid and exit code, never a hang; the
  next job gets a fresh worker.
* Errors of the compile itself arrive with their type and message
  (``UnsupportedFeatureError`` with its ``feature`` and ``where``, ``GrammarSyntaxError`` with
  its line and column): formcast errors are rebuilt from their class name (looked up in
  :mod:`formcast.errors` only) and plain attributes; anything else becomes a
  ``CompileWorkerError`` carrying the worker's traceback.

Workers are started with the ``spawn`` method by default (safe in threaded servers; the main
module must be importable without side effects, as for any ``multiprocessing`` use).  Messages
travel through ``multiprocessing`` pipes (pickle) between this process and its own children
only: no cache file or other outside data is unpickled.

Lifetime: one per compiler; workers start on first use and live until :meth:`close` (they are
daemons: they end with the process).  Thread-safe: up to ``N`` jobs run at once, more wait.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from .. import errors as _errors
from ..errors import CompileWorkerError, FormcastError
from ..limits import CacheLimits, CompileLimits, ParserLimits
from ..vocab.vocabulary import Vocabulary

if TYPE_CHECKING:  # pragma: no cover
    from .spec import ConstraintSpec

__all__ = ["CompileCancelled", "CompilePool", "WorkerSettings", "WorkerTarget", "worker_loop"]

#: seconds between checks of a job's cancel event while it runs
_POLL_SECONDS = 0.02
#: attribute values carried with a rebuilt error (plain data only)
_PLAIN = (str, int, float, bool, type(None))


class CompileCancelled(Exception):
    """Raised by :meth:`CompilePool.run` when its job was cancelled (the worker is killed)."""


@dataclass(frozen=True)
class WorkerSettings:
    """What a worker needs to build the same compiler: the vocabulary as plain data and the
    compiler's limits."""

    tokens: tuple[bytes, ...]
    stop_token_ids: tuple[int, ...]
    special_token_ids: tuple[int, ...]
    vocab_size: int
    name: str
    fingerprint: str
    limits: CompileLimits
    parser_limits: ParserLimits
    cache_limits: CacheLimits
    pause_gc: bool

    @classmethod
    def of(
        cls,
        vocab: Vocabulary,
        limits: CompileLimits,
        parser_limits: ParserLimits,
        cache_limits: CacheLimits,
        pause_gc: bool,
    ) -> WorkerSettings:
        return cls(
            tokens=vocab.tokens,
            stop_token_ids=tuple(sorted(vocab.stop_token_ids)),
            special_token_ids=tuple(sorted(vocab.special_token_ids)),
            vocab_size=vocab.vocab_size,
            name=vocab.name,
            fingerprint=vocab.fingerprint,
            limits=limits,
            parser_limits=parser_limits,
            cache_limits=cache_limits,
            pause_gc=pause_gc,
        )


#: a worker process's entry point: ``target(conn, settings)``
WorkerTarget = Callable[[Connection, WorkerSettings], None]


def _error_payload(exc: BaseException) -> tuple[Any, ...]:
    if isinstance(exc, FormcastError) and getattr(_errors, type(exc).__name__, None) is type(exc):
        attrs = {k: v for k, v in vars(exc).items() if isinstance(v, _PLAIN)}
        return ("error", type(exc).__name__, str(exc), attrs)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))
    return ("crash", type(exc).__name__, str(exc), text)


def _rebuild_error(payload: tuple[Any, ...], pid: int) -> Exception:
    kind, name, message, extra = payload
    if kind == "error":
        cls = getattr(_errors, name, None)
        if isinstance(cls, type) and issubclass(cls, FormcastError):
            exc = cls.__new__(cls)
            Exception.__init__(exc, message)
            for k, v in dict(extra).items():
                if isinstance(k, str) and not k.startswith("__") and isinstance(v, _PLAIN):
                    setattr(exc, k, v)
            return exc
    return CompileWorkerError(
        f"the compile raised {name}: {message} in worker process {pid}; its traceback:\n{extra}",
        pid=pid,
    )


def worker_loop(conn: Connection, build: Callable[[], Any]) -> None:
    """A worker's loop: ``build()`` the compiler once, then run jobs until told to stop (the
    target of the worker processes is ``formcast.index.compiler``'s, which passes ``build``)."""
    failure: tuple[Any, ...] | None = None
    try:
        compiler = build()
    except BaseException as e:  # reported on the first job, then the worker exits
        failure = _error_payload(e)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        if failure is not None:
            conn.send(failure)
            return
        try:
            compiled = compiler.compile(job)
            program = compiled.program
            program.token_mask(program.initial_state())  # the first mask travels with it
            reply: tuple[Any, ...] = ("ok", compiled.serialize())
        except BaseException as e:
            reply = _error_payload(e)
        conn.send(reply)


class _Worker:
    __slots__ = ("conn", "proc")

    def __init__(self, ctx: Any, target: WorkerTarget, settings: WorkerSettings) -> None:
        parent, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=target, args=(child, settings), daemon=True, name="formcast-compile"
        )
        self.proc.start()
        child.close()
        self.conn: Connection = parent

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(timeout=5)
        finally:
            self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(timeout=2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()


class CompilePool:
    """``workers`` compile processes for one vocabulary (see the module docstring).

    Args:
        target: the worker processes' entry point, ``target(conn, settings)`` (a module-level
            function: ``spawn`` pickles it by name); it calls :func:`worker_loop`.
        settings: the vocabulary and limits every worker builds its compiler from.
        workers: processes, at most (started on demand).
        start_method: ``"spawn"`` (default), ``"forkserver"`` or ``"fork"`` (fork is unsafe
            in threaded processes).
    """

    def __init__(
        self,
        target: WorkerTarget,
        settings: WorkerSettings,
        workers: int,
        start_method: str = "spawn",
    ) -> None:
        self.target = target
        self.settings = settings
        self.workers = workers
        self._ctx = mp.get_context(start_method)
        self._slots = threading.BoundedSemaphore(workers)
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (idle and busy)."""
        with self._lock:
            return [w.proc.pid or 0 for w in (*self._idle, *self._busy)]

    def _acquire(self, cancel: threading.Event | None) -> _Worker:
        while not self._slots.acquire(timeout=_POLL_SECONDS):
            if cancel is not None and cancel.is_set():
                raise CompileCancelled
        try:
            with self._lock:
                if self._closed:
                    raise CompileWorkerError("the compile pool is closed")
                while self._idle:
                    w = self._idle.pop()
                    if w.proc.is_alive():
                        break
                    w.conn.close()  # died while idle: replaced silently
                else:
                    w = _Worker(self._ctx, self.target, self.settings)
                self._busy.add(w)
            return w
        except BaseException:
            self._slots.release()
            raise

    def _release(self, w: _Worker, *, keep: bool) -> None:
        with self._lock:
            self._busy.discard(w)
            kept = keep and not self._closed
            if kept:
                self._idle.append(w)
        if not kept:  # cancelled, died, or the pool closed meanwhile
            w.kill()
        self._slots.release()

    def run(self, spec: ConstraintSpec, *, cancel: threading.Event | None = None) -> bytes:
        """Run ``compiler.compile(spec)`` in a worker; the serialized grammar.

        Raises:
            CompileCancelled: ``cancel`` was set (the worker was killed).
            CompileWorkerError: the worker died, or the compile raised a non-formcast error.
            FormcastError: the compile's own error, with its type and attributes.
        """
        what = f"the compile of a {spec.kind} spec"
        w = self._acquire(cancel)
        keep = False
        try:
            try:
                w.conn.send(spec)
            except OSError:
                raise self._died(w, what) from None
            while True:
                ready = wait([w.conn, w.proc.sentinel], timeout=_POLL_SECONDS)
                if cancel is not None and cancel.is_set():
                    raise CompileCancelled
                if w.conn in ready:
                    try:
                        reply = w.conn.recv()
                    except (EOFError, OSError):
                        raise self._died(w, what) from None
                    break
                if ready:  # the sentinel only: the process ended without replying
                    raise self._died(w, what)
            keep = True
            if reply[0] == "ok" and isinstance(reply[1], bytes):
                return reply[1]
            if reply[0] in ("error", "crash") and len(reply) == 4:
                raise _rebuild_error(reply, w.proc.pid or 0)
            raise CompileWorkerError(f"unexpected reply from compile worker: {reply[0]!r}")
        finally:
            self._release(w, keep=keep)

    def _died(self, w: _Worker, what: str) -> CompileWorkerError:
        w.proc.join(timeout=5)
        pid, code = w.proc.pid or 0, w.proc.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
        return CompileWorkerError(
            f"compile worker process {pid} died ({how}) during {what}; the job was lost "
            "(a fresh worker takes the next one). Check the system log for an out-of-memory "
            "kill, or compile in-process (workers=0) to see the failure",
            pid=pid,
            exitcode=code,
        )

    def close(self) -> None:
        """Stop every worker (busy ones are killed); later jobs raise CompileWorkerError."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for w in idle:
            w.stop()
        for w in busy:
            w.proc.kill()
