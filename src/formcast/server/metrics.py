"""The server's Prometheus metrics: :class:`ServerMetrics` (``GET /metrics``).

Families (prefix ``formcast_``): ``requests_total{endpoint,status}``,
``generations_total{finish_reason}``, ``rejected_total{reason}``, ``queue_depth`` (jobs waiting
for the model), ``requests_in_flight``, ``compile_seconds`` (histogram of compiles that were
not memory-cache hits), ``compile_cache_hits_total``, ``compile_errors_total{code}``,
``mask_seconds`` (one observation per decoding step: fill, lookup, accept),
``decode_step_seconds`` (one per model call after the prompt), ``prefill_seconds``,
``time_to_first_token_seconds``, ``generation_seconds``, ``prompt_tokens_total``,
``completion_tokens_total``; with continuous batching ``batch_steps`` (model calls of the
batched decoder so far), ``batch_rows`` (the sequences in those calls, summed: ``batch_rows /
batch_steps`` is the mean batch), ``batch_running`` (slots decoding now) and ``batch_slots``.
When the app is given a :class:`formcast.actions.Metrics`
(tools executed server-side through an ``ActionRunner``), its per-layer families follow
(``formcast_action_...``, :meth:`~formcast.actions.Metrics.prometheus_text`).

Lifetime: one registry per app (so several apps in one process never collide).  Costs: each
observation is a lock and an add; ``render`` is O(families).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._optional import require

if TYPE_CHECKING:  # pragma: no cover
    from ..actions.metrics import Metrics
    from ..generation.results import GenerationResult

__all__ = ["ServerMetrics"]

_STEP_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0)
_LONG_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServerMetrics:
    """The metric families of one app (see the module docstring)."""

    def __init__(self, action_metrics: Metrics | None = None) -> None:
        pc = require("prometheus_client")
        self._pc = pc
        self.registry = pc.CollectorRegistry()
        self.action_metrics = action_metrics
        r = self.registry
        self.requests = pc.Counter(
            "formcast_requests", "HTTP requests answered", ["endpoint", "status"], registry=r
        )
        self.generations = pc.Counter(
            "formcast_generations",
            "choices generated, by finish reason",
            ["finish_reason"],
            registry=r,
        )
        self.rejected = pc.Counter(
            "formcast_rejected", "requests refused before running", ["reason"], registry=r
        )
        self.queue_depth = pc.Gauge(
            "formcast_queue_depth", "jobs waiting for the model thread", registry=r
        )
        self.in_flight = pc.Gauge(
            "formcast_requests_in_flight", "requests admitted, not finished", registry=r
        )
        self.compile_seconds = pc.Histogram(
            "formcast_compile_seconds",
            "constraint compiles (cache misses)",
            buckets=_LONG_BUCKETS,
            registry=r,
        )
        self.compile_cache_hits = pc.Counter(
            "formcast_compile_cache_hits", "compiles answered from the memory cache", registry=r
        )
        self.compile_errors = pc.Counter(
            "formcast_compile_errors", "compiles refused with a 400", ["code"], registry=r
        )
        self.mask_seconds = pc.Histogram(
            "formcast_mask_seconds",
            "constraint work per decoding step",
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.decode_seconds = pc.Histogram(
            "formcast_decode_step_seconds",
            "model call per decoding step",
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.prefill_seconds = pc.Histogram(
            "formcast_prefill_seconds", "prompt evaluation", buckets=_LONG_BUCKETS, registry=r
        )
        self.ttft_seconds = pc.Histogram(
            "formcast_time_to_first_token_seconds",
            "from the model thread picking the job up to the first output token",
            buckets=_LONG_BUCKETS,
            registry=r,
        )
        self.generation_seconds = pc.Histogram(
            "formcast_generation_seconds",
            "one choice, model thread time",
            buckets=_LONG_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = pc.Counter(
            "formcast_prompt_tokens", "prompt tokens evaluated", registry=r
        )
        self.completion_tokens = pc.Counter(
            "formcast_completion_tokens", "output tokens generated", registry=r
        )

    def bind_batch(
        self,
        steps: Callable[[], int],
        rows: Callable[[], int],
        running: Callable[[], int],
        slots: int,
        prompt_evaluated: Callable[[], int] | None = None,
        prompt_reused: Callable[[], int] | None = None,
    ) -> None:
        """Expose the continuous batcher's counters (read at scrape time)."""
        pc, r = self._pc, self.registry
        if prompt_evaluated is not None:
            pc.Gauge(
                "formcast_batch_prompt_tokens_evaluated",
                "prompt tokens the batched decoder evaluated",
                registry=r,
            ).set_function(prompt_evaluated)
        if prompt_reused is not None:
            pc.Gauge(
                "formcast_batch_prompt_tokens_reused",
                "prompt tokens not evaluated: kept in a slot (prompt cache) or copied",
                registry=r,
            ).set_function(prompt_reused)
        pc.Gauge(
            "formcast_batch_steps", "model calls of the batched decoder so far", registry=r
        ).set_function(steps)
        pc.Gauge(
            "formcast_batch_rows", "sequences in those model calls, summed", registry=r
        ).set_function(rows)
        pc.Gauge(
            "formcast_batch_running", "requests (choices) holding a slot now", registry=r
        ).set_function(running)
        pc.Gauge(
            "formcast_batch_slots", "slots of the batched decoder (max_batch)", registry=r
        ).set(slots)

    def bind_queue(self, waiting: Callable[[], int], in_flight: Callable[[], int]) -> None:
        """Read the queue depth and the in-flight count from these at scrape time."""
        self.queue_depth.set_function(waiting)
        self.in_flight.set_function(in_flight)

    def record_finish(self, finish: str, prompt_tokens: int, completion_tokens: int) -> None:
        """One choice ended (``finish``: the engine's finish reason)."""
        self.generations.labels(finish_reason=finish).inc()
        self.prompt_tokens.inc(prompt_tokens)
        self.completion_tokens.inc(completion_tokens)

    def record_timings(self, result: GenerationResult) -> None:
        """A completed choice's per-step timings."""
        t = result.timings
        for s in t.mask_step_s:
            self.mask_seconds.observe(s)
        for s in t.decode_step_s:
            self.decode_seconds.observe(s)
        self.prefill_seconds.observe(t.prefill_s)
        self.ttft_seconds.observe(t.time_to_first_token_s)
        self.generation_seconds.observe(t.total_s)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type (the action metrics appended)."""
        body: bytes = self._pc.generate_latest(self.registry)
        if self.action_metrics is not None:
            body += self.action_metrics.prometheus_text().encode()
        content_type: str = self._pc.CONTENT_TYPE_LATEST
        return body, content_type
