#!/usr/bin/env python3
"""Batched decoding on llama.cpp (SmolLM2-135M Q4_1): what the model gives, and what the
continuous batcher keeps of it.  The reference of issue #30's load target (the server's
throughput with 8 concurrent requests >= 0.8x the model's own batched decode).

Parts (each thread count in ``--threads``, one process, same model file):

1. ``model``: :class:`~formcast.model.llama_cpp_batched.LlamaCppBatchedDecoder` alone.  ``n``
   sequences (1, 2, 4, 8) are prefilled (untimed), then ``--steps`` calls each decode one
   token for every sequence (the arg-max of its last row).  Reported: tokens/s (``n * steps /
   wall``) and the speed-up over ``n = 1``; ``single`` is the single-sequence wrapper
   (``LlamaCppModel.step``, the context ``generate`` uses) for comparison.
2. ``batcher``: :class:`~formcast.generation.batching.ContinuousBatcher` on 8 slots, greedy,
   ``--max-tokens`` per request, a small JSON Schema (``{"city": string <= 12, "population":
   integer}``), no stop before the budget is likely.  ``lone``: one request alone through the
   batcher; ``8 concurrent``: 8 requests submitted at once (different questions).  Reported:
   output tokens/s over the wall time of the whole run, time to first token p50 / max (from
   submit), and ``vs model``: the batcher's tokens/s over part 1's tokens/s at ``n = 8`` with
   the same threads -- the ratio the issue's target is about.  ``8, staggered``: the same 8
   with ``prefill_tokens`` = one prompt, so one request joins per step (lower median time to
   first token: the running rows keep decoding between the prefills).  ``8, shared``: the
   same 8 with ``share_prefix=8``: the chat template's system prompt (24 of about 37 prompt
   tokens) is evaluated once and copied to the other slots.

The machine is shared (2 cores, other work running): numbers are indicative; compare rows of
one run.  Usage::

    python benchmarks/batched_decode.py                    # threads 1 and 2, 24 steps
    python benchmarks/batched_decode.py --threads 1 --steps 16 --max-tokens 24 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np

from formcast.generation.batching import ContinuousBatcher
from formcast.model.llama_cpp import LlamaCppModel
from formcast.model.llama_cpp_batched import LlamaCppBatchedDecoder
from formcast.model.loading import load_model

QUESTIONS = [
    "What is the capital of France?",
    "Name a large city in Japan.",
    "Which city is the capital of Italy?",
    "Give me a city in Brazil.",
    "What is the biggest city in Canada?",
    "Name the capital of Spain.",
    "Which is the largest city in Australia?",
    "Give me a city in Germany.",
]
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "population": {"type": "integer", "minimum": 0},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}
_perf = time.perf_counter


def prompt_ids(model: LlamaCppModel, question: str) -> list[int]:
    assert model.chat_template is not None
    return model.tokenize(model.chat_template.render_user(question))


def model_part(
    model: LlamaCppModel, decoder: LlamaCppBatchedDecoder, steps: int
) -> dict[str, float]:
    """tokens/s of the batched decoder for 1, 2, 4, 8 sequences, and of the lone wrapper."""
    out: dict[str, float] = {}
    prompts = [prompt_ids(model, q) for q in QUESTIONS]
    for n in (1, 2, 4, 8):
        decoder.reset()
        rows = decoder.decode([(s, prompts[s]) for s in range(n)])
        t0 = _perf()
        for _ in range(steps):
            rows = decoder.decode([(s, [int(np.argmax(rows[s]))]) for s in range(n)])
        out[f"n={n}"] = n * steps / (_perf() - t0)
    decoder.reset()
    logits = model.start(prompts[0])
    t0 = _perf()
    for _ in range(steps):
        logits = model.step([int(np.argmax(logits))])
    out["single"] = steps / (_perf() - t0)
    return out


def batcher_part(
    decoder: LlamaCppBatchedDecoder,
    n: int,
    max_tokens: int,
    prefill_tokens: int | None = None,
    share_prefix: int | None = None,
) -> dict[str, float]:
    """One run of ``n`` concurrent requests: tokens/s end to end and after the first step
    (the steady state, prefill and compile left out), and time to first token."""
    decoder.reset()
    batcher = ContinuousBatcher(
        decoder, max_queue=None, prefill_tokens=prefill_tokens, share_prefix=share_prefix
    )
    t0 = _perf()
    handles = [
        batcher.submit_generate(QUESTIONS[i % len(QUESTIONS)], schema=SCHEMA,
                                max_tokens=max_tokens)
        for i in range(n)
    ]  # fmt: skip
    batcher.step()  # prefill of every prompt, the first tokens (forced ones included)
    t1 = _perf()
    done_in_first = sum(len(row.out.ids) for row in batcher._rows.values())
    batcher.run_until_idle()
    t2 = _perf()
    results = [h.result() for h in handles]
    tokens = sum(r.timings.output_tokens for r in results)
    steady = tokens - done_in_first  # (no request finishes within its first step here)
    ttft = [r.timings.time_to_first_token_s for r in results]
    return {
        "tokens_per_s": tokens / (t2 - t0),
        "steady_tokens_per_s": steady / (t2 - t1) if t2 > t1 else float("nan"),
        "ttft_p50_s": statistics.median(ttft),
        "ttft_max_s": max(ttft),
        "wall_s": t2 - t0,
        "tokens": float(tokens),
        "steps": float(batcher.steps),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=24, help="decode calls per point of part 1")
    ap.add_argument("--max-tokens", type=int, default=32, help="budget per batcher request")
    ap.add_argument("--json", type=Path, help="write every number here")
    args = ap.parse_args(argv)

    model = load_model("smollm2")
    assert isinstance(model, LlamaCppModel)
    report: dict[str, Any] = {"threads": {}}
    for threads in args.threads:
        model._lc.llama_set_n_threads(model.llm.ctx, threads, threads)  # the lone wrapper too
        decoder = LlamaCppBatchedDecoder(model, n_slots=8, n_ctx_per_slot=512, n_threads=threads)
        try:
            batcher_part(decoder, 1, 4)  # warm-up: the schema's compile and first masks
            part1 = model_part(model, decoder, args.steps)
            print(f"\n== {threads} thread(s), SmolLM2-135M Q4_1 ==")
            base = part1["n=1"]
            print("model's own batched decode (tokens/s, x over n=1):")
            for key in ("single", "n=1", "n=2", "n=4", "n=8"):
                print(f"  {key:>7}  {part1[key]:8.1f}  {part1[key] / base:5.2f}x", flush=True)
            lone = batcher_part(decoder, 1, args.max_tokens)
            eight = batcher_part(decoder, 8, args.max_tokens)
            one_prompt = max(len(prompt_ids(model, q)) for q in QUESTIONS)
            staggered = batcher_part(decoder, 8, args.max_tokens, prefill_tokens=one_prompt)
            shared = batcher_part(decoder, 8, args.max_tokens, share_prefix=8)
        finally:
            decoder.close()
        report["threads"][threads] = {
            "model": part1,
            "lone": lone,
            "concurrent8": eight,
            "concurrent8_one_prompt_per_step": staggered,
            "concurrent8_share_prefix": shared,
        }
        print("continuous batcher (schema, greedy; steady: after the prefill step):")
        rows = (
            ("lone", lone, "n=1"),
            ("8 concurrent", eight, "n=8"),
            ("8, staggered", staggered, "n=8"),
            ("8, shared", shared, "n=8"),
        )
        for label, r, key in rows:
            print(
                f"  {label:>12}  {r['tokens_per_s']:7.1f} tok/s end to end, "
                f"{r['steady_tokens_per_s']:7.1f} steady "
                f"({r['steady_tokens_per_s'] / part1[key]:4.2f}x model {key})"
                f"  ttft p50 {r['ttft_p50_s'] * 1e3:7.1f} ms"
                f"  max {r['ttft_max_s'] * 1e3:7.1f} ms"
            )
        for label, r in (
            ("8 concurrent", eight),
            ("8, staggered", staggered),
            ("8, shared", shared),
        ):
            print(
                f"  {label} vs lone: throughput {r['tokens_per_s'] / lone['tokens_per_s']:.2f}x, "
                f"ttft p50 {r['ttft_p50_s'] / lone['ttft_p50_s']:.2f}x"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
