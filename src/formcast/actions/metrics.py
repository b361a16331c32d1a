"""Per-layer action metrics, kept apart: :class:`Metrics`.

Every number answers one question over its own denominator; there is deliberately no folded
"success rate" (a run that is well-formed but refunds too much is a schema pass *and* a business
failure, and both are reported).  What is counted, for each finished run
(:meth:`Metrics.record`, called once per ``ActionRunner.run`` by the runner):

* **runs** by :data:`~formcast.actions.types.Status` (committed, rejected, handed_off,
  duplicate, not_committed) and by finish reason;
* **layers**, for each of :data:`~formcast.actions.types.LAYERS`: ``reached`` (the run's last
  attempt ran that layer) and ``passed``; ``rate = passed / reached``, ``None`` when no run
  reached it.  The same counts over *every attempt* (retries included) are in
  ``attempt_layers``;
* **failures** by layer and code (``{"business": {"amount_exceeds_order": 2}}``);
* **attempts** (generations), **retries** (``attempts - 1`` per run), **in_doubt** runs;
* the derived figures named by the seed article: syntax validity, schema pass, dead-end rate
  (runs whose last generation ended ``dead_end``, over all runs), business pass, fact pass,
  inspection pass, permission interceptions (permission failures over the runs that reached the
  permission layer), tool success (execution passes over executions), hand-offs, duplicates
  prevented, rejections and not-committed (cancelled or timed out) runs;
* **latency**: the constrained time to first token and time per output token the runner passes
  (``ttft_s``, ``tpot_s``), and, when asked, the latency *added* by the constraint against
  unconstrained decoding of the same prompt: :meth:`Metrics.compare_unconstrained` generates the
  prompt both ways and records the pair; :meth:`Metrics.record_pair` records a pair measured
  elsewhere.  ``added_ttft_s`` / ``added_tpot_s`` are the means of the per-pair differences
  (constrained minus unconstrained).

Exports: :meth:`Metrics.as_dict` (plain JSON-ready values) and :meth:`Metrics.prometheus_text`
(the Prometheus text exposition format, through ``prometheus_client``: ``pip install
formcast[metrics]``).

Lifetime: one :class:`Metrics` per runner (or shared by several: it is thread-safe, one lock).
Costs: ``record`` is O(layers + failures) under the lock; timing series keep their sum, count
and the last :data:`MAX_SAMPLES` values (for percentiles), so memory is bounded.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .types import LAYERS, OUTCOME_FINISH_REASONS, STATUSES, Layer, LayerResult, Outcome

__all__ = ["MAX_SAMPLES", "LayerCount", "Metrics"]

#: timing values kept per series for percentiles (sum and count cover every value)
MAX_SAMPLES = 4096


@dataclass(frozen=True)
class LayerCount:
    """One layer's counts: ``reached`` runs (or attempts), of which ``passed`` passed."""

    layer: Layer
    reached: int
    passed: int

    @property
    def failed(self) -> int:
        return self.reached - self.passed

    @property
    def rate(self) -> float | None:
        """``passed / reached``; ``None`` when nothing reached the layer (not 0, not 1)."""
        return self.passed / self.reached if self.reached else None


