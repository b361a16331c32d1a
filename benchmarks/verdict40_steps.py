#!/usr/bin/env python3
"""Per-step mask times of a few MaskBench schemas (#31 TBM max: verdict40).

Each schema of ``--files`` (comma-separated names, or ``--find N`` to list the masks over
``--over`` ms of ``maskbench.select_files(--sample, --seed)``) is compiled cold ``--reps``
times (a fresh ``GrammarCompiler`` each, as a MaskBench worker does), and every instance is
walked with a fresh matcher, as ``maskbench._run_task`` walks them (gc off); per (instance,
step) the minimum thread CPU over the reps is printed for the steps over ``--over`` ms (or
``--steps``: those of instance 0).  Usage::

    PYTHONPATH=/tmp/fc-base40 python benchmarks/verdict40_steps.py \\
        --files Github_medium---o82853.json --steps 20-30
    PYTHONPATH=/tmp/fc-base40 python benchmarks/verdict40_steps.py --find 100 --seed 2
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench


def _times(ad: Any, compiled: Any, instances: list[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """Thread CPU ms per (instance, step) of one compile's walks (maskbench's _walk)."""
    out: dict[tuple[int, int], float] = {}
    m = ad.matcher(compiled)
    mask = ad.alloc()
    ad.fill(m, mask)
    gc.collect()
    gc.disable()
    try:
        for i, inst in enumerate(instances):
            m = ad.matcher(compiled)
            view = ad.view(mask)
            ids = inst["ids"]
            for step in range(len(ids) + 1):
                c0 = time.thread_time_ns()
                ad.fill(m, mask)
                out[(i, step)] = (time.thread_time_ns() - c0) / 1e6
                if step == len(ids):
                    break
                t = ids[step]
                if not maskbench.allowed(view, t) or not ad.accept(m, t):
                    break
    finally:
        gc.enable()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="")
    ap.add_argument("--find", type=int, default=0, help="scan a --sample N --seed S subset")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--over", type=float, default=1.0)
    ap.add_argument("--steps", default="", help="instance 0's steps A-B (else: those over)")
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    ap.add_argument("--json", default="", help="write every step's minimum (ms) here")
    args = ap.parse_args()
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    ad: Any = maskbench.ADAPTERS["formcast"]()
    ad.setup()
    ad.warmup()
    if args.find:
        ns = argparse.Namespace(data=args.data, files="", full=False, sample=args.find,
                                seed=args.seed)  # fmt: skip
        paths = maskbench.select_files(ns)
    else:
        paths = [Path(args.data) / n.strip() for n in args.files.split(",") if n.strip()]
    lo, hi = (int(x) for x in args.steps.split("-")) if args.steps else (-1, -1)
    total = 0.0
    every: dict[str, list[float]] = {}
    for path in paths:
        task = maskbench.prepare(path, tok)
        best: dict[tuple[int, int], float] = {}
        try:
            for _ in range(args.reps):
                gc.collect()
                compiled = ad.compile(task["schema"])
                for k, v in _times(ad, compiled, task["instances"]).items():
                    best[k] = min(v, best.get(k, v))
        except Exception as e:  # a compile error: not a mask
            print(f"{path.name[:44]:44s} skipped: {type(e).__name__}", flush=True)
            continue
        total += sum(best.values())
        every[path.name] = [best[k] for k in sorted(best)]
        for (i, step), ms in sorted(best.items()):
            if (lo <= step <= hi and i == 0) if lo >= 0 else ms > args.over:
                print(f"{path.name[:44]:44s} inst {i} step {step:3d}: {ms:6.3f} ms", flush=True)
    print(f"total (sum of per-step minima) {total:.1f} ms", flush=True)
    if every:
        import numpy as np

        a = np.concatenate([np.asarray(v) for v in every.values()])
        print(
            f"{a.size} masks: mean {a.mean() * 1e3:.1f} us, p99 {np.percentile(a, 99) * 1e3:.1f}"
            f" us, max {a.max() * 1e3:.1f} us",
            flush=True,
        )
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(every))


if __name__ == "__main__":
    main()
