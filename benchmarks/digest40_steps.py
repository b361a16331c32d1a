#!/usr/bin/env python3
"""Per-step warm mask times of grammar_bench's json / json_gbnf, with what each slow step did
(digest40, issue #31 grammar warm p99).

Per round: a fresh compile, the first (cold) document walked, then the second (warm) one
with a fresh matcher, every ``fill_next_token_bitmask`` timed in thread CPU (gc off), as
grammar_bench's warm run.  Per warm step it records, from the position classifier's state
before and after (readable on the compiled build: no hooks), the regions made
(``regions+``: a region search), the walk keys added (``keys+``: walks done, region keys or
lone starts), the digest classes whose successors were filled (``succ+``), the classes found
past the digest bound (``past+``: None digests), and whether a mask was computed.  Where
``cfg_program`` runs interpreted (its .so deleted), ``_quotient_digest`` and
``_reachable_classes`` are wrapped too: per step, the digests computed (``dig``: classes of
the region, levels reached, classes ordered, None or not, us).

Prints per workload the warm per-step minimum over the rounds: p99, sum and the slowest
steps with their records (records of the last round).  Usage::

    PYTHONPATH=/tmp/fc-digest40 python benchmarks/digest40_steps.py json,json_gbnf 3
    PYTHONPATH=/tmp/fc-digest40x python benchmarks/digest40_steps.py json 1 --profile=1,8
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar_bench as gb


def _state(clf: Any) -> tuple[int, int, int, int]:
    """(regions, walk keys, filled successor lists, past classes) of a lazy classifier."""
    if not hasattr(clf, "_regions"):
        return (0, 0, 0, 0)
    succ = clf._succ or {}
    past = clf._past or {}
    return (
        len(clf._regions),
        len(clf._by_class),
        sum(len(v) for v in succ.values()),
        sum(len(v) for v in past.values()),
    )


class _Hooks:
    """Wraps the digest functions where cfg_program is interpreted (else records nothing)."""

    def __init__(self) -> None:
        import formcast.index.cfg_program as cp

        self.cp = cp
        self.on = cp.__file__.endswith(".py")
        self.now: list[str] = []
        self.levels = 0
        if not self.on:
            return
        qd0, rc0 = cp._quotient_digest, cp._reachable_classes
        self.orig = qd0, rc0

        def qd(*a: Any, **k: Any) -> Any:
            self.levels = 0
            t0 = time.thread_time_ns()
            r = qd0(*a, **k)
            us = (time.thread_time_ns() - t0) / 1e3
            n = a[7].size
            self.now.append(
                f"dig(cls={n} lv={self.levels} -> {'None' if r is None else 'hash'} {us:.0f}us)"
            )
            return r

        def rc(*a: Any, **k: Any) -> Any:
            r = rc0(*a, **k)
            self.levels = -1 if r is None else int(r.size)
            return r

        cp._quotient_digest, cp._reachable_classes = qd, rc

    def remove(self) -> None:
        if self.on:
            self.cp._quotient_digest, self.cp._reachable_classes = self.orig


def _walk(
    ad: Any, comp: Any, ids: list[int], hooks: _Hooks, prof: set[int] | None = None
) -> list[tuple[float, str]]:
    prog = comp.program
    clf = prog._positions
    m = ad.matcher(comp)
    mask = ad.alloc()
    out: list[tuple[float, str]] = []
    gc.collect()
    gc.disable()
    try:
        for step in range(len(ids) + 1):
            hooks.now = []
            s0 = _state(clf)
            mc = prog.mask_computations
            pr = None
            if prof is not None and step in prof:
                pr = cProfile.Profile(time.thread_time_ns, 1e-9)
                pr.enable()
            c0 = time.thread_time_ns()
            ad.fill(m, mask)
            us = (time.thread_time_ns() - c0) / 1e3
            if pr is not None:
                pr.disable()
                print(f"--- profile of warm step {step} ({us:.0f} us): calls, tot us, cum us")
                st: Any = pstats.Stats(pr).stats
                rows = sorted(st.items(), key=lambda kv: -kv[1][3])[:18]
                for (fn, line, func), (_, nc, tt, ct, _) in rows:
                    where = f"{os.path.basename(fn)}:{line}" if line else ""
                    print(f"  {nc:5d} {tt * 1e6:8.0f} {ct * 1e6:8.0f}  {where} {func}")
            s1 = _state(clf)
            d = [b - a for a, b in zip(s0, s1)]
            what = (
                f"mask={prog.mask_computations - mc} regions+{d[0]} keys+{d[1]} "
                f"succ+{d[2]} past+{d[3]} {' '.join(hooks.now)}"
            )
            out.append((us, what))
            if step == len(ids):
                break
            ad.accept(m, ids[step])
    finally:
        gc.enable()
    return out


def main() -> None:
    from tokenizers import Tokenizer

    names, rounds = sys.argv[1].split(","), int(sys.argv[2])
    # --profile=1,8: a cProfile of these warm steps of the last round (interpreted: useful)
    prof = {int(x) for a in sys.argv[3:] if a.startswith("--profile=") for x in a[10:].split(",")}
    tok = Tokenizer.from_file(gb.tokenizer_path())
    ad = gb.FormcastAdapter(gb.tokenizer_path())
    ad.setup()
    ad.warmup()
    hooks = _Hooks()
    wls = gb.make_workloads()
    try:
        for name in names:
            wl = wls[name]
            docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
            warm: list[list[tuple[float, str]]] = []
            for r in range(rounds):
                comp = ad.compile(wl)
                _walk(ad, comp, docs[0], hooks)
                last = prof if prof and r == rounds - 1 else None
                warm.append(_walk(ad, comp, docs[1], hooks, last))
            best = np.min(np.asarray([[t for t, _ in w] for w in warm]), axis=0)
            top = np.argsort(best)[::-1][:8].tolist()
            print(
                f"{name} warm ({len(best)} masks, {rounds} rounds, cfg_program "
                f"{'interpreted' if hooks.on else 'compiled'}): per-step min p99 "
                f"{np.percentile(best, 99):.0f} us, sum {best.sum():.0f}"
            )
            for i in top:
                print(f"  step {i:4d} {best[i]:7.0f} us  {warm[-1][i][1]}")
    finally:
        hooks.remove()


if __name__ == "__main__":
    main()
