#!/usr/bin/env python3
"""The retry economics of seed 002, from first principles and then measured on the bundled model.

Part (a), closed form (no model, instant).  If one attempt returns a valid document with
probability ``p`` and attempts are independent, the attempts until success ``G`` are geometric:
``E[G] = 1/p``, the ``q``-quantile is the smallest ``n`` with ``1 - (1-p)**n >= q`` (that is
``ceil(log(1-q)/log(1-p))``, computed exactly here with fractions so that ``p=0.95, q=0.95``
gives 1 and ``p=0.9, q=0.999`` gives 3, as the seed prints), tokens per 1,000 requests at
``T`` tokens per attempt are ``1000*T/p``, and the worst case is unbounded.  With a retry cap
``K`` the loop stops: ``E[min(G, K)] = (1-(1-p)**K)/p`` and a request fails with probability
``(1-p)**K`` -- the bounded cost is bought with a failure rate.  :func:`seed_table` prints the
seed's table (``p`` in 0.70 / 0.90 / 0.95 / 0.99, 400 tokens per attempt) plus its simulation
line; tests/actions/test_retry_economics_math.py checks cells against the seed's own numbers.

Part (b), measured (``--measure``; SmolLM2-135M-Instruct on llama.cpp, one thread, offline).
The same extraction prompts against three tool schemas (refund, booking, support ticket), each
a one-shot prompt (the tool, one example message with its JSON arguments, the user's message:
the format a 135M model follows best), run two ways through
:func:`formcast.generation.generate`:

* **unconstrained + validate-and-retry**: no constraint, ``temperature > 0`` with seed
  ``1000*request + attempt`` (so attempts differ), the first JSON object in the text is parsed
  (a ```json fence, prose around it, or rambling that ran out of budget after it are tolerated:
  the lenient parser production code writes) and validated with ``jsonschema``
  (``FormatChecker``); retried until valid or ``--max-attempts`` attempts;
* **constrained**: ``schema=`` (same prompt, temperature and seeds), the same validation; an
  attempt that ran out of ``--max-tokens`` is an invalid attempt (never parsed or repaired).

``--runner`` adds the constrained side once more through :class:`formcast.actions.ActionRunner`
(``RetryPolicy(max_attempts=K)``, the same seeds): attempts, outcome statuses, executions and
latency of ``runner.run`` (schema validation, the ledger and the commit included).

It reports per side: attempts per request (mean, p95, max), the per-attempt validity ``p̂``
(valid attempts / attempts: the maximum-likelihood estimate under the cap), requests that
exhausted the cap, output tokens and prompt+output tokens per 1,000 requests, request latency
p50 / p99 (the sum of the request's attempts), and the attempts part (a) predicts from ``p̂``
with the same cap next to the measured ones.  Validity counts what the schema says, nothing more:
a valid document may still be wrong (seed 002's last table), which is the task-quality question
of ``formcast eval``.

Usage::

    python benchmarks/retry_economics.py                        # part (a) only
    python benchmarks/retry_economics.py --measure              # (a) + (b): 21 prompts, K=5
    python benchmarks/retry_economics.py --measure --runner     # + the runner column
    python benchmarks/retry_economics.py --measure --prompts 6 --max-attempts 3 --json out.json

Lifetime and cost: a script.  Part (a) is arithmetic (microseconds); part (b) loads the model
once (~1 s) and makes at most ``prompts * max_attempts`` unconstrained and as many constrained
generations of at most ``--max-tokens`` tokens each: about 3-4 minutes on a loaded 2-core
machine with the defaults.  The numbers in docs/benchmarks_actions.md came from ``--measure``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from fractions import Fraction  # noqa: E402
from typing import Any  # noqa: E402

from formcast.errors import ConfigurationError  # noqa: E402

# -- part (a): the closed form ---------------------------------------------------------------------

#: The seed's rows and its request size.
SEED_PS: tuple[float, ...] = (0.70, 0.90, 0.95, 0.99)
SEED_TOKENS_PER_ATTEMPT = 400


def _frac(x: float | Fraction) -> Fraction:
    """``x`` as the exact decimal it was written as (0.95 is 19/20, not the nearest double)."""
    return x if isinstance(x, Fraction) else Fraction(repr(float(x)))


def _check_p(p: Fraction) -> None:
    if not 0 < p <= 1:
        raise ConfigurationError(
            f"p (the per-attempt validity) must be in (0, 1], got {float(p)}: pass a "
            "probability; p = 0 never succeeds and has no finite mean"
        )


def mean_attempts(p: float | Fraction) -> float:
    """``E[G] = 1/p``: attempts until the first valid one, uncapped."""
    fp = _frac(p)
    _check_p(fp)
    return float(1 / fp)


def quantile_attempts(p: float | Fraction, q: float | Fraction) -> int:
    """The ``q``-quantile of ``G``: the smallest ``n >= 1`` with ``1 - (1-p)**n >= q``.

    ``ceil(log(1-q) / log(1-p))``, computed in exact arithmetic (the float formula rounds
    ``p = q = 0.95`` to 2 instead of 1 on some platforms)."""
    fp, fq = _frac(p), _frac(q)
    _check_p(fp)
    if not 0 <= fq < 1:
        raise ConfigurationError(
            f"q (the quantile) must be in [0, 1), got {float(fq)}: q = 1 is the worst case, "
            "which is unbounded for p < 1"
        )
    if fp == 1:
        return 1
    miss, tail = 1 - fp, 1 - fq
    n = max(1, math.ceil(math.log(float(tail)) / math.log(float(miss))) - 1)
    while miss**n > tail:  # at most a step or two from the float estimate
        n += 1
    while n > 1 and miss ** (n - 1) <= tail:
        n -= 1
    return n


def tokens_per_1k(p: float | Fraction, tokens_per_attempt: int = SEED_TOKENS_PER_ATTEMPT) -> int:
    """Expected tokens for 1,000 requests, uncapped: ``floor(1000 * T / p)`` (as the seed)."""
    fp = _frac(p)
    _check_p(fp)
    return math.floor(1000 * tokens_per_attempt / fp)


def capped_mean_attempts(p: float | Fraction, k: int) -> float:
    """``E[min(G, K)] = (1 - (1-p)**K) / p``: attempts made with a retry cap of ``K``."""
    fp = _frac(p)
    _check_p(fp)
    if k < 1:
        raise ConfigurationError(f"the retry cap K must be >= 1 attempt, got {k}")
    return float((1 - (1 - fp) ** k) / fp)


def capped_failure_rate(p: float | Fraction, k: int) -> float:
    """``(1-p)**K``: the share of requests still invalid after ``K`` attempts."""
    fp = _frac(p)
    _check_p(fp)
    return float((1 - fp) ** k)


def capped_quantile_attempts(p: float | Fraction, q: float | Fraction, k: int) -> int:
    """The ``q``-quantile of ``min(G, K)``."""
    return min(quantile_attempts(p, q), k)


def simulate(p: float, n: int, seed: int = 0) -> tuple[float, int]:
    """Simulate ``n`` uncapped retry loops at ``p``: (mean attempts, max attempts)."""
    rng = random.Random(seed)
    total = worst = 0
    for _ in range(n):
        a = 1
        while rng.random() >= p:
            a += 1
        total += a
        worst = max(worst, a)
    return total / n, worst


def seed_table(
    ps: Sequence[float] = SEED_PS, tokens_per_attempt: int = SEED_TOKENS_PER_ATTEMPT
) -> list[dict[str, Any]]:
    """The rows of seed 002's table: p, E[attempts], p95 / p99.9 attempts, tokens per 1,000
    requests, worst case."""
    return [
        {
            "p": p,
            "mean_attempts": mean_attempts(p),
            "p95_attempts": quantile_attempts(p, Fraction(95, 100)),
            "p999_attempts": quantile_attempts(p, Fraction(999, 1000)),
            "tokens_per_1k": tokens_per_1k(p, tokens_per_attempt),
            "worst_case": "unbounded",
        }
        for p in ps
    ]


def seed_table_markdown(
    ps: Sequence[float] = SEED_PS, tokens_per_attempt: int = SEED_TOKENS_PER_ATTEMPT
) -> str:
    """Seed 002's table as markdown (same rows and columns, same rounding)."""
    lines = [
        f"A request costs {tokens_per_attempt} tokens; retry until the JSON is valid; "
        "p = probability one attempt is valid.",
        "",
        "| p | E[attempts] | p95 attempts | p99.9 attempts | tokens / 1k requests | worst case |",
        "|---|---|---|---|---|---|",
    ]
    for r in seed_table(ps, tokens_per_attempt):
        lines.append(
            f"| {r['p']:.2f} | {r['mean_attempts']:.2f} | {r['p95_attempts']} | "
            f"{r['p999_attempts']} | {r['tokens_per_1k']:,} | {r['worst_case']} |"
        )
    lines.append(f"| 1.00 (constrained) | 1.00 | 1 | 1 | {tokens_per_1k(1, tokens_per_attempt):,} "
                 "| 1 attempt |")
    return "\n".join(lines)


