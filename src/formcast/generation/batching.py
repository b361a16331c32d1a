"""Continuous batching: many generations on one model, one model call per step.

::

    from formcast.generation.batching import ContinuousBatcher
    from formcast.model.llama_cpp_batched import LlamaCppBatchedDecoder

    batcher = ContinuousBatcher(LlamaCppBatchedDecoder(model, n_slots=8))
    batcher.start()                                   # a worker thread runs the steps
    req = batcher.submit_generate("A date?", regex=r"\\d{4}-\\d{2}-\\d{2}")
    for item in req:                                  # or: async for item in req
        ...                                           # str pieces, then the GenerationResult

A :class:`ContinuousBatcher` owns a :class:`~formcast.model.batched.BatchedDecoder` with
``n_slots`` slots.  ``submit`` first takes the request's *lead* on the caller's thread: the
tokens its constraint forces before any logits exist (masks allowing exactly one token) are
accepted and output at once, and the text the grammar forces next (``{"name":"``, whichever
tokens will spell it) is pushed ahead, so a reply's forced start streams before its first
model call; the lead's tokens are evaluated with the prompt in that call (no call of their
own; an output forced whole finishes inside ``submit``).  Submitted requests wait in a FIFO
queue (bounded by ``max_queue``:
:class:`BatcherFullError` past it, a server's 429) and take a free slot at the start of a step.
One step::

    admit queued requests into free slots (their prompt is fed in this step's call)
    decoder.decode(every running row's unevaluated tokens)      one model call for all rows
    repeat until every row waits for the model or has finished:
        batch_fill_next_token_bitmask(rows that need a mask)    one fill for all rows
        per row, exactly the loop of generate():  only stop tokens allowed -> "completed",
        no token -> "dead_end", budget -> "max_tokens", one token allowed -> taken (forced),
        else sample with this step's logits (the row's own SamplingParams and seeded rng),
        accept, stop token -> "completed", text piece out, stop string -> "stop"
    finished rows leave: their slot is released (and filled by a queued request next step),
    or with prompt_cache=True keeps its sequence for a later request starting the same way

Each row reuses the pieces of :mod:`formcast.generation.loop` (the constraint side, the
sampler, the text output and the result), so a request decoded here makes the same choices as
``generate`` with the same arguments would: the same greedy tokens, and for a seed the same
draws, given the same logits (a batched model call may differ from a lone one in the last bits
of the logits: see the decoder's notes).  Requests never share sampler state, matchers or
output buffers; only the bitmask array is shared, one row per slot.

Driving: :meth:`ContinuousBatcher.start` runs the steps on a worker thread while there is work
(then iterate a request from any thread, or ``async for`` it in an event loop).  Without a
worker, iterating a request (or :meth:`BatchedRequest.result`) runs the steps itself, and
:meth:`ContinuousBatcher.step` runs one step: requests can be submitted between steps to
join at any point.  ``fast_forward=True`` on a request appends the bytes its constraint forces
in the tokenizer's spelling, evaluated in the row's next model call, as ``generate`` does.
Token healing and ``reasoning=`` are not supported here (``generate`` has them).

Lifetime: a batcher per decoder; requests live until their result is read or they are
cancelled.  Thread safety: ``submit*``, ``cancel`` and reading requests work from any thread;
the steps run one at a time.  Cost per step: one model call, one batch mask fill per round of
forced tokens, and per row the sampler at O(allowed tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..bitmask import allocate_token_bitmask
from ..errors import ConfigurationError, FormcastError
from ..frontends.jsonschema.source import pydantic_model_class
from ..index.compiled import CompiledGrammar
from ..model.batched import BatchedDecoder, SupportsCopyPrefix
from ..model.protocol import Logits
from ..runtime.batch import batch_fill_next_token_bitmask
from ..sampling import SamplingParams
from ..vocab.canonical import CanonicalPairs
from ..vocab.vocabulary import Vocabulary
from .control import Step, StepControl, StopReason
from .fast_forward import FastForward, fast_forward_for
from .inputs import (
    DEFAULT_REGEX_DIALECT,
    Prompt,
    _check_compiled,
    _prompt_ids,
    resolve_constraint,
)
from .loop import _ConstraintSide, _ModelSide, _Output, _result
from .options import GenerationOptions
from .results import FinishReason, GenerationResult, GenerationTimings
from .tokenization import canonical_pairs_for

__all__ = [
    "BatchedRequest",
    "BatcherFullError",
    "ContinuousBatcher",
    "RequestCancelledError",
    "StepObserver",
    "SupportsTruncate",
]

_perf = time.perf_counter

_CALL, _AGAIN, _DONE = 0, 1, 2  # what a row needs after one token (see _Row.advance)


@runtime_checkable
class StepObserver(Protocol):
    """Sees a request's model calls as a :class:`LanguageModel` proxy would (the server's
    log-probability recorder): ``consume(tokens)`` with the output tokens about to be
    evaluated (those taken since the last call), then ``on_logits(row)`` with the call's
    logits (a view: copy what you keep).  The prompt's call has no ``consume``.  Both run on
    the batcher's thread; an exception ends that request only."""

    def consume(self, token_ids: Sequence[int]) -> None: ...

    def on_logits(self, logits: Logits) -> None: ...


@runtime_checkable
class SupportsTruncate(Protocol):
    """A batched decoder that can cut a slot's sequence to its first ``n`` tokens
    (``truncate(slot, n)``; :class:`~formcast.model.llama_cpp_batched.LlamaCppBatchedDecoder`
    can): what the batcher's ``prompt_cache`` needs to reuse a finished request's slot."""

    def truncate(self, slot: int, n: int) -> None: ...


class BatcherFullError(FormcastError):
    """The batcher's queue is full (``max_queue`` requests wait already): try again later
    (a server answers 429)."""


class RequestCancelledError(FormcastError):
    """The request was cancelled (:meth:`BatchedRequest.cancel`) before it finished."""


