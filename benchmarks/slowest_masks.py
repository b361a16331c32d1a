#!/usr/bin/env python3
"""The slowest single mask (thread CPU) of named MaskBench schemas, and a digest of every mask.

Per schema (a substring of a MaskBench file name, e.g. ``o19353`` or ``database.beef-5``): a
fresh ``GrammarCompiler(cache_size=0)`` compiles it, every instance is walked with a fresh
matcher, each mask after the first (TBM, as maskbench_cpu.py) timed in thread CPU; prints the
slowest mask (ms, instance, step) and a sha256 of every mask's bytes (base vs yours: equal).
``--profile``: the schema is compiled again and its slowest mask replayed under cProfile.
Schemas run in one process in the order given, after a warm-up compile (process-wide caches
warm as in maskbench's workers).

Usage::

    PYTHONPATH=/tmp/fc-main python benchmarks/slowest_masks.py o19353 database.beef-5
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    args = ap.parse_args()
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.vocab.loaders import load_vocabulary

    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    warm = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
        {"type": "object", "properties": {"a": {"type": "integer"}}}
    )
    GrammarMatcher(warm).fill_next_token_bitmask(mask, 0)
    files = sorted(Path(args.data).glob("*.json"))
    total = hashlib.sha256()
    clock = time.thread_time_ns
    for name in args.names:
        hits = [p for p in files if p.name.split("---")[-1].startswith(name + ".")] or [
            p for p in files if name in p.name
        ]
        path = hits[0]
        task = maskbench.prepare(path, tok)
        h = hashlib.sha256()
        t0 = clock()
        grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(task["schema"])
        worst = (0.0, -1, -1)
        gc.collect()
        gc.disable()  # (as maskbench's walks)
        first = True
        tbm_sum, tbm_n = 0.0, 0
        for i, inst in enumerate(task["instances"]):
            m = GrammarMatcher(grammar)
            for step, token in enumerate([*inst["ids"], None]):
                t = clock()
                m.fill_next_token_bitmask(mask, 0)
                dt = (clock() - t) / 1e6
                if first:
                    ttfm = (clock() - t0) / 1e6
                    first = False
                else:
                    tbm_sum += dt
                    tbm_n += 1
                    if dt > worst[0]:
                        worst = (dt, i, step)
                h.update(mask.tobytes())
                if token is None or not m.accept_token(token):
                    break
        gc.enable()
        total.update(h.digest())
        print(
            f"{path.name.split('---')[-1][:28]:28s} max {worst[0]:7.2f} ms (inst {worst[1]} "
            f"step {worst[2]}) ttfm {ttfm:7.2f} tbm {tbm_sum / max(tbm_n, 1):6.3f} x{tbm_n} "
            f"digest {h.hexdigest()[:12]}",
            flush=True,
        )
        if args.profile and worst[1] >= 0:
            grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(task["schema"])
            for i, inst in enumerate(task["instances"][: worst[1] + 1]):
                m = GrammarMatcher(grammar)
                for step, token in enumerate([*inst["ids"], None]):
                    if (i, step) == worst[1:]:
                        prof = cProfile.Profile(time.thread_time)
                        prof.enable()
                        m.fill_next_token_bitmask(mask, 0)
                        prof.disable()
                        pstats.Stats(prof).sort_stats("cumulative").print_stats(22)
                        break
                    m.fill_next_token_bitmask(mask, 0)
                    if token is None or not m.accept_token(token):
                        break
    print(f"all: {total.hexdigest()}")


if __name__ == "__main__":
    main()