def capped_table_markdown(ps: Sequence[float], k: int) -> str:
    """The same ``p`` with a retry cap ``K``: attempts, p95, and the failure rate it buys."""
    lines = [
        f"With a cap of K = {k} attempts:",
        "",
        "| p | E[min(G,K)] | p95 | failed requests after K |",
        "|---|---|---|---|",
    ]
    for p in ps:
        lines.append(
            f"| {p:.2f} | {capped_mean_attempts(p, k):.3f} | "
            f"{capped_quantile_attempts(p, Fraction(95, 100), k)} | "
            f"{capped_failure_rate(p, k):.2e} |"
        )
    return "\n".join(lines)


# -- part (b): measured on the bundled model ------------------------------------------------------

REFUND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^ORD-[0-9]{5}$"},
        "amount": {"type": "number", "minimum": 0, "maximum": 10000},
        "currency": {"type": "string", "enum": ["USD", "EUR", "GBP"]},
        "reason": {"type": "string", "minLength": 1, "maxLength": 60},
    },
    "required": ["order_id", "amount", "currency", "reason"],
    "additionalProperties": False,
}

BOOKING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 30},
        "check_in": {"type": "string", "format": "date"},
        "nights": {"type": "integer", "minimum": 1, "maximum": 30},
        "guests": {"type": "integer", "minimum": 1, "maximum": 8},
    },
    "required": ["city", "check_in", "nights", "guests"],
    "additionalProperties": False,
}

