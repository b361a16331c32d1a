#!/usr/bin/env python3
"""The per-step work of vLLM's structured-output backends, without the engine (#31).

What ``benchmarks/vllm_backends.py`` times inside vLLM, minus the model and the scheduler: the
calls vLLM's ``StructuredOutputManager`` makes on each request's grammar object every decoding
step (``is_terminated``, ``fill_bitmask`` into the one CPU ``torch.int32`` bitmask, then
``accept_tokens`` of the sampled token), for ``--requests`` requests at once, on the grammar
objects of formcast's, xgrammar's and guidance's vLLM backends built as vLLM builds them (the
real Llama-3 tokenizer, the tiny Llama's padded logits width, ``disable_any_whitespace`` for
the peers).  Every backend replays the SAME token sequences: random walks drawn once through
formcast's masks (seeded; a random allowed token each step, the stop token where allowed with
probability ``--stop-p``), so the backends do the same work; each replay checks that the
backend accepts every token and allows it in its mask (an error otherwise).  Cold work is
excluded: every backend replays the walks once untimed (compiles and first visits), then
``--repeat`` timed replays (rotated order) are measured in thread-CPU time and wall time.

Runs in vLLM's virtual environment::

    VENV=~/.cache/formcast/vllm-venv
    PYTHONPATH=src $VENV/bin/python benchmarks/vllm_step_bench.py --repeat 5
    PYTHONPATH=src $VENV/bin/python benchmarks/vllm_step_bench.py --profile /tmp/steps.prof
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ["TOKENIZERS_PARALLELISM"] = "false"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "engines"))
sys.path.insert(0, str(ROOT / "benchmarks"))

STOP_IDS = {128001, 128008, 128009}  # the tiny Llama's all_stop_token_ids


def backends(tok: Any, vocab_size: int, names: list[str]) -> dict[str, Any]:
    from vllm.v1.structured_output.backend_guidance import GuidanceBackend
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    from formcast.integrations.vllm import FormcastBackend

    config = SimpleNamespace(
        speculative_config=None,
        model_config=None,
        structured_outputs_config=SimpleNamespace(
            disable_any_whitespace=True, disable_additional_properties=False
        ),
    )
    made = {"formcast": FormcastBackend, "xgrammar": XgrammarBackend, "guidance": GuidanceBackend}
    return {n: made[n](config, tokenizer=tok, vocab_size=vocab_size) for n in names}


def walks(
    made: dict[str, Any], docs: list[str], n: int, max_tokens: int, stop_p: float
) -> list[list[int]]:
    """``n`` random walks (request i has schema i % len(docs)) through the intersection of
    every backend's masks (guidance masks some tokens the others allow: a lone ``{`` where a
    key follows), so that every backend can replay every walk."""
    import numpy as np
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from formcast.bitmask import bitmask_to_ids

    rng = random.Random(0)
    out = []
    for i in range(n):
        gs = {
            k: b.compile_grammar(StructuredOutputOptions.JSON, docs[i % len(docs)], STOP_IDS)
            for k, b in made.items()
        }
        masks = {k: b.allocate_token_bitmask(1) for k, b in made.items()}
        seq: list[int] = []
        while len(seq) < max_tokens:
            words = None
            for k, g in gs.items():
                g.fill_bitmask(masks[k], 0)
                row = masks[k].numpy()[0, : (made["formcast"].vocab_size + 31) // 32]
                words = row.copy() if words is None else words & row
            assert words is not None
            ids = bitmask_to_ids(np.ascontiguousarray(words))
            stops = [int(t) for t in ids if int(t) in STOP_IDS]
            rest = [int(t) for t in ids if int(t) not in STOP_IDS]
            stop = stops and (rng.random() < stop_p or not rest)
            tok = stops[0] if stop else rng.choice(rest)
            for k, g in gs.items():
                assert g.accept_tokens(str(i), [tok]), (k, seq, tok)
            seq.append(tok)
            if gs["formcast"].is_terminated():
                break
        out.append(seq)
    return out


def replay(
    backend: Any, docs: list[str], seqs: list[list[int]], check: bool
) -> tuple[float, float]:
    """One batch: compile (untimed), then every step's calls (timed: thread CPU, wall)."""
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    grammars = [
        backend.compile_grammar(StructuredOutputOptions.JSON, docs[i % len(docs)], STOP_IDS)
        for i in range(len(seqs))
    ]
    bitmask = backend.allocate_token_bitmask(len(seqs))
    rows = bitmask.numpy()
    longest = max(len(s) for s in seqs)
    live = list(range(len(seqs)))
    c0, t0 = time.thread_time(), time.perf_counter()
    for step in range(longest):
        live = [i for i in live if step < len(seqs[i])]
        for i in live:  # the manager's grammar_bitmask: one row per scheduled request
            g = grammars[i]
            if not g.is_terminated():
                g.fill_bitmask(bitmask, i)
        if check:
            for i in live:
                t = seqs[i][step]
                if not (int(rows[i, t >> 5]) >> (t & 31)) & 1:
                    raise AssertionError(
                        f"{type(backend).__name__}: request {i} step {step}: token {t} masked "
                        f"out after {seqs[i][:step]}"
                    )
        for i in live:  # the manager's accept_tokens after sampling
            if not grammars[i].accept_tokens(str(i), [seqs[i][step]]):
                raise AssertionError(f"{type(backend).__name__} refused {seqs[i][step]}")
    return time.thread_time() - c0, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--stop-p", type=float, default=0.3)
    ap.add_argument("--backends", default="formcast,xgrammar,guidance")
    ap.add_argument("--profile", help="cProfile formcast's timed replays into this file")
    args = ap.parse_args()
    from _tiny_llama import VOCAB_SIZE, build_tiny_llama
    from transformers import AutoTokenizer

    from formcast._native import native_summary
    from vllm_backends import schemas

    print(f"formcast build: {native_summary()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
    tok = AutoTokenizer.from_pretrained(build_tiny_llama(tmp))
    names = args.backends.split(",")
    made = backends(tok, VOCAB_SIZE, sorted(set(names) | {"formcast"}))
    docs = [json.dumps(s) for s in schemas(None)]
    seqs = walks(made, docs, args.requests, args.max_tokens, args.stop_p)
    print(f"{len(seqs)} walks, {sum(map(len, seqs))} tokens, longest {max(map(len, seqs))}")
    for n in names:  # cold: compiles, vocabularies, first visits; and the check
        replay(made[n], docs, seqs, check=True)
    cpu: dict[str, list[float]] = {n: [] for n in names}
    wall: dict[str, list[float]] = {n: [] for n in names}
    prof = cProfile.Profile() if args.profile else None
    for r in range(args.repeat):
        for n in names[r % len(names):] + names[: r % len(names)]:
            if prof is not None and n == "formcast":
                prof.enable()
            c, w = replay(made[n], docs, seqs, check=False)
            if prof is not None and n == "formcast":
                prof.disable()
            cpu[n].append(c)
            wall[n].append(w)
    steps = sum(map(len, seqs))
    for n in names:
        c = statistics.median(cpu[n])
        print(
            f"{n:9s} thread CPU p50 {1000 * c:7.1f} ms (min {1000 * min(cpu[n]):7.1f})  "
            f"wall p50 {1000 * statistics.median(wall[n]):7.1f} ms  "
            f"{1e6 * c / steps:6.1f} us per request-step"
        )
    if prof is not None:
        import pstats

        prof.dump_stats(args.profile)
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
