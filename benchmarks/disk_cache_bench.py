#!/usr/bin/env python3
"""A compiled grammar loaded from the disk cache by a new process: TTFM vs a fresh compile vs
llguidance's cold TTFM, on a MaskBench sample (the schemas ``maskbench.py --sample N --seed S``
picks), with masks checked bit-identical.

Two phases, each in its own process (Llama-3, 128,256 ids; vocabulary and tokenizer loading
not charged, as in ``maskbench.py``):

1. **write**: per schema, a fresh ``GrammarCompiler(vocab, cache_size=0, cache_dir=D)``
   compiles it (TTFM = compile + matcher + first mask, the "fresh compile" column: the
   process-wide caches are as warm as in ``maskbench.py``'s worker) and writes the file with
   its first mask (what ``formcast compile --cache-dir`` writes; ``--warm`` instead writes it
   after walking the instances, so the file carries every mask of the walks).  Then the
   schema's instances are walked and the SHA-256 of every mask recorded.
2. **read** (a new process): per schema, TTFM = ``GrammarCompiler(vocab, cache_size=0,
   cache_dir=D).compile_json_schema(schema)`` (the schema is read and keyed, the file read
   and loaded) + matcher + first mask.  Then the same walks, every mask compared with the
   writer's hashes (``mask mismatches`` must be 0).  Right before each schema's load, the
   same process measures llguidance's cold TTFM of it (``LLMatcher``: grammar_from_json_schema
   + matcher + first mask, ``maskbench.py``'s adapter): the two are paired, schema by schema,
   under the same machine conditions.  Both are timed in wall and in thread CPU time (the
   latter steadier on a shared machine); the per-schema ratios are reported as p50 / p90 /
   p99 / max, and the warm start's stages (schema read and keyed, file read, deserialize,
   matcher + first mask) as p50 / p90 / p99.

Statistics over the schemas every phase compiled.  Usage (≤ 3 min on a busy 2-core machine)::

    python benchmarks/disk_cache_bench.py --sample 100 --seed 0
    python benchmarks/disk_cache_bench.py --sample 100 --seed 0 --warm --json out.json
    python benchmarks/disk_cache_bench.py --sample 100 --seed 0 --freeze-heap

Each schema's timings start right after a ``gc.collect()``, which walks the whole heap (the
vocabulary, the tokenizer, the tables) and so leaves the CPU caches cold for the Python work
that follows (llguidance's Rust work touches far less); ``--freeze-heap`` freezes the setup's
objects first (``gc.freeze()``, as a long-running server may after loading), so the collection
walks only what the previous schemas left.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # the MaskBench harness: data, tokenizer, llguidance adapter


def _hash(words: Any) -> str:
    return hashlib.sha256(np.ascontiguousarray(words).tobytes()).hexdigest()[:24]


def _walk_hashes(compiled: Any, ids_list: list[list[int]]) -> list[list[str]]:
    from formcast import GrammarMatcher, allocate_token_bitmask

    out = []
    for ids in ids_list:
        m = GrammarMatcher(compiled)
        buf = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
        hashes = []
        for t in [*ids, None]:
            m.fill_next_token_bitmask(buf, 0)
            hashes.append(_hash(buf))
            if t is None or not m.accept_token(t):
                break
        out.append(hashes)
    return out


def _tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    tasks = []
    for path in maskbench.select_files(args):
        t = maskbench.prepare(path, tok)
        t["ids"] = [i["ids"] for i in t["instances"]][: args.instances]
        tasks.append({"file": path.name, "schema": t["schema"], "ids": t["ids"]})
    return tasks


def phase_write(args: argparse.Namespace) -> dict[str, Any]:
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    warm = GrammarCompiler(vocab, cache_size=0)  # setup not charged (as in maskbench.py)
    GrammarMatcher(warm.compile_json_schema({"type": "object"})).fill_next_token_bitmask(
        allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    )
    out: dict[str, Any] = {}
    for task in _tasks(args):
        gc.collect()
        comp = GrammarCompiler(vocab, cache_size=0, cache_dir=args.dir)
        t0 = time.perf_counter_ns()
        try:
            compiled = comp.compile_json_schema(task["schema"])
            m = GrammarMatcher(compiled)
            m.fill_next_token_bitmask(allocate_token_bitmask(1, maskbench.VOCAB_SIZE), 0)
        except FormcastError as e:
            out[task["file"]] = {"error": f"{type(e).__name__}"}
            continue
        ttfm = (time.perf_counter_ns() - t0) / 1e3
        hashes = _walk_hashes(compiled, task["ids"])
        if args.warm:
            comp.save(compiled)
        path = comp.cache_path(compiled)
        out[task["file"]] = {
            "ttfm_us": ttfm,
            "hashes": hashes,
            "bytes": os.path.getsize(path) if path and os.path.exists(path) else 0,
        }
    return out


class _Stages:
    """Wall time (µs) of the stages of one warm start, by wrapping the functions of the disk
    path: the file read (``DiskCache.get``), the load (``CompiledGrammar.deserialize``); the
    rest of ``compile_json_schema`` is the schema read and keyed (and the compiler made)."""

    def __init__(self) -> None:
        from formcast.cache import DiskCache
        from formcast.index.compiled import CompiledGrammar

        self.times: dict[str, float] = {}
        for owner, name, stage in (
            (DiskCache, "get", "file read"),
            (CompiledGrammar, "deserialize", "deserialize"),
        ):
            self._wrap(owner, name, stage)

    def _wrap(self, owner: Any, name: str, stage: str) -> None:
        inner = owner.__dict__[name]
        fn = inner.__func__ if isinstance(inner, classmethod) else inner
        times = self.times

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                times[stage] = times.get(stage, 0.0) + (time.perf_counter_ns() - t0) / 1e3

        setattr(owner, name, classmethod(timed) if isinstance(inner, classmethod) else timed)


def phase_read(args: argparse.Namespace) -> dict[str, Any]:
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    _ = vocab.trie  # per-model setup, not charged: the vocabulary and the front-end's imports
    with tempfile.TemporaryDirectory() as d:
        GrammarCompiler(vocab, cache_dir=d).compile_json_schema({"type": "object"})
        GrammarCompiler(vocab, cache_dir=d).compile_json_schema({"type": "object"})
    written = json.loads(Path(args.written).read_text())
    ad = maskbench.LLGuidanceAdapter()
    try:
        ad.setup()
        ad.warmup()
    except maskbench.Unavailable:
        ad = None
    stages = _Stages()
    out: dict[str, Any] = {}
    tasks = _tasks(args)
    if args.freeze_heap:  # the setup's objects out of the collector's way, as a server may do
        gc.collect()
        gc.freeze()
    for task in tasks:
        w = written.get(task["file"], {})
        if "ttfm_us" not in w:
            continue
        llg, llg_cpu = _llguidance_ttfm(ad, task["schema"]) if ad is not None else (None, None)
        gc.collect()
        stages.times.clear()
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        comp = GrammarCompiler(vocab, cache_size=0, cache_dir=args.dir)
        compiled = comp.compile_json_schema(task["schema"])
        t1 = time.perf_counter_ns()
        m = GrammarMatcher(compiled)
        m.fill_next_token_bitmask(allocate_token_bitmask(1, maskbench.VOCAB_SIZE), 0)
        t2, c2 = time.perf_counter_ns(), time.thread_time_ns()
        ttfm = (t2 - t0) / 1e3
        steps = dict(stages.times)
        steps["schema read and keyed"] = (t1 - t0) / 1e3 - sum(steps.values())
        steps["matcher + first mask"] = (t2 - t1) / 1e3
        hashes = _walk_hashes(compiled, task["ids"])
        mismatches = sum(
            a != b for hw, hr in zip(w["hashes"], hashes) for a, b in zip(hw, hr)
        ) + sum(len(hw) != len(hr) for hw, hr in zip(w["hashes"], hashes))
        out[task["file"]] = {
            "ttfm_us": ttfm,
            "ttfm_cpu_us": (c2 - c0) / 1e3,
            "stages_us": steps,
            "llguidance_ttfm_us": llg,
            "llguidance_ttfm_cpu_us": llg_cpu,
            "from_disk": comp.disk_hits == 1,
            "masks_compared": sum(len(h) for h in hashes),
            "mismatches": mismatches,
        }
    return out


def _llguidance_ttfm(ad: Any, schema: Any) -> tuple[float | None, float | None]:
    """llguidance's cold TTFM of ``schema``, wall and thread CPU µs (None when it does not
    compile it)."""
    gc.collect()
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    try:
        compiled = ad.compile(schema)
        mask = ad.alloc()
        ad.fill(ad.matcher(compiled), mask)
    except maskbench.CompileFailed:
        return None, None
    return (time.perf_counter_ns() - t0) / 1e3, (time.thread_time_ns() - c0) / 1e3


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def _run_phase(name: str, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--phase",
        name,
        "--sample",
        str(args.sample),
        "--seed",
        str(args.seed),
        "--instances",
        str(args.instances),
        "--dir",
        args.dir,
        "--data",
        args.data,
        *(["--warm"] if args.warm else []),
        *(["--freeze-heap"] if args.freeze_heap else []),
        *extra,
    ]
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        target = f.name
    subprocess.run([*cmd, "--out", target], check=True)
    data: dict[str, Any] = json.loads(Path(target).read_text())
    os.unlink(target)
    return data


def main(argv: list[str] | None = None) -> int:
    maskbench._single_thread_env()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--instances", type=int, default=2, help="instances walked per schema")
    ap.add_argument("--warm", action="store_true", help="write the files after the walks")
    ap.add_argument(
        "--freeze-heap",
        action="store_true",
        help="gc.freeze() after the read phase's setup: the gc.collect() before each schema "
        "then no longer walks (and evicts from the CPU caches) the whole setup heap",
    )
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    ap.add_argument("--dir", default=None, help="cache directory (default: a fresh temp dir)")
    ap.add_argument("--json", default=None, help="write the report here")
    ap.add_argument("--phase", choices=["write", "read"], help=argparse.SUPPRESS)
    ap.add_argument("--written", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.files, args.full = None, False
    if args.phase:
        fn = {"write": phase_write, "read": phase_read}
        Path(args.out).write_text(json.dumps(fn[args.phase](args)))
        return 0
    t_start = time.perf_counter()
    args.dir = args.dir or tempfile.mkdtemp(prefix="formcast-disk-bench-")
    written = _run_phase("write", args, [])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(written, f)
        written_path = f.name
    read = _run_phase("read", args, ["--written", written_path])
    os.unlink(written_path)
    common = [
        k
        for k, w in written.items()
        if "ttfm_us" in w and k in read and read[k]["llguidance_ttfm_us"] is not None
    ]
    cols = {
        "formcast fresh compile": [written[k]["ttfm_us"] for k in common],
        "formcast from disk (new process)": [read[k]["ttfm_us"] for k in common],
        "llguidance cold": [read[k]["llguidance_ttfm_us"] for k in common],
    }
    report: dict[str, Any] = {
        "sample": args.sample,
        "seed": args.seed,
        "warm_files": args.warm,
        "freeze_heap": args.freeze_heap,
        "schemas": len(written),
        "compiled_by_all": len(common),
        "loaded_from_disk": sum(bool(read[k]["from_disk"]) for k in common),
        "masks_compared": sum(read[k]["masks_compared"] for k in common),
        "mask_mismatches": sum(read[k]["mismatches"] for k in common),
        "file_bytes_p50": _pct([written[k]["bytes"] for k in common], 50),
        "file_bytes_max": max((written[k]["bytes"] for k in common), default=0),
        "ttfm_us": {
            name: {
                "p50": _pct(xs, 50),
                "p90": _pct(xs, 90),
                "p99": _pct(xs, 99),
                "max": max(xs, default=float("nan")),
                "mean": float(np.mean(xs)) if xs else float("nan"),
            }
            for name, xs in cols.items()
        },
        "seconds": time.perf_counter() - t_start,
    }
    # paired per schema: formcast from disk / llguidance cold, wall and thread CPU time
    ratios = {
        "wall": [read[k]["ttfm_us"] / read[k]["llguidance_ttfm_us"] for k in common],
        "cpu": [
            read[k]["ttfm_cpu_us"] / max(read[k]["llguidance_ttfm_cpu_us"], 1.0) for k in common
        ],
    }
    report["paired_ratio_disk_vs_llguidance"] = {
        name: {q: _pct(xs, p) for q, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))}
        for name, xs in ratios.items()
    }
    report["median_ratio_disk_vs_llguidance"] = _pct(ratios["wall"], 50)
    report["median_cpu_ratio_disk_vs_llguidance"] = _pct(ratios["cpu"], 50)
    report["per_schema"] = {
        k: {
            "fresh_us": written[k]["ttfm_us"],
            **{
                name: read[k][name]
                for name in (
                    "ttfm_us",
                    "ttfm_cpu_us",
                    "llguidance_ttfm_us",
                    "llguidance_ttfm_cpu_us",
                    "stages_us",
                )
            },
        }
        for k in common
    }
    report["p50_ratio_of_distributions"] = (
        report["ttfm_us"]["formcast from disk (new process)"]["p50"]
        / report["ttfm_us"]["llguidance cold"]["p50"]
    )
    stage_names = list(read[common[0]]["stages_us"]) if common else []
    report["stages_us"] = {
        name: {
            q: _pct([read[k]["stages_us"].get(name, 0.0) for k in common], p)
            for q, p in (("p50", 50), ("p90", 90), ("p99", 99))
        }
        for name in stage_names
    }
    print(
        f"{report['compiled_by_all']} of {report['schemas']} schemas compiled by every phase; "
        f"{report['loaded_from_disk']} loaded from disk; {report['masks_compared']} masks "
        f"compared, {report['mask_mismatches']} mismatches; files p50 "
        f"{report['file_bytes_p50'] / 1e3:.0f} KB, max {report['file_bytes_max'] / 1e6:.1f} MB"
    )
    print("\n| TTFM (µs) | p50 | p90 | p99 | max | mean |\n|---|---|---|---|---|---|")
    for name, st in report["ttfm_us"].items():
        cells = " | ".join(f"{st[q]:,.0f}" for q in ("p50", "p90", "p99", "max", "mean"))
        print(f"| {name} | {cells} |")
    print(
        "\n| per-schema ratio, from disk / llguidance cold | p50 | p90 | p99 | max |"
        "\n|---|---|---|---|---|"
    )
    for name, st in report["paired_ratio_disk_vs_llguidance"].items():
        cells = " | ".join(f"{st[q]:.2f}" for q in ("p50", "p90", "p99", "max"))
        print(f"| {'wall' if name == 'wall' else 'thread CPU'} time | {cells} |")
    print("\n| warm-start stage (µs, wall) | p50 | p90 | p99 |\n|---|---|---|---|")
    for name, st in report["stages_us"].items():
        print(f"| {name} | {st['p50']:,.0f} | {st['p90']:,.0f} | {st['p99']:,.0f} |")
    print(f"\np50 from disk / p50 llguidance cold: {report['p50_ratio_of_distributions']:.2f}")
    print(f"({report['seconds']:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0 if report["mask_mismatches"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
