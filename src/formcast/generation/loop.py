"""The per-token decoding loop behind :func:`~formcast.generation.generate` and ``stream``.

One step (the order is fixed; see :mod:`formcast.generation.api` for why)::

    _ConstraintSide.next_allowed   fill the bitmask, look up the allowed ids (cached per row):
                                   only stop tokens allowed -> "completed"; none -> "dead_end"
    budget check                   ``max_tokens`` text tokens -> "max_tokens"
    fast-forward run               (``fast_forward=True``) the forced bytes' tokens, appended
                                   without sampling (:mod:`formcast.generation.fast_forward`);
                                   the next step samples
    forced token                   exactly one allowed: taken without sampling
    _ModelSide.next_token          model.step(pending tokens) -> logits -> masked sample
                                   (and, with ``logprobs``, the token's log-probability)
    _ConstraintSide.accept         matcher.accept_token
    _Output.add                    bytes -> UTF-8 text -> stop-string scan -> yield the piece
    control.on_step                the caller's callback (may end the output)

A :class:`~formcast.generation.StepControl` is checked before the prompt is evaluated and at
the start of every step (so before every model call): a set cancel flag ends the output as
``"cancelled"``, a passed deadline as ``"timeout"``; the result is the prefix so far.

The three sides each own their state (``__slots__``) and their timings (``mask_step_s``,
``decode_step_s``, ``sample_step_s`` measure exactly the statements named above); the loop
(:func:`decode`) only sequences them and builds the :class:`GenerationResult`.

Lifetime: :func:`decode` returns a generator that lives for one generation; the sides live
inside it.  The allowed-ids cache (:func:`cached_allowed_ids`) is process-wide, shared by all
generations, bounded to 64 MiB of row bytes plus ids (:class:`~formcast.cache.LruCache`).
Costs per step: one bitmask fill (the matcher's), one hash of the bitmask row (O(V/32)), and
sampling at O(allowed) after one gather; the warm-up thread runs only during the prefill.
"""

from __future__ import annotations

import codecs
import json
import sys
import threading
import time
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import numpy as np

from ..bitmask import allocate_token_bitmask, bitmask_to_ids
from ..cache import LruCache
from ..errors import DeadEndDiagnostic, FormcastError
from ..index.compiled import CompiledGrammar
from ..model.protocol import LanguageModel, Logits
from ..runtime.matcher import GrammarMatcher
from ..sampling import SamplingParams, sample_token
from ..vocab.canonical import CanonicalPairs
from ..vocab.vocabulary import Vocabulary
from .control import Step, StepControl
from .fast_forward import FastForward
from .results import FinishReason, GenerationResult, GenerationTimings, TokenLogprob
from .tokenization import TokenHealing, canonical_dead_end

__all__ = [
    "JSON_KINDS",
    "WARM_UP_THREAD_NAME",
    "StopScanner",
    "cached_allowed_ids",
    "decode",
    "parse_output",
    "token_logprob",
]

JSON_KINDS = frozenset({"json_schema", "builtin_json"})
"""The constraint kinds whose completed output is parsed as JSON (``result.value``)."""

WARM_UP_THREAD_NAME = "formcast-warm-up"
"""The name of the background thread that precomputes masks during the prefill (joined before
the call yields or returns anything)."""

_WARM_UP_SECONDS = 2.0
"""Upper bound on background mask precomputation during the prompt's prefill."""

_perf = time.perf_counter


# -- allowed ids of a bitmask row ----------------------------------------------------------------
_ALLOWED_IDS_MAX_BYTES = 64 << 20
# row bytes -> (read-only allowed ids, entry bytes: the row's plus the ids')
_ALLOWED_IDS: LruCache[bytes, tuple[np.ndarray, int]] = LruCache(
    sys.maxsize, max_weight=_ALLOWED_IDS_MAX_BYTES, weight=lambda entry: entry[1]
)


