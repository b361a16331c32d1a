"""``inline_single_use`` alone, on the rule tables the JSON-schema front-end hands it, in thread
CPU time (#31; docs/notes/front32.md).

Lowers N MaskBench schemas once, capturing each call's inputs (by wrapping
``emit.inline_single_use``), then times the pass on fresh copies of each table: the minimum of
``--repeat`` calls per table.  Prints p50/p99/max/sum in ms; ``--json`` writes the per-table
times (to compare two builds run interleaved)::

    PYTHONPATH=DIR python benchmarks/lowering_inline.py --sample 150 --seed 5 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "JSONSchemaBench"
DATA = DATA / "maskbench" / "data"


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    from formcast._native import native_summary
    from formcast.frontends.jsonschema import emit as emit_mod
    from formcast.frontends.jsonschema.api import schema_to_grammar
    from formcast.ir.passes import inline_single_use

    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    inputs: list[tuple[dict[str, Any], dict[str, list[str]], str, dict[str, int]]] = []

    def grab(by_name: Any, refs: Any, start: str, **kw: int) -> None:
        inputs.append((dict(by_name), {k: list(v) for k, v in refs.items()}, start, kw))
        inline_single_use(by_name, refs, start, **kw)

    emit_mod.inline_single_use = grab  # type: ignore[assignment]
    for f in files:
        try:
            schema_to_grammar(json.loads(f.read_text(encoding="utf-8")).get("schema"), marks=[])
        except Exception:  # (schemas that do not lower are skipped)
            continue
    clock = time.thread_time_ns
    times: list[float] = []
    for by_name, refs, start, kw in inputs:
        best = 1 << 62
        for _ in range(args.repeat):
            table, rs = dict(by_name), {k: list(v) for k, v in refs.items()}
            t0 = clock()
            inline_single_use(table, rs, start, **kw)
            best = min(best, clock() - t0)
        times.append(best / 1e6)
    print(native_summary())
    print(
        f"inline_single_use over {len(times)} tables: p50 {_pct(times, 0.5):.3f}  "
        f"p99 {_pct(times, 0.99):.2f}  max {max(times):.1f}  sum {sum(times):.1f} ms"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(times), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
