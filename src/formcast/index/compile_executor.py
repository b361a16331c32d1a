"""Where a :class:`~formcast.index.compiler.GrammarCompiler`'s compiles run: in the calling
thread, in worker processes, or awaited from asyncio — and how they are cancelled.

* **Workers** (``workers=N``): a :class:`~formcast.index.workers.CompilePool` compiles a
  :class:`~formcast.index.spec.ConstraintSpec` (pickled) in another process; this process
  waits on a pipe with the GIL released and loads the serialized grammar (milliseconds).  A
  spec that cannot be pickled, or that may not travel (``spec.remote`` False: grammar IR),
  compiles in-process.
* **Async** (:meth:`CompileExecutor.run_async`): the compile runs in a thread of this
  executor, so the event loop never blocks; cancelling the awaiting task sets the compile's
  cancel switch (:class:`CancelSwitch`): a worker job is killed (the worker is replaced on the
  next job), an in-process compile's budget runs out at its next fuel charge.  Nothing is
  written to the disk cache by a cancelled compile (the compiler checks the switch).

Lifetime: one per compiler; the worker processes start on first use and the threads on the
first async compile; :meth:`close` stops both.  Thread-safe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import pickle
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..limits import WorkBudget
from ..vocab.vocabulary import Vocabulary
from .compiled import CompiledGrammar
from .workers import CompileCancelled, CompilePool, WorkerSettings, WorkerTarget

if TYPE_CHECKING:  # pragma: no cover
    from .spec import ConstraintSpec

__all__ = ["CancelSwitch", "CompileExecutor", "current_cancel"]


class CancelSwitch:
    """A compile's cancel switch: set by :meth:`CompileExecutor.run_async` when its task is
    cancelled.  A worker job is killed; an in-process compile's budget runs out at its next
    charge.  Lifetime: one compile."""

    __slots__ = ("budgets", "event")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.budgets: list[WorkBudget] = []

    def attach(self, budget: WorkBudget) -> None:
        """Make ``budget`` run out when the switch is (or was already) set."""
        self.budgets.append(budget)
        if self.event.is_set():
            budget.deadline = float("-inf")

    def set(self) -> None:
        self.event.set()
        for b in list(self.budgets):
            b.deadline = float("-inf")  # the next fuel charge raises: the compile unwinds

    def is_set(self) -> bool:
        return self.event.is_set()


_CANCEL: contextvars.ContextVar[CancelSwitch | None] = contextvars.ContextVar(
    "formcast_compile_cancel", default=None
)


def current_cancel() -> CancelSwitch | None:
    """The cancel switch of the async compile running in this thread (None: a plain call)."""
    return _CANCEL.get()


class CompileExecutor:
    """The worker pool and the async threads of one compiler (see the module docstring).

    Args:
        vocab: the compiler's vocabulary (what a worker's grammar is loaded for).
        target: the worker processes' entry point (module-level: ``spawn`` pickles it).
        settings: what a worker builds its compiler from (None without workers).
        workers: worker processes (0: every compile in-process).
        start_method: ``"spawn"``, ``"forkserver"`` or ``"fork"``.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        target: WorkerTarget,
        settings: WorkerSettings | None,
        workers: int,
        start_method: str,
    ) -> None:
        self.vocab = vocab
        self.workers = workers
        self.pool = (
            CompilePool(target, settings, workers, start_method)
            if workers and settings is not None
            else None
        )
        #: the threads of ``run_async`` (made on first use)
        self.threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run_remote(
        self, spec: ConstraintSpec, cancel: CancelSwitch | None
    ) -> CompiledGrammar | None:
        """``spec`` compiled by a worker and loaded here; None to compile in-process (no
        workers, a spec that may not travel, or one that cannot be pickled).

        Raises:
            asyncio.CancelledError: ``cancel`` was set (the worker was killed).
            CompileWorkerError, and the compile's own errors (see
            :meth:`~formcast.index.workers.CompilePool.run`).
        """
        pool = self.pool
        if pool is None or not spec.remote:
            return None
        try:
            pickle.dumps(spec)
        except Exception:  # e.g. a class defined in a function: compile it here
            return None
        try:
            data = pool.run(spec, cancel=None if cancel is None else cancel.event)
        except CompileCancelled:
            raise asyncio.CancelledError from None
        return CompiledGrammar.deserialize(data, self.vocab)

    async def run_async(self, compile_fn: Callable[[], CompiledGrammar]) -> CompiledGrammar:
        """``await`` ``compile_fn()`` run in a thread of this executor under a fresh cancel
        switch (see :func:`current_cancel`); cancelling the awaiting task sets it."""
        cancel = CancelSwitch()

        def run() -> CompiledGrammar:
            token = _CANCEL.set(cancel)
            try:
                return compile_fn()
            finally:
                _CANCEL.reset(token)

        with self._lock:
            if self.threads is None:
                self.threads = concurrent.futures.ThreadPoolExecutor(
                    max_workers=max(self.workers, 1), thread_name_prefix="formcast-compile"
                )
            threads = self.threads
        future = asyncio.get_running_loop().run_in_executor(threads, run)
        try:
            return await future
        except asyncio.CancelledError:
            cancel.set()  # the thread kills the worker / unwinds the compile, writes nothing
            raise

    def close(self) -> None:
        """Stop the worker processes and the async threads (a running compile is killed).
        Later compiles run in-process."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.close()
        threads, self.threads = self.threads, None
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)

    def worker_pids(self) -> list[int]:
        """Process ids of the running compile workers (empty without workers)."""
        return [] if self.pool is None else self.pool.worker_pids()
