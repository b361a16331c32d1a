"""``LazyExpandedLexer.ensure`` calls of grammar_bench's formcast runs, by batch size (row33).

Wraps ``ensure`` (thread CPU per call, the number of unbuilt states passed), runs
``grammar_bench.run_worker`` for each workload in this process, and prints per batch size
(1, 2, 3-4, 5-8, 9+, 0 = nothing to build) the calls and their total/max microseconds, plus the
workload's cold p99 mask (thread CPU).  Works on the compiled build.

    PYTHONPATH=DIR python benchmarks/ensure_histogram.py [json json_gbnf c_lang]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    import grammar_bench
    from formcast.automata.lexer import LazyExpandedLexer

    real = LazyExpandedLexer.ensure
    rec: list[tuple[int, float]] = []

    def spy(self: Any, states: Any) -> bool:
        arr = np.asarray(states, dtype=np.int64)
        k = len({int(s) for s in arr.tolist() if not self.built[s]})
        c0 = time.thread_time_ns()
        out: bool = real(self, states)
        rec.append((k, (time.thread_time_ns() - c0) / 1e3))
        return out

    LazyExpandedLexer.ensure = spy  # type: ignore[method-assign]
    bins = [(0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, 10**9)]
    for wl in sys.argv[1:] or ["json", "json_gbnf", "c_lang"]:
        rec.clear()
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            grammar_bench.run_worker("formcast", wl, f.name, False)
            res = json.loads(Path(f.name).read_text())
        cold = res.get("cold_cpu", {})
        parts = []
        for lo, hi in bins:
            ts = [t for k, t in rec if lo <= k <= hi]
            if ts:
                parts.append(
                    f"k{lo}-{hi if hi < 10**9 else ''}: n={len(ts)} "
                    f"sum={sum(ts):.0f} max={max(ts):.0f}"
                )
        tot = sum(t for k, t in rec if k)
        print(
            f"{wl}: cold_cpu p99={cold.get('p99_us')} max={cold.get('max_us')} "
            f"ensure_sum(k>0)={tot:.0f}us | " + "; ".join(parts)
        )


if __name__ == "__main__":
    main()
