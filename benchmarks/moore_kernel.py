#!/usr/bin/env python3
"""The compiled Moore refinement (``formcast.automata._moore``) against the numpy one.

Times ``equivalence_classes(table, labels, depth)`` per call on real inputs, with the C kernel
and with the numpy path (the kernel switched off), in one process, best of ``--repeat`` runs
each, and checks on every input that both give the same partition (numbers included), the same
``stable`` and the same fuel.  The inputs are those the token index refines while compiling
JSON schemas: a seeded sample of MaskBench schemas (``../shared/data/JSONSchemaBench/maskbench``)
compiled on Llama-3 (the calls recorded as they happen), or a pickle of ``(table, labels,
depth)`` triples (``--cases``; ``--save`` writes the sample's).

Usage (the kernel exists in the compiled copy only: build it with scripts/build_native.sh)::

    bash scripts/build_native.sh /tmp/native
    PYTHONPATH=/tmp/native python benchmarks/moore_kernel.py --schemas 120
    PYTHONPATH=/tmp/native python benchmarks/moore_kernel.py --cases cases.pkl

Without the kernel (the pure-Python package) only the numpy path is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MASKBENCH = os.path.join(HERE, "..", "..", "shared", "data", "JSONSchemaBench", "maskbench", "data")

Case = tuple[np.ndarray, np.ndarray, int]


def capture(n_schemas: int, seed: int) -> list[Case]:
    """The inputs of every ``equivalence_classes`` call of the token index while compiling a
    seeded sample of ``n_schemas`` MaskBench schemas on Llama-3 (failed compiles skipped)."""
    from formcast import GrammarCompiler
    from formcast.index import cfg_program
    from formcast.vocab.loaders import load_vocabulary

    names = sorted(f for f in os.listdir(MASKBENCH) if f.endswith(".json"))
    random.Random(seed).shuffle(names)
    cases: list[Case] = []
    real = cfg_program.equivalence_classes

    def record(table: np.ndarray, labels: np.ndarray, depth: int, **kw: Any) -> Any:
        cases.append((table.copy(), labels.copy(), depth))
        return real(table, labels, depth, **kw)

    cfg_program.equivalence_classes = record  # type: ignore[assignment]
    try:
        compiler = GrammarCompiler(load_vocabulary("llama3"), cache_dir=False, cache_size=0)
        for name in names[:n_schemas]:
            with open(os.path.join(MASKBENCH, name), encoding="utf-8") as fh:
                schema = json.load(fh)["schema"]
            try:
                compiler.compile_json_schema(schema)
            except Exception as exc:  # a schema formcast rejects: not an input here
                print(f"  {name}: {type(exc).__name__}", file=sys.stderr)
    finally:
        cfg_program.equivalence_classes = real  # type: ignore[assignment]
    return cases


def _timed(case: Case, kernel: Any, repeat: int) -> tuple[float, np.ndarray, bool]:
    import formcast.automata.equivalence as eq

    saved = eq._KERNEL
    eq._KERNEL = kernel
    try:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            part, stable = eq.equivalence_classes(*case)
            best = min(best, time.perf_counter() - t0)
    finally:
        eq._KERNEL = saved
    return best, part, stable


def _fuel(case: Case, kernel: Any) -> int:
    import formcast.automata.equivalence as eq
    from formcast.limits import WorkBudget

    saved = eq._KERNEL
    eq._KERNEL = kernel
    try:
        work = WorkBudget(10**12)
        eq.equivalence_classes(*case, work=work)
    finally:
        eq._KERNEL = saved
    return work.used


def _stats(ms: np.ndarray) -> str:
    return (
        f"median {np.median(ms):8.3f}  p90 {np.percentile(ms, 90):8.3f}  "
        f"max {ms.max():8.3f}  sum {ms.sum():9.1f}  (ms per call)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", help="a pickle of (table, labels, depth) triples")
    ap.add_argument("--schemas", type=int, default=120, help="MaskBench schemas to compile")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", help="write the captured inputs to this pickle")
    ap.add_argument("--repeat", type=int, default=3, help="runs per call (the best is kept)")
    args = ap.parse_args()

    import formcast.automata.equivalence as eq
    from formcast._native import native_summary

    if args.cases:
        with open(args.cases, "rb") as fh:
            cases: list[Case] = pickle.load(fh)
    else:
        cases = capture(args.schemas, args.seed)
        if args.save:
            with open(args.save, "wb") as fh:
                pickle.dump(cases, fh)
    print(
        f"{native_summary()}\n{len(cases)} inputs (states: median "
        f"{int(np.median([c[0].shape[0] for c in cases]))}, "
        f"max {max(c[0].shape[0] for c in cases)})"
    )
    kernel = eq._KERNEL
    ref_ms, nat_ms, mismatches = [], [], 0
    for case in cases:
        t_ref, ref_part, ref_stable = _timed(case, None, args.repeat)
        ref_ms.append(t_ref * 1e3)
        if kernel is None:
            continue
        t_nat, part, stable = _timed(case, kernel, args.repeat)
        nat_ms.append(t_nat * 1e3)
        if (
            part.tolist() != ref_part.tolist()
            or stable != ref_stable
            or _fuel(case, kernel) != _fuel(case, None)
        ):
            mismatches += 1
    ref = np.array(ref_ms)
    print(f"numpy   {_stats(ref)}")
    if kernel is None:
        print("no kernel (the pure-Python package): build the compiled copy to compare")
        return
    nat = np.array(nat_ms)
    print(f"kernel  {_stats(nat)}")
    ratio = ref / nat
    print(
        f"speedup per call: median {np.median(ratio):.1f}x  p10 {np.percentile(ratio, 10):.1f}x  "
        f"min {ratio.min():.1f}x;  of the sums {ref.sum() / nat.sum():.1f}x"
    )
    print(f"identical partitions, stability and fuel: {len(cases) - mismatches}/{len(cases)}")
    if mismatches:
        sys.exit(1)


if __name__ == "__main__":
    main()
