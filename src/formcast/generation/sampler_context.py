"""What every sampling method of :class:`~formcast.generation.conditioned.ConditionedSampler`
shares: the next-token distribution of the chain without the mask, the statistics, the context
a method is built with, and the method protocol.

Lifetime: a :class:`SamplerContext` and its :class:`SamplerStats` live as long as their
sampler (per prompt and constraint); :func:`next_token_distribution` is stateless (one
softmax over the vocabulary).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..errors import SamplingBudgetError
from ..index.compiled import CompiledGrammar
from ..model.protocol import LanguageModel, Logits
from ..sampling import SamplingParams, token_probabilities
from ..vocab.canonical import CanonicalPairs
from ..vocab.vocabulary import Vocabulary
from .loop import parse_output
from .results import GenerationResult, GenerationTimings

__all__ = [
    "SamplerContext",
    "SamplerStats",
    "SamplingMethod",
    "completed_result",
    "next_token_distribution",
]


# -- shared pieces -------------------------------------------------------------------------------
def next_token_distribution(
    logits: Logits, params: SamplingParams
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, probs)``: the unmasked next-token distribution of ``logits`` under ``params``
    (temperature, top-k, top-p), restricted to the ids of probability > 0 (increasing)."""
    probs = token_probabilities(logits, None, params)
    ids = np.flatnonzero(probs > 0.0)
    p = probs[ids]
    return ids, p / p.sum()


@dataclass
class SamplerStats:
    """What a :class:`ConditionedSampler` spent and learned (cumulative over ``sample`` calls).

    Attributes:
        model_calls: model evaluations (prefills and steps), the cost measure.
        attempts: walks (proposals) started; ``accepted`` of them gave a sample.
        accepted: samples returned.
        seconds: wall time spent in ``sample``.
        z_estimate: the estimated valid mass ``Z = p(L)`` (``nan`` before any walk; only the
            ``"exact"`` method estimates it).
        z_ci: a 95% interval for ``Z`` (clipped to the exact bounds below).
        z_lower: the mass of the distinct complete outputs seen (an exact lower bound).
        z_upper: the mass not known to be dead (an exact upper bound).
        trie_nodes: prefixes expanded.
    """

    model_calls: int = 0
    attempts: int = 0
    accepted: int = 0
    seconds: float = 0.0
    z_estimate: float = math.nan
    z_ci: tuple[float, float] = (math.nan, math.nan)
    z_lower: float = 0.0
    z_upper: float = 1.0
    trie_nodes: int = 0
    _z_sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0], repr=False)

    @property
    def acceptance_rate(self) -> float:
        """``accepted / attempts`` (``nan`` before any attempt)."""
        return self.accepted / self.attempts if self.attempts else math.nan

    @property
    def model_calls_per_sample(self) -> float:
        return self.model_calls / self.accepted if self.accepted else math.nan

    def _record_walk(self, accepted: bool, live_root: float) -> None:
        """One walk of the exact sampler: update the Z estimate (mean of a_i * live_i)."""
        term = live_root if accepted else 0.0
        sums = self._z_sums  # n, sum, sum of squares (O(1) per walk)
        sums[0] += 1.0
        sums[1] += term
        sums[2] += term * term
        n = sums[0]
        mean = sums[1] / n
        var = max(sums[2] - n * mean * mean, 0.0) / (n - 1) if n > 1 else math.inf
        half = 1.96 * math.sqrt(var / n)
        lo, hi = self.z_lower, self.z_upper
        self.z_estimate = min(max(mean, lo), hi)
        self.z_ci = (min(max(mean - half, lo), hi), max(min(mean + half, hi), lo))


@dataclass
class SamplerContext:
    """Everything a :class:`SamplingMethod` needs (built by :class:`ConditionedSampler`)."""

    model: LanguageModel
    prompt_ids: list[int]
    compiled: CompiledGrammar | None
    params: SamplingParams
    max_tokens: int
    max_model_calls: int
    stats: SamplerStats
    compile_s: float = 0.0
    schema_class: Any = None
    canonical: CanonicalPairs | None = None  # canonical=True: the model's pair test
    forced_stop: str = "certain"  # or "model" (see aligned.FORCED_STOP)

    def charge_model_call(self, samples_so_far: int) -> None:
        """Count one model call; raise :class:`SamplingBudgetError` when the budget is spent."""
        if self.stats.model_calls >= self.max_model_calls:
            s = self.stats
            raise SamplingBudgetError(
                "max_model_calls",
                self.max_model_calls,
                f"{samples_so_far} sample(s) drawn in this call, {s.accepted} in all, "
                f"{s.attempts} attempts; estimated valid mass Z={s.z_estimate:.3g} "
                f"(95% CI {s.z_ci[0]:.3g}..{s.z_ci[1]:.3g}, upper bound {s.z_upper:.3g}): "
                "raise max_model_calls, or use method='aligned' (approximate, cheaper)",
                samples=samples_so_far,
                z_estimate=s.z_estimate,
            )
        self.stats.model_calls += 1

    def result(
        self, token_ids: list[int], stop_token: int | None, seconds: float
    ) -> GenerationResult:
        """The completed :class:`GenerationResult` of ``token_ids`` (text tokens) ended by
        ``stop_token`` (``None`` when the grammar ended the output)."""
        timings = GenerationTimings(
            compile_s=self.compile_s,
            total_s=seconds,
            prompt_tokens=len(self.prompt_ids),
            output_tokens=len(token_ids),
        )
        return completed_result(
            self.model.vocab,
            token_ids,
            stop_token,
            compiled=self.compiled,
            prompt_ids=self.prompt_ids,
            timings=timings,
            schema_class=self.schema_class,
        )


def completed_result(
    vocab: Vocabulary,
    token_ids: Sequence[int],
    stop_token: int | None,
    *,
    compiled: CompiledGrammar | None,
    prompt_ids: Sequence[int],
    timings: GenerationTimings,
    schema_class: Any = None,
) -> GenerationResult:
    """The ``"completed"`` :class:`GenerationResult` of a sampled output: ``token_ids`` (text
    tokens) ended by ``stop_token``, its text decoded from the token bytes and parsed for a
    JSON constraint.  The one constructor of the conditioned samplers' results
    (:meth:`SamplerContext.result`, :class:`~formcast.generation.aligned.AlignedSampler`)."""
    raw = vocab.decode(token_ids)
    text = raw.decode("utf-8", errors="replace")
    kind = compiled.kind if compiled is not None else None
    value, parsed, parse_error = parse_output(text, "completed", kind, schema_class)
    return GenerationResult(
        text=text,
        finish_reason="completed",
        token_ids=tuple(token_ids),
        raw=raw,
        value=value,
        parsed=parsed,
        parse_error=parse_error,
        diagnostic=None,
        stop_token_id=stop_token,
        constraint=kind,
        prompt_ids=tuple(prompt_ids),
        timings=timings,
    )


class SamplingMethod(Protocol):
    """A sampling method: built as ``Method(ctx)``; one sample per ``sample_one``."""

    def sample_one(self, rng: np.random.Generator) -> GenerationResult: ...
