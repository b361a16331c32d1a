"""Run a dataset of prompts through an :class:`~formcast.actions.runner.ActionRunner` and report
the per-layer table, the statuses and the task quality: what ``formcast eval`` prints.

A *spec* is a Python file (:func:`load_spec`) that defines:

* ``TOOLS`` -- a non-empty list of :class:`~formcast.actions.tool.Tool` (required);
* ``PRINCIPAL`` -- the principal of the cases that name none (default ``None``);
* ``LEDGER`` -- the idempotency ledger (default: a fresh ``MemoryLedger``);
* ``MODEL`` -- a model object or a model name, used when the command line names none;
* ``RETRY`` -- an ``actions.RetryPolicy`` (default: the runner's);
* ``OPTIONS`` -- a dict of generation options for the runner (``max_tokens``, ``temperature``,
  ``seed``, ``system``...).

A *case file* is JSON Lines (:func:`load_cases`), one object per line (blank lines skipped)::

    {"id": "small-refund", "prompt": "...", "expected": {"action": "refund", "amount": 20},
     "principal": {"user": "ana", "role": "customer"}, "status": "committed"}

``prompt`` is required; ``expected`` (the arguments the model should produce), ``principal``
(overrides ``PRINCIPAL``), ``status`` (the expected outcome status), ``idempotency_key`` (to
replay a key: the second case with one key is a duplicate) and ``id`` are optional.

Task quality is measured on the cases with ``expected``, against ``outcome.args`` (the
validated arguments with server fields, or the last parsed value when a layer refused them),
projected on the expected fields: **exact match** (every expected field equal) and **per-field
accuracy** (a field over the cases that expect it).  A run without arguments (nothing parsed)
matches nothing.  Equality is JSON equality (``1 == 1.0``, but ``true != 1``).  Status accuracy
counts the cases with ``status``.  Layer counts come from :class:`~formcast.actions.metrics.Metrics`
(one record per run, made by the runner).

Lifetime: functions and immutable reports; :func:`run_eval` makes one runner for the dataset.
Costs: one ``runner.run`` per case (each one or more generations).
"""

from __future__ import annotations

import json
import runpy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, FormcastError
from .metrics import Metrics
from .types import LAYERS, STATUSES, Outcome

__all__ = [
    "Case",
    "CaseResult",
    "EvalReport",
    "EvalSpec",
    "format_report",
    "load_cases",
    "load_spec",
    "run_eval",
    "score",
]

_CASE_KEYS = frozenset({"id", "prompt", "expected", "principal", "status", "idempotency_key"})


@dataclass(frozen=True)
class EvalSpec:
    """What a spec file defines (see the module docstring)."""

    tools: tuple[Any, ...]
    principal: Any = None
    ledger: Any = None
    model: Any = None
    retry: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)
    path: str = ""


@dataclass(frozen=True)
class Case:
    """One dataset line."""

    id: str
    prompt: str
    expected: Mapping[str, Any] | None = None
    principal: Any = None
    has_principal: bool = False
    status: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True)
class CaseResult:
    """One case's run: the outcome (``None`` when the run raised: ``error`` says what)."""

    case: Case
    outcome: Outcome | None
    exact: bool | None  # None: the case expects nothing
    fields: Mapping[str, bool]
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        o = self.outcome
        return {
            "id": self.case.id,
            "status": None if o is None else o.status,
            "expected_status": self.case.status,
            "finish_reason": None if o is None else o.finish_reason,
            "attempts": None if o is None else o.attempts,
            "args": None if o is None or o.args is None else dict(o.args),
            "expected": None if self.case.expected is None else dict(self.case.expected),
            "exact": self.exact,
            "fields": dict(self.fields),
            "failures": [] if o is None else [f.as_dict() for f in o.failures],
            "error": self.error,
        }


@dataclass(frozen=True)
class EvalReport:
    """The cases' results and the metrics the runner recorded."""

    results: tuple[CaseResult, ...]
    metrics: Metrics

    @property
    def errors(self) -> int:
        """Cases whose run raised (the evaluation itself failed for them)."""
        return sum(r.error is not None for r in self.results)

    def quality(self) -> dict[str, Any]:
        """``exact_match`` and ``status_match`` as ``{count, of, rate}``; ``fields`` as
        ``{field: {count, of, rate}}`` (rates ``None`` over an empty denominator)."""

        def rate(count: int, of: int) -> dict[str, Any]:
            return {"count": count, "of": of, "rate": count / of if of else None}

        scored = [r for r in self.results if r.exact is not None]
        per_field: dict[str, list[int]] = {}
        for r in scored:
            for name, good in r.fields.items():
                c = per_field.setdefault(name, [0, 0])
                c[0] += good
                c[1] += 1
        with_status = [r for r in self.results if r.case.status is not None]
        status_ok = sum(
            r.outcome is not None and r.outcome.status == r.case.status for r in with_status
        )
        return {
            "exact_match": rate(sum(bool(r.exact) for r in scored), len(scored)),
            "fields": {k: rate(v[0], v[1]) for k, v in per_field.items()},
            "status_match": rate(status_ok, len(with_status)),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": len(self.results),
            "errors": self.errors,
            "metrics": self.metrics.as_dict(),
            "quality": self.quality(),
            "results": [r.as_dict() for r in self.results],
        }


