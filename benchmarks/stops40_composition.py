#!/usr/bin/env python3
"""What MaskBench's slowest masks spend their time on (stops40, #31 TBM p99).

Walks the schemas of ``maskbench.select_files`` (``--sample N --seed S``) as maskbench's
formcast worker does, in ONE process: a fresh ``GrammarCompiler(cache_size=0)`` per schema,
compile + first mask (TTFM, untimed here), then every instance with a fresh matcher, each mask
(``fill_next_token_bitmask``) timed in wall (``perf_counter_ns``, as maskbench) and thread CPU.
``--json OUT`` writes ``[[schema, instance, step, wall_us, cpu_us, {phase: us}], ...]``.

``--parts`` (only where ``formcast.index.cfg_program`` is interpreted: ``patch_guard``)
attributes each mask's thread CPU to *exclusive* phases (the innermost hooked call owns its
time; ``matcher`` is the rest of the fill): ``ensure`` (``LazyExpandedLexer.ensure``: lexer
rows, stops), ``stops glue`` (``_ensure`` / ``_build_stops`` own: walk rows written),
``walks`` (the ``_walk_*`` methods and the trie kernels), ``region`` (region search / grow),
``digest``, ``checks`` (``_verify_*``, ``_looped_groups``), ``counted``, ``classify`` (the
rest of ``_LazyExitSplitClassifier._classify`` / ``classify``), ``compute`` (the rest of
``CfgProgram._compute_mask``: unions of words, candidate filter), ``program``
(``token_mask``'s rest: cap, mask cache).  Hooks cost ~1-2 us a call (the mask's time
includes them).

``--lexer``: only ``ensure`` hooked (the rest: ``rest``), in any build (the lexer's class
is an ordinary Python class).

``--report A.json [B.json]``: the masks above the p99 (and p98-p99) of A's thread CPU
(``--wall``: wall times), their
phases summed; with B, how many of A's slow set are B's slow set (e.g. compiled vs
interpreted)::

    PYTHONPATH=/tmp/fc-base40 python benchmarks/stops40_composition.py --sample 200 --seed 2 \\
        --json /tmp/s40/comp_c.json
    PYTHONPATH=/tmp/fc-stops40i python benchmarks/stops40_composition.py --sample 200 \\
        --seed 2 --parts --json /tmp/s40/comp_i.json
    python benchmarks/stops40_composition.py --report /tmp/s40/comp_i.json /tmp/s40/comp_c.json
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench

_wall = time.perf_counter_ns
#: the phases' clock: thread CPU (on a loaded machine wall time is mostly preemption)
_clk = time.thread_time_ns
#: the phase stack: [label, start ns of its current exclusive slice]
_stack: list[list[Any]] = []
#: the current mask's exclusive ns per phase
_cur: dict[str, int] = collections.defaultdict(int)


def _wrap(owner: Any, name: str, label: str) -> None:
    fn = getattr(owner, name)

    def wrapped(*a: Any, **k: Any) -> Any:
        t = _clk()
        if _stack:
            top = _stack[-1]
            _cur[top[0]] += t - top[1]
        _stack.append([label, t])
        try:
            return fn(*a, **k)
        finally:
            t2 = _clk()
            lab, t1 = _stack.pop()
            _cur[lab] += t2 - t1
            if _stack:
                _stack[-1][1] = t2

    setattr(owner, name, wrapped)


def _install() -> None:
    from formcast.automata import lexer as lx
    from formcast.index import cfg_program as cp

    cls = cp._LazyExitSplitClassifier
    groups = {
        "ensure": [(lx.LazyExpandedLexer, "ensure")],
        "stops glue": [(cls, "_ensure"), (cls, "_build_stops")],
        "walks": [(cls, m) for m in ("_walk_words", "_walk_pairs", "_walk_resumed", "_write_rows")]
        + [
            (cp, f)
            for f in ("_walk", "classify_walk_resume", "classify_walk_rows", "write_walk_state")
            if hasattr(cp, f)
        ],
        "region": [
            (cls, m) for m in ("_region_at", "_new_region", "_search_region", "_grown_region")
        ]
        + [
            (cp, f)
            for f in ("equivalence_classes", "_row_classes", "_reachable_classes")
            if hasattr(cp, f)
        ],
        "digest": [
            (cls, m) for m in ("_region_key", "_region_digest", "_cut_columns", "cut_signature")
        ]
        + [(cp, f) for f in ("_quotient_digest", "_shared_walks") if hasattr(cp, f)],
        "checks": [
            (cp, f)
            for f in ("_verify_looped", "_verify_by_levels", "_verify_in_order")
            if hasattr(cp, f)
        ]
        + [(cp.CfgProgram, "_looped_groups")],
        "counted": [(cp._CountedClassifier, "classify")],
        "classify": [(cls, "classify"), (cls, "_classify")],
        "compute": [(cp.CfgProgram, "_compute_mask")],
        "program": [(cp.CfgProgram, "token_mask")],
    }
    for label, items in groups.items():
        for owner, name in items:
            _wrap(owner, name, label)


def run(args: argparse.Namespace) -> None:
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.vocab.loaders import load_vocabulary

    if args.parts:
        import patch_guard

        patch_guard.require_patchable("stops40_composition.py", "--parts")
        _install()
    elif args.lexer:  # (an ordinary Python class: patchable in the compiled build too)
        from formcast.automata import lexer as lx

        _wrap(lx.LazyExpandedLexer, "ensure", "ensure")
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    warm = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
        {"type": "object", "properties": {"a": {"type": "integer"}}}
    )
    GrammarMatcher(warm).fill_next_token_bitmask(mask, 0)
    cpu = time.thread_time_ns
    out: list[list[Any]] = []
    for path in maskbench.select_files(args):
        task = maskbench.prepare(path, tok)
        gc.collect()
        try:
            grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(task["schema"])
            GrammarMatcher(grammar).fill_next_token_bitmask(mask, 0)
        except Exception:
            continue
        name = path.name.split("---")[-1]
        gc.collect()
        gc.disable()
        for i, inst in enumerate(task["instances"]):
            m = GrammarMatcher(grammar)
            ids = inst["ids"]
            for step in range(len(ids) + 1):
                _cur.clear()
                c0 = cpu()
                t0 = _wall()
                try:
                    m.fill_next_token_bitmask(mask, 0)
                except Exception:
                    break
                dt = _wall() - t0
                dc = cpu() - c0
                parts = {k: round(v / 1e3, 2) for k, v in _cur.items() if v}
                if args.parts or args.lexer:
                    rest = round((dc - sum(_cur.values())) / 1e3, 2)
                    parts["matcher" if args.parts else "rest"] = rest
                out.append([name, i, step, dt / 1e3, dc / 1e3, parts])
                if step == len(ids):
                    break
                try:
                    if not m.accept_token(ids[step]):
                        break
                except Exception:
                    break
        gc.enable()
    wall = sorted(r[3] for r in out)
    n = len(wall)
    print(
        f"masks {n} TBM mean {sum(wall) / max(n, 1):.1f} us p99 "
        f"{wall[min(n - 1, int(0.99 * (n - 1) + 0.5))] if n else 0:.0f} us "
        f"max {wall[-1] if n else 0:.0f} us",
        flush=True,
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out), encoding="utf-8")


def _pct(sorted_vals: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(sorted_vals), q))


def report(paths: list[str], col: int) -> None:
    a = json.loads(Path(paths[0]).read_text(encoding="utf-8"))
    wall = sorted(r[col] for r in a)
    p98, p99 = _pct(wall, 98), _pct(wall, 99)
    total = sum(wall)
    print(f"{paths[0]}: masks {len(a)} mean {total / len(a):.1f} us p98 {p98:.0f} p99 {p99:.0f}")
    sets = {
        "> p99": [r for r in a if r[col] > p99],
        "p98-p99": [r for r in a if p98 < r[col] <= p99],
        "all": a,
    }
    labels = sorted({k for r in a for k in r[5]})
    for sname, rows in sets.items():
        s = sum(r[col] for r in rows)
        print(f"\n{sname}: {len(rows)} masks, {s / 1e3:.1f} ms ({100 * s / total:.1f}% of all)")
        sums = {k: sum(r[5].get(k, 0.0) for r in rows) for k in labels}
        for k, v in sorted(sums.items(), key=lambda kv: -kv[1]):
            cnt = sum(1 for r in rows if r[5].get(k, 0.0) > 0)
            print(f"  {k:12s} {v / 1e3:8.2f} ms {100 * v / max(s, 1e-9):5.1f}%  in {cnt} masks")
        if sname == "> p99":
            by = collections.Counter(r[0] for r in rows)
            print("  schemas:", ", ".join(f"{k[:24]} {v}" for k, v in by.most_common(12)))
            steps0 = sum(1 for r in rows if r[2] == 0)
            print(f"  step 0 (first mask of an instance): {steps0}")
    if len(paths) > 1:
        b = json.loads(Path(paths[1]).read_text(encoding="utf-8"))
        bw = sorted(r[col] for r in b)
        bp99 = _pct(bw, 99)
        ka = {tuple(r[:3]) for r in a if r[col] > p99}
        kb = {tuple(r[:3]) for r in b if r[col] > bp99}
        print(
            f"\nslow set (> p99) of {paths[0]}: {len(ka)}; of {paths[1]} (p99 {bp99:.0f} us, "
            f"mean {sum(bw) / len(bw):.1f}): {len(kb)}; both {len(ka & kb)}"
        )
        ka2 = {tuple(r[:3]) for r in a if r[col] > p98}
        bp98 = _pct(bw, 98)
        kb2 = {tuple(r[:3]) for r in b if r[col] > bp98}
        print(f"slow set (> p98): {len(ka2)} / {len(kb2)}; both {len(ka2 & kb2)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--files", default="")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    ap.add_argument("--parts", action="store_true")
    ap.add_argument("--lexer", action="store_true", help="only LazyExpandedLexer.ensure timed")
    ap.add_argument("--json", default="")
    ap.add_argument("--report", nargs="+", default=None)
    ap.add_argument("--wall", action="store_true")
    args = ap.parse_args()
    if args.report:
        report(args.report, 3 if args.wall else 4)
    else:
        run(args)


if __name__ == "__main__":
    main()
