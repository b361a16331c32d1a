"""The serving engine: a bounded queue in front of the model, compiles off the event loop.

Two ways to run the model (``ServerConfig.batching``):

* **continuous batching** (the default when formcast has a batched decoder for the model:
  llama.cpp, transformers, ``CallableModel`` -- :func:`~formcast.model.batched_select.
  batched_decoder_for`): every choice of every request is a request of a
  :class:`~formcast.generation.batching.ContinuousBatcher` with ``max_batch`` slots.  Its
  worker thread (``formcast-batcher``) decodes the running sequences together, one model call
  per step; a request takes a free slot at the next step after it arrives and frees it when it
  ends (finished, cancelled, timed out), so no request waits for another to finish while a
  slot is free.  Queued beyond the slots: FIFO.  Admission (the 429) counts requests:
  ``max_batch + max_queue`` in flight at most.
* **sequential** (``batching=False``, or a model without a batched decoder): the job FIFO of
  one model thread, described below.

::

    HTTP request (event loop)
      -> engine.admit()            in flight > 1 + max_queue ?  429 + Retry-After
      -> await engine.compile(...) GrammarCompiler.compile_async: a worker process or thread,
                                   the compiled-grammar cache shared by every request
      -> engine.run(job)           the job waits in the model thread's FIFO; the thread
                                   tokenizes, then drives formcast.generation.stream and
                                   posts each text piece back to the loop
      <- Piece / Finished events   (async iterator; closing it cancels the generation)

Generation is serialized: one model, one sequence at a time (the model wrappers are not
thread-safe), on the thread ``formcast-model``.  A job is cancelled by setting its ``cancel``
event -- the HTTP layer does it when the client disconnects, and leaving :meth:`Engine.run`
early does it too: the model thread checks the event before every model call and between
pieces, closes the stream and calls the model no more.  The request's deadline
(``request_timeout_s`` from its arrival) is checked at the same points and ends the generation
with ``finish="timeout"``.

With batching the same events come from the batcher: each choice's text pieces (whole
characters) and its :class:`Finished`; choices of one request (``n``) are decoded together and
their events interleave.  The job's ``cancel`` event and deadline reach the batcher as the
request's :class:`~formcast.generation.StepControl`, checked at every step: the request leaves
its slot before its next model call.  Results are those of ``generate`` with the same options
(same tokens for greedy decoding, given the same logits: see the batched decoder's notes on
the last bits of batched logits).

Lifetime: one engine per app; :meth:`Engine.close` stops the thread (or the batcher, and closes
its decoder) and the compile workers.
Costs: admission and event hand-off are O(1); a compile costs what the compiler costs (cached
per constraint); the model thread's work is the generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import queue
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import FormcastError
from ..generation.api import stream
from ..generation.batching import BatchedRequest, ContinuousBatcher, RequestCancelledError
from ..generation.control import StepControl
from ..generation.fast_forward import fast_forward_for
from ..generation.options import GenerationOptions
from ..generation.results import GenerationResult, TokenLogprob
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..index.spec import ConstraintSpec, KeyedSpec
from ..model.batched import BatchedDecoder
from ..model.batched_select import batched_decoder_for
from ..model.protocol import LanguageModel
from .api_errors import APIError
from .config import ServerConfig
from .metrics import ServerMetrics

__all__ = ["Engine", "Finish", "Finished", "GenerationSpec", "Job", "Piece", "TokenLogprob"]

Finish = Literal["completed", "stop", "max_tokens", "dead_end", "timeout", "cancelled"]
"""How one generation ended: formcast's finish reasons plus ``timeout`` (the request's deadline
passed) and ``cancelled`` (the client went away; never sent to anyone)."""

_perf = time.perf_counter

_WAKE_BOUND_S = 0.005
"""The longest a submitted request leaves an idle batcher asleep while a burst's other
requests are still to be submitted (:meth:`Engine._wake_soon`)."""

_LeadKey = tuple[int, tuple[str, ...], bool]
"""What a request's lead depends on besides its grammar: ``(max_tokens, stop, fast_forward)``
(the batcher's lead is deterministic given these: forced tokens need no logits)."""


@dataclass(frozen=True)
class GenerationSpec:
    """One choice to generate: its index in the response, the prompt, the seed."""

    index: int
    prompt: str | Sequence[int]  # text (tokenized by the model thread) or token ids
    seed: int | None


@dataclass(frozen=True)
class Piece:
    """Text generated for choice ``index`` (whole characters)."""

    index: int
    text: str


@dataclass(frozen=True)
class Finished:
    """Choice ``index`` ended.

    Attributes:
        text: the whole text of the choice.
        finish: see :data:`Finish`.
        prompt_tokens, completion_tokens: usage (``completion_tokens`` of an interrupted
            generation counts the tokens the model evaluated).
        result: the generation's result (``None`` when it was interrupted).
    """

    index: int
    text: str
    finish: Finish
    prompt_tokens: int
    completion_tokens: int
    result: GenerationResult | None = None
    logprobs: list[TokenLogprob] | None = None


@dataclass
class Job:
    """One request's generations, run in order by the model thread.

    ``deadline`` is a :func:`time.monotonic` value (``None``: none).  ``cancel`` stops the job
    at the next check.  The events go to ``events`` on the event loop ``loop``."""

    specs: list[GenerationSpec]
    compiled: CompiledGrammar | None
    max_tokens: int | None  # None: the default, bounded by the context left after the prompt
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    deadline: float | None
    loop: asyncio.AbstractEventLoop
    logprobs: int | None = None  # None: off; k: each token's log-probability and the top k
    events: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    on_done: Callable[[], None] | None = None  # called (on the model thread) when it ends

    def post(self, event: object) -> None:
        """Hand an event to the loop (from the model thread); dropped when the loop is gone."""
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody listens any more
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)