# -- loading -------------------------------------------------------------------------------------
def load_spec(path: str | Path) -> EvalSpec:
    """Run the spec file ``path`` and read its names (see the module docstring).

    Raises:
        ConfigurationError: the file is missing, raises, or ``TOOLS`` is missing or not a
            non-empty list of ``actions.Tool``.
    """
    from .tool import Tool

    p = Path(path)
    if not p.is_file():
        raise ConfigurationError(f"--tool {path}: no such file; give the spec file's path")
    try:
        names = runpy.run_path(str(p), run_name="formcast_eval_spec")
    except FormcastError:
        raise
    except Exception as exc:
        raise ConfigurationError(
            f"--tool {path}: running the spec file raised {type(exc).__name__}: {exc}"
        ) from exc
    tools = names.get("TOOLS")
    if not isinstance(tools, (list, tuple)) or not tools:
        raise ConfigurationError(
            f"{path}: define TOOLS = [actions.Tool(...), ...] (a non-empty list), got "
            f"{type(tools).__name__}"
        )
    for i, t in enumerate(tools):
        if not isinstance(t, Tool):
            raise ConfigurationError(
                f"{path}: TOOLS[{i}] is a {type(t).__name__}, not an actions.Tool"
            )
    options = names.get("OPTIONS", {})
    if not isinstance(options, Mapping):
        raise ConfigurationError(f"{path}: OPTIONS must be a dict of generation options")
    return EvalSpec(
        tools=tuple(tools),
        principal=names.get("PRINCIPAL"),
        ledger=names.get("LEDGER"),
        model=names.get("MODEL"),
        retry=names.get("RETRY"),
        options=dict(options),
        path=str(p),
    )


