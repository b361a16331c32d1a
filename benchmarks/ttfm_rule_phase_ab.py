"""TTFM of two builds, interleaved per schema (thread CPU), for A/B runs on a loaded machine.

TTFM as ``benchmarks/rule_phase_ttfm.py`` measures it: per MaskBench schema (its sample), a
fresh ``GrammarCompiler(vocab, cache_size=0)``, ``compile_json_schema`` and a matcher's first
mask, in thread CPU time; the process-wide caches stay warm from the schemas before, as in
MaskBench's workers.  Here one worker process per build (``--serve``) is fed the same schemas
in the same order, one at a time, the two alternating which goes first (A B, B A, ...), so the
machine's drift falls on both alike; each round starts fresh workers.  Per schema the minimum
over rounds; prints the paired median ratio B/A, both p50s / p90s, and per round the same,
for TTFM and for the rule phase inside it (``compile_grammar_automaton``'s thread CPU)::

    python benchmarks/ttfm_rule_phase_ab.py /tmp/fc-main /tmp/fc-branch --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lowering_ttfm import DATA, _pct


def _serve(args: Any) -> int:
    import formcast.index.compiler as compiler_mod
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast._native import native_summary
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    clock = time.thread_time_ns
    spent = [0]
    build = compiler_mod.compile_grammar_automaton

    def timed(*a: Any, **k: Any) -> Any:
        t0 = clock()
        try:
            return build(*a, **k)
        finally:
            spent[0] += clock() - t0

    compiler_mod.compile_grammar_automaton = timed

    def ttfm(schema: Any) -> tuple[float, float]:
        spent[0] = 0
        t0 = clock()
        compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        m = GrammarMatcher(compiled)
        mask = allocate_token_bitmask(1, vocab.vocab_size)
        m.fill_next_token_bitmask(mask, 0)
        return (clock() - t0) / 1e6, spent[0] / 1e6

    ttfm({"type": "object", "properties": {"a": {"type": "integer"}}})  # warm-up
    print(json.dumps(native_summary()), flush=True)
    for line in sys.stdin:
        schema = json.loads((DATA / line.strip()).read_text(encoding="utf-8")).get("schema")
        try:
            ms, rule_ms = ttfm(schema)
        except (FormcastError, RecursionError, ValueError):
            ms, rule_ms = -1.0, -1.0
        print(ms, rule_ms, flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="*")
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.serve:
        return _serve(args)
    a_dir, b_dir = args.builds
    files = sorted(DATA.glob("*.json"))
    names = [f.name for f in sorted(random.Random(args.seed).sample(files, args.sample))]
    best: list[dict[str, float]] = [{}, {}]
    best_rule: list[dict[str, float]] = [{}, {}]
    for rnd in range(args.rounds):
        procs = []
        for d in (a_dir, b_dir):
            env = dict(os.environ, PYTHONPATH=d)
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--serve"],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for p in procs:
            assert p.stdout is not None
            summary = json.loads(p.stdout.readline())
            if rnd == 0:
                print(summary)
        this: list[dict[str, float]] = [{}, {}]
        this_rule: list[dict[str, float]] = [{}, {}]
        for i, name in enumerate(names):
            order = (0, 1) if (i + rnd) % 2 == 0 else (1, 0)
            for w in order:
                p = procs[w]
                assert p.stdin is not None
                assert p.stdout is not None
                p.stdin.write(name + "\n")
                p.stdin.flush()
                ms, rule_ms = map(float, p.stdout.readline().split())
                if ms >= 0:
                    this[w][name] = ms
                    this_rule[w][name] = rule_ms
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
            p.wait()
        common = sorted(set(this[0]) & set(this[1]))
        for label, got in (("TTFM", this), ("rule phase", this_rule)):
            ratio = statistics.median(got[1][k] / got[0][k] for k in common if got[0][k] > 0)
            print(
                f"round {rnd + 1} {label}: n={len(common)}"
                f" p50 A {_pct([got[0][k] for k in common], 0.5):.3f}"
                f" B {_pct([got[1][k] for k in common], 0.5):.3f} ms;"
                f" paired median B/A {ratio:.3f}",
                flush=True,
            )
        for w in (0, 1):
            for k, v in this[w].items():
                best[w][k] = min(best[w].get(k, v), v)
                best_rule[w][k] = min(best_rule[w].get(k, this_rule[w][k]), this_rule[w][k])
    common = sorted(set(best[0]) & set(best[1]))
    for label, got in (("TTFM", best), ("rule phase", best_rule)):
        xa, xb = [got[0][k] for k in common], [got[1][k] for k in common]
        ratio = statistics.median(y / x for x, y in zip(xa, xb, strict=True) if x > 0)
        print(
            f"best of {args.rounds} {label}: n={len(common)} p50 A {_pct(xa, 0.5):.3f}"
            f" B {_pct(xb, 0.5):.3f} ms; p90 A {_pct(xa, 0.9):.2f} B {_pct(xb, 0.9):.2f};"
            f" sum A {sum(xa):.0f} B {sum(xb):.0f} ms; paired median B/A {ratio:.3f}"
        )
    if args.json:
        out = {"ttfm": best, "rule": best_rule}
        Path(args.json).write_text(json.dumps(out, indent=0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