class BatchedRequest:
    """One request of a :class:`ContinuousBatcher`: its output as it is produced.

    Iterate it (``for``, or ``async for`` when the batcher has a worker thread) for the same
    items as :func:`~formcast.generation.stream`: non-empty ``str`` pieces of whole characters,
    then the :class:`GenerationResult`.  Items are buffered: a slow reader never slows the
    batch.  ``result()`` waits for the result.  A failed request raises its error from either;
    a cancelled one :class:`RequestCancelledError`.

    Lifetime: made by ``submit``; the batcher drops it once finished.  Thread-safe.
    """

    __slots__ = (
        "_batcher",
        "_cancelled",
        "_cond",
        "_done",
        "_error",
        "_items",
        "_result",
        "_waiters",
        "lead",
        "prompt_ids",
    )

    def __init__(self, batcher: ContinuousBatcher, prompt_ids: list[int]) -> None:
        self._batcher = batcher
        self.prompt_ids = prompt_ids
        self.lead: tuple[str, ...] = ()
        """The pieces ``submit`` pushed while it took the request's lead (its forced tokens'
        text, then the forced text pushed ahead), in order: the first items of the request,
        whatever the worker pushes later.  Set before ``submit`` returns; never changed."""
        self._cond = threading.Condition()
        self._items: deque[str] = deque()
        self._done = False
        self._cancelled = False
        self._result: GenerationResult | None = None
        self._error: BaseException | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    # -- producer side (the batcher) -----------------------------------------------------------
    def _push(self, piece: str) -> None:
        with self._cond:
            self._items.append(piece)
            self._cond.notify_all()
            waiters = list(self._waiters)
        _wake(waiters)

    def _finish(self, result: GenerationResult | None, error: BaseException | None) -> None:
        with self._cond:
            if self._done:
                return
            self._result = result
            self._error = error
            self._done = True
            self._cond.notify_all()
            waiters = list(self._waiters)
        _wake(waiters)

    # -- consumer side -------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """The request finished (a result, an error, or cancelled)."""
        return self._done

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Stop the request: it leaves its slot (or the queue) before the next model call;
        reading it then raises :class:`RequestCancelledError`.  No effect once finished."""
        with self._cond:
            if self._done:
                return
            self._cancelled = True
        self._batcher._cancel(self)

    def take_ready(self) -> list[str]:
        """The text pieces buffered now, removed from the request (never waits): what
        iterating it would yield first.  For a consumer that forwards the pieces ``submit``
        already pushed (the forced start) before it starts iterating; iteration then yields
        only what comes later.  O(pieces)."""
        with self._cond:
            pieces, _ = self._take()
        return pieces

    def _take(self) -> tuple[list[str], bool]:
        """The buffered pieces and whether the request is done (under the lock)."""
        pieces = list(self._items)
        self._items.clear()
        return pieces, self._done

    def _final(self) -> GenerationResult:
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise RequestCancelledError("the request was cancelled before it finished")
        return self._result

    def __iter__(self) -> Iterator[str | GenerationResult]:
        while True:
            with self._cond:
                pieces, done = self._take()
                if not pieces and not done and self._batcher.has_worker:
                    self._cond.wait()
                    pieces, done = self._take()
            yield from pieces
            if done:
                with self._cond:
                    pieces, _ = self._take()
                yield from pieces
                yield self._final()
                return
            if not pieces and not self._batcher.has_worker:
                self._batcher.step()

    def result(self, timeout: float | None = None) -> GenerationResult:
        """Wait for the result (the text pieces stay readable by iteration).

        Raises:
            TimeoutError: not finished within ``timeout`` seconds (only with a worker).
            RequestCancelledError, or the request's own error.
        """
        deadline = None if timeout is None else _perf() + timeout
        while True:
            with self._cond:
                if self._done:
                    return self._final()
                if self._batcher.has_worker:
                    left = None if deadline is None else deadline - _perf()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"the request did not finish within {timeout} s")
                    self._cond.wait(left)
                    continue
            self._batcher.step()

    async def _aiter(self) -> AsyncIterator[str | GenerationResult]:
        if not self._batcher.has_worker:
            raise ConfigurationError(
                "async iteration needs the batcher's worker thread: call batcher.start() first"
            )
        event = asyncio.Event()
        me = (asyncio.get_running_loop(), event)
        with self._cond:
            self._waiters.append(me)
        try:
            while True:
                event.clear()
                with self._cond:
                    pieces, done = self._take()
                for piece in pieces:
                    yield piece
                if done:
                    with self._cond:
                        pieces, _ = self._take()
                    for piece in pieces:
                        yield piece
                    yield self._final()
                    return
                if not pieces:
                    await event.wait()
        finally:
            with self._cond:
                self._waiters.remove(me)

    def __aiter__(self) -> AsyncIterator[str | GenerationResult]:
        return self._aiter()

    async def aresult(self) -> GenerationResult:
        """``result()`` for an event loop (needs the worker thread)."""
        last: str | GenerationResult | None = None
        async for item in self:
            last = item
        assert isinstance(last, GenerationResult)
        return last


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _lower_thread_priority(by: int) -> None:
    """Raise the calling thread's niceness by ``by`` (Linux, where niceness is per thread;
    a no-op elsewhere or when the system refuses)."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + by)


def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]) -> None:
    for loop, event in waiters:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(event.set)


