"""Fixed cost of a compile: thread CPU of compile + first mask per MaskBench schema (``--json``:
per-schema times, to pair two builds with ``paired_ratios.py``).

A fresh ``GrammarCompiler(vocab, cache_size=0)`` per schema (as maskbench.py's formcast
adapter); after a warm-up compile so process-wide caches are in the state a server's are.
Prints p50/p99/max/mean in ms over the schemas that compile.

    PYTHONPATH=DIR python benchmarks/ttfm_fixed.py --sample 100 --seed 3 [--profile out.prof]
    PYTHONPATH=DIR python benchmarks/ttfm_fixed.py --sample 150 --seed 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent.parent / "shared/data/JSONSchemaBench/maskbench/data"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--max-props", type=int, default=None, help="only schemas this small")
    ap.add_argument("--json", default="", help="write {schema: [ms per repeat]} here")
    args = ap.parse_args()
    import formcast
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    schemas = []
    for f in files:
        doc = json.loads(f.read_text(encoding="utf-8"))
        schemas.append((f.name, doc.get("schema", doc)))
    mask = allocate_token_bitmask(1, vocab.vocab_size)

    firsts: list[float] = []

    def one(schema: object) -> None:
        c = GrammarCompiler(vocab, cache_size=0, cache_dir=False).compile_json_schema(schema)
        t0 = time.thread_time_ns()
        GrammarMatcher(c).fill_next_token_bitmask(mask, 0)
        firsts.append((time.thread_time_ns() - t0) / 1e6)

    one({"type": "object", "properties": {"a": {"type": "integer"}}})
    ok = []
    names = []
    for name, s in schemas:  # first pass: which compile (and warm shared caches as a server's)
        try:
            one(s)
            ok.append(s)
            names.append(name)
        except formcast.errors.FormcastError:
            pass
    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
    times = []
    firsts.clear()
    clock = time.thread_time_ns
    per: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for name, s in zip(names, ok):
            if prof:
                prof.enable()
            t0 = clock()
            one(s)
            dt = clock() - t0
            if prof:
                prof.disable()
            times.append(dt / 1e6)
            per.setdefault(name, []).append(dt / 1e6)
    if prof:
        prof.dump_stats(args.profile)
    if args.json:
        Path(args.json).write_text(json.dumps(per), encoding="utf-8")
    for name, ts in (("compile+first mask", times), ("first mask", firsts)):
        ts.sort()
        n = len(ts)
        print(
            f"{name}: n={n} p50={ts[n // 2]:.2f} p99={ts[min(n - 1, int(n * 0.99))]:.2f} "
            f"max={ts[-1]:.2f} mean={sum(ts) / n:.2f} ms"
        )


if __name__ == "__main__":
    main()