def cached_allowed_ids(row: np.ndarray) -> np.ndarray:
    """:func:`~formcast.bitmask.bitmask_to_ids` of ``row`` (read-only), cached by the row's bytes.

    Shared by all generations: a state seen before (by any request) costs one hash of the row
    instead of an unpack.  An entry is weighed as its row bytes plus its ids; one heavier than
    the whole bound is computed but not kept."""
    key = row.tobytes()
    _, entry = _ALLOWED_IDS.get(key)
    if entry is not None:
        return entry[0]
    ids = bitmask_to_ids(row)
    ids.setflags(write=False)
    size = len(key) + ids.nbytes
    if size <= _ALLOWED_IDS_MAX_BYTES:
        _ALLOWED_IDS.put(key, (ids, size))
    return ids


# -- the three sides of a step -------------------------------------------------------------------
class _ConstraintSide:
    """The grammar's side of one generation: the matcher, its bitmask and the mask timings.

    ``next_allowed`` returns the allowed ids, or ``None`` when the constraint ends the
    generation (``end`` then says how: ``"completed"`` with ``stop_token``, or ``"dead_end"``
    with ``diagnostic``).  Each step's ``mask_step_s`` entry covers the fill, the cached id
    lookup, the forced-stop check and (added by ``accept``) the accept."""

    __slots__ = (
        "bitmask",
        "canonical",
        "diagnostic",
        "end",
        "mask_times",
        "matcher",
        "n_stops",
        "row",
        "stop_flags",
        "stop_token",
    )

    def __init__(
        self, compiled: CompiledGrammar, vocab: Vocabulary, canonical: CanonicalPairs | None = None
    ) -> None:
        self.matcher = GrammarMatcher(compiled)
        self.canonical = canonical
        self.bitmask = allocate_token_bitmask(1, vocab.vocab_size)
        self.row = self.bitmask[0]
        stop_ids = vocab.stop_token_ids
        self.stop_flags = np.zeros(vocab.vocab_size, dtype=bool)
        self.stop_flags[list(stop_ids)] = True
        self.n_stops = len(stop_ids)
        self.mask_times: list[float] = []
        self.end: FinishReason = "dead_end"  # read once next_allowed returned None
        self.stop_token: int | None = None
        self.diagnostic: DeadEndDiagnostic | None = None

    def next_allowed(self, prev: int = -1, filled: bool | None = None) -> np.ndarray | None:
        """The ids allowed next (sorted), or ``None`` when the constraint ends the output.

        ``prev``: the previous output token (``-1``: none), for ``canonical``'s pair rows.
        ``filled``: ``self.row`` was already filled by a batch fill, which returned this
        (:mod:`formcast.generation.batching`); ``None``: fill it here."""
        matcher = self.matcher
        tm = _perf()
        ok = matcher.fill_next_token_bitmask(self.bitmask) if filled is None else filled
        allowed = cached_allowed_ids(self.row)
        canonical = self.canonical
        if ok and canonical is not None and prev >= 0 and allowed.size:
            canonical.restrict_bitmask(prev, self.row, allowed)
            allowed = cached_allowed_ids(self.row)
            if allowed.size == 0:
                self.mask_times.append(_perf() - tm)
                self.diagnostic = canonical_dead_end(matcher, canonical.vocab, prev)
                self.end = "dead_end"
                return None
        if ok and allowed.size <= self.n_stops and self.stop_flags[allowed].all():
            # only stop tokens: the output is complete, no model call
            self.stop_token = int(allowed[0])
            matcher.accept_token(self.stop_token)
            self.mask_times.append(_perf() - tm)
            self.end = "completed"
            return None
        self.mask_times.append(_perf() - tm)
        if not ok:
            self.diagnostic = matcher.diagnose()
            self.end = "dead_end"
            return None
        return allowed

    def accept(self, tok: int) -> None:
        """Advance the matcher by the chosen token (timed into this step's mask time)."""
        ta = _perf()
        accepted = self.matcher.accept_token(tok)
        self.mask_times[-1] += _perf() - ta
        if not accepted:  # pragma: no cover - the sampler only returns allowed tokens
            raise FormcastError(f"internal error: sampled token {tok} rejected by the matcher")


