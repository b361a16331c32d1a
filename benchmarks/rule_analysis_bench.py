"""Thread CPU time of the grammar analyses and augmented tables over a MaskBench sample.

Compiles each schema of a MaskBench sample (``benchmarks/maskbench.py``'s files), keeps its
rule automata, then times, per automaton, :meth:`GrammarAnalysis.of` (FIRST / FOLLOW, what a
program's set-up computes first) and :func:`split_bytes`, and :func:`_augmented_table` on
counted-window sizes (774, 3096, 6192 rows: the windows of long strings, built at mask time),
each result kept (fresh memory, as at mask time).  Prints p50 / p90 / p99 in microseconds.

    PYTHONPATH=/tmp/fc-main python benchmarks/rule_analysis_bench.py --sample 150 --seed 5
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench as mb
from formcast import GrammarCompiler
from formcast.automata.analysis import GrammarAnalysis, split_bytes
from formcast.automata.rules import GrammarAutomaton
from formcast.index import compiler
from formcast.index.cfg_program import _augmented_table
from formcast.vocab.loaders import load_vocabulary


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--data", default=str(mb.DATA_DIR))
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--files", default="")
    args = ap.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(mb.tokenizer_path())
    vocab = load_vocabulary("llama3")
    autos: list[GrammarAutomaton] = []
    build = compiler.compile_grammar_automaton

    def keep(*a: object, **k: object) -> GrammarAutomaton:
        auto = build(*a, **k)  # type: ignore[arg-type]
        autos.append(auto)
        return auto

    compiler.compile_grammar_automaton = keep  # type: ignore[assignment]
    for path in mb.select_files(args):
        data = mb.prepare(path, tok)
        if data is None or not data.get("instances"):
            continue
        try:
            GrammarCompiler(vocab, cache_size=0).compile_json_schema(data["schema"])
        except Exception:
            continue
    compiler.compile_grammar_automaton = build  # type: ignore[assignment]
    tt = time.thread_time_ns
    t_an: list[float] = []
    t_sb: list[float] = []
    for auto in autos:
        t = tt()
        GrammarAnalysis.of(auto)
        t_an.append((tt() - t) / 1e3)
        t = tt()
        split_bytes(auto)
        t_sb.append((tt() - t) / 1e3)
    print(f"automata {len(autos)}")
    for name, v in (("GrammarAnalysis.of", t_an), ("split_bytes", t_sb)):
        print(
            f"{name:20s} p50 {pct(v, 0.5):7.0f} p90 {pct(v, 0.9):7.0f} p99 {pct(v, 0.99):7.0f} us"
        )
    rng = np.random.default_rng(1)
    for n in (774, 3096, 6192):
        table = rng.integers(0, n, size=(n, 256)).astype(np.int32)
        table[rng.random((n, 256)) < 0.7] = 0
        table[0] = 0
        split = rng.random((n, 256)) < 0.2
        kept, ts = [], []
        for _ in range(7):
            t = tt()
            kept.append(_augmented_table(table, split))
            ts.append((tt() - t) / 1e3)
        print(f"_augmented_table {n:5d} rows: min {min(ts):7.0f} median {pct(ts, 0.5):7.0f} us")


if __name__ == "__main__":
    main()