class _Row:
    """One running request: its slot and the loop's three sides (see
    :mod:`formcast.generation.loop`)."""

    __slots__ = (
        "after_run",
        "ahead",
        "allowed",
        "canonical",
        "compile_s",
        "compiled",
        "constraint",
        "control",
        "decode_times",
        "ff",
        "forced_memo",
        "handle",
        "held",
        "max_tokens",
        "observer",
        "out",
        "prefill_s",
        "prefilled",
        "prompt_ids",
        "ready",
        "sampler",
        "schema_class",
        "seq",
        "slot",
        "stop_ids",
        "t_call",
    )

    def __init__(
        self,
        job: _Job,
        stop_ids: frozenset[int],
        forced_memo: dict[tuple[int, ...], bytes] | None = None,
    ):
        self.handle = job.handle
        # the grammar's forced bytes after a lead's tokens (shared by the batcher's requests
        # on the same grammar; see ContinuousBatcher._forced)
        self.forced_memo = forced_memo
        self.slot = -1  # seat() gives it one
        self.prompt_ids = job.handle.prompt_ids
        self.compiled = job.compiled
        self.compile_s = job.compile_s
        self.schema_class = job.schema_class
        self.max_tokens = job.max_tokens
        self.t_call = job.t_call
        self.observer = job.observer
        self.control = job.control
        self.stop_ids = stop_ids
        vocab = job.vocab
        self.constraint: _ConstraintSide | None = None
        if job.compiled is not None:  # its own bitmask row until seat()
            self.constraint = _ConstraintSide(job.compiled, vocab, job.canonical)
        self.sampler = _ModelSide(
            None,  # type: ignore[arg-type]
            np.empty(0, np.float32),
            job.params,
            job.rng,
            job.logprobs,
        )
        # before seat(): the lead's forced tokens; then what the next model call evaluates
        self.sampler.pending = []
        self.held: list[int] = []  # the tokens the slot's cache holds (evaluated or copied)
        self.seq: list[int] = list(self.prompt_ids)  # prompt + lead, set by seat()
        self.out = _Output(vocab, job.stops)
        self.prefilled = False
        self.prefill_s = 0.0
        self.decode_times: list[float] = []
        self.ready = False  # the mask of the next token is computed (``allowed``)
        self.allowed: np.ndarray | None = None
        self.ff = job.fast_forward
        self.canonical = job.canonical
        self.after_run = False  # the last token was a fast-forward run's: sample the next
        self.ahead = ""  # text pushed before the tokens that write it were chosen (lead)

    def lead(self) -> FinishReason | None:
        """Take the tokens the constraint forces before the first model call (the *lead*):
        each step of :meth:`advance` whose mask allows exactly one token needs no logits, so
        the tokens are accepted, output (pushed to the request at once) and queued to be
        evaluated with the prompt in the row's first call.  Stops at the first token that
        needs logits.  Returns the finish reason when the output ended inside the lead (all
        of it forced, a stop string, ``max_tokens``, ``on_step``), else ``None``.  Rows
        without a constraint, or with an observer (which sees calls as a model proxy under
        ``generate`` would), have no lead.  Runs on the submitting thread, before the row is
        queued: the mask fills use the row's own bitmask."""
        if self.constraint is None or self.observer is not None:
            return None
        while True:
            what, reason = self.advance(None)
            if what == _CALL:
                self._push_ahead()
                return None
            if what == _DONE:
                return reason

    def _push_ahead(self) -> None:
        """Push the text the grammar forces next (``find_jump_forward_bytes``: the bytes every
        continuation starts with, whichever tokens spell them) before the model is asked for
        those tokens, as far as it is whole UTF-8 characters and at most one byte per token
        of budget left (so ``max_tokens`` cannot cut it).  The tokens are then chosen as
        always (the model picks the spelling, e.g. ``{`` or ``{"``); the text they write is
        not pushed a second time (:meth:`_emit`).  Not with stop strings (the text is held
        back for them), ``canonical`` (whose pair rule can end the output inside forced
        text) or a character left incomplete by the last token."""
        constraint = self.constraint
        out = self.out
        if (
            constraint is None
            or out.scanner.stops
            or self.canonical is not None
            or out.decoder.getstate()[0]
        ):
            return
        tf = _perf()
        # the matcher's state is a function of the grammar and the tokens it accepted (the
        # lead's, all in out.ids): a grammar's forced start is computed once per batcher
        memo = self.forced_memo
        key = tuple(out.ids)
        forced = memo.get(key) if memo is not None else None
        if forced is None:
            forced = constraint.matcher.find_jump_forward_bytes()
            if memo is not None:
                memo[key] = forced
        constraint.mask_times[-1] += _perf() - tf
        forced = forced[: self.max_tokens - len(out.ids)]
        try:
            text = forced.decode("utf-8")
        except UnicodeDecodeError as exc:  # a character cut at the end: up to it
            text = forced[: exc.start].decode("utf-8", errors="replace")
        if text:
            self.ahead = text
            self.handle._push(text)

    def _emit(self, piece: str) -> None:
        """Push ``piece`` (text the output just wrote), less what was pushed ahead."""
        ahead = self.ahead
        if ahead:
            n = min(len(ahead), len(piece))
            if piece[:n] != ahead[:n]:  # pragma: no cover - forced bytes start every output
                raise FormcastError(
                    f"internal error: output {piece!r} does not continue the forced text "
                    f"{ahead!r} pushed ahead"
                )
            self.ahead = ahead[n:]
            piece = piece[n:]
        if piece:
            self.handle._push(piece)

    def seat(self, slot: int, bitmask: np.ndarray) -> None:
        """The row takes ``slot``: the batch fill writes its bitmask row from now on, and its
        known sequence (``seq``) is the prompt and the lead."""
        self.slot = slot
        side = self.constraint
        if side is not None:
            side.bitmask = bitmask[slot : slot + 1]
            side.row = bitmask[slot]
        self.seq = self.prompt_ids + self.sampler.pending

    def advance(self, ok: bool | None) -> tuple[int, FinishReason | None]:
        """One iteration of :func:`formcast.generation.loop._steps` without the model call:
        ``(_CALL, None)``: the row must evaluate its pending tokens before it can sample;
        ``(_AGAIN, None)``: a token was taken, the next needs a mask; ``(_DONE, reason)``.

        ``ok``: this row's batch-fill result (``None`` without a constraint or when the mask
        is already computed)."""
        out = self.out
        if self.ready:
            allowed = self.allowed
        else:
            allowed = None
            constraint = self.constraint
            if constraint is not None:
                prev = out.ids[-1] if out.ids else -1
                allowed = constraint.next_allowed(prev, filled=ok)
                if allowed is None:  # only stop tokens allowed, or none at all
                    out.stop_token = constraint.stop_token
                    return _DONE, constraint.end
            if len(out.ids) >= self.max_tokens:
                return _DONE, "max_tokens"
            if self.ff is not None:  # as generate(fast_forward=True): a run, or sample
                if self.after_run:
                    self.after_run = False
                else:
                    ran = self._forward(self.ff)
                    if ran is not None:
                        return ran
        if allowed is not None and allowed.size == 1:  # forced: any sampler would pick it
            tok = int(allowed[0])
            out.n_forced += 1
            forced = True
        else:
            sampler = self.sampler
            if sampler.pending or not self.prefilled:  # no logits yet: the model first
                self.ready, self.allowed = True, allowed
                return _CALL, None
            tok = sampler.next_token(allowed)
            forced = False
        self.ready, self.allowed = False, None
        if not out.ids:
            out.ttft = _perf() - self.t_call
        if self.constraint is not None:
            self.constraint.accept(tok)
        sampler = self.sampler
        if tok in self.stop_ids:  # not output: no log-probability entry either
            if not forced and sampler.logprobs:
                sampler.logprobs.pop()
            out.stop_token = tok
            return _DONE, "completed"
        if forced and sampler.logprobs is not None:
            sampler.forced(tok)
        sampler.pending.append(tok)
        safe, hit = out.add(tok)
        if safe:
            self._emit(safe)
        if hit:
            return _DONE, "stop"
        control = self.control
        if control is not None and control.on_step is not None:
            entries = sampler.logprobs
            lp = entries[-1].logprob if entries else None
            if control.on_step(Step(len(out.ids) - 1, tok, forced, lp)):
                return _DONE, "cancelled"
        return _AGAIN, None

    def _forward(self, ff: FastForward) -> tuple[int, FinishReason | None] | None:
        """The current state's forced run (:meth:`FastForward.run`) taken as forced tokens:
        accepted, queued for the next model call, output, shown to ``on_step`` -- as
        :func:`formcast.generation.loop._fast_forward`.  ``None``: no run (the row samples);
        else ``(_AGAIN, None)`` or ``(_DONE, reason)`` (a stop string, ``on_step``)."""
        out = self.out
        constraint = self.constraint
        assert constraint is not None
        tf = _perf()
        run = ff.run(
            constraint.matcher,
            out.ids,
            budget=self.max_tokens - len(out.ids),
            canonical=self.canonical,
        )
        constraint.mask_times[-1] += _perf() - tf
        if not run:
            return None
        if not out.ids:
            out.ttft = _perf() - self.t_call
        control = self.control
        on_step = control.on_step if control is not None else None
        pending = self.sampler.pending
        for tok in run:
            constraint.accept(tok)
            out.n_forced += 1
            pending.append(tok)
            safe, hit = out.add(tok)
            if safe:
                self._emit(safe)
            if hit:
                return _DONE, "stop"
            if on_step is not None and on_step(Step(len(out.ids) - 1, tok, True, None)):
                return _DONE, "cancelled"
        self.after_run = True
        return _AGAIN, None

    def result(self, reason: FinishReason) -> GenerationResult:
        """Flush the text and build the result (as :func:`formcast.generation.loop.decode`)."""
        out = self.out
        if reason not in ("stop", "cancelled", "timeout"):  # as decode(): no tail when stopped
            tail, hit = out.finish()
            if hit:
                reason = "stop"
            if tail:
                self._emit(tail)
        total = _perf() - self.t_call
        constraint = self.constraint
        timings = GenerationTimings(
            compile_s=self.compile_s,
            prefill_s=self.prefill_s,
            time_to_first_token_s=out.ttft if out.ids else total,
            total_s=total,
            prompt_tokens=len(self.prompt_ids),
            output_tokens=len(out.ids),
            forced_tokens=out.n_forced,
            decode_step_s=tuple(self.decode_times),
            mask_step_s=tuple(constraint.mask_times) if constraint is not None else (),
            sample_step_s=tuple(self.sampler.sample_times),
        )
        result = _result(
            out, reason, constraint, self.compiled, self.schema_class, self.prompt_ids, timings
        )
        entries = self.sampler.logprobs
        return result if entries is None else dataclasses.replace(result, logprobs=tuple(entries))


