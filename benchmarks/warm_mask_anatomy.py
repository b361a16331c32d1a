"""Anatomy of grammar_bench's warm masks (issue #31): what a warm mask recomputes, and the
warm p99 with each part taken away.

grammar_bench's *warm* run is a second document on a grammar whose per-state caches the
first document filled.  A warm mask is computed (not a cache hit) where the second
document reaches a parser state the first did not; its time is then (1) the classification
of stack tops first met (a trie walk per new lexer start: the builtin JSON grammar's
whitespace counts of an indented document after a compact one are new tops), (2) the check
of the candidate tokens that cross a rule return against the stack (``_verify_in_order``:
parser steps, new ones where the stack is new), (3) the rest (unions, copies).  Per
workload, in one process, thread CPU:

* ``as is``: the second document after the first (grammar_bench's warm run);
* ``tops pre-classified``: the same on a fresh compile with every stack top of both
  documents classified before the walk (so (1) is a look-up): the p99 of (2) + (3);
* ``masks pre-computed``: the second document walked again (every mask a cache hit).

It lists the slowest masks of the first two with their parts (timers add their own cost;
``--untimed``: the p99s without them, no parts; ``--max-ws=N|none``: the builtin JSON
grammar's whitespace bound, an experiment).  Usage::

    PYTHONPATH=/tmp/fc-native-X python benchmarks/warm_mask_anatomy.py [--untimed] json c_lang
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar_bench as gb


class _Parts:
    """Times classification, candidate checks and parser steps of one program's masks."""

    def __init__(self, prog: Any, timed: bool) -> None:
        import formcast.index.cfg_program as cp

        self.cp, self.timed = cp, timed
        self.cls_type, self.pda_type = type(prog._positions), type(prog.pda)
        self.orig = (self.cls_type.classify, cp._verify_in_order, self.pda_type.step)
        self.orig_looped = cp._verify_looped
        self.tops: set[tuple[int, int]] = set()
        self.now: dict[str, float] = {}

    def _add(self, key: str, t0: int) -> None:
        self.now[key] = self.now.get(key, 0) + (time.thread_time_ns() - t0) / 1e3

    def install(self) -> None:
        cls0, ver0, step0 = self.orig

        def cls(pos: Any, rule: int, state: int) -> Any:
            self.tops.add((rule, state))
            t0 = time.thread_time_ns()
            r = cls0(pos, rule, state)
            self._add("classify", t0)
            return r

        def ver(*a: Any) -> Any:
            t0 = time.thread_time_ns()
            r = ver0(*a)
            self._add("verify", t0)
            self.now["cands"] = self.now.get("cands", 0) + a[3].size
            return r

        def looped(*a: Any) -> Any:  # the grouped check: its distinct strings as cands
            t0 = time.thread_time_ns()
            r = self.orig_looped(*a)
            self._add("verify", t0)
            self.now["cands"] = self.now.get("cands", 0) + len(a[2][0])
            return r

        def step(pda: Any, s: Any, b: int) -> Any:
            fresh = (s, b) not in pda._steps
            t0 = time.thread_time_ns()
            r = step0(pda, s, b)
            self._add("steps", t0)
            self.now["new"] = self.now.get("new", 0) + fresh
            return r

        self.cls_type.classify = cls
        if self.timed:
            self.cp._verify_in_order = ver
            self.cp._verify_looped = looped
            self.pda_type.step = step

    def remove(self) -> None:
        self.cls_type.classify, self.cp._verify_in_order, self.pda_type.step = self.orig
        self.cp._verify_looped = self.orig_looped


def _walk(ad: Any, compiled: Any, ids: list[int], parts: _Parts | None) -> list[Any]:
    prog = compiled.program
    m = ad.matcher(compiled)
    mask = ad.alloc()
    rows = []
    gc.collect()
    gc.disable()
    try:
        for step in range(len(ids) + 1):
            if parts is not None:
                parts.now = {}
            mc = prog.mask_computations
            c0 = time.thread_time_ns()
            ad.fill(m, mask)
            us = (time.thread_time_ns() - c0) / 1e3
            rows.append((us, step, prog.mask_computations - mc, parts.now if parts else {}))
            if step == len(ids):
                break
            ad.accept(m, ids[step])
    finally:
        gc.enable()
    return rows


def _p99(rows: list[Any]) -> float:
    return float(np.percentile([r[0] for r in rows], 99))


def _anatomy(ad: Any, tok: Any, name: str, timed: bool) -> None:
    wl = gb.make_workloads()[name]
    docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
    compiled = ad.compile(wl)
    parts = _Parts(compiled.program, timed)
    parts.install()
    try:
        _walk(ad, compiled, docs[0], parts)
        first = set(parts.tops)
        as_is = _walk(ad, compiled, docs[1], parts)
        floor = _walk(ad, compiled, docs[1], None)
    finally:
        parts.remove()
    compiled2 = ad.compile(wl)
    _walk(ad, compiled2, docs[0], None)
    for rule, state in sorted(parts.tops):
        compiled2.program.classify(rule, state)
    parts2 = _Parts(compiled2.program, timed)
    parts2.install()
    try:
        pre = _walk(ad, compiled2, docs[1], parts2)
    finally:
        parts2.remove()
    computed = sum(1 for r in as_is if r[2])
    print(
        f"{name}: {len(as_is)} warm masks, {computed} computed, {len(parts.tops - first)} "
        f"stack tops first met; warm p99 us: as is {_p99(as_is):.0f}, tops pre-classified "
        f"{_p99(pre):.0f}, masks pre-computed {_p99(floor):.0f}"
    )
    if not timed:
        return
    for label, rows in (("as is", as_is), ("pre-classified", pre)):
        for us, st, _, got in sorted(rows, key=lambda r: -r[0])[:6]:
            print(
                f"   {label} step {st:3d} {us:6.0f} us: classify {got.get('classify', 0):5.0f},"
                f" verify {got.get('verify', 0):5.0f} ({got.get('cands', 0)} cands; step() "
                f"{got.get('steps', 0):4.0f} us, {got.get('new', 0)} new)"
            )


def main() -> None:
    args = sys.argv[1:]
    timed = "--untimed" not in args
    for arg in args:
        if arg.startswith("--max-ws="):  # an experiment: the builtin JSON grammar's ws bound
            import formcast.frontends.builtin_json as bj

            v = arg.split("=", 1)[1]
            bj.BUILTIN_JSON_BOUNDS["max_ws"] = None if v == "none" else int(v)
    names = [a for a in args if not a.startswith("--")] or ["json", "json_gbnf", "c_lang"]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(gb.tokenizer_path())
    ad = gb.FormcastAdapter(gb.tokenizer_path())
    ad.setup()
    ad.warmup()
    for name in names:
        _anatomy(ad, tok, name, timed)


if __name__ == "__main__":
    main()
