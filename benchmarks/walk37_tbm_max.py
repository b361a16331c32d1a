#!/usr/bin/env python3
"""The slowest masks of one MaskBench schema after a worker's history, with their page faults.

Runs the schemas of ``--files`` (comma-separated file names, or ``@path`` of a file holding
them: e.g. ``/tmp/o50679_prefix.txt``, the 114 seed-1 schemas up to o50679) in one process as
a MaskBench formcast worker runs them (``maskbench._run_task``'s steps: compile, first mask,
then every instance walked with a fresh matcher, gc off), and for the schema ``--target``
(the last one by default) prints its ``--top`` slowest masks (wall) with their thread CPU,
system time and minor page faults (``getrusage(RUSAGE_THREAD)`` around each mask).
``--neighbour S``: a second process allocates and frees 64 MB numpy arrays for S seconds
beside it (fresh pages all along: the "another run beside it" of docs/benchmarks.md's seed-1
TBM max, where numpy's huge-page advice for arrays >= 4 MiB made o50679's 15th mask 31-34 ms).

Usage (A/B: alternate the builds)::

    PYTHONPATH=/tmp/fc-main python benchmarks/walk37_tbm_max.py \\
        --files @/tmp/o50679_prefix.txt --neighbour 600
"""

from __future__ import annotations

import argparse
import gc
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench

_NEIGHBOUR = """
import sys, time
import numpy as np
end = time.time() + float(sys.argv[1])
while time.time() < end:
    a = np.ones(8 << 20)
    del a
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", required=True)
    ap.add_argument("--target", default="")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--neighbour", type=float, default=0.0)
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    args = ap.parse_args()
    spec = args.files
    if spec.startswith("@"):
        spec = Path(spec[1:]).read_text()
    names = [n.strip() for n in spec.split(",") if n.strip()]
    target = args.target or names[-1]
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    ad: Any = maskbench.ADAPTERS["formcast"]()
    ad.setup()
    ad.warmup()
    neighbour = None
    if args.neighbour > 0:
        neighbour = subprocess.Popen([sys.executable, "-c", _NEIGHBOUR, str(args.neighbour)])
    data = Path(args.data)
    try:
        for name in names:
            task = maskbench.prepare(data / name, tok)
            gc.collect()
            try:
                compiled = ad.compile(task["schema"])
                m = ad.matcher(compiled)
                mask = ad.alloc()
                ad.fill(m, mask)
            except Exception:
                continue
            hit = target in name
            rows: list[tuple[float, float, float, int, int, int]] = []
            gc.collect()
            gc.disable()
            try:
                for i, inst in enumerate(task["instances"]):
                    m = ad.matcher(compiled)
                    view = ad.view(mask)
                    ids = inst["ids"]
                    for step in range(len(ids) + 1):
                        r0 = resource.getrusage(resource.RUSAGE_THREAD)
                        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                        ad.fill(m, mask)
                        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
                        r1 = resource.getrusage(resource.RUSAGE_THREAD)
                        if hit:
                            rows.append(
                                (
                                    (w1 - w0) / 1e6,
                                    (c1 - c0) / 1e6,
                                    (r1.ru_stime - r0.ru_stime) * 1e3,
                                    r1.ru_minflt - r0.ru_minflt,
                                    i,
                                    step,
                                )
                            )
                        if step == len(ids):
                            break
                        t = ids[step]
                        if not maskbench.allowed(view, t) or not ad.accept(m, t):
                            break
            finally:
                gc.enable()
            if hit:
                rows.sort(reverse=True)
                for wall, cpu, sys_ms, flt, i, step in rows[: args.top]:
                    print(
                        f"{name[:40]:40s} inst {i} step {step:3d}: wall {wall:6.2f} ms "
                        f"cpu {cpu:6.2f} sys {sys_ms:5.2f} minflt {flt}",
                        flush=True,
                    )
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()


if __name__ == "__main__":
    main()
