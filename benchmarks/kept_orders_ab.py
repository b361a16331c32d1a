#!/usr/bin/env python3
"""In-process A/B of a switch of the candidate checks (verdict36: ``cfg_program._KEEP_ORDERS``,
the candidate sets' kept orders and shared prefixes), after benchmarks/checks_tbm_ab.py
(verify35), whose method it keeps: ``base`` is the installed package with the switch off,
``new`` with it on.

(checks_tbm_ab.py's own description, for the method:)
TBM of two trees'
``CfgProgram._compute_mask`` + the module functions below ``class CfgProgram`` + ``pda.py``.

Per variant (``--base`` and ``--new``: repository roots, default the installed package's and
this tree's), the source of ``CfgProgram._compute_mask``, of ``cfg_program``'s module-level
functions from ``_no_memo`` to ``_result`` and of ``automata/pda.py`` is executed in a copy
of the installed modules' namespaces; a variant is switched on by setting the installed
``CfgProgram._compute_mask`` and ``cfg_program.PushdownAutomaton`` to its own.  Everything
else (classification, lexer, trie walks) is the installed package's, shared by both.

Per MaskBench schema of the sample, ``--reps`` rounds, the variants alternating (ABBA...): a
fresh compile (untimed) and every instance walked with a fresh matcher, each mask after the
first timed in thread CPU (gc off).  Reported: per variant the TBM mean, p99 and max of the
per-mask minimum over the rounds (the masks are the same sequence in both), the sum, and the
median per-schema ratio new/base.  A mask that differs between the variants is an error.
Usage::

    PYTHONPATH=/tmp/fc-verdict36 python benchmarks/kept_orders_ab.py --sample 100 --seed 3
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
    args = ap.parse_args()
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    import formcast.index.cfg_program as cp
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    base_root = Path(cp.__file__).resolve().parents[2]
    switch = {"base": False, "new": True}
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
                    cp._KEEP_ORDERS = switch[which]
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
            cp._KEEP_ORDERS = True
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
        f"_KEEP_ORDERS off vs on, {base_root}"
    )


if __name__ == "__main__":
    main()