class _ModelSide:
    """The model's side: the current logits, the tokens not yet evaluated, the sampler.

    Forced tokens are only queued (``pending``); the next sampled token evaluates them all in
    one ``model.step`` call.  ``decode_times`` has one entry per such call, ``sample_times``
    one per sampled token.  With ``top`` (``logprobs=``) not ``None``, ``logprobs`` gets one
    :class:`TokenLogprob` per output token, from the logits and allowed ids it was drawn
    from (:func:`token_logprob`; a forced token's is added by :meth:`forced`)."""

    __slots__ = (
        "decode_times",
        "logits",
        "logprobs",
        "model",
        "params",
        "pending",
        "rng",
        "sample_times",
        "top",
    )

    def __init__(
        self,
        model: LanguageModel,
        logits: Logits,
        params: SamplingParams,
        rng: np.random.Generator,
        top: int | None = None,
    ) -> None:
        self.model = model
        self.logits = logits
        self.params = params
        self.rng = rng
        self.top = top
        self.logprobs: list[TokenLogprob] | None = None if top is None else []
        self.pending: list[int] = []
        self.decode_times: list[float] = []
        self.sample_times: list[float] = []

    def forced(self, tok: int) -> None:
        """Record a forced token's log-probability (0: the only token allowed)."""
        if self.logprobs is not None and self.top is not None:
            self.logprobs.append(TokenLogprob(tok, 0.0, ((tok, 0.0),)[: self.top]))

    def next_token(self, allowed: np.ndarray | None) -> int:
        """Evaluate the pending tokens, then sample among ``allowed`` (``None``: any token)."""
        if self.pending:
            td = _perf()
            self.logits = self.model.step(self.pending)
            self.decode_times.append(_perf() - td)
            self.pending = []
        ts = _perf()
        if allowed is None:
            tok = sample_token(self.logits, None, self.params, self.rng)
        else:
            tok = _sample_allowed(self.logits, allowed, self.params, self.rng)
        self.sample_times.append(_perf() - ts)
        if self.logprobs is not None and self.top is not None:
            self.logprobs.append(token_logprob(self.logits, allowed, tok, self.top))
        return tok


def token_logprob(logits: Any, allowed: np.ndarray | None, tok: int, top: int) -> TokenLogprob:
    """``tok``'s :class:`TokenLogprob` at a step with ``logits`` where ``allowed`` (sorted ids;
    ``None``: every token) were allowed: a log-softmax of the raw logits over the allowed ids
    (temperature 1, before top-k/top-p; non-finite logits are left out of the normalizer),
    and the ``top`` most likely of them (a stable sort: ties in increasing id order).
    O(allowed) plus the sort."""
    row = np.asarray(logits, dtype=np.float64)
    ids = np.arange(row.shape[0]) if allowed is None else allowed
    sub = row[ids]
    finite = np.isfinite(sub)
    peak = sub[finite].max() if finite.any() else 0.0
    logz = peak + np.log(np.exp(sub[finite] - peak).sum())
    lp = sub - logz
    order = np.argsort(-lp, kind="stable")[:top]
    return TokenLogprob(
        int(tok), float(row[tok] - logz), tuple((int(ids[j]), float(lp[j])) for j in order)
    )


def _sample_allowed(
    logits: Any, ids: np.ndarray, params: SamplingParams, rng: np.random.Generator
) -> int:
    """:func:`~formcast.sampling.sample_token` restricted to the allowed ``ids``.

    Exactly the distribution (and, for a seeded ``rng``, exactly the token) of
    ``sample_token(logits, bitmask_row, params, rng)``: masked tokens have probability 0, the
    chain (temperature, top-k, top-p, softmax) only ever sees the allowed tokens, the allowed
    ids are in increasing order (same greedy tie-break, same inverted CDF, one ``rng.random()``
    draw) -- but the work is O(allowed) instead of O(vocabulary) after the gather.
    """
    sub = np.take(np.asarray(logits), ids)
    return int(ids[sample_token(sub, None, params, rng)])


