#!/usr/bin/env python3
"""In-process A/B of the parser's candidate-check loops (``cfg_program._NATIVE_CHECKS``,
json37: ``PushdownAutomaton.check_strings`` / ``check_suffixes``, compiled with the parser)
on grammar_bench's documents, cold and warm (issue #31).

Per workload and round, the two settings alternating (off, on, on, off, ...): a fresh compile
(``GrammarCompiler(cache_size=0)``, untimed), the first document walked with a fresh matcher
(cold), then the second (warm), each mask timed in thread CPU (gc off).  Reported per setting
and document: p99 / max / sum of the per-mask minimum over the rounds (the same masks in the
same order) and its five slowest steps; masks that differ between the settings are an error.
Run it on a compiled copy (the switch only changes time there)::

    PYTHONPATH=/tmp/fc-json37b python benchmarks/json37_checks_ab.py --rounds 6 json json_gbnf
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar_bench as gb


def _walk(
    ad: gb.FormcastAdapter, wl: gb.Workload, docs: list[list[int]]
) -> tuple[list[list[float]], str]:
    compiled = ad.compile(wl)
    h = hashlib.sha256()
    out: list[list[float]] = []
    for ids in docs[:2]:
        m = ad.matcher(compiled)
        mask = ad.alloc()
        times: list[float] = []
        gc.collect()
        gc.disable()
        try:
            for step in range(len(ids) + 1):
                c0 = time.thread_time_ns()
                ad.fill(m, mask)
                times.append((time.thread_time_ns() - c0) / 1e3)
                h.update(mask.tobytes())
                if step == len(ids):
                    break
                ad.accept(m, ids[step])
        finally:
            gc.enable()
        out.append(times)
    return out, h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("workloads", nargs="*", default=["json", "json_gbnf"])
    args = ap.parse_args()
    from tokenizers import Tokenizer

    import formcast.index.cfg_program as cp

    tok = Tokenizer.from_file(gb.tokenizer_path())
    ad = gb.FormcastAdapter(gb.tokenizer_path())
    ad.setup()
    ad.warmup()
    for name in args.workloads:
        wl = gb.make_workloads()[name]
        docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
        runs: dict[bool, list[list[list[float]]]] = {False: [], True: []}
        digests: set[str] = set()
        for r in range(args.rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                cp._NATIVE_CHECKS = on
                times, digest = _walk(ad, wl, docs)
                runs[on].append(times)
                digests.add(digest)
        cp._NATIVE_CHECKS = True
        if len(digests) != 1:
            print(f"{name}: MASKS DIFFER {digests}")
        for d, label in ((0, "cold"), (1, "warm")):
            for on in (False, True):
                best = np.min(np.asarray([t[d] for t in runs[on]]), axis=0)
                top = np.argsort(-best)[:5]
                print(
                    f"{name} {label} native {'on ' if on else 'off'}: per-mask min p99 "
                    f"{np.percentile(best, 99):.0f} us, max {best.max():.0f}, sum "
                    f"{best.sum():.0f}; top {[(int(k), round(float(best[k]))) for k in top]}"
                )


if __name__ == "__main__":
    main()
