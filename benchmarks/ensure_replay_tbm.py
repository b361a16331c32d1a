#!/usr/bin/env python3
"""MaskBench's ``LazyExpandedLexer.ensure`` calls, replayed on fresh lexers (ensure36, #31).

Per schema of ``maskbench.select_files`` (``--sample N --seed S``): compile (fresh
``GrammarCompiler(cache_size=0)``), fill the first mask and every instance's masks (as
tbm_parts.py does, in one process) with ``ensure`` recorded (per lexer, its calls in order);
then replay each lexer's calls ``--reps`` times on a fresh ``LazyExpandedLexer(auto, cap)``
(construction untimed), each call timed in thread CPU, keeping per call its least time over
the reps.  Prints the sum, the calls by rows built (1 / 2-7 / 8+ / none) with their sums and
medians, and the SHA-256 over every lexer's state after the replay (equal across builds = the
same rows, state numbering and unions).  Works on the compiled build (the lexer class is an
ordinary Python class whose methods are compiled).

    PYTHONPATH=DIR python benchmarks/ensure_replay_tbm.py --sample 100 --seed 3 [--reps 3]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench
from stops39_replay import _digest, _record


def _wrap(cls: Any, name: str, acc: dict[str, list[float]]) -> None:
    real = getattr(cls, name)
    slot = acc.setdefault(name, [0.0, 0.0])

    def wrapped(*a: Any) -> Any:
        t = time.thread_time_ns()
        try:
            return real(*a)
        finally:
            slot[0] += (time.thread_time_ns() - t) / 1e3
            slot[1] += 1

    setattr(cls, name, wrapped)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--files", default="")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="cProfile (thread CPU) the replays")
    ap.add_argument(
        "--parts",
        action="store_true",
        help="time the lexer's build methods (inclusive thread CPU) during the replays",
    )
    args = ap.parse_args()
    maskbench._single_thread_env()
    import numpy as np

    from formcast.automata.lexer import LazyExpandedLexer

    lexers = _record(args)  # (stops39_replay.py's recorder: every ensure, per lexer)
    clock = time.thread_time_ns
    per: list[tuple[int, float]] = []  # (rows built, least us)
    digests: list[str] = []
    parts: dict[str, list[float]] = {}
    if args.parts:
        from patch_guard import require_patchable

        # ensure's own calls of these go through the native class's vtable where the lexer is
        # compiled: the wrappers would time nothing
        require_patchable(
            "ensure_replay_tbm.py", "--parts (wraps lexer methods)", "formcast.automata.lexer"
        )
        for name in ("_build", "_union_rows_small", "_union_rows", "_chain", "_plain_rows"):
            _wrap(LazyExpandedLexer, name, parts)
    prof = cProfile.Profile(time.thread_time) if args.profile else None
    if prof is not None:
        prof.enable()
    for auto, cap, calls in lexers:
        best = [float("inf")] * len(calls)
        built_n = [0] * len(calls)
        dig = ""
        for _ in range(args.reps):
            lex = LazyExpandedLexer(auto, cap)
            for i, states in enumerate(calls):
                b0 = int(np.count_nonzero(lex.built))
                t = clock()
                lex.ensure(states)
                dt = (clock() - t) / 1e3
                if dt < best[i]:
                    best[i] = dt
                built_n[i] = int(np.count_nonzero(lex.built)) - b0
            dig = _digest(lex)
        digests.append(dig)
        per.extend(zip(built_n, best, strict=True))
    if prof is not None:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    total = sum(t for _, t in per)
    print(f"lexers {len(lexers)} calls {len(per)} sum {total / 1e3:.2f} ms")
    for name, lo, hi in (("none", 0, 1), ("1", 1, 2), ("2-7", 2, 8), ("8+", 8, 1 << 30)):
        ts = [t for n, t in per if lo <= n < hi]
        if ts:
            print(
                f"  built {name:5s} n={len(ts):5d} sum {sum(ts) / 1e3:8.2f} ms "
                f"p50 {statistics.median(ts):7.1f} us"
            )
    for name, (us, n) in sorted(parts.items(), key=lambda kv: -kv[1][0]):
        print(f"  {name:18s} calls {int(n):5d} sum {us / 1e3:8.2f} ms (over all reps)")
    print("digest " + hashlib.sha256("".join(digests).encode()).hexdigest())


if __name__ == "__main__":
    main()