class StopScanner:
    """Cuts the text at the first caller stop string; holds back possible stop-string starts."""

    __slots__ = ("held", "stops")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.held = ""

    def feed(self, piece: str) -> tuple[str, bool]:
        """``(text safe to emit, stop string found)``."""
        if not self.stops:
            return piece, False
        buf = self.held + piece
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return buf[: min(hits)], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if s.startswith(buf[len(buf) - k :]):
                    keep = k
                    break
        self.held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


class _Output:
    """The output of one generation: token ids and bytes, incremental UTF-8 decoding, the
    stop-string scan, and what ends up in the result besides the text (the stop token, the
    forced-token count, the time to the first token).

    ``add`` returns the text that is safe to emit (whole characters, no possible stop-string
    start) and whether a stop string appeared; ``finish`` the held-back tail."""

    __slots__ = (
        "decoder",
        "diagnostic",
        "emitted",
        "ids",
        "n_forced",
        "raw",
        "scanner",
        "skip",
        "stop_token",
        "ttft",
        "vocab",
    )

    def __init__(self, vocab: Vocabulary, stops: tuple[str, ...], skip: int = 0) -> None:
        self.vocab = vocab
        self.skip = skip  # leading bytes that are not output (token healing's removed text)
        self.diagnostic: DeadEndDiagnostic | None = None
        self.ids: list[int] = []
        self.raw = bytearray()
        self.emitted: list[str] = []
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.scanner = StopScanner(stops)
        self.stop_token: int | None = None
        self.n_forced = 0
        self.ttft = 0.0

    def add(self, tok: int) -> tuple[str, bool]:
        """Append a text token: ``(text safe to emit, stop string found)``."""
        self.ids.append(tok)
        data = self.vocab.token_bytes(tok)
        if self.skip:
            cut = min(self.skip, len(data))
            data = data[cut:]
            self.skip -= cut
        self.raw += data
        piece = self.decoder.decode(data)
        if not piece:
            return "", False
        safe, hit = self.scanner.feed(piece)
        if safe:
            self.emitted.append(safe)
        return safe, hit

    def finish(self) -> tuple[str, bool]:
        """The rest of the text once the tokens end: ``(tail, stop string found)``."""
        tail, hit = self.scanner.feed(self.decoder.decode(b"", final=True))
        if not hit:
            tail += self.scanner.flush()
        if tail:
            self.emitted.append(tail)
        return tail, hit


# -- the loop ------------------------------------------------------------------------------------
def prefill(
    model: LanguageModel, prompt_ids: list[int], compiled: CompiledGrammar | None
) -> tuple[Logits, float]:
    """``model.start(prompt_ids)`` while a thread precomputes masks: ``(logits, seconds)``.

    The thread precomputes token classifications on the other core while the model reads the
    prompt; it never outlives the prefill: it is stopped and joined before the first token (a
    daemon thread still running at interpreter exit is stopped wherever it is, possibly inside
    native code, which can abort the process: "terminate called without an active
    exception"); the join costs at most the one mask computation in progress."""
    warm_stop = threading.Event()
    warmer: threading.Thread | None = None
    if compiled is not None:
        warmer = threading.Thread(
            target=compiled.warm_up,
            args=(_WARM_UP_SECONDS, warm_stop),
            name=WARM_UP_THREAD_NAME,
            daemon=True,
        )
        warmer.start()
    t0 = _perf()
    try:
        logits = model.start(prompt_ids)
        return logits, _perf() - t0
    finally:
        warm_stop.set()
        if warmer is not None:
            warmer.join()


