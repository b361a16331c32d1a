#!/usr/bin/env python3
"""MaskBench's ``LazyExpandedLexer.ensure`` calls (the stops' rows, #31), recorded and
replayed on fresh lexers (stops39; ensure_replay_tbm.py's recording).

Records (per schema of ``maskbench.select_files``: compile, first mask and every instance's
masks in one process, as tbm_parts.py) each lexer's ``ensure`` calls, then replays them
``--reps`` times on a fresh ``LazyExpandedLexer(auto, cap)`` (construction untimed), per call
the least thread CPU over the reps; prints the sum, sums and medians by (largest row's members
capped at 5, a rule met for the first time), and the SHA-256 over every lexer's final state
(equal across builds = the same rows, numbering and unions).  A/B: processes of the two
builds alternated.  ``TOPS35_PERF_CTL`` (and ``TOPS35_PERF_ACK``): perf's control (and ack)
fifo, sampling enabled around the replays only (garbage collection off there, as in the
benchmarks).

    PYTHONPATH=DIR python benchmarks/stops39_replay.py --sample 100 --seed 3 --reps 5
"""

from __future__ import annotations

import argparse
import collections
import gc
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench


def _digest(lex: Any) -> str:
    h = hashlib.sha256()
    n = lex.size
    for arr in (lex.table[:n], lex.split[:n], lex.built[:n]):
        h.update(arr.tobytes())
    h.update(repr((n, sorted(lex.ids.items()), lex.sets)).encode())
    return h.hexdigest()


def _record(args: argparse.Namespace) -> list[tuple[Any, int, list[Any]]]:
    import numpy as np
    from tokenizers import Tokenizer

    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.automata.lexer import LazyExpandedLexer
    from formcast.vocab.loaders import load_vocabulary
    from patch_guard import require_patchable

    # where the lexer is compiled, its class is native: callers reach ensure through the
    # vtable and never see the spy
    require_patchable(
        "stops39_replay.py",
        "recording (spies on LazyExpandedLexer.ensure)",
        "formcast.automata.lexer",
    )
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, vocab.vocab_size)
    real = LazyExpandedLexer.ensure
    rec: dict[int, tuple[Any, list[Any]]] = {}

    def spy(self: Any, states: Any) -> bool:
        entry = rec.setdefault(id(self), (self, []))
        entry[1].append(np.array(states, dtype=np.int64, copy=True))
        return real(self, states)

    LazyExpandedLexer.ensure = spy  # type: ignore[method-assign]
    lexers: list[tuple[Any, int, list[Any]]] = []
    for path in maskbench.select_files(args):
        task = maskbench.prepare(path, tok)
        rec.clear()
        try:
            grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(task["schema"])
            GrammarMatcher(grammar).fill_next_token_bitmask(mask, 0)
        except Exception:
            continue
        for inst in task["instances"]:
            m = GrammarMatcher(grammar)
            for token in [*inst["ids"], None]:
                try:
                    m.fill_next_token_bitmask(mask, 0)
                except Exception:
                    break
                if token is None:
                    break
                try:
                    ok = m.accept_token(token)
                except Exception:
                    ok = False
                if not ok:
                    break
        for lex, calls in rec.values():
            lexers.append((lex.auto, lex.max_states, calls))
    LazyExpandedLexer.ensure = real  # type: ignore[method-assign]
    return lexers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--files", default="")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    maskbench._single_thread_env()
    from formcast.automata.lexer import LazyExpandedLexer

    lexers = _record(args)
    ctl = os.environ.get("TOPS35_PERF_CTL")
    perf = open(ctl, "wb", buffering=0) if ctl else None  # noqa: SIM115
    ack_path = os.environ.get("TOPS35_PERF_ACK")
    ack = open(ack_path, "rb", buffering=0) if ack_path else None  # noqa: SIM115

    def _perf(cmd: bytes) -> None:
        if perf is not None:
            perf.write(cmd)
            if ack is not None:
                ack.read(5)  # (perf's "ack\n\0": the command took effect)

    clock = time.thread_time_ns
    per: list[tuple[tuple[int, bool], float]] = []
    digests: list[str] = []
    for auto, cap, calls in lexers:
        best = [float("inf")] * len(calls)
        keys: list[tuple[int, bool]] = [(0, False)] * len(calls)
        dig = ""
        for _ in range(args.reps):
            lex = LazyExpandedLexer(auto, cap)
            gc.collect()
            gc.disable()  # (as the benchmarks' timed masks)
            _perf(b"enable\n")
            for i, states in enumerate(calls):
                h = lex._helpers
                u0 = h.unfilled if h is not None else 0
                t = clock()
                lex.ensure(states)
                dt = (clock() - t) / 1e3
                best[i] = min(best[i], dt)
                h = lex._helpers
                todo = [int(s) for s in states.tolist()]
                n_glob = int(lex.offsets[-1])
                m = max(
                    (len(h.closure(s)) if s < n_glob else len(lex.sets[s - n_glob])) for s in todo
                )
                keys[i] = (min(m, 5), u0 - h.unfilled > 0)
            _perf(b"disable\n")
            gc.enable()
            dig = _digest(lex)
        digests.append(dig)
        per.extend(zip(keys, best, strict=True))
    total = sum(t for _, t in per)
    print(f"lexers {len(lexers)} calls {len(per)} sum {total / 1e3:.2f} ms")
    by: dict[tuple[int, bool], list[float]] = collections.defaultdict(list)
    for k, t in per:
        by[k].append(t)
    for k in sorted(by):
        ts = by[k]
        print(
            f"  members {k[0]} new rules {k[1]!s:5s} n={len(ts):5d} sum {sum(ts) / 1e3:8.2f} ms "
            f"p50 {statistics.median(ts):7.1f} us"
        )
    print("digest " + hashlib.sha256("".join(digests).encode()).hexdigest())


if __name__ == "__main__":
    main()