@dataclass(slots=True)
class _Job:
    """A submitted request waiting for a slot (everything already checked)."""

    handle: BatchedRequest
    compiled: CompiledGrammar | None
    params: SamplingParams
    rng: np.random.Generator
    max_tokens: int
    stops: tuple[str, ...]
    canonical: CanonicalPairs | None
    schema_class: Any
    compile_s: float
    t_call: float
    vocab: Vocabulary
    observer: StepObserver | None
    logprobs: int | None = None
    control: StepControl | None = None
    fast_forward: FastForward | None = None
    row: _Row | None = None  # made by submit (which takes its lead)

    def stopped_result(self, reason: StopReason) -> GenerationResult:
        """The result of a request stopped before it got a slot (as ``decode`` gives for a
        control that stops it before the prefill): no text, no tokens -- or its lead's."""
        if self.row is not None and self.row.out.ids:
            return self.row.result(reason)
        total = _perf() - self.t_call
        timings = GenerationTimings(
            compile_s=self.compile_s,
            time_to_first_token_s=total,
            total_s=total,
            prompt_tokens=len(self.handle.prompt_ids),
        )
        out = _Output(self.vocab, self.stops)
        result = _result(
            out, reason, None, self.compiled, self.schema_class, self.handle.prompt_ids, timings
        )
        return result if self.logprobs is None else dataclasses.replace(result, logprobs=())


