"""The outcome of one generation: :class:`GenerationResult` and :class:`GenerationTimings`.

``finish_reason`` separates the ways a generation ends (never folded into one "ok"):

``"completed"``
    The model (or the grammar, when nothing else was allowed) emitted a stop token in an
    accepting state: the text is a complete sentence of the constraint's language.
``"max_tokens"``
    The token budget ran out first.  The text is a *truncated prefix*; it is never completed
    automatically, and ``value`` / ``parsed`` are ``None`` even if the prefix happens to parse
    (``parse_error`` says why).  This is how a schema without ``maxItems`` / ``maxLength`` (or
    with a bound like ``10**12``) ends when the model keeps going: the output is bounded by the
    schema *and* the budget, whichever is shorter.
``"dead_end"``
    The constraint allowed no token at all (``diagnostic`` says why: typically a byte the
    tokenizer cannot spell).  The text is the prefix generated so far.
``"stop"``
    A caller-given stop string appeared; the text ends before it (constrained output is then
    usually incomplete, so ``value`` is ``None``).
``"cancelled"`` / ``"timeout"``
    A :class:`~formcast.generation.StepControl` ended the generation (its cancel flag was set,
    its ``on_step`` returned ``True``; or its deadline or ``timeout_s`` passed).  The text is
    the prefix generated so far (``value`` ``None``).

Lifetime: immutable values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import DeadEndDiagnostic

__all__ = [
    "FINISH_REASONS",
    "FinishReason",
    "GenerationResult",
    "GenerationTimings",
    "StepTimes",
    "TokenLogprob",
    "percentile",
]

FinishReason = Literal["completed", "max_tokens", "dead_end", "stop", "cancelled", "timeout"]
FINISH_REASONS: tuple[FinishReason, ...] = (
    "completed", "max_tokens", "dead_end", "stop", "cancelled", "timeout",
)


def percentile(values: tuple[float, ...], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation; ``nan`` when empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class StepTimes:
    """A summary of per-step durations (seconds): count, total, p50, p99 and max.

    ``str()`` gives ``"38 x, p50 0.05 ms, p99 0.31 ms, max 1.20 ms"``; the durations themselves
    stay in the :class:`GenerationTimings` tuple the summary was made from."""

    count: int
    total_s: float
    p50_s: float
    p99_s: float
    max_s: float

    @classmethod
    def of(cls, values: tuple[float, ...]) -> StepTimes:
        """The summary of ``values`` (``nan`` quantiles when empty)."""
        return cls(
            len(values),
            math.fsum(values),
            percentile(values, 50),
            percentile(values, 99),
            max(values, default=math.nan),
        )

    def __str__(self) -> str:
        if not self.count:
            return "none"
        return (
            f"{self.count} x, p50 {_ms(self.p50_s)}, p99 {_ms(self.p99_s)}, "
            f"max {_ms(self.max_s)}"
        )


def _ms(seconds: float) -> str:
    """``seconds`` for a human: ``"0.05 ms"``, ``"12.3 ms"``, ``"1.24 s"``."""
    if not math.isfinite(seconds):
        return "n/a"
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    ms = seconds * 1e3
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


@dataclass(frozen=True, repr=False)
class GenerationTimings:
    """Where the time of one generation went, in seconds.

    Attributes:
        compile_s: compiling the constraint (``0`` when it came from the compiler's cache or
            was passed compiled).
        prefill_s: evaluating the prompt (one model call).
        time_to_first_token_s: from the call to the first output token being chosen (compile,
            prompt and the first mask included).
        total_s: the whole call.
        prompt_tokens: tokens of the prompt (chat template applied).
        output_tokens: text tokens generated (the final stop token is not counted).
        forced_tokens: output tokens taken without sampling because the grammar allowed exactly
            one token, or appended by a ``fast_forward=True`` run (their evaluation is batched
            into the next model call).
        decode_step_s: each model call after the prompt (one per sampled token, fewer when
            forced tokens were batched).
        mask_step_s: per decoding step, the constraint's own work: filling the token bitmask
            from the grammar state, checking for forced tokens and accepting the chosen token
            (a fast-forward run, its spelling and its accepts, is one step).
        sample_step_s: per sampled token, the sampler chain (mask applied as ``-inf``,
            temperature, top-k, top-p, draw); runs with or without a constraint.
    """

    compile_s: float = 0.0
    prefill_s: float = 0.0
    time_to_first_token_s: float = 0.0
    total_s: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    forced_tokens: int = 0
    decode_step_s: tuple[float, ...] = ()
    mask_step_s: tuple[float, ...] = ()
    sample_step_s: tuple[float, ...] = ()

    @property
    def decode_s(self) -> float:
        """Total model time after the prompt."""
        return math.fsum(self.decode_step_s)

    @property
    def mask_s(self) -> float:
        """Total constraint (mask) time."""
        return math.fsum(self.mask_step_s)

    @property
    def sample_s(self) -> float:
        """Total sampler-chain time."""
        return math.fsum(self.sample_step_s)

    @property
    def per_token_s(self) -> float:
        """Wall time per output token after the first (``nan`` with fewer than two tokens)."""
        if self.output_tokens < 2:
            return math.nan
        return (self.total_s - self.time_to_first_token_s) / (self.output_tokens - 1)

    @property
    def decode_step_p50_s(self) -> float:
        return percentile(self.decode_step_s, 50)

    @property
    def mask_p50_s(self) -> float:
        return percentile(self.mask_step_s, 50)

    @property
    def mask_p99_s(self) -> float:
        return percentile(self.mask_step_s, 99)

    @property
    def mask_max_s(self) -> float:
        return max(self.mask_step_s, default=math.nan)

    @property
    def mask_overhead(self) -> float:
        """Constraint time as a share of model decode time (``nan`` without decode steps)."""
        decode = self.decode_s
        return self.mask_s / decode if decode > 0 else math.nan

    @property
    def mask_steps(self) -> StepTimes:
        """count / total / p50 / p99 / max of ``mask_step_s``."""
        return StepTimes.of(self.mask_step_s)

    @property
    def decode_steps(self) -> StepTimes:
        """count / total / p50 / p99 / max of ``decode_step_s``."""
        return StepTimes.of(self.decode_step_s)

    @property
    def sample_steps(self) -> StepTimes:
        """count / total / p50 / p99 / max of ``sample_step_s``."""
        return StepTimes.of(self.sample_step_s)

    def __str__(self) -> str:
        """A few readable lines: totals, counts, and p50/p99/max of each kind of step."""
        head = (
            f"total {_ms(self.total_s)} (compile {_ms(self.compile_s)}, prefill "
            f"{_ms(self.prefill_s)}, first token {_ms(self.time_to_first_token_s)}); "
            f"{self.prompt_tokens} prompt tokens, {self.output_tokens} output tokens "
            f"({self.forced_tokens} forced), {len(self.decode_step_s) + 1} model calls"
        )
        lines = [head, f"  decode: {self.decode_steps}", f"  mask:   {self.mask_steps}"]
        if self.mask_step_s and self.decode_step_s:
            lines[-1] += f" ({self.mask_overhead:.1%} of decode)"
        lines.append(f"  sample: {self.sample_steps}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        """One line: the summary of ``str()``; the per-step tuples stay in the attributes."""
        flat = "; ".join(part.strip() for part in str(self).split("\n"))
        return f"GenerationTimings({flat})"

    def summary(self) -> dict[str, float | int]:
        """Flat numbers for logs and ``--json`` output (seconds, counts, ratios)."""
        return {
            "compile_s": self.compile_s,
            "prefill_s": self.prefill_s,
            "time_to_first_token_s": self.time_to_first_token_s,
            "total_s": self.total_s,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "forced_tokens": self.forced_tokens,
            "model_calls": len(self.decode_step_s) + 1,
            "per_token_s": self.per_token_s,
            "decode_s": self.decode_s,
            "decode_step_p50_s": self.decode_step_p50_s,
            "mask_s": self.mask_s,
            "mask_p50_s": self.mask_p50_s,
            "mask_p99_s": self.mask_p99_s,
            "mask_max_s": self.mask_max_s,
            "sample_s": self.sample_s,
            "mask_overhead": self.mask_overhead,
        }


@dataclass(frozen=True)
class TokenLogprob:
    """One output token's log-probability under the distribution it was drawn from: the
    model's logits at that step restricted to the tokens allowed there (the constraint's mask,
    and ``canonical``'s), renormalized by a log-softmax at temperature 1, before top-k/top-p.
    Unconstrained, the model's own log-softmax; a token the constraint forced (the only one
    allowed) has log-probability 0.

    Attributes:
        token_id: the output token.
        logprob: its log-probability.
        top: the ``logprobs`` most likely allowed tokens at that step, as ``(token id,
            log-probability)``, most likely first (ties in increasing id order).
    """

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class GenerationResult:
    """The outcome of :func:`formcast.generation.generate` (and the last item of ``stream``).

    Attributes:
        text: the generated text (UTF-8; an incomplete trailing character, possible only after
            ``max_tokens``, is shown as U+FFFD).  With ``finish_reason == "stop"`` it ends
            before the stop string.
        finish_reason: ``"completed"``, ``"max_tokens"``, ``"dead_end"`` or ``"stop"`` (see
            the module docstring).
        token_ids: the generated text tokens (the final stop token is not included).
        raw: the exact generated bytes (all tokens, before any stop-string cut).
        value: the parsed JSON document when the constraint is JSON (schema or JSON grammar)
            and ``finish_reason == "completed"``; otherwise ``None``.
        parsed: for a completed JSON output, an instance of the Pydantic class given as
            ``schema=`` (``Model.model_validate_json(text)``), else the same as ``value``;
            ``None`` when not completed.
        parse_error: for a JSON constraint, why there is no value (the output is unfinished:
            ``finish_reason`` is not ``"completed"``, or the Pydantic class's validators reject
            the document); ``None`` when ``value`` is the document (which may be JSON
            ``null``) and for non-JSON constraints.
        diagnostic: why no token was allowed, when ``finish_reason == "dead_end"``.
        stop_token_id: the stop token that ended a completed generation.
        constraint: the compiled constraint's kind (``"regex"``, ``"json_schema"``,
            ``"builtin_json"``, ``"gbnf"``, ``"lark"``) or ``None`` (unconstrained); with
            ``reasoning=``, the answer's kind.
        prompt_ids: the prompt as token ids (chat template applied).
        timings: :class:`GenerationTimings`.
        reasoning: with ``generate(..., reasoning=...)``, the thinking text before the end
            marker (the marker excluded; all of the text when the output ended before the
            marker, ``text`` then being ``""``); ``text`` / ``value`` / ``parsed`` are the
            constrained answer after the marker, while ``token_ids`` / ``raw`` stay the whole
            output.  ``None`` without ``reasoning=``.
        logprobs: with ``logprobs=k``, one :class:`TokenLogprob` per token of ``token_ids``
            (the whole output, thinking included); ``None`` otherwise.
    """

    text: str
    finish_reason: FinishReason
    token_ids: tuple[int, ...]
    raw: bytes = b""
    value: Any = None
    parsed: Any = None
    parse_error: str | None = None
    diagnostic: DeadEndDiagnostic | None = None
    stop_token_id: int | None = None
    constraint: str | None = None
    prompt_ids: tuple[int, ...] = ()
    timings: GenerationTimings = field(default_factory=GenerationTimings)
    reasoning: str | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None

    @property
    def completed(self) -> bool:
        """True when the output finished normally (a stop token in an accepting state)."""
        return self.finish_reason == "completed"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable view (the CLI's ``--json`` output)."""
        return {
            "text": self.text,
            "reasoning": self.reasoning,
            "finish_reason": self.finish_reason,
            "completed": self.completed,
            "value": self.value,
            "parse_error": self.parse_error,
            "token_ids": list(self.token_ids),
            "constraint": self.constraint,
            "diagnostic": None if self.diagnostic is None else str(self.diagnostic),
            "timings": self.timings.summary(),
        }
