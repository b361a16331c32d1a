#!/usr/bin/env python3
"""Where the lazy classifier's first visits go (glue38, #31): tbm_parts.py's run with light
wrappers (thread CPU, ~2.5 us each: ``thread_time_ns`` ~1 us a call) on ``_classify``, the
kernel's ``classify_from``/``write_state``, regions, digests, stops, ``_walk_words`` and their
glue; prints each sum and the rest of ``_classify``::

    PYTHONPATH=/tmp/fc-glue38 python benchmarks/glue38_classify_split.py --sample 100 --seed 3
"""

import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import patch_guard
import tbm_parts

patch_guard.require_patchable("glue38_classify_split.py", "timing the classifier's methods")
from formcast.index import cfg_program as cp  # noqa: E402
from formcast.vocab import trie as tr  # noqa: E402

clk = time.thread_time_ns
acc = collections.Counter()
cnt = collections.Counter()


def wrap(owner, name, label):
    fn = getattr(owner, name)

    def w(*a, **k):
        t = clk()
        try:
            return fn(*a, **k)
        finally:
            acc[label] += clk() - t
            cnt[label] += 1

    setattr(owner, name, w)


class K:
    def __init__(s, k):
        s._k = k

    def __getattr__(s, n):
        return getattr(s._k, n)

    def classify_from(s, *a):
        t = clk()
        try:
            return s._k.classify_from(*a)
        finally:
            acc["kernel"] += clk() - t
            cnt["kernel"] += 1

    def write_state(s, *a):
        t = clk()
        try:
            return s._k.write_state(*a)
        finally:
            acc["write_state"] += clk() - t
            cnt["write_state"] += 1


tr._KERNEL = K(tr._KERNEL)
wrap(cp._LazyExitSplitClassifier, "_classify", "_classify")
wrap(cp._LazyExitSplitClassifier, "_new_region", "region")
wrap(cp._LazyExitSplitClassifier, "_region_digest", "digest")
wrap(cp._LazyExitSplitClassifier, "_build_stops", "build_stops")
wrap(cp._LazyExitSplitClassifier, "_ensure", "ensure")
wrap(cp._LazyExitSplitClassifier, "_walk_words", "walk_words")
wrap(cp.CfgProgram, "_compute_mask", "compute_mask")
wrap(cp, "classify_walk_resume", "cwr")
wrap(cp._LazyExitSplitClassifier, "_walk_resumed", "walk_resumed")
wrap(cp._LazyExitSplitClassifier, "_walk_rows", "walk_rows")
wrap(cp._LazyExitSplitClassifier, "_tables", "tables")
sys.argv = ["tbm_parts.py", *sys.argv[1:]]
tbm_parts.main()
for k in acc:
    print(f"{k:14s} {acc[k] / 1e6:8.1f} ms {cnt[k]:6d}")
print(
    "glue(_classify - kernel - ws - region - digest - build_stops - ensure) %.1f"
    % (
        (
            acc["_classify"]
            - acc["kernel"]
            - acc["write_state"]
            - acc["region"]
            - acc["digest"]
            - acc["build_stops"]
            - acc["ensure"]
        )
        / 1e6
    )
)
print(
    "walk_words - kernel - build_stops %.1f"
    % ((acc["walk_words"] - acc["kernel"] - acc["build_stops"]) / 1e6)
)
