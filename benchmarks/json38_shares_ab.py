#!/usr/bin/env python3
"""In-process A/B of a candidate set's share measurement (json38): ``pda.measure_shares`` (compiled
in the compiled build) against the interpreted loop ``cfg_program._verify_strings`` ran before
(``_py_measure_shares`` here), on grammar_bench's masks (issue #31); a copy of
grammar_warm_ab.py (verdict36's) with that switch, printing the cold document's masks too.

Per workload and round, the two settings alternating (off, on, on, off, ...): a fresh compile
(``GrammarCompiler(cache_size=0)``, untimed), the first document walked (cold, untimed), then
the second document walked with a fresh matcher, each mask timed in thread CPU (gc off) --
grammar_bench's warm run.  Reported per setting: the warm p99 / max / sum of the per-mask
minimum over the rounds (the same masks in the same order), and the per-round p99s; masks
that differ between the settings are an error.  Usage::

    PYTHONPATH=/tmp/fc-json38 python benchmarks/json38_shares_ab.py --rounds 4 json json_gbnf
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


def _py_measure_shares(data_of: list[bytes], shared: list[int]) -> list[bytes]:
    """The loop of ``_verify_strings`` before json38 (interpreted: this module is not compiled)."""
    for j in range(1, len(data_of)):
        if shared[j] < 0:
            data, prev = data_of[j], data_of[j - 1]
            limit = min(len(data), len(prev))
            k = 0
            while k < limit and data[k] == prev[k]:
                k += 1
            shared[j] = k
    if data_of:
        shared[0] = 0
    return [d[k:] if k else d for d, k in zip(data_of, shared)]


def _warm(
    ad: gb.FormcastAdapter, wl: gb.Workload, docs: list[list[int]]
) -> tuple[list[float], str]:
    compiled = ad.compile(wl)
    times: list[float] = []
    h = hashlib.sha256()
    for _label, ids in (("cold", docs[0]), ("warm", docs[1])):
        m = ad.matcher(compiled)
        mask = ad.alloc()
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
    return times, h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("workloads", nargs="*", default=["json", "json_gbnf"])
    args = ap.parse_args()
    from tokenizers import Tokenizer

    import formcast.index.cfg_program as cp

    native = cp.measure_shares

    tok = Tokenizer.from_file(gb.tokenizer_path())
    ad = gb.FormcastAdapter(gb.tokenizer_path())
    ad.setup()
    ad.warmup()
    for name in args.workloads:
        wl = gb.make_workloads()[name]
        docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
        runs: dict[bool, list[list[float]]] = {False: [], True: []}
        digests: dict[bool, set[str]] = {False: set(), True: set()}
        for r in range(args.rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                cp.measure_shares = native if on else _py_measure_shares
                times, digest = _warm(ad, wl, docs)
                runs[on].append(times)
                digests[on].add(digest)
        cp.measure_shares = native
        if len(digests[False] | digests[True]) != 1:
            print(f"{name}: MASKS DIFFER {digests}")
        n_cold = len(docs[0]) + 1
        for on in (False, True):
            best_all = np.min(np.asarray(runs[on]), axis=0)
            for doc, best in (("cold", best_all[:n_cold]), ("warm", best_all[n_cold:])):
                print(
                    f"{name} {doc} shares {'pda' if on else 'py '}: per-mask min p99 "
                    f"{np.percentile(best, 99):.1f} us, max {best.max():.1f}, "
                    f"sum {best.sum():.0f}"
                )


if __name__ == "__main__":
    main()
