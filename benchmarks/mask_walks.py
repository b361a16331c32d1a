#!/usr/bin/env python3
"""formcast's mask times along MaskBench walks, first visits apart: one build against another.

``maskbench.py`` compares engines; this one compares two formcast builds (the pure-Python
package and the compiled copy of docs/native.md, run with ``PYTHONPATH``) on the distribution
that decides TBM p99: the masks of states seen for the first time.  In one process: per schema
of ``maskbench.py``'s sample, a fresh ``GrammarCompiler(cache_size=0)`` compiles it (process-
wide caches stay warm, as in ``maskbench.py``'s worker), then each instance is walked with a
fresh matcher, timing ``fill_next_token_bitmask`` (wall, ``perf_counter``; the thread's CPU
time with ``--cpu``) at every step plus the final one; a step is a first visit when the
grammar's cached mask count grew.  Compiles that fail are skipped, as are the schemas named by
``--skip``.

Usage (about a minute per 150 schemas; interleave runs of the two builds)::

    python benchmarks/mask_walks.py --sample 150 --seed 1
    python benchmarks/mask_walks.py --sample 150 --seed 1 --eager  # the eager token index
    PYTHONPATH=/tmp/formcast-native python benchmarks/mask_walks.py --sample 150 --seed 1
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # the MaskBench harness: data, sample, tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    ap.add_argument("--skip", default="", help="comma-separated substrings of file names")
    ap.add_argument(
        "--eager", action="store_true", help="the eager token index (cfg_program.LAZY_INDEX off)"
    )
    ap.add_argument(
        "--cpu",
        action="store_true",
        help="time each mask in CPU time of the thread (time.thread_time) rather than wall "
        "time: steadier on a shared, loaded machine (the masks run on this thread only)",
    )
    ap.add_argument(
        "--gc-off",
        action="store_true",
        help="collect, then disable the garbage collector during each schema's walks, as "
        "maskbench.py's worker does (a collection then never lands on one mask)",
    )
    ap.add_argument(
        "--warmup",
        action="store_true",
        help="compile a small schema and fill its first mask before the sample, as "
        "maskbench.py's worker does (process-wide one-time setup then lands on no mask)",
    )
    args = ap.parse_args()
    maskbench._single_thread_env()  # before numpy loads its BLAS
    import numpy as np
    from tokenizers import Tokenizer

    import formcast.index.cfg_program as cfg_program
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast._native import native_summary
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    cfg_program.LAZY_INDEX = not args.eager
    clock = time.thread_time if args.cpu else time.perf_counter

    files = maskbench.select_files(
        argparse.Namespace(
            data=args.data, files=None, full=False, sample=args.sample, seed=args.seed
        )
    )
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    if args.warmup:
        warm = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
            {"type": "object", "properties": {"a": {"type": "integer"}}}
        )
        GrammarMatcher(warm).fill_next_token_bitmask(mask, 0)
    skip = [s for s in args.skip.split(",") if s]
    times: list[float] = []
    first: list[bool] = []
    where: list[str] = []
    compiled = 0
    for path in files:
        if any(s in path.name for s in skip):
            continue
        task = maskbench.prepare(path, tok)
        try:
            grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(task["schema"])
        except FormcastError:
            continue
        compiled += 1
        if args.gc_off:
            gc.collect()
            gc.disable()
        for inst in task["instances"]:
            matcher = GrammarMatcher(grammar)
            for token in [*inst["ids"], None]:
                before = grammar.cache_info().get("masks_cached", 0)
                t0 = clock()
                matcher.fill_next_token_bitmask(mask, 0)
                times.append(clock() - t0)
                first.append(grammar.cache_info().get("masks_cached", 0) != before)
                where.append(path.name)
                if token is None or not matcher.accept_token(token):
                    break
        gc.enable()
    d = np.asarray(times) * 1e6
    fv = np.asarray(first)
    index = "eager" if args.eager else "lazy"
    print(f"formcast: {native_summary()}; {index} token index; {'CPU' if args.cpu else 'wall'}")
    print(f"{compiled} of {len(files)} schemas compiled; {d.size} masks, {int(fv.sum())} first")
    print("| masks | n | p50 | p90 | p99 | p99.9 | max | mean |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, sel in (("all", d), ("first visits", d[fv]), ("seen before", d[~fv])):
        q = np.percentile(sel, [50, 90, 99, 99.9]) if sel.size else [0.0] * 4
        print(
            f"| {name} | {sel.size} | {q[0]:,.1f} µs | {q[1]:,.1f} µs | {q[2]:,.1f} µs | "
            f"{q[3]:,.1f} µs | {sel.max() if sel.size else 0:,.1f} µs | {sel.mean():,.1f} µs |"
        )
    top = np.percentile(d, 99)
    slow = Counter(w for w, t in zip(where, d) if t >= top).most_common(8)
    print("schemas with the most masks at or past p99:", ", ".join(f"{w} ({n})" for w, n in slow))


if __name__ == "__main__":
    main()