def decode(
    model: LanguageModel,
    prompt_ids: list[int],
    compiled: CompiledGrammar | None,
    params: SamplingParams,
    rng: np.random.Generator,
    max_tokens: int,
    stops: tuple[str, ...],
    compile_s: float,
    t_call: float,
    schema_class: Any = None,
    *,
    canonical: CanonicalPairs | None = None,
    healed: bytes = b"",
    control: StepControl | None = None,
    logprobs: int | None = None,
    fast_forward: FastForward | None = None,
) -> Generator[str, None, GenerationResult]:
    """The decoding loop: yields the text pieces, returns the :class:`GenerationResult`.

    ``compile_s`` and ``t_call`` (the :func:`time.perf_counter` of the call) go into the
    timings; ``schema_class`` (a Pydantic model class) gives ``result.parsed``.  ``canonical``
    ANDs its pair rows into every mask after the first output token; ``healed`` (token
    healing: the bytes of the prompt token backed off, ``prompt_ids`` being the prompt
    without it) must be re-spelled first and is left out of the text (see
    :mod:`formcast.generation.tokenization`).  ``control`` is checked before the prefill and
    every step (see the module docstring); ``logprobs`` (``k``) records each output token's
    :class:`TokenLogprob` with the ``k`` most likely tokens.  ``fast_forward`` (with a
    constraint, without ``logprobs``) appends the forced bytes' tokens at once
    (:mod:`formcast.generation.fast_forward`).  Nothing runs until the first item is
    requested; the generator lives for one generation."""
    vocab = model.vocab
    if (canonical is not None or fast_forward is not None) and compiled is None:
        raise FormcastError(  # pragma: no cover - generate() checks it first
            "internal error: canonical masking and fast-forward need a constraint"
        )
    if fast_forward is not None and logprobs is not None:
        raise FormcastError(  # pragma: no cover - GenerationOptions refuses it first
            "internal error: fast-forward tokens have no log-probabilities"
        )
    constraint = _ConstraintSide(compiled, vocab, canonical) if compiled is not None else None
    out = _Output(vocab, stops, len(healed))
    healing = TokenHealing(vocab, healed) if healed else None
    stopped = control.check() if control is not None else None
    if stopped is not None:  # cancelled or timed out before the model read the prompt
        total = _perf() - t_call
        timings = GenerationTimings(
            compile_s=compile_s, time_to_first_token_s=total, total_s=total,
            prompt_tokens=len(prompt_ids),
        )
        result = _result(out, stopped, constraint, compiled, schema_class, prompt_ids, timings)
        return result if logprobs is None else replace(result, logprobs=())
    logits, prefill_s = prefill(model, prompt_ids, compiled)
    sampler = _ModelSide(model, logits, params, rng, logprobs)
    reason = yield from _steps(
        constraint, sampler, out, vocab.stop_token_ids, max_tokens, t_call, healing, canonical,
        control, fast_forward,
    )
    if reason not in ("stop", "cancelled", "timeout"):
        tail, hit = out.finish()
        if hit:
            reason = "stop"
        if tail:
            yield tail
    total = _perf() - t_call
    timings = GenerationTimings(
        compile_s=compile_s,
        prefill_s=prefill_s,
        time_to_first_token_s=out.ttft if out.ids else total,
        total_s=total,
        prompt_tokens=len(prompt_ids),
        output_tokens=len(out.ids),
        forced_tokens=out.n_forced,
        decode_step_s=tuple(sampler.decode_times),
        mask_step_s=tuple(constraint.mask_times) if constraint is not None else (),
        sample_step_s=tuple(sampler.sample_times),
    )
    result = _result(out, reason, constraint, compiled, schema_class, prompt_ids, timings)
    if sampler.logprobs is None:
        return result
    return replace(result, logprobs=tuple(sampler.logprobs))