TICKET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 60},
        "priority": {"type": "string", "enum": ["low", "medium", "high", "urgent"]},
        # (a pattern, not format "email": format "email" with a maxLength exceeds the
        # default max_automaton_states=10000 when the two are intersected)
        "email": {"type": "string",
                  "pattern": "^[a-z0-9._-]{1,24}@[a-z0-9-]{1,20}(\\.[a-z]{2,6}){1,2}$"},
    },
    "required": ["title", "priority", "email"],
    "additionalProperties": False,
}

SCHEMAS: dict[str, dict[str, Any]] = {
    "refund": REFUND_SCHEMA,
    "booking": BOOKING_SCHEMA,
    "ticket": TICKET_SCHEMA,
}

#: (tool, user message): 7 per tool, interleaved so that ``--prompts N`` covers every tool.
MESSAGES: tuple[tuple[str, str], ...] = tuple(
    pair
    for trio in zip(
        [
            ("refund", "I want my money back for ORD-48213: 23.50 USD, the mug arrived broken."),
            ("refund", "Please refund 120 EUR on ORD-10077. The jacket was the wrong size."),
            ("refund", "Order ORD-55190 never arrived. Refund the 15.99 GBP please."),
            ("refund", "Refund request: ORD-30002, 250 USD, charged twice."),
            ("refund", "The headphones from ORD-77341 stopped working; I paid 89 EUR."),
            ("refund", "Can I get 9.99 USD back for ORD-60518? Wrong colour."),
            ("refund", "ORD-21894: 42 GBP, item damaged in transit, refund please."),
        ],
        [
            ("booking", "Book a hotel in Lisbon from 2026-03-14 for 3 nights, 2 guests."),
            ("booking", "I need a room in Oslo, arriving 2026-07-01, staying 5 nights, just me."),
            ("booking", "Family of 4 to Rome, check in 2026-08-10, one week (7 nights)."),
            ("booking", "Reserve Berlin for 2 people, 2 nights starting 2026-02-20."),
            ("booking", "Hotel in Kyoto, 2026-04-03, 10 nights, 3 guests."),
            ("booking", "Madrid, 1 night on 2026-05-05 for two adults."),
            ("booking", "Check in at Dublin on 2026-09-12, 4 nights, 1 guest."),
        ],
        [
            ("ticket", "The checkout page shows a 500 error, urgent! Reach me at ana@example.com"),
            ("ticket", "Low priority: typo on the pricing page. bob@example.org"),
            ("ticket", "I can't reset my password, medium priority, email chen.li@example.net"),
            ("ticket", "High priority: invoices are not being emailed. contact ops@example.com"),
            ("ticket", "Dark mode request, low priority, from maria@example.io"),
            ("ticket", "Login fails on mobile since this morning. urgent. sam@example.com"),
            ("ticket", "Export to CSV is slow (medium). Write to dev@example.co.uk"),
        ],
        strict=True,
    )
    for pair in trio
)