class _Series:
    """Sum, count and the last :data:`MAX_SAMPLES` values of one timing (seconds)."""

    __slots__ = ("count", "recent", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.recent: deque[float] = deque(maxlen=MAX_SAMPLES)

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.recent.append(value)

    def summary(self) -> dict[str, float | int | None]:
        if not self.count:
            return {"count": 0, "mean": None, "p50": None, "p95": None}
        values = sorted(self.recent)
        return {
            "count": self.count,
            "mean": self.total / self.count,
            "p50": _percentile(values, 50),
            "p95": _percentile(values, 95),
        }


def _percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile of sorted ``values`` (as numpy's default)."""
    pos = (len(values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def _check_seconds(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(
            f"Metrics: {name} must be a number of seconds or None, got {type(value).__name__}"
        )
    v = float(value)
    if math.isnan(v):  # a one-token generation has no TPOT: the runner may pass nan
        return None
    if v < 0 or math.isinf(v):
        raise ConfigurationError(f"Metrics: {name} must be finite and >= 0, got {value!r}")
    return v


class Metrics:
    """Counts of finished action runs, layer by layer (see the module docstring).

    Thread-safe.  ``record`` is what the runner calls; ``record_pair`` and
    ``compare_unconstrained`` add the constrained-versus-unconstrained latency comparison.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget everything recorded so far."""
        with self._lock:
            self._runs = 0
            self._attempts = 0
            self._retries = 0
            self._in_doubt = 0
            self._statuses: Counter[str] = Counter()
            self._finish: Counter[str] = Counter()
            self._reached: Counter[str] = Counter()
            self._passed: Counter[str] = Counter()
            self._att_reached: Counter[str] = Counter()
            self._att_passed: Counter[str] = Counter()
            self._failures: dict[str, Counter[str]] = {layer: Counter() for layer in LAYERS}
            self._ttft = _Series()
            self._tpot = _Series()
            self._added_ttft = _Series()
            self._added_tpot = _Series()
            self._pairs = 0

    # -- recording ---------------------------------------------------------------------------
    def record(
        self, outcome: Outcome, *, ttft_s: float | None = None, tpot_s: float | None = None
    ) -> None:
        """Count one finished run.

        Args:
            outcome: the run's :class:`~formcast.actions.types.Outcome`.
            ttft_s: the constrained time to first token of its (last) generation, if known.
            tpot_s: its time per output token after the first (``nan`` or ``None`` when it
                made fewer than two tokens: not counted).

        Raises:
            ConfigurationError: ``outcome`` is not an ``Outcome``, or a timing is negative.
        """
        if not isinstance(outcome, Outcome):
            raise ConfigurationError(
                f"Metrics.record needs an actions.Outcome, got {type(outcome).__name__}"
            )
        ttft = _check_seconds("ttft_s", ttft_s)
        tpot = _check_seconds("tpot_s", tpot_s)
        attempts = outcome.history or ((outcome.layers,) if outcome.layers else ())
        with self._lock:
            self._runs += 1
            self._attempts += outcome.attempts
            self._retries += max(outcome.attempts - 1, 0)
            self._in_doubt += bool(outcome.in_doubt)
            self._statuses[outcome.status] += 1
            self._finish[outcome.finish_reason] += 1
            self._count_layers(outcome.layers, self._reached, self._passed)
            for layer_results in attempts:
                self._count_layers(layer_results, self._att_reached, self._att_passed)
            for f in outcome.failures:
                self._failures.setdefault(f.layer, Counter())[f.code] += 1
            if ttft is not None:
                self._ttft.add(ttft)
            if tpot is not None:
                self._tpot.add(tpot)

    @staticmethod
    def _count_layers(
        results: Iterable[LayerResult], reached: Counter[str], passed: Counter[str]
    ) -> None:
        for lr in results:
            reached[lr.layer] += 1
            passed[lr.layer] += bool(lr.ok)

    def record_pair(
        self,
        *,
        ttft_s: float,
        tpot_s: float | None,
        unconstrained_ttft_s: float,
        unconstrained_tpot_s: float | None,
    ) -> None:
        """Record constrained and unconstrained timings of the *same prompt* (same model, same
        options): the differences feed ``added_ttft_s`` / ``added_tpot_s``.  A TPOT that is
        ``None`` or ``nan`` on either side (fewer than two tokens) leaves TPOT out of the pair.

        Raises:
            ConfigurationError: a timing that is not a finite number >= 0.
        """
        c_ttft = _check_seconds("ttft_s", ttft_s)
        u_ttft = _check_seconds("unconstrained_ttft_s", unconstrained_ttft_s)
        c_tpot = _check_seconds("tpot_s", tpot_s)
        u_tpot = _check_seconds("unconstrained_tpot_s", unconstrained_tpot_s)
        if c_ttft is None or u_ttft is None:
            raise ConfigurationError("Metrics.record_pair: both TTFTs are required numbers")
        with self._lock:
            self._pairs += 1
            self._added_ttft.add(c_ttft - u_ttft)  # may be negative: noise, reported as is
            if c_tpot is not None and u_tpot is not None:
                self._added_tpot.add(c_tpot - u_tpot)

    def compare_unconstrained(
        self, model: Any, prompt: Any, **options: Any
    ) -> dict[str, float | None]:
        """Generate ``prompt`` twice with ``model`` -- once with the constraint in ``options``
        (``schema=``, ``regex=``, ``grammar=`` or ``compiled=``), once without it, the other
        options equal -- record the pair (:meth:`record_pair`) and return both timings and
        their differences (``added_ttft_s``, ``added_tpot_s``; TPOT ``None`` when either run
        made fewer than two tokens).

        The constrained run comes first, so its TTFT includes compiling the constraint when it
        is not cached yet -- the cost a first request pays.  Costs two generations.

        Raises:
            ConfigurationError: ``options`` hold no constraint (nothing to compare), or what
                :func:`formcast.generation.generate` raises for bad options.
        """
        from ..generation.api import generate

        constraint_keys = ("schema", "regex", "grammar", "compiled")
        if not any(options.get(k) is not None for k in constraint_keys):
            raise ConfigurationError(
                "Metrics.compare_unconstrained needs a constraint to compare against: pass "
                "schema=, regex=, grammar= or compiled="
            )
        free = {k: v for k, v in options.items() if k not in (*constraint_keys, "dialect")}
        constrained = generate(model, prompt, **options).timings
        unconstrained = generate(model, prompt, **free).timings
        c_tpot = constrained.per_token_s
        u_tpot = unconstrained.per_token_s
        self.record_pair(
            ttft_s=constrained.time_to_first_token_s,
            tpot_s=c_tpot,
            unconstrained_ttft_s=unconstrained.time_to_first_token_s,
            unconstrained_tpot_s=u_tpot,
        )
        tpots = not (math.isnan(c_tpot) or math.isnan(u_tpot))
        return {
            "ttft_s": constrained.time_to_first_token_s,
            "unconstrained_ttft_s": unconstrained.time_to_first_token_s,
            "added_ttft_s": constrained.time_to_first_token_s
            - unconstrained.time_to_first_token_s,
            "tpot_s": c_tpot if not math.isnan(c_tpot) else None,
            "unconstrained_tpot_s": u_tpot if not math.isnan(u_tpot) else None,
            "added_tpot_s": (c_tpot - u_tpot) if tpots else None,
        }

    # -- reading -----------------------------------------------------------------------------
    @property
    def runs(self) -> int:
        with self._lock:
            return self._runs

    def layer(self, layer: Layer, *, per_attempt: bool = False) -> LayerCount:
        """One layer's counts over runs (their last attempt) or over every attempt."""
        if layer not in LAYERS:
            raise ConfigurationError(f"unknown layer {layer!r}; the layers are {LAYERS}")
        with self._lock:
            reached, passed = (
                (self._att_reached, self._att_passed) if per_attempt
                else (self._reached, self._passed)
            )
            return LayerCount(layer, reached[layer], passed[layer])

    def layers(self, *, per_attempt: bool = False) -> list[LayerCount]:
        """Every layer's counts, in :data:`LAYERS` order."""
        return [self.layer(name, per_attempt=per_attempt) for name in LAYERS]

    def as_dict(self) -> dict[str, Any]:
        """Every count and rate as plain JSON-ready values (rates ``None`` over an empty
        denominator).  Keys: ``runs``, ``attempts``, ``retries``, ``in_doubt``, ``statuses``,
        ``finish_reasons``, ``layers`` / ``attempt_layers`` (``{layer: {reached, passed,
        failed, rate}}``), ``failures`` (``{layer: {code: n}}``), ``rates`` (each named
        figure as ``{count, of, rate}``), ``latency`` (``ttft_s``, ``tpot_s``,
        ``added_ttft_s``, ``added_tpot_s``: ``{count, mean, p50, p95}``; ``pairs``)."""
        with self._lock:
            runs = self._runs
            statuses = {s: self._statuses[s] for s in STATUSES}
            finish = {r: self._finish[r] for r in OUTCOME_FINISH_REASONS}

            def table(reached: Counter[str], passed: Counter[str]) -> dict[str, Any]:
                out: dict[str, Any] = {}
                for name in LAYERS:
                    lc = LayerCount(name, reached[name], passed[name])
                    out[name] = {"reached": lc.reached, "passed": lc.passed,
                                 "failed": lc.failed, "rate": lc.rate}
                return out

            layers = table(self._reached, self._passed)
            attempt_layers = table(self._att_reached, self._att_passed)

            def rate(count: int, of: int) -> dict[str, Any]:
                return {"count": count, "of": of, "rate": count / of if of else None}

            def passed(name: str) -> dict[str, Any]:
                return rate(self._passed[name], self._reached[name])

            perm = self._reached["permission"]
            rates = {
                "syntax_valid": passed("syntax"),
                "schema_pass": passed("schema"),
                "dead_end": rate(self._finish["dead_end"], runs),
                "business_pass": passed("business"),
                "fact_pass": passed("facts"),
                "inspection_pass": passed("inspection"),
                "permission_interceptions": rate(perm - self._passed["permission"], perm),
                "tool_success": passed("execution"),
                "committed": rate(statuses["committed"], runs),
                "rejected": rate(statuses["rejected"], runs),
                "handed_off": rate(statuses["handed_off"], runs),
                "duplicates_prevented": rate(statuses["duplicate"], runs),
                "not_committed": rate(statuses["not_committed"], runs),
            }
            return {
                "runs": runs,
                "attempts": self._attempts,
                "retries": self._retries,
                "in_doubt": self._in_doubt,
                "statuses": statuses,
                "finish_reasons": finish,
                "layers": layers,
                "attempt_layers": attempt_layers,
                "failures": {k: dict(sorted(v.items())) for k, v in self._failures.items() if v},
                "rates": rates,
                "latency": {
                    "ttft_s": self._ttft.summary(),
                    "tpot_s": self._tpot.summary(),
                    "added_ttft_s": self._added_ttft.summary(),
                    "added_tpot_s": self._added_tpot.summary(),
                    "pairs": self._pairs,
                },
            }

    def prometheus_text(self, *, prefix: str = "formcast_action") -> str:
        """The counts in the Prometheus text exposition format (``prometheus_client``'s
        ``generate_latest`` over a private registry; nothing is registered globally).

        Families (``prefix`` first): ``_runs_total{status}``, ``_finish_reasons_total
        {reason}``, ``_attempts_total``, ``_retries_total``, ``_in_doubt_total``,
        ``_layer_reached_total{layer}``, ``_layer_passed_total{layer}`` (and the
        ``_attempt_layer_*`` pair), ``_failures_total{layer,code}``, and summaries
        ``_ttft_seconds``, ``_tpot_seconds``, ``_added_ttft_seconds``, ``_added_tpot_seconds``
        (count and sum).  Rates are left to the query (``passed / reached``).

        Raises:
            MissingDependencyError: ``prometheus_client`` is not installed
                (``pip install formcast[metrics]``).
        """
        from .._optional import require

        if not prefix.replace("_", "a").isalnum() or prefix[:1].isdigit():
            raise ConfigurationError(
                f"Metrics.prometheus_text: prefix {prefix!r} is not a Prometheus metric name "
                "(letters, digits and '_', not starting with a digit)"
            )
        exposition = require("prometheus_client")
        core = require("prometheus_client.core")
        snapshot = self.as_dict()
        with self._lock:
            sums = {
                "ttft": (self._ttft.count, self._ttft.total),
                "tpot": (self._tpot.count, self._tpot.total),
                "added_ttft": (self._added_ttft.count, self._added_ttft.total),
                "added_tpot": (self._added_tpot.count, self._added_tpot.total),
            }

        def families() -> Iterator[Any]:
            fam = core.CounterMetricFamily(
                f"{prefix}_runs", "Finished action runs by status", labels=["status"]
            )
            for status, n in snapshot["statuses"].items():
                fam.add_metric([status], n)
            yield fam
            fam = core.CounterMetricFamily(
                f"{prefix}_finish_reasons", "Runs by how their last generation ended",
                labels=["reason"],
            )
            for reason, n in snapshot["finish_reasons"].items():
                fam.add_metric([reason], n)
            yield fam
            for name, doc in (
                ("attempts", "Generations made"),
                ("retries", "Generations beyond the first of each run"),
                ("in_doubt", "Runs whose idempotency key was pending (reported, not re-run)"),
            ):
                yield core.CounterMetricFamily(f"{prefix}_{name}", doc, value=snapshot[name])
            for key, what in (("layers", "runs (last attempt)"), ("attempt_layers", "attempts")):
                stem = "layer" if key == "layers" else "attempt_layer"
                reached = core.CounterMetricFamily(
                    f"{prefix}_{stem}_reached", f"Validation layer reached, over {what}",
                    labels=["layer"],
                )
                passed = core.CounterMetricFamily(
                    f"{prefix}_{stem}_passed", f"Validation layer passed, over {what}",
                    labels=["layer"],
                )
                for layer, c in snapshot[key].items():
                    reached.add_metric([layer], c["reached"])
                    passed.add_metric([layer], c["passed"])
                yield reached
                yield passed
            fam = core.CounterMetricFamily(
                f"{prefix}_failures", "Structured failures of the runs' last attempts",
                labels=["layer", "code"],
            )
            for layer, codes in snapshot["failures"].items():
                for code, n in codes.items():
                    fam.add_metric([layer, code], n)
            yield fam
            for key, doc in (
                ("ttft", "Constrained time to first token"),
                ("tpot", "Constrained time per output token"),
                ("added_ttft", "Constrained minus unconstrained TTFT, same prompt"),
                ("added_tpot", "Constrained minus unconstrained TPOT, same prompt"),
            ):
                count, total = sums[key]
                yield core.SummaryMetricFamily(
                    f"{prefix}_{key}_seconds", doc, count_value=count, sum_value=total
                )

        class _Collector:
            def collect(self) -> Iterator[Any]:
                return families()

        registry = exposition.CollectorRegistry(auto_describe=False)
        registry.register(_Collector())
        text: bytes = exposition.generate_latest(registry)
        return text.decode("utf-8")

    def __repr__(self) -> str:
        d = self.as_dict()
        return f"Metrics(runs={d['runs']}, statuses={d['statuses']})"

