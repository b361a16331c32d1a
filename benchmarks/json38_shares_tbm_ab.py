"""In-process A/B of the compiled share measurement (json38: ``pda.measure_shares``, compiled with
the parser, against the interpreted loop ``cfg_program._verify_strings`` ran before) on
MaskBench TBM: kept_orders_ab.py (verdict36's) with that switch and a ``--files`` option.
Per schema, ``--reps`` rounds alternating (base, new, new, base, ...), each a fresh compile and
every instance's masks timed in thread CPU (gc off); per-mask minimum per setting; masks
must be identical.  Usage::

    PYTHONPATH=/tmp/fc-json38 python benchmarks/json38_shares_tbm_ab.py --sample 100 --seed 3
"""

from __future__ import annotations

import argparse
import gc
import hashlib
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
    ap.add_argument("--files", default=None, help="comma-separated file names (else a sample)")
    args = ap.parse_args()
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    import formcast.index.cfg_program as cp
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    base_root = Path(cp.__file__).resolve().parents[2]
    from json38_shares_ab import _py_measure_shares

    switch = {"base": _py_measure_shares, "new": cp.measure_shares}
    files = maskbench.select_files(
        argparse.Namespace(
            data=str(maskbench.DATA_DIR), files=args.files, full=False, sample=args.sample,
            seed=args.seed,
        )
    )  # fmt: skip
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    warm = GrammarCompiler(vocab, cache_size=0).compile_json_schema({"type": "string"})
    GrammarMatcher(warm).fill_next_token_bitmask(mask, 0)
    vocab.trie.strings_end_to_end()  # per-vocabulary tables made before the timing
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
                    cp.measure_shares = switch[which]
                    grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
                        task["schema"]
                    )
                    times: list[float] = []
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
            cp.measure_shares = switch["new"]
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
        f"interpreted vs compiled share measurement, {base_root}"
    )


if __name__ == "__main__":
    main()