#: One worked example per tool (a message and its arguments), shown in the prompt: a one-shot
#: prompt, the format a 135M model follows best (shown the JSON Schema itself, it echoes the
#: schema back; shown a bare example document, it copies the example's values).
EXAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "refund": ("Refund 5 USD for ORD-11111, it came late.",
               {"order_id": "ORD-11111", "amount": 5, "currency": "USD",
                "reason": "late delivery"}),
    "booking": ("Paris for 1 night from 2026-01-31, one guest.",
                {"city": "Paris", "check_in": "2026-01-31", "nights": 1, "guests": 1}),
    "ticket": ("Search is broken, high priority. jo@example.com",
               {"title": "Search is broken", "priority": "high", "email": "jo@example.com"}),
}


def prompt_for(tool: str, message: str) -> str:
    """The extraction prompt: the tool, one worked example, the user's message (the same
    prompt for both sides)."""
    ex_message, ex_args = EXAMPLES[tool]
    return (
        f"Extract the arguments of the `{tool}` tool from the user's message as one JSON "
        "object, and nothing else.\n\n"
        f"User: {ex_message}\nJSON: {json.dumps(ex_args)}\n\n"
        f"User: {message}\nJSON:"
    )


#: Fields whose value is spelled out in every user message: a valid document that gets one of
#: them wrong is valid and wrong (the check is ``str(value).lower() in message.lower()``).
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "refund": ("order_id", "currency"),
    "booking": ("city", "check_in"),
    "ticket": ("priority", "email"),
}


def key_fields_right(tool: str, message: str, value: Any) -> bool:
    """Whether every key field of ``value`` is spelled out in ``message``."""
    low = message.lower()
    return isinstance(value, dict) and all(
        str(value.get(k, "\0")).lower() in low for k in KEY_FIELDS[tool]
    )


def lenient_json(text: str) -> tuple[Any, bool]:
    """The first JSON object in ``text`` (prose and code fences around it tolerated), and
    whether the whole text was exactly that JSON (``json.loads(text)`` would succeed).
    Raises ``ValueError`` when there is none."""
    try:
        return json.loads(text), True
    except ValueError:
        pass
    dec = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = dec.raw_decode(text, start)
            return value, False
        except ValueError:
            start = text.find("{", start + 1)
    raise ValueError("no JSON object in the text")


@dataclass
class Attempt:
    ok: bool
    right: bool  # valid, and the key fields are the message's (KEY_FIELDS)
    code: str  # valid | unparseable | schema | max_tokens | dead_end | ...
    strict_json: bool
    output_tokens: int
    prompt_tokens: int
    seconds: float
    text: str = ""


