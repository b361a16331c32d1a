#!/usr/bin/env python3
"""Per-step cold mask times of one grammar_bench workload on a fresh compile, with what each
step did to the lazy classifier's regions (grow40, issue #31).  Works on the compiled build:
it only reads the classifier's state between masks (no method is wrapped).

Per step: thread CPU of the mask (min over ``--runs`` fresh processes-worth of compiles in
this process), and the region events seen after it: ``new R<id>(<states>/<classes>)`` a
region made by a full search (``+overlap`` where it shares states with an earlier region: the
search that follows a failed grow), ``grow R<id>+<k>`` a region grown by ``k`` states.
Prints the top steps by time (the cold p99 of 178 masks: the 3rd slowest and 0.23 of the way
to the 2nd).  Several runs in one process share walks across compiles (the vocabulary's
SHARED_WALKS): for grammar_bench's numbers use ``--runs 1`` per process
(``benchmarks/grow40_ab.py`` alternates builds so)::

    PYTHONPATH=/tmp/fc-base40 python benchmarks/grow40_steps.py json_gbnf --runs 3 --top 8
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from tokenizers import Tokenizer

import grammar_bench as gb


def _regions(pos: Any) -> list[tuple[int, int, int, frozenset[int]]]:
    """(start, states, classes, state set) per region of a lazy classifier (empty else)."""
    regions = getattr(pos, "_regions", None)
    if regions is None:
        return []
    return [(int(r[0]), int(r[1].size), int(r[6].size), frozenset(r[1].tolist())) for r in regions]


def _events(before: list[Any], after: list[Any]) -> list[str]:
    out = []
    for i, r in enumerate(after):
        if i >= len(before):
            overlap = any(len(r[3] & b[3]) > 1 for b in after[:i])
            out.append(f"new R{i}({r[1]}/{r[2]}){'+overlap' if overlap else ''}")
        elif r[1] != before[i][1]:
            out.append(f"grow R{i}+{r[1] - before[i][1]}({r[1]}/{r[2]})")
    return out


def run_once(wl: Any, doc: list[int], ad: Any) -> tuple[list[float], list[list[str]]]:
    gc.collect()
    comp = ad.compile(wl)
    m = ad.matcher(comp)
    pos = comp.program._positions
    mask = ad.alloc()
    times: list[float] = []
    events: list[list[str]] = []
    gc.collect()
    gc.disable()
    try:
        for step in range(len(doc) + 1):
            before = _regions(pos)
            t0 = time.thread_time_ns()
            ad.fill(m, mask)
            times.append((time.thread_time_ns() - t0) / 1e3)
            events.append(_events(before, _regions(pos)))
            if step == len(doc):
                break
            ad.accept(m, doc[step])
    finally:
        gc.enable()
    return times, events


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--json", action="store_true", help="print the per-step times as JSON")
    a = ap.parse_args()
    wl = gb.make_workloads()[a.workload]
    tp = gb.tokenizer_path()
    doc = Tokenizer.from_file(tp).encode(wl.docs[0], add_special_tokens=False).ids
    ad = gb.FormcastAdapter(tp)
    ad.setup()
    ad.warmup()
    best: np.ndarray | None = None
    events: list[list[str]] = []
    for _ in range(a.runs):
        t, events = run_once(wl, doc, ad)
        arr = np.asarray(t)
        best = arr if best is None else np.minimum(best, arr)
    assert best is not None
    if a.json:
        print(json.dumps({"us": best.tolist(), "events": [" ".join(e) for e in events]}))
        return
    print(
        f"{a.workload}: {best.size} masks, p99 {np.percentile(best, 99):.0f} us, "
        f"sum {best.sum():.0f} us, max {best.max():.0f} us"
    )
    for s in np.argsort(-best)[: a.top].tolist():
        print(f"  step {s:4d} {best[s]:8.0f} us  {' '.join(events[s])}")


if __name__ == "__main__":
    main()
