#!/usr/bin/env python3
"""The lexer rows a stop builds (glue38, #31): tbm_parts.py's run with
``LazyExpandedLexer._union_rows_small`` timed (thread CPU) by (rows, members capped at 5,
new rules met); prints the calls, sum and median per bucket::

    PYTHONPATH=/tmp/fc-glue38 python benchmarks/glue38_stop_rows.py --sample 100 --seed 3
"""

import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tbm_parts
from formcast.automata import lexer as lx

clk = time.thread_time_ns
by = collections.defaultdict(list)
fn = lx.LazyExpandedLexer._union_rows_small


def w(self, h, batch):
    u0 = h.unfilled
    t = clk()
    try:
        return fn(self, h, batch)
    finally:
        dt = clk() - t
        m = max(len(b) for b in batch)
        by[(len(batch), min(m, 5), u0 - h.unfilled > 0)].append(dt)


lx.LazyExpandedLexer._union_rows_small = w
sys.argv = ["tbm_parts.py", *sys.argv[1:]]
tbm_parts.main()
for k in sorted(by):
    print(
        "rows,members,newrules",
        k,
        len(by[k]),
        f"sum ms {sum(by[k]) / 1e6:.1f} p50 us {statistics.median(by[k]) / 1e3:.1f}",
    )
