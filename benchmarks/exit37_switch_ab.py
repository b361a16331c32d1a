#!/usr/bin/env python3
"""In-process A/B of a module switch of the lazy classifier (exit37, #31), by
benchmarks/kept_orders_ab.py's method: per MaskBench schema (``--sample N --seed S``),
``--reps`` rounds with the variants alternating (ABBA...), each a fresh compile (untimed)
and every instance walked with a fresh matcher, each mask after the first timed in thread
CPU (gc off); ``--ttfm``: the compile and first mask instead.
``base`` sets ``MODULE.ATTR = --base-value``, ``new`` ``--new-value`` (ints).
Reported: per variant the TBM mean, p99, max and sum of the per-mask minimum over its rounds,
and the median per-schema ratio new/base; masks compared (a difference is an error).

    PYTHONPATH=/tmp/fc-exit37 python benchmarks/exit37_switch_ab.py \\
        --attr formcast.index.cfg_program._STOP_SIBLINGS --base-value 0 --new-value 64
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--attr", required=True, help="module.path.NAME")
    ap.add_argument("--base-value", type=int, default=0)
    ap.add_argument("--new-value", type=int, default=1)
    ap.add_argument(
        "--ttfm",
        action="store_true",
        help="time the compile and the first mask (one number per schema) instead",
    )
    args = ap.parse_args()
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    mod_name, attr = args.attr.rsplit(".", 1)
    mod = importlib.import_module(mod_name)
    values = {"base": args.base_value, "new": args.new_value}
    keep = getattr(mod, attr)
    files = maskbench.select_files(
        argparse.Namespace(
            data=str(maskbench.DATA_DIR), files=None, full=False, sample=args.sample,
            seed=args.seed,
        )
    )  # fmt: skip
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    warm = GrammarCompiler(vocab, cache_size=0).compile_json_schema({"type": "string"})
    GrammarMatcher(warm).fill_next_token_bitmask(mask, 0)
    vocab.trie.strings_end_to_end()
    clock = time.thread_time_ns
    best: dict[str, list[float]] = {"base": [], "new": []}
    ratios: list[float] = []
    for path in files:
        task = maskbench.prepare(path, tok)
        got: dict[str, list[list[float]]] = {"base": [], "new": []}
        digests: dict[str, str] = {}
        try:
            for rep in range(args.reps):
                for which in ("base", "new") if rep % 2 == 0 else ("new", "base"):
                    setattr(mod, attr, values[which])
                    times: list[float] = []
                    t0 = clock()
                    grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
                        task["schema"]
                    )
                    if args.ttfm:
                        m = GrammarMatcher(grammar)
                        m.fill_next_token_bitmask(mask, 0)
                        times.append((clock() - t0) / 1e3)
                        got[which].append(times)
                        digests.setdefault(which, hashlib.sha256(mask.tobytes()).hexdigest())
                        continue
                    h = hashlib.sha256()
                    first = True
                    gc.collect()
                    gc.disable()
                    for inst in task["instances"]:
                        m = GrammarMatcher(grammar)
                        for token in [*inst["ids"], None]:
                            t = clock()
                            m.fill_next_token_bitmask(mask, 0)
                            dt = (clock() - t) / 1e3
                            if not first:
                                times.append(dt)
                            first = False
                            h.update(mask.tobytes())
                            if token is None or not m.accept_token(token):
                                break
                    gc.enable()
                    got[which].append(times)
                    digests.setdefault(which, h.hexdigest())
                    if digests[which] != h.hexdigest():
                        raise SystemExit(f"{path.name}: {which}'s masks differ between rounds")
        except FormcastError:
            continue
        finally:
            setattr(mod, attr, keep)
        if digests.get("base") != digests.get("new"):
            raise SystemExit(f"{path.name}: masks differ between base and new")
        sums = {}
        for which, runs in got.items():
            mins = np.min(np.asarray(runs), axis=0) if runs and runs[0] else np.zeros(0)
            best[which].extend(mins.tolist())
            sums[which] = float(mins.sum())
        if sums["base"] > 1000:  # (schemas with at least 1 ms of masks)
            ratios.append(sums["new"] / sums["base"])
    for which, ts in best.items():
        a = np.asarray(ts)
        print(
            f"{which:5s} masks {a.size} TBM mean {a.mean():.1f} us p99 {np.percentile(a, 99):.0f}"
            f" max {a.max():.0f} sum {a.sum() / 1e3:.1f} ms"
        )
    print(
        f"new/base: sum {sum(best['new']) / sum(best['base']):.3f}, median per-schema ratio "
        f"{statistics.median(ratios):.3f} ({len(ratios)} schemas); masks identical; "
        f"{args.attr} {args.base_value} vs {args.new_value}"
    )


if __name__ == "__main__":
    main()
