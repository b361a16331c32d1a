"""The classify kernel calls of a grammar_bench workload's first cold steps (walk38, session
24): per call its step, trie (nodes, strings), start, resume, the walk's live nodes and the
nodes a depth-first walk reads (live nodes' children), and its thread CPU replayed on fresh
copies of its arguments (rows are mutated by a call), optionally A/B against a second build
of the kernel (``--kernel PATH.so``: both replayed interleaved, results compared).

    PYTHONPATH=/tmp/fc-main python benchmarks/walk38_calls.py c1_arith --steps 2 [--reps 20]
        [--kernel /tmp/w38/_trie_walk.so] [--save /tmp/w38/c1.pkl]
"""

from __future__ import annotations

import argparse
import copy
import importlib.machinery
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _load_kernel(path: str) -> Any:
    loader = importlib.machinery.ExtensionFileLoader("formcast.vocab._trie_walk", path)
    spec = importlib.util.spec_from_file_location("formcast.vocab._trie_walk", path, loader=loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _copy_args(a: tuple[Any, ...]) -> tuple[Any, ...]:
    """A copy of _classify_call's arguments after the trie: arrays and the rows tuple copied
    (sharing kept: the table is one of the rows' tables), the vocabulary trie by reference."""
    memo: dict[int, Any] = {id(a[4]): a[4]}
    return tuple(copy.deepcopy(x, memo) for x in a)


def _live(trie: Any, table: np.ndarray, start: int) -> tuple[int, int]:
    """(live nodes, nodes a depth-first walk reads: those whose parent is live) of a walk
    from start, level by level on the flattened nodes (sentinel rows count as live)."""
    _, _, byte, _, parent, _ = trie._flat_nodes()
    state = np.zeros(parent.size, dtype=np.int64)
    done = 0
    while done < parent.size:  # (a level: the nodes whose parent is above `done`)
        stop = np.nonzero(parent[done:] >= done)[0]
        hi = done + (int(stop[0]) if stop.size else parent.size - done)
        pp = parent[done:hi]
        s = np.where(pp < 0, start, state[np.maximum(pp, 0)])
        state[done:hi] = np.where(s > 0, table[s, byte[done:hi]], 0)
        done = hi
    live = state != 0
    read = np.where(parent < 0, True, live[np.maximum(parent, 0)])
    return int(live.sum()), int(read.sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--kernel", default=None)
    ap.add_argument("--flush", action="store_true", help="evict caches before each replay")
    ap.add_argument("--touch", default="", help="after --flush, touch: memo,ftok,table,flat")
    ap.add_argument("--only", type=int, default=None, help="replay only this call")
    args = ap.parse_args()

    from tokenizers import Tokenizer

    import formcast.vocab.trie as tr
    import grammar_bench as gb

    wl = gb.make_workloads()[args.workload]
    tp = gb.tokenizer_path()
    tok = Tokenizer.from_file(tp)
    doc = tok.encode(wl.docs[0], add_special_tokens=False).ids
    ad = gb.FormcastAdapter(tp)
    ad.setup()
    ad.warmup()
    calls: list[tuple[int, float, tuple[Any, ...]]] = []
    real = tr._classify_call
    step_now = [0]

    def wrap(*a: Any) -> Any:
        if step_now[0] >= args.steps:
            return real(*a)
        saved = _copy_args(a[1:])  # (the tries by reference)
        t0 = time.thread_time_ns()
        got = real(*a)
        calls.append((step_now[0], (time.thread_time_ns() - t0) / 1e3, (a[0], *saved)))
        return got

    # (walk39: the lazy classifier's resumable walks go through ClassifyWalker.walk; captured
    # in _classify_call's argument order: trie, table, start, pending, sink, vocab trie,
    # words, string map, drop, rows, resume, resumable)
    trie_of: dict[int, Any] = {}
    real_walker = tr.TokenTrie.classify_walker
    real_walk = tr.ClassifyWalker.walk

    def walker(self: Any, vocab_trie: Any, n_words: int, own: bool) -> Any:
        got = real_walker(self, vocab_trie, n_words, own)
        if got is not None:
            trie_of[id(got)] = self
        return got

    def walk(self: Any, table: Any, start: int, pending: Any, sink: int, *rest: Any) -> Any:
        words, smap, drop, rows, resume = rest
        if step_now[0] >= args.steps:
            return real_walk(self, table, start, pending, sink, *rest)
        a = (table, start, pending, sink, self.vocab_trie, words, smap, drop, rows, resume, True)
        saved = _copy_args(a)
        t0 = time.thread_time_ns()
        got = real_walk(self, table, start, pending, sink, *rest)
        calls.append((step_now[0], (time.thread_time_ns() - t0) / 1e3, (trie_of[id(self)], *saved)))
        return got

    tr._classify_call = wrap
    tr.TokenTrie.classify_walker = walker  # type: ignore[method-assign]
    tr.ClassifyWalker.walk = walk  # type: ignore[method-assign]
    comp = ad.compile(wl)
    m = ad.matcher(comp)
    mask = ad.alloc()
    for step in range(min(len(doc), args.steps)):
        step_now[0] = step
        ad.fill(m, mask)
        ad.accept(m, doc[step])
    step_now[0] = 10**9
    tr._classify_call = real
    tr.TokenTrie.classify_walker = real_walker  # type: ignore[method-assign]
    tr.ClassifyWalker.walk = real_walk  # type: ignore[method-assign]
    kerns = [("base", tr._KERNEL)]
    if args.kernel:
        kerns.append(("new", _load_kernel(args.kernel)))

    flush = np.zeros(6 << 20, dtype=np.int64) if args.flush else None

    def replay(kern: Any, c: tuple[Any, ...]) -> tuple[float, Any]:
        trie, rest = c[0], c[10:]
        a = _copy_args(c[1:])
        table, start, pending, sink, vocab_trie, words, smap, drop, rows = a[:9]
        if rows is not None:  # (the walked table is one of the rows' tables, as in situ)
            table = rows.cut if c[1] is c[9].cut else rows.lex
            pending = rows.pending
        resume = rest[0] if rest else None
        resumable = rest[1] if len(rest) > 1 else False
        saved = tr._KERNEL
        tr._KERNEL = kern
        trie._heads.clear()
        try:
            head = trie._classify_head(vocab_trie, int(words.size), smap is None)
            handle, memo = head
            max_reach = tr._NATIVE_WALK_MAX_REACH
            if memo:
                max_reach = max(max_reach, trie.total_nodes // tr._MEMO_WALK_MAX_SHARE)
            if flush is not None:
                flush[:] += 1  # (a pass over 48 MB: the caches cold, as in situ)
                mm = trie._memo
                parts: list[Any] = []
                if "memo" in args.touch and mm is not None:
                    parts += [mm.pos, mm.byte, mm.depth, mm.size, mm.own, mm.str, mm.sel]
                if "sets" in args.touch and mm is not None:
                    parts += [mm.sets]
                if "ftok" in args.touch:
                    parts += [vocab_trie.first_token]
                if "table" in args.touch:
                    parts += [table, pending]
                if "flat" in args.touch:
                    parts += [*trie._flat_nodes()[:5], trie._below_second]
                for x in parts:
                    x.view(np.uint8).sum()
            t0 = time.thread_time_ns()
            if resumable:
                got = kern.classify_from(
                    handle, table, start, pending, sink, smap, drop, words, max_reach, rows, resume
                )
            else:
                got = kern.classify(
                    handle, table, start, pending, sink, smap, drop, words, max_reach, rows
                )
            t = (time.thread_time_ns() - t0) / 1e3
        finally:
            tr._KERNEL = saved
            trie._heads.clear()
        return t, (bytes(got[0]), bytes(got[1]), words.tobytes())

    print(f"{args.workload}: {len(calls)} calls in {args.steps} steps")
    for k, (step, us, c) in enumerate(calls):
        if args.only is not None and k != args.only:
            continue
        trie, table, start = c[0], c[1], c[2]
        resume = c[10] if len(c) > 10 else None
        live, read = _live(trie, table, start) if resume is None else (-1, -1)
        times: dict[str, list[float]] = {n: [] for n, _ in kerns}
        outs: dict[str, Any] = {}
        for _ in range(args.reps):
            for n, kern in kerns:
                t, out = replay(kern, c)
                times[n].append(t)
                outs[n] = out
        same = "" if len(kerns) == 1 else (" same" if outs["base"] == outs["new"] else " DIFF")
        ts = " ".join(f"{n} {min(v):7.1f}/{float(np.median(v)):7.1f}" for n, v in times.items())
        print(
            f"#{k} step {step} in situ {us:7.1f} us | trie {trie.total_nodes} nodes "
            f"{len(trie.strings)} str | start {start} resume "
            f"{'-' if resume is None else len(resume) // 2} | live {live} read {read} | "
            f"replay min/med {ts}{same}"
        )


if __name__ == "__main__":
    main()
