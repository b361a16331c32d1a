#!/usr/bin/env python3
"""formcast's own work for one FRESH batch of ``benchmarks/vllm_backends.py``, without the engine.

What the engine's fresh batches add to formcast's per-step work: the compile of 8 new schemas
(``FormcastBackend.compile_grammar`` for 32 requests, as vLLM's compile thread calls it) and
the first visits of their states (``fill_bitmask``, which computes a state's mask the first
time; with canonical forcing also the forced text's first token).  32 grammars advance by
random walks through their own masks (seeded; a uniformly drawn allowed token per row), every
row filled each step, until every request stops or ``--max-tokens``.  Thread CPU time of the
backend's calls only (the walk's drawing is not counted).  Per round: compile, fill (and its
wall time: a fill that waits -- a GIL released and taken back -- shows there), accept.

Runs in vLLM's virtual environment (it imports vLLM's backend classes)::

    PYTHONPATH=src ~/.cache/formcast/vllm-venv/bin/python benchmarks/vllm_fresh_work.py
    PYTHONPATH=src ... benchmarks/vllm_fresh_work.py --canonical 0   # the grammar's rows
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "engines"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--canonical", default="1", help="FORMCAST_VLLM_CANONICAL_FORCED")
    args = ap.parse_args()
    os.environ["FORMCAST_VLLM_CANONICAL_FORCED"] = args.canonical
    import numpy as np
    from _tiny_llama import TOKENIZER_LEN, VOCAB_SIZE, llama3_tokenizer_file
    from transformers import PreTrainedTokenizerFast
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from formcast.integrations.vllm import FormcastBackend
    from vllm_backends import schemas

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(llama3_tokenizer_file()), eos_token="<|eot_id|>"
    )
    backend = FormcastBackend(
        SimpleNamespace(speculative_config=None), tokenizer=tok, vocab_size=VOCAB_SIZE
    )
    backend.warm_up()
    bitmask = backend.allocate_token_bitmask(args.requests)
    rows = bitmask.numpy()
    stops = {int(tok.eos_token_id)}
    totals: list[float] = []
    for r in range(args.rounds):
        rng = random.Random(r)
        docs = schemas(r + 100)  # bounds no other round uses: every schema compiles
        t0 = time.thread_time()
        grammars = [
            backend.compile_grammar(
                StructuredOutputOptions.JSON, json.dumps(docs[i % len(docs)]), set(stops)
            )
            for i in range(args.requests)
        ]
        compile_s = time.thread_time() - t0
        fill_s = accept_s = fill_wall = 0.0
        live = list(range(args.requests))
        steps = 0
        while live and steps < args.max_tokens:
            steps += 1
            t0, w0 = time.thread_time(), time.perf_counter()
            for i in live:
                grammars[i].fill_bitmask(bitmask, i)
            fill_s += time.thread_time() - t0
            fill_wall += time.perf_counter() - w0
            picks = []
            for i in live:
                ids = np.flatnonzero(np.unpackbits(rows[i].view(np.uint8), bitorder="little"))
                picks.append(int(rng.choice(ids[ids < TOKENIZER_LEN].tolist())))
            t0 = time.thread_time()
            for i, t in zip(live, picks):
                assert grammars[i].accept_tokens("r", [t])
            live = [i for i in live if not grammars[i].is_terminated()]
            accept_s += time.thread_time() - t0
        total = compile_s + fill_s + accept_s
        if r:
            totals.append(total)
        print(
            f"round {r}{' (cold: the first compile)' if not r else ''}: compile "
            f"{1000 * compile_s:.0f} ms, fill {1000 * fill_s:.0f} ms (wall {1000 * fill_wall:.0f} "
            f"ms), accept "
            f"{1000 * accept_s:.0f} ms, total {1000 * total:.0f} ms, {steps} steps"
        )
    if totals:
        print(f"p50 total of rounds 1+: {1000 * statistics.median(totals):.0f} ms")


if __name__ == "__main__":
    main()