class ContinuousBatcher:
    """Requests decoded together on a :class:`~formcast.model.batched.BatchedDecoder` (see the
    module docstring).

    Args:
        decoder: the batched model; its ``n_slots`` bounds the requests running at once.
        max_queue: most requests waiting for a slot (``None``: unbounded); ``submit`` past it
            raises :class:`BatcherFullError`.
        prefill_tokens: most prompt tokens that join in one step (``None``: every queued
            request that has a slot joins at once).  At least one request joins per step
            whatever its length.  A bound staggers simultaneous arrivals over several steps:
            the running rows keep decoding between them and the first joiners get their first
            token sooner (lower time to first token, at a little throughput).
        share_prefix: share prompt starts of at least this many tokens (``None``: off).  A
            joining request whose prompt starts like a running request's prompt gets those
            tokens' cache copied from it (:class:`~formcast.model.batched.SupportsCopyPrefix`)
            and evaluates only the rest; a request that shares such a start with one joining
            in the same step waits one step, to copy it once it is evaluated.  The copied
            entries were computed in another batch, so the logits can differ from a full
            prefill in the last bits (as any batching does).
        prompt_cache: keep a finished request's cache in its slot until the slot is needed
            again (as llama.cpp's server keeps its slots' prompts, and vLLM's automatic
            prefix caching its blocks): a joining request takes the free slot whose kept
            sequence shares the longest start with its prompt (ties: the slot left longest
            ago), keeps that start (``truncate``, :class:`SupportsTruncate`) and evaluates
            only the rest; with ``share_prefix`` it copies a longer start from another slot
            (kept or running) when there is one.  A repeated prompt (a retried request, the
            next turn of a conversation, the same system prompt and tools) then costs one
            token of prefill.  Off when the decoder cannot truncate.  Memory: none beyond the
            slots' cache, which is allocated up front anyway.
        worker_nice: raise the worker thread's niceness by this much when it starts (Linux:
            ``os.setpriority`` on the thread's own id; the threads llama.cpp starts from it
            inherit it; elsewhere, or when refused, nothing changes).  A server's event loop
            then gets the cores first when both are ready: its per-request work is short and
            latency-bound (a streamed forced start, arrivals), the steps are long and
            throughput-bound.  0: the process's own priority.

    Raises:
        ConfigurationError: ``decoder`` is not a batched decoder, or a bad ``max_queue`` /
            ``prefill_tokens`` / ``worker_nice``.
    """

    def __init__(
        self,
        decoder: BatchedDecoder,
        *,
        max_queue: int | None = 64,
        prefill_tokens: int | None = None,
        share_prefix: int | None = None,
        prompt_cache: bool = False,
        worker_nice: int = 0,
    ) -> None:
        if not isinstance(decoder, BatchedDecoder):
            raise ConfigurationError(
                "ContinuousBatcher takes a BatchedDecoder (LlamaCppBatchedDecoder, "
                f"TransformersBatchedDecoder), got {type(decoder).__name__}"
            )
        if max_queue is not None and (
            isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 0
        ):
            raise ConfigurationError(f"max_queue must be an int >= 0 or None, got {max_queue!r}")
        if prefill_tokens is not None and (
            isinstance(prefill_tokens, bool)
            or not isinstance(prefill_tokens, int)
            or prefill_tokens < 1
        ):
            raise ConfigurationError(
                f"prefill_tokens must be an int >= 1 or None, got {prefill_tokens!r}"
            )
        self._prefill_tokens = prefill_tokens
        if share_prefix is not None and (
            isinstance(share_prefix, bool) or not isinstance(share_prefix, int) or share_prefix < 1
        ):
            raise ConfigurationError(
                f"share_prefix must be an int >= 1 or None, got {share_prefix!r}"
            )
        self._share_prefix = share_prefix if isinstance(decoder, SupportsCopyPrefix) else None
        if not isinstance(prompt_cache, bool):
            raise ConfigurationError(f"prompt_cache must be a bool, got {prompt_cache!r}")
        self._prompt_cache = prompt_cache and isinstance(decoder, SupportsTruncate)
        if isinstance(worker_nice, bool) or not isinstance(worker_nice, int) or worker_nice < 0:
            raise ConfigurationError(f"worker_nice must be an int >= 0, got {worker_nice!r}")
        self._worker_nice = worker_nice
        # grammar -> {lead tokens: the bytes it forces after them}: a request's forced start
        # (find_jump_forward_bytes, ~0.1-0.2 ms) computed once per grammar, not per submit;
        # an entry lives as long as its grammar (weak keys)
        self._forced: weakref.WeakKeyDictionary[CompiledGrammar, dict[tuple[int, ...], bytes]]
        self._forced = weakref.WeakKeyDictionary()
        self._kept: dict[int, list[int]] = {}  # free slot -> the tokens its cache still holds
        self._left: dict[int, int] = {}  # slot -> the step its last request left (LRU order)
        self._decoder = decoder
        self._vocab = decoder.vocab
        self._stop_ids = self._vocab.stop_token_ids
        self._max_queue = max_queue
        self._bitmask = allocate_token_bitmask(decoder.n_slots, self._vocab.vocab_size)
        self._queue: deque[_Job] = deque()
        self._rows: dict[int, _Row] = {}  # slot -> row
        self._cancels: set[BatchedRequest] = set()
        self._lock = threading.Lock()  # the queue and the cancel set
        self._wake = threading.Condition(self._lock)
        self._step_lock = threading.Lock()  # one step at a time
        self._worker: threading.Thread | None = None
        self._closing = False
        self.steps = 0
        """Steps run so far (one model call each, when any row ran)."""
        self.rows_stepped = 0
        """Rows in those steps' model calls, summed (``rows_stepped / steps``: the mean batch)."""
        self.prompt_tokens_evaluated = 0
        """Prompt tokens the model evaluated for joining requests."""
        self.prompt_tokens_reused = 0
        """Prompt tokens not evaluated: kept in a slot (``prompt_cache``) or copied from
        another (``share_prefix``)."""

    # -- state ---------------------------------------------------------------------------------
    @property
    def decoder(self) -> BatchedDecoder:
        return self._decoder

    @property
    def n_slots(self) -> int:
        return self._decoder.n_slots

    @property
    def running(self) -> int:
        """Requests holding a slot."""
        return len(self._rows)

    @property
    def queued(self) -> int:
        """Requests waiting for a slot."""
        return len(self._queue)

    @property
    def has_worker(self) -> bool:
        return self._worker is not None

    @property
    def worker_alive(self) -> bool:
        """The worker thread runs (started and not closed)."""
        worker = self._worker
        return worker is not None and worker.is_alive() and not self._closing

    # -- submitting ----------------------------------------------------------------------------
    def submit(
        self,
        prompt_ids: Sequence[int],
        *,
        compiled: CompiledGrammar | None = None,
        params: SamplingParams | None = None,
        seed: int | None = None,
        max_tokens: int = 256,
        stop: str | Sequence[str] | None = None,
        canonical: bool = False,
        schema_class: Any = None,
        compile_s: float = 0.0,
        observer: StepObserver | None = None,
        logprobs: int | None = None,
        control: StepControl | None = None,
        fast_forward: bool = False,
        wake: bool = True,
    ) -> BatchedRequest:
        """Queue a request given as token ids and (optionally) a compiled constraint.

        ``params`` defaults to greedy decoding (``generate``'s ``temperature=0``); ``seed``
        seeds the request's own sampler exactly as ``generate(seed=)``; ``schema_class`` (a
        Pydantic class) gives ``result.parsed``; ``compile_s`` goes into the timings;
        ``observer`` sees the request's model calls (:class:`StepObserver`); ``logprobs``
        (``k``) gives ``result.logprobs`` as ``generate(logprobs=k)``; ``control`` (a
        :class:`~formcast.generation.StepControl`) is checked at the start of every step
        while the request waits or runs, so a set cancel flag or a passed deadline ends it
        before its next model call with ``finish_reason`` ``"cancelled"`` / ``"timeout"``
        and the text so far (a normal result, as ``generate(control=)`` gives; its slot is
        freed), and its ``on_step`` sees every output token.  ``fast_forward`` (with
        ``compiled``, without ``logprobs``): the bytes the constraint forces are appended as
        the tokenizer's tokens and evaluated in the row's next model call, as
        ``generate(fast_forward=True)`` (:mod:`formcast.generation.fast_forward`).
        ``wake=False``: an idle worker thread is not woken for this request (a running one
        takes it at its next step); call :meth:`wake` once the caller's own urgent work is
        done -- e.g. a server writing a burst's first chunks before the worker's Python (GIL
        held) competes with it, and so that the burst joins in one step.

        The request's lead (see the module docstring; not without ``compiled``, nor with an
        ``observer``) is taken here, on the calling thread: its mask fills, its pieces and
        ``on_step`` calls happen before this returns.  The text pushed ahead (the forced bytes
        past the forced tokens; not with ``stop`` strings or ``canonical``, at most one byte
        per token of ``max_tokens`` left) is text every output continues with, so the pieces
        still join to ``result().text`` -- unless the request is cancelled or times out before
        its tokens have written it.

        Raises:
            ConfigurationError: bad arguments, or prompt + ``max_tokens`` exceeds a slot's
                context (checked here, before anything runs).
            VocabularyError: ``compiled`` is for another vocabulary.
            BatcherFullError: ``max_queue`` requests are waiting already.
        """
        return self._submit(
            prompt_ids,
            compiled,
            params,
            seed,
            max_tokens,
            stop,
            canonical,
            schema_class,
            compile_s,
            _perf(),
            observer,
            logprobs,
            control,
            fast_forward,
            wake,
        )

    def _submit(
        self,
        prompt_ids: Sequence[int],
        compiled: CompiledGrammar | None,
        params: SamplingParams | None,
        seed: int | None,
        max_tokens: int,
        stop: str | Sequence[str] | None,
        canonical: bool,
        schema_class: Any,
        compile_s: float,
        t_call: float,
        observer: StepObserver | None = None,
        logprobs: int | None = None,
        control: StepControl | None = None,
        fast_forward: bool = False,
        wake: bool = True,
    ) -> BatchedRequest:
        ids = [int(t) for t in prompt_ids]
        if not ids:
            raise ConfigurationError("the prompt is empty: give at least one token id")
        model = self._decoder.model
        if compiled is not None:
            compiled = _check_compiled(compiled, model)
        # the option checks of generate(), made in their one place
        checked = GenerationOptions(
            max_tokens=max_tokens,
            seed=seed,
            stop=stop,
            logprobs=logprobs,
            control=control,
            fast_forward=fast_forward,
        )
        ff: FastForward | None = None
        if fast_forward:
            if compiled is None:
                raise ConfigurationError(
                    "fast_forward=True needs a constraint (compiled=): without one nothing "
                    "is forced"
                )
            ff = fast_forward_for(model)
        limit = self._decoder.max_context
        if limit is not None and len(ids) + max_tokens > limit:
            raise ConfigurationError(
                f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceeds the "
                f"{limit} tokens a slot holds: lower max_tokens or make the decoder with a "
                "larger context per slot"
            )
        if params is None:
            params = SamplingParams.greedy()
        elif not isinstance(params, SamplingParams):
            raise ConfigurationError(f"params must be SamplingParams, got {type(params).__name__}")
        if not isinstance(canonical, bool):
            raise ConfigurationError(f"canonical must be a bool, got {canonical!r}")
        if observer is not None and not isinstance(observer, StepObserver):
            raise ConfigurationError(
                "observer must have consume(token_ids) and on_logits(logits) methods, got "
                f"{type(observer).__name__}"
            )
        pairs: CanonicalPairs | None = None
        if canonical:
            if compiled is None:
                raise ConfigurationError("canonical=True needs a constraint (compiled=)")
            pairs = canonical_pairs_for(model)
        handle = BatchedRequest(self, ids)
        job = _Job(
            handle=handle,
            compiled=compiled,
            params=params,
            rng=np.random.default_rng(checked.seed),
            max_tokens=max_tokens,
            stops=checked.stops,
            canonical=pairs,
            schema_class=schema_class,
            compile_s=compile_s,
            t_call=t_call,
            vocab=self._vocab,
            observer=observer,
            logprobs=checked.logprobs,
            control=checked.control,
            fast_forward=ff,
        )
        with self._lock:
            self._check_room()
        memo = None
        if compiled is not None:
            memo = self._forced.get(compiled)
            if memo is None:
                memo = self._forced.setdefault(compiled, {})
        row = job.row = _Row(job, self._stop_ids, memo)
        if checked.control is None or checked.control.check() is None:
            try:
                ended = row.lead()  # the forced start: output now, evaluated with the prompt
            except Exception as exc:
                handle._finish(None, exc)
                return handle
            with handle._cond:  # not queued yet: only the lead pushed
                handle.lead = tuple(handle._items)
            if ended is not None:  # the whole output was known without the model
                try:
                    handle._finish(row.result(ended), None)
                except Exception as exc:  # pragma: no cover - building a result does not fail
                    handle._finish(None, exc)
                return handle
        with self._lock:
            self._check_room()
            self._queue.append(job)
            if wake:
                self._wake.notify_all()
        return handle

    def wake(self) -> None:
        """Wake the worker thread if it sleeps (it then takes what is queued): after
        ``submit(wake=False)``.  O(1); any thread."""
        with self._lock:
            self._wake.notify_all()

    def _check_room(self) -> None:
        """Raise unless a request may be queued now (under ``_lock``)."""
        if self._closing:
            raise ConfigurationError("the batcher is closed: make a new one")
        waiting = len(self._queue)
        if self._max_queue is not None and waiting >= self._max_queue:
            raise BatcherFullError(
                f"{waiting} requests wait for one of {self.n_slots} slots already "
                f"(max_queue={self._max_queue}): try again later"
            )

    def submit_generate(
        self,
        prompt: Prompt,
        *,
        schema: Any = None,
        regex: str | None = None,
        grammar: str | None = None,
        grammar_syntax: str = "gbnf",
        compiled: CompiledGrammar | None = None,
        constraint: Any = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        chat: bool | None = None,
        system: str | None = None,
        dialect: str = DEFAULT_REGEX_DIALECT,
        canonical: bool = False,
        fast_forward: bool = False,
    ) -> BatchedRequest:
        """:meth:`submit` with :func:`~formcast.generation.generate`'s arguments (same names,
        defaults and meaning; the prompt through the model's chat template; the constraint
        compiled by the shared compiler of the vocabulary).

        Raises:
            as ``generate`` for bad arguments or a constraint that does not compile, and
            :class:`BatcherFullError`.
        """
        t_call = _perf()
        model = self._decoder.model
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
        cg, compile_s = resolve_constraint(
            model,
            compiled=compiled,
            schema=schema,
            regex=regex,
            grammar=grammar,
            grammar_syntax=grammar_syntax,
            compiler=None,
            dialect=dialect,
            constraint=constraint,
        )
        ids = _prompt_ids(model, prompt, chat=chat, system=system)
        schema_class = pydantic_model_class(schema) if cg is not None else None
        return self._submit(
            ids,
            cg,
            params,
            seed,
            max_tokens,
            stop,
            canonical,
            schema_class,
            compile_s,
            t_call,
            fast_forward=fast_forward,
        )

    # -- running -------------------------------------------------------------------------------
    def step(self) -> bool:
        """Run one step (see the module docstring): at most one model call.

        Returns whether work remains (requests running or queued).  Safe to call from any
        thread (steps run one at a time); a request's error ends that request only."""
        with self._step_lock:
            self._drop_cancelled()
            self._drop_stopped()
            self._admit()
            rows = list(self._rows.values())
            if rows:
                self._call_model(rows)
                self._tokens([r for r in rows if self._rows.get(r.slot) is r])
                self.steps += 1
                self.rows_stepped += len(rows)
            with self._lock:
                return bool(self._rows or self._queue)

    def run_until_idle(self) -> None:
        """Run steps until no request is running or queued (without a worker thread)."""
        while self.step():
            pass

    def start(self) -> None:
        """Run the steps on a daemon worker thread from now on (idempotent); it sleeps while
        there is no work and ends with :meth:`close`."""
        with self._lock:
            if self._closing:
                raise ConfigurationError("the batcher is closed: make a new one")
            if self._worker is not None:
                return
            self._worker = threading.Thread(target=self._work, name="formcast-batcher", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        if self._worker_nice:
            _lower_thread_priority(self._worker_nice)
        while True:
            with self._lock:
                while not (self._rows or self._queue or self._cancels or self._closing):
                    self._wake.wait()
                if self._closing:
                    return
            try:
                self.step()
            except BaseException as exc:  # pragma: no cover - every row error is caught below
                self._fail_all(exc)

    def close(self) -> None:
        """Cancel every request, stop the worker thread and release every slot (the decoder
        stays open: close it yourself)."""
        with self._lock:
            self._closing = True
            jobs = list(self._queue)
            self._queue.clear()
            self._wake.notify_all()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join()
        self._worker = None
        with self._step_lock:
            for job in jobs:
                job.handle._cancelled = True
                job.handle._finish(None, None)
            for row in list(self._rows.values()):
                row.handle._cancelled = True
                self._leave(row, None, None)

    def __enter__(self) -> ContinuousBatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the step's parts ----------------------------------------------------------------------
    def _cancel(self, handle: BatchedRequest) -> None:
        with self._lock:
            self._cancels.add(handle)
            self._wake.notify_all()

    def _drop_cancelled(self) -> None:
        with self._lock:
            cancels, self._cancels = self._cancels, set()
            if cancels:
                kept = [job for job in self._queue if job.handle not in cancels]
                for job in self._queue:
                    if job.handle in cancels:
                        job.handle._finish(None, None)
                self._queue = deque(kept)
        for row in list(self._rows.values()):
            if row.handle in cancels:
                self._leave(row, None, None)

    def _drop_stopped(self) -> None:
        """Requests whose control says stop (cancel flag set, deadline passed) end now, with
        the text so far: queued ones without a slot, running ones leave theirs."""
        with self._lock:
            stopped = [
                (job, reason)
                for job in self._queue
                if job.control is not None and (reason := job.control.check()) is not None
            ]
            if stopped:
                gone = {id(job) for job, _ in stopped}
                self._queue = deque(job for job in self._queue if id(job) not in gone)
        for job, reason in stopped:
            try:
                result = job.stopped_result(reason)
            except Exception as exc:  # pragma: no cover - building a result does not fail
                job.handle._finish(None, exc)
            else:
                job.handle._finish(result, None)
        for row in list(self._rows.values()):
            control = row.control
            reason = control.check() if control is not None else None
            if reason is not None:
                try:
                    result = row.result(reason)
                except Exception as exc:  # pragma: no cover - building a result does not fail
                    self._leave(row, None, exc)
                else:
                    self._leave(row, result, None)

    def _admit(self) -> None:
        """Queued requests take free slots, first come first served: each the free slot
        whose kept sequence shares the longest start with its prompt (``prompt_cache``),
        or a copy of a longer shared start (``share_prefix``); its ``pending`` is the rest."""
        free = [s for s in range(self.n_slots) if s not in self._rows]
        budget = self._prefill_tokens
        share = self._share_prefix
        joined = 0
        new_rows: list[_Row] = []
        with self._lock:
            while free and self._queue:
                head = self._queue[0]
                assert head.row is not None
                n_prompt = len(head.row.prompt_ids)
                ids = head.row.prompt_ids + head.row.sampler.pending  # prompt and lead
                dst, kept = self._pick_slot(free, ids)
                donor, n = None, 0
                if share is not None:
                    donor, n = self._donor(ids, dst)
                    if n < share or n <= kept:
                        donor, n = None, 0
                    have = max(n, kept)
                    if any(
                        min(_common_prefix(ids, r.seq), len(ids) - 1) - have >= share
                        for r in new_rows
                    ):
                        break  # joins next step, copying the prefix once it is evaluated
                cost = len(ids) - max(n, kept)
                if budget is not None and joined and joined + cost > budget:
                    break
                job = self._queue.popleft()
                free.remove(dst)
                row = job.row
                assert row is not None
                row.seat(dst, self._bitmask)
                reused = self._take_slot(dst, kept, donor, n)
                row.sampler.pending = list(ids[reused:])
                row.held = list(ids[:reused])
                joined += len(ids) - reused
                self.prompt_tokens_reused += min(reused, n_prompt)
                self._rows[dst] = row
                new_rows.append(row)

    def _pick_slot(self, free: list[int], ids: list[int]) -> tuple[int, int]:
        """``(slot, tokens to keep)`` for ``ids`` among the ``free`` slots.

        A kept sequence that holds the whole prompt but its last token, or that the prompt
        extends (the next turn of a conversation), is reused in place: nothing else is lost.
        Otherwise the slot costing least is taken -- a never used one, else the one left
        longest ago -- keeping whatever start it shares with ``ids`` (a longer one is copied
        from another slot by the caller).  At most ``len(ids) - 1`` tokens are kept: one is
        evaluated, for the logits."""
        if not self._kept:
            return free[0], 0
        cap = len(ids) - 1
        best, best_n = None, 0
        for s in free:
            kept = self._kept.get(s)
            if kept:
                n = min(_common_prefix(ids, kept), cap)
                if n > best_n:
                    best, best_n = s, n
        if best is not None and (best_n == cap or best_n >= len(self._kept[best])):
            return best, best_n
        dst = min(free, key=lambda s: (s in self._kept, self._left.get(s, -1)))
        kept = self._kept.get(dst)
        return dst, min(_common_prefix(ids, kept), cap) if kept else 0

    def _take_slot(self, dst: int, kept: int, donor: int | None, n: int) -> int:
        """Ready free slot ``dst``: copy ``n`` tokens from slot ``donor``, or keep ``kept``
        of its own, or release it; returns how many prompt tokens it now holds."""
        decoder: Any = self._decoder
        held = self._kept.pop(dst, None)
        if donor is not None:
            if held is not None:
                decoder.release(dst)
            try:
                decoder.copy_prefix(donor, dst, n)
            except ConfigurationError:  # the model cannot: prefill it all
                self._share_prefix = None
                return 0
            return n
        if kept:
            try:
                decoder.truncate(dst, kept)
            except ConfigurationError:  # the model cannot: prefill it all
                self._prompt_cache = False
                decoder.release(dst)
                return 0
            return kept
        if held is not None:
            decoder.release(dst)
        return 0

    def _donor(self, ids: list[int], dst: int) -> tuple[int | None, int]:
        """The slot (a running row's, evaluated, or a kept one other than ``dst``) whose
        sequence shares the longest start with ``ids`` (at most ``len(ids) - 1`` tokens:
        one is left to evaluate, for the logits)."""
        best: int | None = None
        best_n = 0
        cap = len(ids) - 1
        for r in self._rows.values():
            if r.prefilled:
                n = min(_common_prefix(ids, r.held), cap)
                if n > best_n:
                    best, best_n = r.slot, n
        for s, kept in self._kept.items():
            if s != dst:
                n = min(_common_prefix(ids, kept), cap)
                if n > best_n:
                    best, best_n = s, n
        return best, best_n

    def _call_model(self, rows: list[_Row]) -> None:
        """The step's one model call: every row's pending tokens (a joining row's prompt)."""
        for r in list(rows):
            if r.observer is not None and r.prefilled:
                try:
                    r.observer.consume(list(r.sampler.pending))
                except Exception as exc:
                    rows.remove(r)
                    self._leave(r, None, exc)
        if not rows:
            return
        feeds = [(r.slot, r.sampler.pending) for r in rows]
        t0 = _perf()
        try:
            logits = self._decoder.decode(feeds)
        except Exception as exc:  # the call failed for every row in it
            for r in rows:
                self._leave(r, None, exc)
            return
        dt = _perf() - t0
        for i, r in enumerate(rows):
            r.sampler.logits = logits[i]
            if not r.prefilled:  # the prompt's part of the call (the lead is output)
                self.prompt_tokens_evaluated += max(0, len(r.prompt_ids) - len(r.held))
            r.held += r.sampler.pending
            r.sampler.pending = []
            if r.prefilled:
                r.decode_times.append(dt)
            else:
                r.prefill_s, r.prefilled = dt, True
            if r.observer is not None:
                try:
                    r.observer.on_logits(logits[i])
                except Exception as exc:
                    self._leave(r, None, exc)

    def _tokens(self, rows: list[_Row]) -> None:
        """Take tokens for every row until each waits for the model or has finished."""
        todo = rows
        while todo:
            fill: dict[int, bool] = {}
            masked = [r for r in todo if r.constraint is not None and not r.ready]
            if masked:
                matchers = [r.constraint.matcher for r in masked]  # type: ignore[union-attr]
                res = batch_fill_next_token_bitmask(
                    matchers, self._bitmask, [r.slot for r in masked]
                )
                fill = {r.slot: bool(ok) for r, ok in zip(masked, res.allowed)}
            again: list[_Row] = []
            for r in todo:
                try:
                    what, reason = r.advance(fill.get(r.slot))
                except Exception as exc:
                    self._leave(r, None, exc)
                    continue
                if what == _AGAIN:
                    again.append(r)
                elif what == _DONE:
                    assert reason is not None
                    try:
                        result = r.result(reason)
                    except Exception as exc:
                        self._leave(r, None, exc)
                        continue
                    self._leave(r, result, None)
            todo = again

    def _leave(
        self, row: _Row, result: GenerationResult | None, error: BaseException | None
    ) -> None:
        """The row leaves its slot (released in the decoder) and its request finishes."""
        if self._rows.get(row.slot) is row:
            del self._rows[row.slot]
            self._left[row.slot] = self.steps
            try:
                if (
                    self._prompt_cache
                    and error is None
                    and row.prefilled
                    and row.held
                    and self._decoder.length(row.slot) == len(row.held)
                ):
                    self._kept[row.slot] = row.held  # kept for a request starting the same
                else:
                    self._decoder.release(row.slot)
            except Exception as exc:  # pragma: no cover - a closed decoder
                error = error or exc
        row.handle._finish(result, error)

    def _fail_all(self, exc: BaseException) -> None:  # pragma: no cover - see _work
        for row in list(self._rows.values()):
            self._leave(row, None, exc)