class _JobDone:
    pass


@dataclass(frozen=True)
class _Failed:
    error: BaseException


class Engine:
    """The model thread, its bounded queue and the shared compiler (see the module docstring).

    Args:
        model: the served model (used by the model thread only, once started).
        config: the server's options.
        metrics: where timings and counters go.
    """

    def __init__(self, model: LanguageModel, config: ServerConfig, metrics: ServerMetrics) -> None:
        self.model = model
        self.config = config
        self.metrics = metrics
        if config.fast_forward:
            fast_forward_for(model)  # the model can spell forced bytes, or the error says why
        self.compiler = GrammarCompiler(
            model.vocab,
            limits=config.compile_limits,
            workers=config.compile_workers,
            cache_dir=config.cache_dir,
        )
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        # grammars whose lead a request took already, with the options that shape a lead and
        # the pieces it pushed: the next ones are submitted on the event loop (their lead's
        # masks are memoized: ~0.5 ms, less than a hop to a thread), and those with the same
        # options stream the same pieces before their prompt is tokenized (_lead_ahead)
        self._led: weakref.WeakKeyDictionary[CompiledGrammar, tuple[_LeadKey, tuple[str, ...]]]
        self._led = weakref.WeakKeyDictionary()
        self._ahead = 0  # requests whose forced start went out ahead, not yet submitted (loop)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closed = False
        self._job_seconds = 0.0  # exponential mean of a job's model time, for Retry-After
        self._thread: threading.Thread | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self.batching_off: str | None = None
        """Why requests are served one after another (``None``: they are batched)."""
        self._decoder: BatchedDecoder | None = None
        self._batcher: ContinuousBatcher | None = None
        if not config.batching:
            self.batching_off = "ServerConfig.batching is False"
        else:
            try:
                self._decoder = batched_decoder_for(
                    model, n_slots=config.max_batch, n_threads=config.n_threads
                )
            except FormcastError as exc:  # the backend cannot batch this model: serve in turn
                self.batching_off = f"no batched decoder: {exc}"
            else:
                if self._decoder is None:
                    self.batching_off = (
                        f"formcast has no batched decoder for {type(model).__name__}"
                    )
        if self._decoder is not None:
            batcher = ContinuousBatcher(  # admit() bounds the queue
                self._decoder,
                max_queue=None,
                share_prefix=config.share_prefix,
                prefill_tokens=config.prefill_tokens,
                prompt_cache=config.prompt_cache,
                worker_nice=config.batch_nice,
            )
            self._batcher = batcher
            metrics.bind_batch(
                lambda: batcher.steps,
                lambda: batcher.rows_stepped,
                lambda: batcher.running,
                batcher.n_slots,
                lambda: batcher.prompt_tokens_evaluated,
                lambda: batcher.prompt_tokens_reused,
            )
        metrics.bind_queue(lambda: self.waiting, lambda: self.in_flight)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the model thread, or the batcher's worker (idempotent)."""
        with self._lock:
            if self._batcher is not None:
                if not self._closed:
                    self._batcher.start()
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._worker, name="formcast-model", daemon=True
                )
                self._thread.start()

    def close(self) -> None:
        """Stop taking requests, let the running generation stop at its next check, join the
        model thread and stop the compile workers."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        self._jobs.put(None)
        if thread is not None:
            thread.join(timeout=30)
        if self._batcher is not None:
            self._batcher.close()  # cancels what runs or waits, joins its worker
            close = getattr(self._decoder, "close", None)
            if close is not None:
                close()
        self.compiler.close()

    @property
    def alive(self) -> bool:
        """The model thread (or the batcher's worker) runs and the engine takes requests."""
        if self._batcher is not None:
            return not self._closed and self._batcher.worker_alive
        thread = self._thread
        return not self._closed and thread is not None and thread.is_alive()

    @property
    def batcher(self) -> ContinuousBatcher | None:
        """The continuous batcher serving the requests (``None``: sequential serving, see
        :attr:`batching_off`)."""
        return self._batcher

    @property
    def slots(self) -> int:
        """Requests (choices) generated at once: ``max_batch`` with batching, else 1."""
        return 1 if self._batcher is None else self._batcher.n_slots

    @property
    def in_flight(self) -> int:
        """Requests admitted and not finished (compiling, waiting or generating)."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Jobs waiting for the model thread (with batching: choices waiting for a slot)."""
        if self._batcher is not None:
            return self._batcher.queued
        return self._jobs.qsize()

    # -- admission ------------------------------------------------------------------------------
    def admit(self) -> Callable[[], None]:
        """Count a request in, or raise the 429 (queue full) / 503 (closing) :class:`APIError`.

        Returns the request's ``release``: idempotent (the first call counts the request out),
        so it can be called both where the response ends and when its job ends (a stream whose
        body never started -- the client left first -- still frees its place)."""
        slots = self.slots
        capacity = self.config.max_queue + slots
        with self._lock:
            if self._closed:
                raise APIError(
                    503,
                    "the server is shutting down; retry on another instance",
                    type="server_error",
                    code="unavailable",
                    headers={"Retry-After": str(self.config.retry_after_s)},
                )
            if self._in_flight >= capacity:
                retry = self._retry_after()
                self.metrics.rejected.labels(reason="queue_full").inc()
                raise APIError(
                    429,
                    f"the request queue is full ({self._in_flight} requests in flight: "
                    f"{'1' if slots == 1 else f'max_batch={slots}'} generating and "
                    f"max_queue={self.config.max_queue} waiting); retry after {retry} s",
                    type="rate_limit_error",
                    code="queue_full",
                    headers={"Retry-After": str(retry)},
                )
            self._in_flight += 1
        released = threading.Event()

        def release() -> None:
            with self._lock:
                if not released.is_set():
                    released.set()
                    self._in_flight -= 1

        return release

    def _retry_after(self) -> int:
        """Seconds until a slot is likely free: the mean job time times the work ahead."""
        ahead = max(1, self._in_flight - self.config.max_queue - self.slots + 1)
        estimate = self._job_seconds * ahead
        return int(min(60, max(self.config.retry_after_s, math.ceil(estimate))))

    # -- compiling ------------------------------------------------------------------------------
    async def compile(
        self,
        spec: ConstraintSpec | Callable[[], ConstraintSpec | KeyedSpec],
        *,
        param: str | None,
    ) -> CompiledGrammar:
        """``await`` one compile of ``spec`` (or of what ``spec()`` makes, reading a schema
        inside this method's error handling) off the event loop
        (``GrammarCompiler.compile_async``), under ``compile_timeout_s``.  Raises
        :class:`APIError` 400 for every compile error (see
        :func:`~formcast.server.api_errors.from_formcast_error`)."""
        from .api_errors import from_formcast_error

        t0 = _perf()
        hits = self.compiler.hits
        timeout = self.config.compile_timeout_s
        try:
            # keyed once: the look-up and, on a miss, the compile use the same key
            value = self.compiler.keyed(spec if isinstance(spec, ConstraintSpec) else spec())
            # a repeated constraint is found here, on the event loop, without waiting behind
            # the compile thread (one compile at a time)
            hit = self.compiler.cached(value)
            if hit is not None:
                self.metrics.compile_cache_hits.inc()
                return hit
            compiled = await asyncio.wait_for(self.compiler.compile_async(value), timeout)
        except TimeoutError:
            self.metrics.compile_errors.labels(code="compile_timeout").inc()
            raise APIError(
                400,
                f"the constraint in {param} took longer than compile_timeout_s={timeout} s to "
                "compile (the compile was cancelled); simplify it, or ask the operator to raise "
                "--compile-timeout",
                param=param,
                code="compile_timeout",
                extra={"limit": "compile_timeout_s", "value": timeout},
            ) from None
        except FormcastError as exc:
            err = from_formcast_error(exc, param=param)
            self.metrics.compile_errors.labels(code=err.code or "error").inc()
            raise err from exc
        if self.compiler.hits == hits:  # compiled (or loaded from disk), not a memory hit
            self.metrics.compile_seconds.observe(_perf() - t0)
        else:
            self.metrics.compile_cache_hits.inc()
        return compiled

    # -- running --------------------------------------------------------------------------------
    async def run(self, job: Job) -> AsyncIterator[Piece | Finished]:
        """Queue ``job`` and yield its events until every choice has finished.

        Leaving the iteration early (the client went away, the task was cancelled) cancels the
        job: the model thread stops before its next model call.  Errors raised while preparing
        the prompt (too long for the context...) are re-raised here as :class:`APIError`."""
        if self._batcher is not None:
            async for event in self._run_batched(job, self._batcher):
                yield event
            return
        self._jobs.put(job)
        try:
            while True:
                event = await job.events.get()
                if isinstance(event, _JobDone):
                    return
                if isinstance(event, _Failed):
                    raise event.error
                yield event
        finally:
            job.cancel.set()  # a no-op once the job is done; stops it otherwise

    # -- continuous batching --------------------------------------------------------------------
    async def _run_batched(
        self, job: Job, batcher: ContinuousBatcher
    ) -> AsyncIterator[Piece | Finished]:
        """:meth:`run` with batching: every choice is submitted to ``batcher`` at once, a pump
        task per choice turns its items into events.  Leaving early sets the job's cancel flag:
        the batcher ends the choices at its next step (their slots are freed and the
        ``cancelled`` finishes counted) -- the pumps run until then."""
        t0 = _perf()
        ahead = self._lead_ahead(job)
        counted = [False]

        def uncount() -> None:  # this request no longer holds the idle worker asleep
            if counted[0]:
                counted[0] = False
                self._ahead -= 1

        if ahead is not None:  # the forced start before the prompt is tokenized and submitted
            self._ahead += 1
            counted[0] = True
            try:
                for spec in job.specs:
                    for piece in ahead:
                        yield Piece(spec.index, piece)
                # the rest after the requests already read (a burst split over loop turns, as
                # uvicorn reads it): their heads first, then the tokenizes and submits
                await asyncio.sleep(0)
            except BaseException:  # the client left (or the task was cancelled) meanwhile
                uncount()
                job.cancel.set()
                if job.on_done is not None:
                    job.on_done()
                raise
        try:
            prepared = []
            for spec in job.specs:  # every prompt checked before anything is submitted
                ids = self._prompt_ids(spec.prompt)
                prepared.append((spec, ids, self._max_tokens(job, len(ids))))
            control = StepControl(cancel=job.cancel, deadline=job.deadline)
            submitted: list[tuple[GenerationSpec, list[int], BatchedRequest]] = []

            def submit_all(wake: bool) -> None:  # submit takes the forced lead (masks)
                for spec, ids, max_tokens in prepared:
                    options = GenerationOptions(
                        max_tokens=max_tokens,
                        temperature=job.temperature,
                        top_p=job.top_p,
                        seed=spec.seed,
                        stop=list(job.stop) or None,
                        logprobs=job.logprobs,
                    )
                    req = batcher.submit(
                        ids,
                        compiled=job.compiled,
                        params=options.params,
                        seed=options.seed,
                        max_tokens=max_tokens,
                        stop=list(options.stops) or None,
                        logprobs=options.logprobs,
                        control=control,
                        fast_forward=self._fast_forward(job),
                        wake=wake,
                    )
                    submitted.append((spec, ids, req))

            try:
                compiled = job.compiled
                if compiled is None or compiled in self._led:
                    # no lead, or one taken before: its masks are memoized.  An idle worker is
                    # woken at the next loop turn, not now: the requests already read in this
                    # turn (a burst) run their handlers and write their first chunks first,
                    # without the worker's step holding the GIL between them, and join its
                    # first step together
                    try:
                        submit_all(False)
                    finally:
                        uncount()
                        self._wake_soon(batcher)
                else:  # a grammar's first lead computes masks: off the event loop
                    await asyncio.to_thread(submit_all, True)
                if compiled is not None and submitted:
                    self._remember_lead(job, compiled, prepared[0][2], submitted[0][2])
                # the pieces submit pushed already (the forced start): yielded before the
                # pumps start, without the two event-loop turns the pump and the job's queue
                # would take (less the lead, when it was streamed ahead)
                early = [
                    (spec.index, _after_lead(req, ahead, job) if ahead else req.take_ready())
                    for spec, _, req in submitted
                ]
            except BaseException:  # also a cancelled await: the thread may still submit
                uncount()
                job.cancel.set()  # what it submits ends at the batcher's next step
                for _, _, req in submitted:
                    req.cancel()
                raise
        except Exception as exc:
            if job.on_done is not None:
                job.on_done()
            raise _api_error(exc) from exc
        except BaseException:  # the request's task was cancelled meanwhile
            if job.on_done is not None:
                job.on_done()
            raise
        left = [len(submitted)]

        def one_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                self._job_seconds = 0.8 * self._job_seconds + 0.2 * (_perf() - t0)
                if job.on_done is not None:
                    job.on_done()

        for spec, ids, req in submitted:
            task = asyncio.create_task(self._pump(job, spec, ids, req, one_done))
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)
        try:
            for index, pieces in early:
                for piece in pieces:
                    yield Piece(index, piece)
            finished = 0
            while finished < len(submitted):
                event = await job.events.get()
                if isinstance(event, _Failed):
                    raise event.error
                if isinstance(event, Finished):
                    finished += 1
                yield event
        finally:
            job.cancel.set()  # a no-op once every choice has finished; stops them otherwise

    def _wake_soon(self, batcher: ContinuousBatcher) -> None:
        """Wake an idle worker after ``submit(wake=False)``: at the next loop turn (after the
        requests already read have written their first chunks), or -- while requests whose
        forced start went out ahead are still to be submitted (a burst) -- when the last of
        them is, so that the burst joins one step; :data:`_WAKE_BOUND_S` at the latest."""
        loop = asyncio.get_running_loop()
        if self._ahead == 0:
            loop.call_soon(batcher.wake)
        else:
            loop.call_later(_WAKE_BOUND_S, batcher.wake)

    def _lead_key(self, job: Job, max_tokens: int) -> _LeadKey:
        return (max_tokens, job.stop, self._fast_forward(job))

    def _remember_lead(
        self, job: Job, compiled: CompiledGrammar, max_tokens: int, req: BatchedRequest
    ) -> None:
        """Keep what ``req``'s lead pushed for the next requests on ``compiled`` (when the
        lead left the output to the model: a request finished in its lead is not kept)."""
        if req.lead and not req.done:
            self._led[compiled] = (self._lead_key(job, max_tokens), req.lead)
        elif compiled not in self._led:
            self._led[compiled] = ((-1, (), False), ())  # led: masks memoized, nothing ahead

    def _lead_ahead(self, job: Job) -> tuple[str, ...] | None:
        """The pieces ``job``'s lead will push, known before its prompt is tokenized: those
        of the last request on the same grammar whose lead had the same options
        (:data:`_LeadKey`), when no error can come after them -- every prompt's tokens are
        bounded (the model's ``prompt_token_bound``) so that it fits the context with
        ``max_tokens`` (given, or the default, which ``min(default, room)`` then leaves
        as is).  ``None``: tokenize and submit first, as for a first request.  O(prompt
        bytes), on the event loop."""
        compiled = job.compiled
        if compiled is None or self._batcher is None:
            return None
        led = self._led.get(compiled)
        if led is None or not led[1]:
            return None
        bound = getattr(self.model, "prompt_token_bound", None)
        context = self._batcher.decoder.max_context
        if bound is None or context is None:
            return None
        max_tokens = self.config.default_max_tokens if job.max_tokens is None else job.max_tokens
        if led[0] != self._lead_key(job, max_tokens):
            return None
        for spec in job.specs:
            prompt = spec.prompt
            try:
                n = bound(prompt) if isinstance(prompt, str) else len(prompt)
            except Exception:  # e.g. text that is not UTF-8: tokenize says why, first
                return None
            if not isinstance(n, int) or not prompt or n + max_tokens > context or max_tokens < 1:
                return None
        return led[1]

    async def _pump(
        self,
        job: Job,
        spec: GenerationSpec,
        ids: list[int],
        req: BatchedRequest,
        done: Callable[[], None],
    ) -> None:
        """One choice's items as events on the job's queue; its finish counted in the
        metrics (whether or not anyone still reads the events)."""
        try:
            async for item in req:
                if isinstance(item, str):
                    job.events.put_nowait(Piece(spec.index, item))
                    continue
                finished = self._finished(job, spec, ids, item)
                self.metrics.record_finish(
                    finished.finish, finished.prompt_tokens, finished.completion_tokens
                )
                job.events.put_nowait(finished)
        except RequestCancelledError:  # the engine closed under it: nobody listens
            pass
        except Exception as exc:
            job.events.put_nowait(_Failed(_api_error(exc)))
        finally:
            done()

    def _finished(
        self, job: Job, spec: GenerationSpec, ids: list[int], result: GenerationResult
    ) -> Finished:
        """The :class:`Finished` of one choice's result (its timings go to the metrics unless
        it was interrupted)."""
        entries = None if result.logprobs is None else list(result.logprobs)
        if result.finish_reason in ("cancelled", "timeout"):
            return Finished(
                spec.index,
                result.text,
                result.finish_reason,
                len(ids),
                len(result.token_ids),
                logprobs=entries,
            )
        self.metrics.record_timings(result)
        return Finished(
            spec.index,
            result.text,
            result.finish_reason,
            result.timings.prompt_tokens,
            result.timings.output_tokens,
            result,
            entries,
        )

    # -- the model thread -----------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            t0 = _perf()
            try:
                self._run_job(job)
            except Exception as exc:  # reported to the request; the thread lives on
                job.post(_Failed(_api_error(exc)))
            finally:
                job.post(_JobDone())
                if job.on_done is not None:
                    job.on_done()
                self._job_seconds = 0.8 * self._job_seconds + 0.2 * (_perf() - t0)

    def _run_job(self, job: Job) -> None:
        prompts = [self._prompt_ids(spec.prompt) for spec in job.specs]  # errors before output
        for spec, ids in zip(job.specs, prompts, strict=True):
            finished = self._generate(job, spec, ids)
            self.metrics.record_finish(
                finished.finish, finished.prompt_tokens, finished.completion_tokens
            )
            job.post(finished)
            if finished.finish == "cancelled":
                return

    def _prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        ids = self.model.tokenize(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not ids:
            raise APIError(
                400,
                "the prompt is empty: give at least one token of context",
                param="prompt",
                code="invalid_request",
            )
        return ids

    def _max_tokens(self, job: Job, n_prompt: int) -> int:
        context = self.model.max_context if self._decoder is None else self._decoder.max_context
        room = None if context is None else context - n_prompt
        if room is not None and room <= 0:
            raise APIError(
                400,
                f"the prompt has {n_prompt} tokens, the model's context holds "
                f"{context}: shorten the messages",
                param="messages",
                code="context_length_exceeded",
            )
        if job.max_tokens is None:
            default = self.config.default_max_tokens
            return default if room is None else min(default, room)
        if room is not None and job.max_tokens > room:
            raise APIError(
                400,
                f"prompt ({n_prompt} tokens) + max_tokens ({job.max_tokens}) exceeds the "
                f"model's context of {context} tokens: lower max_tokens",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return job.max_tokens

    def _fast_forward(self, job: Job) -> bool:
        """``ServerConfig.fast_forward`` for this job: a constrained request without
        ``logprobs`` (fast-forward tokens are not sampled, so they have no log-probabilities:
        a request asking for them is decoded with plain masking)."""
        return self.config.fast_forward and job.compiled is not None and job.logprobs is None

    def _generate(self, job: Job, spec: GenerationSpec, ids: list[int]) -> Finished:
        max_tokens = self._max_tokens(job, len(ids))
        control = StepControl(cancel=job.cancel, deadline=job.deadline)
        stopped = control.check()  # waited too long in the queue, or abandoned there
        if stopped is not None:
            return Finished(
                spec.index, "", stopped, len(ids), 0, logprobs=None if job.logprobs is None else []
            )
        items = stream(
            self.model,
            ids,
            compiled=job.compiled,
            max_tokens=max_tokens,
            temperature=job.temperature,
            top_p=job.top_p,
            seed=spec.seed,
            stop=list(job.stop) or None,
            control=control,
            logprobs=job.logprobs,
            fast_forward=self._fast_forward(job),
        )
        result: GenerationResult | None = None
        try:
            for item in items:
                if isinstance(item, GenerationResult):
                    result = item
                    break
                job.post(Piece(spec.index, item))
        finally:
            items.close()
        if result is None:  # pragma: no cover - a stream always ends with its result
            raise FormcastError("internal error: the stream ended without a result")
        return self._finished(job, spec, ids, result)


def _after_lead(req: BatchedRequest, ahead: tuple[str, ...], job: Job) -> list[str]:
    """``req``'s buffered pieces less its lead, which was streamed ahead as ``ahead``
    (:meth:`Engine._lead_ahead`).  A lead that differs is an internal error -- unless the
    job was stopped before its lead was taken (cancelled, or its deadline passed: no lead at
    all), which then ends with what was streamed (as text pushed ahead of a request cancelled
    later does)."""
    pieces = req.take_ready()
    lead = req.lead
    stopped = job.cancel.is_set() or (job.deadline is not None and time.monotonic() >= job.deadline)
    if lead != ahead and not (not lead and stopped):
        raise FormcastError(
            f"internal error: the lead {lead!r} differs from the forced start {ahead!r} "
            "streamed before it"
        )
    return pieces[len(lead) :]


def _api_error(exc: BaseException) -> BaseException:
    """What a request is answered for an error of its generation: an :class:`APIError` as
    is, a formcast error as its 4xx/5xx (:func:`~formcast.server.api_errors.
    from_formcast_error`), anything else a 500 naming it; a cancellation passes through."""
    if isinstance(exc, APIError) or not isinstance(exc, Exception):
        return exc
    if isinstance(exc, FormcastError):
        from .api_errors import from_formcast_error

        return from_formcast_error(exc, param="messages")
    return APIError(
        500,
        f"internal error: {type(exc).__name__}: {exc}",
        type="server_error",
        code="internal_error",
    )


def now_deadline(timeout_s: float | None) -> float | None:
    """The :func:`time.monotonic` deadline ``timeout_s`` from now (``None``: none)."""
    return None if timeout_s is None else time.monotonic() + timeout_s
