#!/usr/bin/env python3
"""Thread CPU of the region phases of chosen steps of grammar_bench's cold document (region39,
issue #31): per step, the mask and the time inside ``_search_region`` (outermost and nested
calls summed), ``_grown_region``, ``equivalence_classes`` (as cfg_program calls it),
``_region_digest`` and ``_walk_words``; optional hooks are skipped where a build lacks them.
One process per call (a cold document: run it alternately on two builds for an A/B)::

    PYTHONPATH=/tmp/fc-main39 python benchmarks/region39_grow_phases.py json_gbnf 35,37,71,74,91
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tokenizers import Tokenizer

import formcast.index.cfg_program as cp
import grammar_bench as gb

_T = time.thread_time_ns
_ACC: dict[str, float] = {}


def _wrap(owner: Any, name: str, key: str) -> None:
    real = getattr(owner, name, None)
    if real is None:
        return

    def timed(*args: Any) -> Any:
        t0 = _T()
        try:
            return real(*args)
        finally:
            _ACC[key] = _ACC.get(key, 0.0) + (_T() - t0) / 1e3

    setattr(owner, name, timed)


def main() -> None:
    workload, steps = sys.argv[1], {int(s) for s in sys.argv[2].split(",")}
    cls = cp._LazyExitSplitClassifier
    _wrap(cls, "_search_region", "search")
    _wrap(cls, "_grown_region", "grow")
    _wrap(cls, "_region_digest", "digest")
    _wrap(cls, "_walk_words", "walk")
    _wrap(cp, "equivalence_classes", "refine")
    wl = gb.make_workloads()[workload]
    tp = gb.tokenizer_path()
    doc = Tokenizer.from_file(tp).encode(wl.docs[0], add_special_tokens=False).ids
    ad = gb.FormcastAdapter(tp)
    ad.setup()
    ad.warmup()
    m = ad.matcher(ad.compile(wl))
    mask = ad.alloc()
    for step in range(len(doc) + 1):
        _ACC.clear()
        t0 = _T()
        ad.fill(m, mask)
        took = (_T() - t0) / 1e3
        if step in steps:
            print(step, round(took), {k: round(v) for k, v in sorted(_ACC.items())})
        if step == len(doc):
            break
        ad.accept(m, doc[step])


if __name__ == "__main__":
    main()
