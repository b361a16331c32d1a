"""Rule automata of MaskBench schemas: a sha256 over all of them, and their cold build time.

Per schema of a MaskBench sample (as ``benchmarks/rule_phase_ttfm.py`` picks them): the JSON
Schema front-end's grammar (``schema_to_grammar``), then ``compile_grammar_automaton`` with the
JSON hints (the rule phase of a compile).  ``--hash`` prints one sha256 over every automaton
(names, counts, and per rule: start, ref_rules, table, accepting, ref_table, refs, boundary,
tail) and one per schema with ``--verbose``: two builds that print the same digest built the
same automata.  Without it, each schema's rule phase is timed with the process-wide rule and
sub-automaton caches emptied first (thread CPU, gc off during the call), best of ``--reps``,
and written to ``--json`` (schema -> ms) for paired comparisons::

    PYTHONPATH=DIR python benchmarks/rule_automata_hash.py --sample 150 --seed 5 --hash
    PYTHONPATH=DIR python benchmarks/rule_automata_hash.py --sample 150 --seed 5 --reps 5 \
        --json a.json
    python benchmarks/rule_automata_hash.py --compare a.json b.json   # paired median ratio b/a

``--profile N``: run every schema's cold rule phase N times (for perf / cProfile).

``--ab DIR_A DIR_B``: the two builds timed side by side, one worker process each (``--serve``)
fed the same schema in turn (A, B, B, A, ... per round), so that the machine's drift falls on
both alike; per schema the best of ``--reps`` per round and of ``--rounds`` rounds; prints the
paired median ratio B/A and both p50s::

    python benchmarks/rule_automata_hash.py --ab /tmp/fc-main /tmp/fc-branch --reps 3 --rounds 3
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from lowering_ttfm import DATA


def _digest(auto: Any) -> str:
    import numpy as np

    h = hashlib.sha256()
    h.update(repr((auto.names, auto.counts)).encode())
    for r, dfa in enumerate(auto.dfas):
        h.update(repr((dfa.start, dfa.ref_rules, dfa.table.shape)).encode())
        h.update(np.ascontiguousarray(dfa.table, dtype=np.int32).tobytes())
        h.update(np.ascontiguousarray(dfa.accepting, dtype=bool).tobytes())
        if dfa.ref_table is not None:
            h.update(repr(dfa.ref_table.shape).encode())
            h.update(np.ascontiguousarray(dfa.ref_table, dtype=np.int32).tobytes())
        h.update(repr(auto.refs[r]).encode())
        h.update(np.ascontiguousarray(auto.boundary[r], dtype=bool).tobytes())
        h.update(np.ascontiguousarray(auto.tail[r], dtype=bool).tobytes())
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--hash", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--json", default="")
    ap.add_argument("--compare", nargs=2, default=None)
    ap.add_argument("--ab", nargs=2, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", action="store_true")
    args = ap.parse_args()
    if args.ab:
        return _ab(args)
    if args.compare:
        a = json.loads(Path(args.compare[0]).read_text())
        b = json.loads(Path(args.compare[1]).read_text())
        keys = sorted(set(a) & set(b))
        ratios = [b[k] / a[k] for k in keys if a[k] > 0]
        sa, sb = sorted(a[k] for k in keys), sorted(b[k] for k in keys)
        print(
            f"n={len(keys)} paired median ratio {statistics.median(ratios):.3f}; "
            f"p50 {sa[len(sa) // 2]:.3f} -> {sb[len(sb) // 2]:.3f} ms; "
            f"sum {sum(sa):.1f} -> {sum(sb):.1f} ms"
        )
        return 0
    from formcast._native import native_summary
    from formcast.automata import regular, rules
    from formcast.errors import FormcastError
    from formcast.frontends.jsonschema.api import schema_to_grammar
    from formcast.ir.nodes import JSON_HINTS

    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    grammars: dict[str, Any] = {}
    for f in files:
        schema = json.loads(f.read_text(encoding="utf-8")).get("schema")
        try:
            grammars[f.name] = schema_to_grammar(schema, marks=[])[0]
        except (FormcastError, RecursionError, ValueError):
            continue
    build = rules.compile_grammar_automaton
    kw = {"expand_calls": JSON_HINTS.expand_calls, "minimize": JSON_HINTS.minimize}

    def cold(grammar: Any) -> Any:
        rules.RULE_DFA_CACHE.clear()
        regular.SUB_DFA_CACHE.clear()
        return build(grammar, **kw)

    if args.serve:
        names = sorted(grammars)
        print(json.dumps(names), flush=True)
        for line in sys.stdin:
            name, reps = line.split()
            best = float("inf")
            try:
                for _ in range(int(reps)):
                    rules.RULE_DFA_CACHE.clear()
                    regular.SUB_DFA_CACHE.clear()
                    gc.disable()
                    try:
                        t0 = time.thread_time_ns()
                        build(grammars[name], **kw)
                        best = min(best, (time.thread_time_ns() - t0) / 1e6)
                    finally:
                        gc.enable()
            except (FormcastError, RecursionError, ValueError):
                best = -1.0
            print(best, flush=True)
        return 0
    if args.hash:
        total = hashlib.sha256()
        n = 0
        for name, g in grammars.items():
            try:
                d = _digest(cold(g))
            except (FormcastError, RecursionError, ValueError) as e:
                d = f"error {type(e).__name__}: {e}"
            n += 1
            total.update(f"{name} {d}\n".encode())
            if args.verbose:
                print(name, d)
        print(native_summary())
        print(f"{n} schemas, sha256 {total.hexdigest()}")
        return 0
    if args.profile:
        gc.disable()  # (as the timed runs: the collector's passes are the lowering's objects)
        for _ in range(args.profile):
            for g in grammars.values():
                with contextlib.suppress(FormcastError, RecursionError, ValueError):
                    cold(g)
        return 0
    clock = time.thread_time_ns
    out: dict[str, float] = {}
    for name, g in grammars.items():
        best = float("inf")
        try:
            for _ in range(args.reps):
                rules.RULE_DFA_CACHE.clear()
                regular.SUB_DFA_CACHE.clear()
                gc.disable()
                try:
                    t0 = clock()
                    build(g, **kw)
                    best = min(best, (clock() - t0) / 1e6)
                finally:
                    gc.enable()
        except (FormcastError, RecursionError, ValueError):
            continue
        out[name] = best
    xs = sorted(out.values())
    print(
        f"{native_summary()}\nn={len(xs)} cold rule phase best-of-{args.reps}: "
        f"p50 {xs[len(xs) // 2]:.3f} p90 {xs[int(len(xs) * 0.9)]:.3f} max {xs[-1]:.3f} "
        f"sum {sum(xs):.1f} ms"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=0))
    return 0


def _ab(args: Any) -> int:
    import os
    import subprocess

    procs = []
    for d in args.ab:
        env = dict(os.environ, PYTHONPATH=d)
        cmd = [sys.executable, __file__, "--serve", "--sample", str(args.sample)]
        cmd += ["--seed", str(args.seed)]
        procs.append(
            subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
    names = [json.loads(p.stdout.readline()) for p in procs if p.stdout]
    common = sorted(set(names[0]) & set(names[1]))
    best: list[dict[str, float]] = [{}, {}]

    def ask(i: int, name: str) -> None:
        p = procs[i]
        assert p.stdin is not None
        assert p.stdout is not None
        p.stdin.write(f"{name} {args.reps}\n")
        p.stdin.flush()
        t = float(p.stdout.readline())
        if t >= 0:
            best[i][name] = min(best[i].get(name, float("inf")), t)

    for r in range(args.rounds):
        for k, name in enumerate(common):
            order = (0, 1) if (k + r) % 2 == 0 else (1, 0)
            for i in order:
                ask(i, name)
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    keys = [k for k in common if k in best[0] and k in best[1]]
    ratios = [best[1][k] / best[0][k] for k in keys if best[0][k] > 0]
    a = sorted(best[0][k] for k in keys)
    b = sorted(best[1][k] for k in keys)
    print(
        f"n={len(keys)} rounds={args.rounds} reps={args.reps}: paired median ratio B/A "
        f"{statistics.median(ratios):.3f}; p50 A {a[len(a) // 2]:.3f} B {b[len(b) // 2]:.3f} "
        f"ms; p90 A {a[int(len(a) * 0.9)]:.3f} B {b[int(len(b) * 0.9)]:.3f}; "
        f"sum A {sum(a):.1f} B {sum(b):.1f} ms"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"a": best[0], "b": best[1]}, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