def _result(
    out: _Output,
    reason: FinishReason,
    constraint: _ConstraintSide | None,
    compiled: CompiledGrammar | None,
    schema_class: Any,
    prompt_ids: list[int],
    timings: GenerationTimings,
) -> GenerationResult:
    """The :class:`GenerationResult` of a finished output (JSON parsed when completed)."""
    text = "".join(out.emitted)
    kind = compiled.kind if compiled is not None else None
    value, parsed, parse_error = parse_output(text, reason, kind, schema_class)
    return GenerationResult(
        text=text,
        finish_reason=reason,
        token_ids=tuple(out.ids),
        raw=bytes(out.raw),
        value=value,
        parsed=parsed,
        parse_error=parse_error,
        diagnostic=(
            out.diagnostic
            if out.diagnostic is not None
            else constraint.diagnostic
            if constraint is not None
            else None
        ),
        stop_token_id=out.stop_token,
        constraint=kind,
        prompt_ids=tuple(prompt_ids),
        timings=timings,
    )


def _steps(
    constraint: _ConstraintSide | None,
    sampler: _ModelSide,
    out: _Output,
    stop_ids: frozenset[int],
    max_tokens: int,
    t_call: float,
    healing: TokenHealing | None = None,
    canonical: CanonicalPairs | None = None,
    control: StepControl | None = None,
    fast_forward: FastForward | None = None,
) -> Generator[str, None, FinishReason]:
    """One token per iteration (mask, budget, forced or sampled token, accept, text) until the
    output ends; yields the safe text pieces, returns the finish reason.  A stop token ends
    the output without counting as text (``out.stop_token``).  While ``healing`` is active the
    allowed tokens are the healing ones (pair-tested too), and the matcher only sees the bytes
    past the removed text.  ``control`` is checked first in every step (before any model
    call) and its ``on_step`` sees every output token.  With ``fast_forward``, a step whose
    state forces bytes appends their tokens instead (:func:`_fast_forward`; the step after
    such a run samples)."""
    out_ids = out.ids
    matcher = constraint.matcher if constraint is not None else None
    on_step = control.on_step if control is not None else None
    after_run = False  # the last step was a fast-forward run: its held-back end is sampled
    while True:
        if control is not None:
            stopped = control.check()
            if stopped is not None:
                return stopped
        allowed: np.ndarray | None = None
        prev = out_ids[-1] if out_ids else -1
        healing_now = healing is not None and healing.active
        if healing_now:
            assert healing is not None
            allowed = healing.allowed(matcher)
            if canonical is not None and prev >= 0:
                allowed = canonical.restrict_ids(prev, allowed)
            if allowed.size == 0:
                if canonical is not None and prev >= 0:
                    out.diagnostic = canonical_dead_end(matcher, canonical.vocab, prev)
                else:  # pragma: no cover - the backed-off token itself always re-spells it
                    out.diagnostic = _healing_dead_end(matcher, out.vocab, healing.remaining)
                return "dead_end"
        elif constraint is not None:
            allowed = constraint.next_allowed(prev)
            if allowed is None:  # only stop tokens allowed, or none at all
                out.stop_token = constraint.stop_token
                return constraint.end
        if len(out_ids) >= max_tokens:
            return "max_tokens"
        if fast_forward is not None and not healing_now and not after_run:
            assert constraint is not None
            ran, ended = yield from _fast_forward(
                fast_forward, constraint, sampler, out, max_tokens, t_call, canonical, on_step
            )
            if ended is not None:
                return ended
            if ran:
                after_run = True
                continue
        after_run = False
        forced = allowed is not None and allowed.size == 1
        if forced:  # any sampler would pick it
            assert allowed is not None
            tok = int(allowed[0])
            out.n_forced += 1
        else:
            tok = sampler.next_token(allowed)
        if not out_ids:
            out.ttft = _perf() - t_call
        if healing_now:
            assert healing is not None
            healing.accept(tok, matcher)
        elif constraint is not None:
            constraint.accept(tok)
        if tok in stop_ids:  # not output: no log-probability entry either
            if not forced and sampler.logprobs:
                sampler.logprobs.pop()
            out.stop_token = tok
            return "completed"
        if forced and sampler.logprobs is not None:
            sampler.forced(tok)
        sampler.pending.append(tok)
        safe, hit = out.add(tok)
        if safe:
            yield safe
        if hit:
            return "stop"
        if on_step is not None:
            entries = sampler.logprobs
            lp = entries[-1].logprob if entries else None
            if on_step(Step(len(out_ids) - 1, tok, forced, lp)):
                return "cancelled"