@dataclass
class Request:
    tool: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].ok

    @property
    def seconds(self) -> float:
        return math.fsum(a.seconds for a in self.attempts)


def _validator(schema: dict[str, Any]) -> Any:
    import jsonschema

    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def run_side(
    model: Any,
    items: Sequence[tuple[str, str]],
    *,
    constrained: bool,
    max_attempts: int,
    max_tokens: int,
    temperature: float,
    progress: bool,
) -> list[Request]:
    """Every request of ``items`` through the retry loop, one side."""
    from formcast.generation import generate

    validators = {name: _validator(s) for name, s in SCHEMAS.items()}
    out: list[Request] = []
    for i, (tool, message) in enumerate(items):
        req = Request(tool)
        prompt = prompt_for(tool, message)
        for attempt in range(max_attempts):
            opts: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature,
                                    "seed": 1000 * i + attempt}
            if constrained:
                opts["schema"] = SCHEMAS[tool]
            res = generate(model, prompt, **opts)
            strict = False
            code: str
            value: Any = None
            if constrained:  # an unfinished constrained document is never parsed or repaired
                code = "parsed" if res.finish_reason == "completed" else res.finish_reason
                value, strict = res.value, code == "parsed"
            else:  # free text: whatever came back (prose after the JSON ran out of budget too)
                try:
                    value, strict = lenient_json(res.text)
                    code = "parsed"
                except ValueError:
                    code = "unparseable"
            if code == "parsed":
                code = "valid" if validators[tool].is_valid(value) else "schema"
            t = res.timings
            right = code == "valid" and key_fields_right(tool, message, value)
            req.attempts.append(Attempt(code == "valid", right, code, strict, t.output_tokens,
                                        t.prompt_tokens, t.total_s, res.text))
            if code == "valid":
                break
        out.append(req)
        if progress:
            side = "constrained" if constrained else "free"
            codes = ",".join(a.code for a in req.attempts)
            print(f"  [{side} {i + 1}/{len(items)}] {tool}: {codes}", file=sys.stderr, flush=True)
    return out


def run_runner_side(
    model: Any,
    items: Sequence[tuple[str, str]],
    *,
    max_attempts: int,
    max_tokens: int,
    temperature: float,
    progress: bool,
) -> dict[str, Any]:
    """The constrained side through :class:`formcast.actions.ActionRunner` (one runner per
    tool, ``RetryPolicy(max_attempts=K)``, a ``MemoryLedger``, an ``execute`` that records the
    call): attempts and statuses from the :class:`~formcast.actions.types.Outcome`, latency
    as the wall time of ``runner.run``."""
    from formcast import actions

    executed: list[str] = []

    def execute(args: dict[str, Any], key: str) -> dict[str, Any]:
        executed.append(key)
        return {"ok": True}

    runners = {
        name: actions.ActionRunner(
            model,
            tools=[actions.Tool(name=name, schema=schema, execute=execute)],
            retry=actions.RetryPolicy(max_attempts=max_attempts),
            max_tokens=max_tokens, temperature=temperature,
        )
        for name, schema in SCHEMAS.items()
    }
    attempts: list[int] = []
    lat: list[float] = []
    statuses: dict[str, int] = {}
    right = 0
    for i, (tool, message) in enumerate(items):
        t0 = time.perf_counter()
        outcome = runners[tool].run(prompt_for(tool, message), seed=1000 * i)
        lat.append(time.perf_counter() - t0)
        attempts.append(outcome.attempts)
        statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
        right += outcome.committed and key_fields_right(tool, message, dict(outcome.args or {}))
        if progress:
            print(f"  [runner {i + 1}/{len(items)}] {tool}: {outcome.status} "
                  f"after {outcome.attempts}", file=sys.stderr, flush=True)
    return {
        "requests": len(items),
        "attempts_mean": sum(attempts) / len(attempts),
        "attempts_p95": _pct(attempts, 95),
        "attempts_max": max(attempts),
        "statuses": statuses,
        "executions": len(executed),
        "committed_right": right,
        "latency_p50_s": _pct(lat, 50),
        "latency_p99_s": _pct(lat, 99),
    }


