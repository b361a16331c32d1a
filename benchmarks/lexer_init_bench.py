"""Construction cost of :class:`~formcast.automata.lexer.LazyExpandedLexer` per MaskBench schema.

Compiles a sample of MaskBench schemas once (recording the grammar automaton each compile hands
to the lazy lexer), then times, in thread CPU, a lexer's construction plus the rows of its start
states (what the first mask asks of it) for each automaton, interleaved over ``--repeat``
passes.  Each pass uses *fresh copies* of the automata (new DFA objects, same tables) so a cache
keyed by object identity cannot hit; a cache keyed by content does, as across a server's
compiles of different schemas sharing JSON pieces.  Prints p50/p90/p99/mean in microseconds.

    PYTHONPATH=DIR python benchmarks/lexer_init_bench.py --sample 100 --seed 3 [--profile F]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent.parent / "shared/data/JSONSchemaBench/maskbench/data"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    import formcast
    from formcast import GrammarCompiler
    from formcast.automata import lexer as lexmod
    from formcast.index import cfg_program
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    autos = []
    real = lexmod.LazyExpandedLexer

    def spy(auto: object, *a: object, **k: object) -> object:
        autos.append(auto)
        return real(auto, *a, **k)  # type: ignore[arg-type]

    cfg_program.LazyExpandedLexer = spy  # type: ignore[assignment,misc]
    try:
        for f in files:
            doc = json.loads(f.read_text(encoding="utf-8"))
            with contextlib.suppress(formcast.errors.FormcastError):
                GrammarCompiler(vocab, cache_size=0, cache_dir=False).compile_json_schema(
                    doc.get("schema", doc)
                )
    finally:
        cfg_program.LazyExpandedLexer = real  # type: ignore[misc]

    def fresh(auto: Any) -> Any:
        dfas = tuple(
            type(d)(
                d.table.copy(),
                d.accepting.copy(),
                d.start,
                d.ref_rules,
                None if d.ref_table is None else d.ref_table.copy(),
            )
            for d in auto.dfas
        )
        new = type(auto)(auto.names, dfas, auto.refs, auto.boundary, auto.tail, auto.counts)
        object.__setattr__(new, "_analysis", auto.analysis)
        return new

    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
    times: list[float] = []
    clock = time.thread_time_ns
    for rep in range(args.repeat):
        copies = [fresh(a) for a in autos] if rep else autos
        for a in copies:
            _ = a.analysis  # type: ignore[attr-defined]  # (memoized per automaton: not ours)
            if prof:
                prof.enable()
            t0 = clock()
            lx = real(a, 30_000)  # type: ignore[arg-type]
            lx.ensure([lx.entry(r, a.dfas[r].start) for r in range(min(2, len(a.dfas)))])  # type: ignore[attr-defined]
            dt = clock() - t0
            if prof:
                prof.disable()
            if rep:
                times.append(dt / 1e3)
    if prof:
        prof.dump_stats(args.profile)
    times.sort()
    n = len(times)
    print(
        f"lexer init+start rows: autos={len(autos)} n={n} p50={times[n // 2]:.0f} "
        f"p90={times[int(n * 0.9)]:.0f} p99={times[min(n - 1, int(n * 0.99))]:.0f} "
        f"mean={sum(times) / n:.0f} us"
    )


if __name__ == "__main__":
    main()