def _fast_forward(
    ff: FastForward,
    constraint: _ConstraintSide,
    sampler: _ModelSide,
    out: _Output,
    max_tokens: int,
    t_call: float,
    canonical: CanonicalPairs | None,
    on_step: Any,
) -> Generator[str, None, tuple[bool, FinishReason | None]]:
    """Append the current state's forced run (:meth:`FastForward.run`) as forced tokens:
    accepted, queued for the next model call, added to the output and shown to ``on_step``.

    Returns ``(whether there was a run, None)`` (without one the step samples as usual), or
    ``(True, reason)`` when a stop string or ``on_step`` ended the output inside the run.  The
    run's work is timed into the step's mask time."""
    out_ids = out.ids
    tf = _perf()
    run = ff.run(
        constraint.matcher, out_ids, budget=max_tokens - len(out_ids), canonical=canonical
    )
    constraint.mask_times[-1] += _perf() - tf
    if not run:
        return False, None
    if not out_ids:
        out.ttft = _perf() - t_call
    for tok in run:
        constraint.accept(tok)
        out.n_forced += 1
        sampler.pending.append(tok)
        safe, hit = out.add(tok)
        if safe:
            yield safe
        if hit:
            return True, "stop"
        if on_step is not None and on_step(Step(len(out_ids) - 1, tok, True, None)):
            return True, "cancelled"
    return True, None


def _healing_dead_end(
    matcher: GrammarMatcher | None, vocab: Vocabulary, remaining: bytes
) -> DeadEndDiagnostic:
    """No token re-spells the removed prompt text and continues into the constraint."""
    return DeadEndDiagnostic(
        state=matcher.state if matcher is not None else None,
        prefix=b"",
        expected=f"a token that continues the healed prompt text {remaining!r}",
        expected_bytes=(),
        accepting=False,
        vocabulary_fingerprint=vocab.fingerprint,
        reason=(
            f"token_healing=True: no token of vocabulary {vocab.name!r} starts the output with "
            f"the removed prompt bytes {remaining!r} and continues into the constraint; use "
            "token_healing=False, or end the prompt where the constraint can start"
        ),
        extra={"healed_remaining": remaining},
    )


def parse_output(
    text: str, reason: FinishReason, kind: str | None, schema_class: Any
) -> tuple[Any, Any, str | None]:
    """``(value, parsed, parse_error)`` of a generation's text.

    Only a ``"completed"`` JSON output is parsed: anything else (a ``max_tokens`` prefix even
    if it happens to parse, a dead end, a stop string) has ``value``/``parsed`` ``None`` and a
    ``parse_error`` saying why, so a truncated output can never pass for a document (and a
    completed JSON ``null`` is told apart by ``parse_error is None``).  With a Pydantic class,
    ``parsed`` is ``schema_class.model_validate_json(text)`` (``None`` and the validation
    error in ``parse_error`` if the class's own validators reject the document).
    """
    if kind not in JSON_KINDS:
        return None, None, None
    if reason != "completed":
        return (
            None,
            None,
            (
                f"no JSON value: finish_reason is {reason!r}, the text is an unfinished prefix "
                "of a document"
            ),
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:  # pragma: no cover - the grammar guarantees JSON
        return None, None, f"internal error: the completed output is not JSON ({exc})"
    if schema_class is None:
        return value, value, None
    try:
        return value, schema_class.model_validate_json(text), None
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        return value, None, f"{schema_class.__name__} rejects the document: {exc}"
