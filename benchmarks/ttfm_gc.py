"""TTFM p50 with the cyclic GC's collections counted out (thread CPU), for issue #31.

As ``benchmarks/ttfm_perf_profile.py`` runs it (one process, caches warm from the schemas before):
per schema TTFM, and the thread CPU of the garbage collector's collections inside it (via
``gc.callbacks``).  ``mode``: ``on`` (the default collector), ``off`` (``gc.disable()`` for
the loop).  Prints TTFM p50, p50 of TTFM minus its collections, the collections' total and
how many schemas saw one.  Where they run: right after ``compiler.compile``'s ``gc_paused``
exits (the young generation then holds everything the compile kept)::

    PYTHONPATH=/tmp/fc-main python benchmarks/ttfm_gc.py on --sample 200 --seed 3
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lowering_ttfm import DATA


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("on", "off"))
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    files = sorted(DATA.glob("*.json"))
    names = [f.name for f in sorted(random.Random(args.seed).sample(files, args.sample))]
    schemas = [json.loads((DATA / n).read_text(encoding="utf-8")).get("schema") for n in names]
    clock = time.thread_time_ns
    spent = [0, 0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            spent[1] = clock()
        else:
            spent[0] += clock() - spent[1]

    def ttfm(schema: Any) -> None:
        compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        mask = allocate_token_bitmask(1, vocab.vocab_size)
        GrammarMatcher(compiled).fill_next_token_bitmask(mask, 0)

    ttfm({"type": "object", "properties": {"a": {"type": "integer"}}})
    if args.mode == "off":
        gc.disable()
    gc.callbacks.append(on_gc)
    total: list[float] = []
    in_gc: list[float] = []
    for schema in schemas:
        spent[0] = 0
        t0 = clock()
        try:
            ttfm(schema)
        except (FormcastError, RecursionError, ValueError):
            continue
        total.append((clock() - t0) / 1e6)
        in_gc.append(spent[0] / 1e6)
    gc.callbacks.remove(on_gc)
    hit = [g for g in in_gc if g > 0]
    print(
        f"{args.mode}: n={len(total)} TTFM p50 {statistics.median(total):.3f} ms, minus its "
        f"collections p50 {statistics.median(t - g for t, g in zip(total, in_gc)):.3f} ms; "
        f"collections {sum(in_gc):.0f} ms in {len(hit)} schemas "
        f"(p50 {statistics.median(hit) if hit else 0.0:.2f} ms each)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
