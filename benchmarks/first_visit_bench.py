#!/usr/bin/env python3
"""First-visit mask times of formcast on the grammar_bench workloads (issue #17 item 4).

For each workload, in a fresh worker process (so no workload inherits another's process-wide
shared walks): setup and a throw-away compile as in ``benchmarks/grammar_bench.py``, then the
workload's compile with caching off and its first document with a fresh matcher.  Every
``fill_next_token_bitmask`` whose mask was computed (not a cache hit: the program's
``mask_computations`` grew) is a *first visit*; its CPU time (``time.thread_time``) is kept.
Prints, per workload, first visits / steps and the p10/p50/p90/p99/max/total of the first
visits, plus the time spent in the vocabulary walks (``TokenTrie.walk_pairs``, or the
compiled build's fused walk calls ``_trie_walk.classify`` / ``classify_from``).

Usage::

    python benchmarks/first_visit_bench.py                      # every workload
    python benchmarks/first_visit_bench.py --workloads c1_arith,c_lang --json out.json

A/B runs of two source trees: run it with ``PYTHONPATH=/tmp/old/src`` and without, interleaved.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _worker(workload: str) -> dict[str, Any]:
    from tokenizers import Tokenizer

    import grammar_bench as gb
    from formcast.vocab import trie as trie_mod

    wl = gb.make_workloads()[workload]
    tok = Tokenizer.from_file(gb.tokenizer_path())
    ids = tok.encode(wl.docs[0], add_special_tokens=False).ids
    ad = gb.FormcastAdapter(gb.tokenizer_path())
    ad.setup()
    ad.warmup()
    walk_cpu = [0.0]
    orig = trie_mod.TokenTrie.walk_pairs

    def timed(self: Any, table: Any, start: int) -> Any:
        c0 = time.thread_time()
        try:
            return orig(self, table, start)
        finally:
            walk_cpu[0] += time.thread_time() - c0

    trie_mod.TokenTrie.walk_pairs = timed  # type: ignore[method-assign]
    kernel = trie_mod._KERNEL  # the compiled build's fused walks (no walk_pairs there)
    for name in ("classify", "classify_from"):
        fn = getattr(kernel, name, None) if kernel is not None else None
        if fn is not None:

            def timed_c(*a: Any, _fn: Any = fn) -> Any:
                c0 = time.thread_time()
                try:
                    return _fn(*a)
                finally:
                    walk_cpu[0] += time.thread_time() - c0

            setattr(kernel, name, timed_c)
    compiled = ad.compile(wl)
    prog = compiled.program
    m = ad.matcher(compiled)
    mask = ad.alloc()
    first: list[float] = []
    walks: list[float] = []
    steps = 0
    gc.collect()
    gc.disable()
    try:
        for step in range(len(ids) + 1):
            before = prog.cache_info()["mask_computations"]
            w0 = walk_cpu[0]
            c0 = time.thread_time()
            ad.fill(m, mask)
            dt = time.thread_time() - c0
            steps += 1
            if prog.cache_info()["mask_computations"] > before:
                first.append(dt * 1e3)
                walks.append((walk_cpu[0] - w0) * 1e3)
            if step == len(ids):
                break
            if not ad.accept(m, ids[step]):
                raise RuntimeError(f"{workload}: token {ids[step]} rejected at step {step}")
    finally:
        gc.enable()
    return {"workload": workload, "steps": steps, "first_ms": first, "walk_ms": walks}


def _summary(r: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    a = np.asarray(r["first_ms"], dtype=np.float64)
    out: dict[str, Any] = {"workload": r["workload"], "first": int(a.size), "steps": r["steps"]}
    if a.size:
        for q in (10, 50, 90, 99):
            out[f"p{q}"] = float(np.percentile(a, q))
        out["max"] = float(a.max())
        out["total"] = float(a.sum())
        out["walk_total"] = float(sum(r["walk_ms"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="json,c1_arith,c_lang,json_gbnf")
    ap.add_argument("--json", default="")
    ap.add_argument("--_worker", default="")
    args = ap.parse_args()
    if args._worker:
        print(json.dumps(_worker(args._worker)))
        return
    rows = []
    print("| workload | first visits / steps | p10 | p50 | p90 | p99 | max | total | in walks |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w in args.workloads.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), "--_worker", w]
        got = subprocess.run(cmd, capture_output=True, text=True, check=True)
        r = json.loads(got.stdout.strip().splitlines()[-1])
        s = _summary(r)
        rows.append({**r, **s})
        if s["first"]:
            print(
                f"| {w} | {s['first']} / {s['steps']} | {s['p10']:.2f} ms | {s['p50']:.2f} ms "
                f"| {s['p90']:.2f} ms | {s['p99']:.2f} ms | {s['max']:.2f} ms "
                f"| {s['total']:.0f} ms | {s['walk_total']:.0f} ms |",
                flush=True,
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
