"""The first mask's ``LazyExpandedLexer`` calls, replayed on fresh lexers (issue #31, ensure33).

Per MaskBench schema: compile (fresh ``GrammarCompiler``, no cache), record the lexer calls of
the first mask (``ensure`` with its states), then replay them ``--reps``
times on a fresh ``LazyExpandedLexer(auto)`` each (construction untimed) and keep the least
thread CPU of the calls together: a low-noise measure of the first mask's lexer work on a
loaded machine.  Works on the compiled build (the lexer class is an ordinary Python class).
Also prints the SHA-256 of every lexer's state after the replay (table, split, built rows up
to ``size``, ``size``, the union ids): equal digests across builds = the same rows built.

    PYTHONPATH=DIR python benchmarks/ensure_replay.py --sample 150 --seed 5 [--reps 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent.parent / "shared/data/JSONSchemaBench/maskbench/data"


def _digest(lex: Any) -> str:
    h = hashlib.sha256()
    n = lex.size
    for arr in (lex.table[:n], lex.split[:n], lex.built[:n]):
        h.update(arr.tobytes())
    h.update(repr((n, sorted(lex.ids.items()), lex.sets)).encode())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None, help="write per-schema times (us) and digests here")
    ap.add_argument(
        "--other",
        default=None,
        help="another lexer.py (pure): replayed in the same process, alternating per rep; "
        "prints per-schema paired ratios (this tree's / the other's)",
    )
    args = ap.parse_args()
    import numpy as np

    import formcast
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.automata.lexer import LazyExpandedLexer
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    mask = allocate_token_bitmask(1, vocab.vocab_size)
    calls: list[Any] = []
    autos: list[Any] = []
    real_ensure = LazyExpandedLexer.ensure

    def spy_ensure(self: Any, states: Any) -> bool:
        if not autos or autos[-1] is not self:
            autos.append(self)
        calls.append(np.array(states, dtype=np.int64, copy=True))
        return real_ensure(self, states)

    classes = [LazyExpandedLexer]
    if args.other:
        import importlib.util

        spec = importlib.util.spec_from_file_location("formcast.automata._lexer_other", args.other)
        assert spec is not None
        assert spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        classes.append(mod.LazyExpandedLexer)
    pairs: list[tuple[float, float, int]] = []
    out: dict[str, Any] = {}
    for f in files:
        doc = json.loads(f.read_text(encoding="utf-8"))
        try:
            c = GrammarCompiler(vocab, cache_size=0, cache_dir=False).compile_json_schema(
                doc.get("schema", doc)
            )
        except formcast.errors.FormcastError:
            continue
        calls.clear()
        autos.clear()
        LazyExpandedLexer.ensure = spy_ensure  # type: ignore[method-assign]
        try:
            GrammarMatcher(c).fill_next_token_bitmask(mask, 0)
        finally:
            LazyExpandedLexer.ensure = real_ensure  # type: ignore[method-assign]
        if not calls or len(autos) != 1:
            out[f.stem] = {"us": 0.0, "digest": "", "states": 0}
            continue
        auto, cap = autos[0].auto, autos[0].max_states
        bests = [float("inf")] * len(classes)
        digests = [""] * len(classes)
        for _ in range(args.reps):
            for k, cls in enumerate(classes):
                lex = cls(auto, cap)
                t0 = time.thread_time_ns()
                for states in calls:
                    lex.ensure(states)
                bests[k] = min(bests[k], (time.thread_time_ns() - t0) / 1e3)
                digests[k] = _digest(lex)
        if len(classes) == 2:
            assert digests[0] == digests[1], f.stem
            if bests[1] > 50:
                pairs.append((bests[0], bests[1], int(lex.offsets[-1])))
        out[f.stem] = {"us": bests[0], "digest": digests[0], "states": int(lex.offsets[-1])}
    for name, lo, hi in (("all", 0, 1 << 40), ("<1024", 0, 1024), (">=1024", 1024, 1 << 40)):
        sel = [(a, b) for a, b, n in pairs if lo <= n < hi]
        if not sel:
            continue
        r = sorted(a / b for a, b in sel)
        sa, sb = sum(a for a, _ in sel), sum(b for _, b in sel)
        print(
            f"paired {name} (other > 50 us) n={len(r)} ratio p25={r[len(r) // 4]:.3f} "
            f"p50={r[len(r) // 2]:.3f} p75={r[3 * len(r) // 4]:.3f} sum {sa / 1e3:.2f} vs "
            f"{sb / 1e3:.2f} ms"
        )
    ts = sorted(v["us"] for v in out.values())
    n = len(ts)
    big = sorted(v["us"] for v in out.values() if v["states"] >= 1024)
    small = sorted(v["us"] for v in out.values() if v["us"] > 0 and v["states"] < 1024)
    print(
        f"n={n} p50={ts[n // 2]:.1f} p75={ts[int(n * 0.75)]:.1f} p90={ts[int(n * 0.9)]:.1f} "
        f"p99={ts[min(n - 1, int(n * 0.99))]:.1f} max={ts[-1]:.1f} sum={sum(ts) / 1e3:.2f} ms"
    )
    print(
        f"small (<1024, built some row) n={len(small)} sum={sum(small) / 1e3:.2f} ms "
        f"p50={small[len(small) // 2] if small else 0:.1f}"
    )
    print(f"large (>=1024) n={len(big)} sum={sum(big) / 1e3:.2f} ms")
    total = hashlib.sha256("".join(v["digest"] for v in out.values()).encode()).hexdigest()
    print(f"digest {total}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=0))


if __name__ == "__main__":
    main()