def load_cases(path: str | Path) -> list[Case]:
    """Read a JSON Lines case file (see the module docstring).

    Raises:
        ConfigurationError: missing file, a line that is not a JSON object, a missing or
            non-string ``prompt``, an unknown key, a bad ``expected`` or ``status`` (the
            message names the line).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigurationError(f"--data {path}: no such file; give the JSONL case file")
    cases: list[Case] = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{where}: not JSON ({exc})") from exc
        if not isinstance(obj, dict):
            raise ConfigurationError(f"{where}: each line must be a JSON object")
        unknown = sorted(set(obj) - _CASE_KEYS)
        if unknown:
            raise ConfigurationError(
                f"{where}: unknown key(s) {unknown}; a case has {sorted(_CASE_KEYS)}"
            )
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise ConfigurationError(f"{where}: \"prompt\" must be a non-empty string")
        expected = obj.get("expected")
        if expected is not None and not isinstance(expected, dict):
            raise ConfigurationError(f"{where}: \"expected\" must be an object of fields")
        status = obj.get("status")
        if status is not None and status not in STATUSES:
            raise ConfigurationError(f"{where}: \"status\" must be one of {STATUSES}")
        key = obj.get("idempotency_key")
        if key is not None and not isinstance(key, str):
            raise ConfigurationError(f"{where}: \"idempotency_key\" must be a string")
        cases.append(
            Case(
                id=str(obj.get("id", f"line{n}")),
                prompt=prompt,
                expected=expected,
                principal=obj.get("principal"),
                has_principal="principal" in obj,
                status=status,
                idempotency_key=key,
            )
        )
    if not cases:
        raise ConfigurationError(f"--data {path}: no cases (the file is empty)")
    return cases


# -- running -------------------------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, but booleans are not numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return bool(a == b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and bool(a == b)


def score(expected: Mapping[str, Any] | None, args: Mapping[str, Any] | None) -> tuple[
    bool | None, dict[str, bool]
]:
    """(exact match, per-field correctness) of ``args`` against ``expected``."""
    if expected is None:
        return None, {}
    fields = {
        name: args is not None and name in args and _same(args[name], want)
        for name, want in expected.items()
    }
    return all(fields.values()), fields


def run_eval(
    spec: EvalSpec,
    cases: Sequence[Case],
    model: Any,
    *,
    options: Mapping[str, Any] | None = None,
    metrics: Metrics | None = None,
    compare_unconstrained: bool = False,
) -> EvalReport:
    """Run every case through one ``ActionRunner(model, spec.tools, ...)``.

    ``options`` (e.g. ``{"max_tokens": 128}``) override the spec's ``OPTIONS``.  A case whose
    run raises is reported with its error (and counted in ``EvalReport.errors``); the others
    still run.  With ``compare_unconstrained``, each case's prompt is also generated with the
    runner's constraint and without it (:meth:`Metrics.compare_unconstrained`, two more
    generations a case, nothing executed) for the added TTFT and TPOT.
    """
    from .ledger import MemoryLedger
    from .runner import ActionRunner

    m = metrics if metrics is not None else Metrics()
    kwargs: dict[str, Any] = {**spec.options, **(options or {})}
    if spec.retry is not None:
        kwargs["retry"] = spec.retry
    ledger = spec.ledger if spec.ledger is not None else MemoryLedger()
    runner = ActionRunner(model, tools=list(spec.tools), ledger=ledger, metrics=m, **kwargs)
    results: list[CaseResult] = []
    for case in cases:
        principal = case.principal if case.has_principal else spec.principal
        try:
            outcome = runner.run(
                case.prompt, principal=principal, idempotency_key=case.idempotency_key
            )
        except Exception as exc:  # reported per case; the dataset goes on
            results.append(CaseResult(case, None, None if case.expected is None else False,
                                      {k: False for k in case.expected or {}},
                                      error=f"{type(exc).__name__}: {exc}"))
            continue
        exact, fields = score(case.expected, outcome.args)
        results.append(CaseResult(case, outcome, exact, fields))
        if compare_unconstrained:
            same = {k: getattr(runner.options, k) for k in _COMPARED_OPTIONS}
            m.compare_unconstrained(model, case.prompt, compiled=runner.compiled, **same)
    return EvalReport(tuple(results), m)


#: the runner's generation options that the unconstrained comparison keeps equal
_COMPARED_OPTIONS = ("max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "chat",
                     "system")


# -- printing ------------------------------------------------------------------------------------
def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.3f}"


def format_report(report: EvalReport, *, cases: bool = True) -> str:
    """The text ``formcast eval`` prints: the per-layer table (layer, reached, passed, rate),
    the named rates, statuses and finish reasons, task quality, and one line per case."""
    d = report.metrics.as_dict()
    out: list[str] = []
    out.append(f"{'layer':<12}{'reached':>8}{'passed':>8}{'rate':>8}")
    for name in LAYERS:
        c = d["layers"][name]
        out.append(f"{name:<12}{c['reached']:>8}{c['passed']:>8}{_pct(c['rate']):>8}")
    out.append("")
    out.append(f"runs {d['runs']}, attempts {d['attempts']} (retries {d['retries']}), "
               f"in doubt {d['in_doubt']}, errors {report.errors}")
    out.append("statuses:       " + ", ".join(f"{k} {v}" for k, v in d["statuses"].items()))
    out.append("finish reasons: " + ", ".join(
        f"{k} {v}" for k, v in d["finish_reasons"].items() if v))
    lat = d["latency"]
    if lat["ttft_s"]["count"]:
        line = (f"latency:        TTFT mean {lat['ttft_s']['mean'] * 1e3:.1f} ms"
                f" (p95 {lat['ttft_s']['p95'] * 1e3:.1f})")
        if lat["tpot_s"]["count"]:
            line += f", TPOT mean {lat['tpot_s']['mean'] * 1e3:.2f} ms"
        out.append(line)
    if lat["pairs"]:
        added = f"added by the constraint ({lat['pairs']} prompts, vs unconstrained): TTFT " \
                f"{lat['added_ttft_s']['mean'] * 1e3:+.1f} ms"
        if lat["added_tpot_s"]["count"]:
            added += f", TPOT {lat['added_tpot_s']['mean'] * 1e3:+.2f} ms"
        out.append("                " + added)
    r = d["rates"]
    named = ("dead_end", "permission_interceptions", "tool_success", "duplicates_prevented")
    out.append("rates:          " + ", ".join(
        f"{k.replace('_', ' ')} {r[k]['count']}/{r[k]['of']}" for k in named))
    failures = d["failures"]
    if failures:
        out.append("failures:       " + ", ".join(
            f"{layer}/{code} {n}" for layer, codes in failures.items() for code, n in codes.items()
        ))
    q = report.quality()
    out.append("")
    em = q["exact_match"]
    out.append(f"task quality: exact match {em['count']}/{em['of']} = {_pct(em['rate'])}")
    if q["fields"]:
        out.append(f"  {'field':<14}{'correct':>8}{'of':>5}{'accuracy':>10}")
        for name, c in q["fields"].items():
            out.append(f"  {name:<14}{c['count']:>8}{c['of']:>5}{_pct(c['rate']):>10}")
    sm = q["status_match"]
    if sm["of"]:
        out.append(f"status as expected: {sm['count']}/{sm['of']} = {_pct(sm['rate'])}")
    if cases:
        out.append("")
        out.append(f"{'case':<22}{'status':<15}{'finish':<11}{'att':>4}  failures / args")
        for res in report.results:
            o = res.outcome
            if o is None:
                out.append(f"{res.case.id:<22}{'ERROR':<15}{'':<11}{'':>4}  {res.error}")
                continue
            detail = ", ".join(f"{f.layer}/{f.code}" for f in o.failures) or json.dumps(
                None if o.args is None else dict(o.args), sort_keys=True, default=str
            )
            mark = "" if res.exact is None else (" =" if res.exact else " ≠")
            out.append(f"{res.case.id:<22}{o.status:<15}{o.finish_reason:<11}"
                       f"{o.attempts:>4}{mark:<2}{detail}")
    return "\n".join(out)