def _pct(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (``q`` in 0..100)."""
    s = sorted(xs)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(reqs: Sequence[Request], max_attempts: int) -> dict[str, Any]:
    """The side's numbers (see the module docstring)."""
    attempts = [len(r.attempts) for r in reqs]
    flat = [a for r in reqs for a in r.attempts]
    valid = sum(a.ok for a in flat)
    p_hat = valid / len(flat) if flat else math.nan
    n = len(reqs)
    codes: dict[str, int] = {}
    for a in flat:
        codes[a.code] = codes.get(a.code, 0) + 1
    out_tokens = sum(a.output_tokens for a in flat)
    all_tokens = out_tokens + sum(a.prompt_tokens for a in flat)
    lat = [r.seconds for r in reqs]
    predicted = capped_mean_attempts(p_hat, max_attempts) if p_hat > 0 else float(max_attempts)
    return {
        "requests": n,
        "attempts_total": len(flat),
        "attempts_mean": sum(attempts) / n,
        "attempts_p95": _pct(attempts, 95),
        "attempts_max": max(attempts),
        "p_hat": p_hat,
        "strict_json_rate": sum(a.strict_json for a in flat) / len(flat),
        "requests_failed": sum(not r.ok for r in reqs),
        "requests_right": sum(bool(r.attempts) and r.attempts[-1].right for r in reqs),
        "first_attempt_p": sum(r.attempts[0].ok for r in reqs) / n,
        "attempt_codes": codes,
        "output_tokens_per_1k": 1000 * out_tokens / n,
        "total_tokens_per_1k": 1000 * all_tokens / n,
        "latency_p50_s": _pct(lat, 50),
        "latency_p99_s": _pct(lat, 99),
        "predicted_attempts_mean": predicted,
        "predicted_failed_rate": capped_failure_rate(p_hat, max_attempts) if p_hat > 0 else 1.0,
        "predicted_p95": (capped_quantile_attempts(p_hat, Fraction(95, 100), max_attempts)
                          if p_hat > 0 else max_attempts),
    }


def measured_markdown(free: dict[str, Any], cons: dict[str, Any], k: int) -> str:
    rows = [
        ("attempts per request: mean", "attempts_mean", "{:.2f}"),
        ("attempts per request: p95", "attempts_p95", "{:.1f}"),
        ("attempts per request: max", "attempts_max", "{}"),
        ("validity per attempt p̂", "p_hat", "{:.3f}"),
        ("whole text is JSON (json.loads) per attempt", "strict_json_rate", "{:.3f}"),
        ("validity of first attempts", "first_attempt_p", "{:.3f}"),
        (f"requests still invalid after K={k}", "requests_failed", "{}"),
        ("requests valid with the key fields right", "requests_right", "{}"),
        ("output tokens / 1k requests", "output_tokens_per_1k", "{:,.0f}"),
        ("prompt + output tokens / 1k requests", "total_tokens_per_1k", "{:,.0f}"),
        ("request latency p50 (s)", "latency_p50_s", "{:.2f}"),
        ("request latency p99 (s)", "latency_p99_s", "{:.2f}"),
        ("predicted mean attempts from p̂ (capped geometric)", "predicted_attempts_mean",
         "{:.2f}"),
        ("predicted p95 attempts from p̂", "predicted_p95", "{}"),
        ("predicted invalid after K, (1-p̂)^K", "predicted_failed_rate", "{:.3f}"),
    ]
    lines = [
        "| | unconstrained + validate-and-retry | constrained (`schema=`) |",
        "|---|---|---|",
    ]
    for label, key, fmt in rows:
        lines.append(f"| {label} | {fmt.format(free[key])} | {fmt.format(cons[key])} |")
    lines.append(f"| attempt outcomes | {_codes(free)} | {_codes(cons)} |")
    return "\n".join(lines)


def _codes(s: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(s["attempt_codes"].items()))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from formcast.model.loading import load_model

    if not 1 <= args.prompts <= len(MESSAGES):
        raise SystemExit(f"--prompts must be in 1..{len(MESSAGES)}, got {args.prompts}")
    if args.max_attempts < 1:
        raise SystemExit(f"--max-attempts must be >= 1, got {args.max_attempts}")
    items = MESSAGES[: args.prompts]
    model = load_model("smollm2")
    from formcast.generation import compile_constraint

    for s in SCHEMAS.values():  # compile outside the timed requests (start-up work)
        compile_constraint(model.vocab, schema=s)
    t0 = time.perf_counter()
    free = run_side(model, items, constrained=False, max_attempts=args.max_attempts,
                    max_tokens=args.max_tokens, temperature=args.temperature,
                    progress=not args.quiet)
    cons = run_side(model, items, constrained=True, max_attempts=args.max_attempts,
                    max_tokens=args.max_tokens, temperature=args.temperature,
                    progress=not args.quiet)
    wall = time.perf_counter() - t0
    fs, cs = summarize(free, args.max_attempts), summarize(cons, args.max_attempts)
    for summary, reqs in ((fs, free), (cs, cons)):
        summary["per_request"] = [
            {"tool": r.tool, "codes": [a.code for a in r.attempts], "last": r.attempts[-1].text}
            for r in reqs
        ]
    runner = None
    if args.runner:
        runner = run_runner_side(model, items, max_attempts=args.max_attempts,
                                 max_tokens=args.max_tokens, temperature=args.temperature,
                                 progress=not args.quiet)
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover
        load = math.nan
    return {
        "free": fs,
        "constrained": cs,
        "runner": runner,
        "settings": {"prompts": args.prompts, "max_attempts": args.max_attempts,
                     "max_tokens": args.max_tokens, "temperature": args.temperature,
                     "model": "smollm2 (SmolLM2-135M-Instruct, llama.cpp, n_threads=1)"},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load:.2f}",
        "wall_s": wall,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--measure", action="store_true", help="also run part (b) on the model")
    ap.add_argument("--prompts", type=int, default=21, help="requests (1..21, default 21)")
    ap.add_argument("--max-attempts", type=int, default=5, help="the retry cap K (default 5)")
    ap.add_argument("--max-tokens", type=int, default=96, help="budget per attempt (96)")
    ap.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (0.7)")
    ap.add_argument("--json", help="write the numbers to this file")
    ap.add_argument("--quiet", action="store_true", help="no per-request progress on stderr")
    ap.add_argument("--runner", action="store_true",
                    help="also run the constrained side through actions.ActionRunner")
    args = ap.parse_args(argv)

    print("## (a) Seed 002's table, from first principles\n")
    print(seed_table_markdown())
    mean, worst = simulate(0.95, 20_000, seed=0)
    print(f"\nsimulated 20,000 requests at p=0.95 (random.Random(0)): "
          f"mean attempts {mean:.3f}, max {worst}\n")
    print(capped_table_markdown(SEED_PS, args.max_attempts))
    report: dict[str, Any] = {"seed_table": seed_table(), "simulated_p095": [mean, worst]}
    if args.measure:
        m = measure(args)
        report["measured"] = m
        s = m["settings"]
        print(f"\n## (b) Measured: {s['prompts']} requests, K={s['max_attempts']}, "
              f"max_tokens={s['max_tokens']}, temperature={s['temperature']}, {s['model']}\n")
        print(measured_markdown(m["free"], m["constrained"], s["max_attempts"]))
        print(f"\n{m['machine']}; both sides took {m['wall_s']:.0f} s.")
        r = m["runner"]
        if r is not None:
            st = ", ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items()))
            print(f"\nThe constrained side through `actions.ActionRunner` (RetryPolicy("
                  f"max_attempts={s['max_attempts']}), MemoryLedger): attempts mean "
                  f"{r['attempts_mean']:.2f} / p95 {r['attempts_p95']:.1f} / max "
                  f"{r['attempts_max']}; outcomes: {st}; executions {r['executions']} "
                  f"({r['committed_right']} with the key fields right); "
                  f"latency p50 {r['latency_p50_s']:.2f} s, p99 {r['latency_p99_s']:.2f} s.")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
