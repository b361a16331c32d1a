#!/usr/bin/env python3
"""In-process MaskBench TBM (thread CPU) with the lazy classifier's parts timed (tops35, #31).

Walks the schemas of ``maskbench.select_files`` (``--sample N --seed S``) as maskbench_cpu.py's
workers do (a fresh ``GrammarCompiler(cache_size=0)`` per schema, its first mask untimed, then
every instance with a fresh matcher, each mask timed in thread CPU), in ONE process (process
caches warm as in a worker).  ``--parts``: wraps the classifier's methods and the kernels
``cfg_program`` calls (inclusive thread CPU per name, split by the mask's bin: <100 us,
100 us-1 ms, >1 ms).  ``--profile``: cProfile (thread CPU) over the timed masks only.
``--json OUT``: ``{schema: [mask us, ...]}`` for paired comparisons (``tbm_pairs.py``).

    PYTHONPATH=/tmp/fc-tops35 python benchmarks/tbm_parts.py --sample 100 --seed 3 --parts
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench

_clock = time.thread_time_ns
_acc: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0, 0, 0])
_cur: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
_lexprof = cProfile.Profile(time.thread_time) if "--lexprof" in sys.argv else None
#: ``TOPS35_PERF_CTL``: a perf control fifo (``perf record --control fifo:...``): sampling
#: enabled around each schema's timed masks only
_perf_ctl = (
    open(os.environ["TOPS35_PERF_CTL"], "wb", buffering=0)  # noqa: SIM115 (process-long)
    if os.environ.get("TOPS35_PERF_CTL")
    else None
)
_hist: list[tuple[int, int, int]] = []
_rounds: list[tuple[bool, int, int]] = []
_depth: dict[str, int] = collections.defaultdict(int)


def _wrap(owner: Any, name: str, label: str) -> None:
    fn = getattr(owner, name)

    def wrapped(*a: Any, **k: Any) -> Any:
        _depth[label] += 1
        t = _clock()
        try:
            return fn(*a, **k)
        finally:
            _depth[label] -= 1
            if not _depth[label]:  # outermost only
                c = _cur[label]
                c[0] += _clock() - t
                c[1] += 1

    setattr(owner, name, wrapped)


def _install() -> None:
    from formcast.index import cfg_program as cp

    cls = cp._LazyExitSplitClassifier
    for m in (
        "classify",
        "_ensure",
        "_new_region",
        "_region_digest",
        "_walk_words",
        "_walk_pairs",
        "_tables",
        "_region_at",
    ):
        _wrap(cls, m, "L." + m)
    for f in (
        "classify_walk_resume",
        "classify_walk_rows",
        "write_walk_state",
        "ahead_states",
        "equivalence_classes",
        "_row_classes",
        "_reachable_classes",
        "_quotient_digest",
        "_shared_walks",
    ):
        if hasattr(cp, f):
            _wrap(cp, f, f)
    _wrap(cp._LazyWalkTables, "write", "T.write")
    orig_ww = cls._walk_words

    def ww(self: Any, trie: Any, cut: bool, start: int, *a: Any) -> Any:
        n0 = _cur["L._ensure"][1]
        t = _clock()
        r = orig_ww(self, trie, cut, start, *a)
        inreg = self._region_at(start) is not None
        _rounds.append((cut + 2 * inreg, _cur["L._ensure"][1] - n0, _clock() - t))
        return r

    cls._walk_words = ww
    orig_init = cls.__init__

    class _Proxy:
        def __init__(self, lexer: Any) -> None:
            object.__setattr__(self, "_l", lexer)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._l, name)

        def ensure(self, states: Any) -> Any:
            if _lexprof is not None:
                _lexprof.enable()
                try:
                    return self._l.ensure(states)
                finally:
                    _lexprof.disable()
            b0 = int(self._l.built.sum())
            t = _clock()
            try:
                return self._l.ensure(states)
            finally:
                dt = _clock() - t
                _hist.append((len(states), int(self._l.built.sum()) - b0, dt))
                c = _cur["lexer.ensure"]
                c[0] += _clock() - t
                c[1] += 1
                c2 = _cur["lexer.ensure states"]
                c2[1] += len(states)

    def init(self: Any, lexer: Any, *a: Any) -> None:
        orig_init(self, _Proxy(lexer), *a)

    cls.__init__ = init
    _wrap(cp._CountedClassifier, "classify", "Counted.classify")
    _wrap(cp.CfgProgram, "_compute_mask", "P._compute_mask")
    _wrap(cp.CfgProgram, "classify", "P.classify")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--files", default="")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    ap.add_argument("--parts", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--lexprof", action="store_true")
    ap.add_argument(
        "--old-methods",
        default="",
        help="in-process A/B: these methods of the "
        "lazy classifier from --old-file, alternated with the current ones",
    )
    ap.add_argument("--old-file", default="/tmp/tops35_main_cfg.py")
    args = ap.parse_args()
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    import patch_guard
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.vocab.loaders import load_vocabulary

    flags = (("--parts", args.parts), ("--profile", args.profile))
    for flag, on in (*flags, ("--old-methods", args.old_methods)):
        if on:  # each patches methods of the lazy classifier
            patch_guard.require_patchable("tbm_parts.py", flag)
    prof = cProfile.Profile() if args.profile else None
    if args.parts:
        _install()
    if args.profile:
        from formcast.index import cfg_program as cp

        orig_c = cp._LazyExitSplitClassifier._classify

        def pc(self: Any, start: int) -> Any:
            assert prof is not None
            prof.enable()
            try:
                return orig_c(self, start)
            finally:
                prof.disable()

        cp._LazyExitSplitClassifier._classify = pc
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    warm = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
        {"type": "object", "properties": {"a": {"type": "integer"}}}
    )
    GrammarMatcher(warm).fill_next_token_bitmask(mask, 0)
    bins = [0, 0, 0]
    bin_n = [0, 0, 0]
    variants: list[tuple[str, dict[str, Any]]] = [("", {})]
    if args.old_methods:
        import textwrap

        from formcast.index import cfg_program as cp

        cls = cp._LazyExitSplitClassifier
        full = Path(args.old_file).read_text(encoding="utf-8")
        old: dict[str, Any] = {}
        new: dict[str, Any] = {}
        for name in args.old_methods.split(","):
            start = full.index(f"    def {name}(")
            end = full.index("\n    def ", start + 10)
            ns = dict(vars(cp))
            exec(textwrap.dedent(full[start:end]), ns)
            old[name] = ns[name]
            new[name] = cls.__dict__.get(name)
        variants = [("new", new), ("old", old)]
    outs: dict[str, dict[str, list[float]]] = {v: {} for v, _ in variants}

    def one(path: Path, task: dict[str, Any], label: str) -> None:
        try:
            grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(task["schema"])
            GrammarMatcher(grammar).fill_next_token_bitmask(mask, 0)
        except Exception:
            return
        times: list[float] = []
        gc.collect()
        gc.disable()
        if _perf_ctl is not None:
            _perf_ctl.write(b"enable\n")
            _perf_ctl.flush()
        for inst in task["instances"]:
            m = GrammarMatcher(grammar)
            for token in [*inst["ids"], None]:
                _cur.clear()
                t = _clock()
                try:
                    m.fill_next_token_bitmask(mask, 0)
                except Exception:
                    break
                dt = _clock() - t
                times.append(dt / 1e3)
                b = 0 if dt < 100_000 else 1 if dt < 1_000_000 else 2
                bins[b] += dt
                bin_n[b] += 1
                for lab, (ns_, n) in _cur.items():
                    a = _acc[lab]
                    a[2 * b] += ns_
                    a[2 * b + 1] += n
                if token is None:
                    break
                try:
                    ok = m.accept_token(token)
                except Exception:
                    ok = False
                if not ok:
                    break
        if _perf_ctl is not None:
            _perf_ctl.write(b"disable\n")
            _perf_ctl.flush()
        gc.enable()
        outs[label][path.name] = times

    for k, path in enumerate(maskbench.select_files(args)):
        task = maskbench.prepare(path, tok)
        order = variants if k % 2 == 0 else variants[::-1]
        for label, methods in order:
            if methods:
                from formcast.index import cfg_program as cp

                for name, fn in methods.items():
                    setattr(cp._LazyExitSplitClassifier, name, fn)
                cp._shared_walks(vocab).clear()  # (both variants equally cold)
            one(path, task, label)
    if len(variants) > 1:
        for label, _ in variants:
            o = outs[label]
            allv = [t for ts in o.values() for t in ts]
            allv.sort()
            print(
                f"{label}: TBM mean {sum(allv) / max(len(allv), 1):.2f} us p99 "
                f"{allv[int(0.99 * (len(allv) - 1) + 0.5)]:.0f} us"
            )
            if args.json:
                Path(f"{args.json}.{label}").write_text(json.dumps(o), encoding="utf-8")
    out = outs[variants[0][0]]
    if args.json:
        Path(args.json).write_text(json.dumps(out), encoding="utf-8")
    allt = [t for ts in out.values() for t in ts]
    allt.sort()
    p99 = allt[min(len(allt) - 1, int(0.99 * (len(allt) - 1) + 0.5))] if allt else 0
    print(
        f"schemas {len(out)} masks {len(allt)} TBM mean {sum(allt) / max(len(allt), 1):.1f} us "
        f"p99 {p99:.0f} us max {allt[-1] if allt else 0:.0f} us"
    )
    print(
        "bins (<100us, 100us-1ms, >1ms): ms "
        + ", ".join(f"{b / 1e6:.1f} ({n})" for b, n in zip(bins, bin_n, strict=True))
    )
    if _acc:
        head = ("part", "<100us ms", "n", "mid ms", "n", ">1ms", "n")
        print("{:28s} {:>10s} {:>6s} {:>9s} {:>6s} {:>8s} {:>5s}".format(*head))
        for label, a in sorted(_acc.items(), key=lambda kv: -kv[1][2]):
            print(
                f"{label:28s} {a[0] / 1e6:10.1f} {a[1]:6d} {a[2] / 1e6:9.1f} {a[3]:6d} "
                f"{a[4] / 1e6:8.1f} {a[5]:5d}"
            )
    if _rounds:
        for cut in (0, 1, 2, 3):
            rs = [r for r in _rounds if r[0] == cut]
            by = collections.Counter(min(r[1], 9) for r in rs)
            tm: dict[int, int] = collections.defaultdict(int)
            for r in rs:
                tm[min(r[1], 9)] += r[2]
            print(
                ("exit", "cut", "exit in region", "cut in region")[cut],
                "walks",
                len(rs),
                {k: (by[k], round(tm[k] / 1e6, 1)) for k in sorted(by)},
            )
    if _hist:
        import statistics

        print(
            "ensure calls",
            len(_hist),
            "states/call",
            statistics.mean(h[0] for h in _hist),
            "rows built/call",
            statistics.mean(h[1] for h in _hist),
            "us p50",
            statistics.median(h[2] for h in _hist) / 1e3,
            "mean",
            statistics.mean(h[2] for h in _hist) / 1e3,
        )
        by = collections.defaultdict(list)
        for h in _hist:
            by[min(h[1], 64) // 8].append(h[2] / 1e3)
        for k in sorted(by):
            print("  rows built", k * 8, "..", len(by[k]), "calls, mean us", statistics.mean(by[k]))
    if _lexprof is not None:
        pstats.Stats(_lexprof).sort_stats("tottime").print_stats(25)
    if prof is not None:
        st = pstats.Stats(prof)
        st.sort_stats("tottime").print_stats(35)
        st.print_callees(
            "_walk_resumed|_ensure|_classify\\b|_walk_words|write\\b|_new_region|classify_walk_resume|_classify_call"
        )


if __name__ == "__main__":
    main()
