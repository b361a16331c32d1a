"""First lowerings of JSON schemas, by stage, in thread CPU time (#31's front-end share of TTFM).

For N MaskBench schemas, each lowered ONCE (the first lowering of that schema in the process,
as a server sees a schema it has not compiled; the process-wide caches of parsed patterns and
formats hold what the schemas before it left there, after a warm-up schema): keying
(``JsonSchemaSpec.of`` + ``cache_key``: reading the schema, its canonical JSON, the digest),
normalizing (``Normalizer.run``), emitting (``Emitter.grammar`` less the clean-up) and the
clean-up (``emit._finish``).  Prints p50/p99/max in ms per stage and of the front-end in all
(keying + lowering); ``--json`` writes the per-schema times (to compare two builds run
interleaved)::

    PYTHONPATH=DIR python benchmarks/lowering_first.py --sample 150 --seed 5 [--json out.json]
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
STAGES = ("keying", "normalize", "emit", "finish", "lowering", "front")


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    from formcast._native import native_summary
    from formcast.errors import FormcastError
    from formcast.frontends.jsonschema import emit as emit_mod
    from formcast.frontends.jsonschema.emit import Emitter
    from formcast.frontends.jsonschema.normalize import Normalizer
    from formcast.index.spec import JsonSchemaSpec
    from formcast.limits import CompileLimits, WorkBudget, compile_scope

    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    clock = time.thread_time_ns
    finish_ns = [0]
    real_finish = emit_mod._finish

    def timed_finish(*a: Any, **k: Any) -> Any:
        t0 = clock()
        try:
            return real_finish(*a, **k)
        finally:
            finish_ns[0] += clock() - t0

    emit_mod._finish = timed_finish  # type: ignore[assignment]

    def run(schema: Any) -> dict[str, float]:
        finish_ns[0] = 0
        t0 = clock()
        spec = JsonSchemaSpec.of(schema)
        spec.cache_key()
        t1 = clock()
        with compile_scope(WorkBudget(1 << 62, None)):
            norm = Normalizer(spec.loaded.value, spec.options, spec.loaded.local)
            root = norm.run()
            t2 = clock()
            Emitter(norm, spec.options, []).grammar(root)
            t3 = clock()
        f = finish_ns[0]
        ms = {
            "keying": (t1 - t0) / 1e6,
            "normalize": (t2 - t1) / 1e6,
            "emit": (t3 - t2 - f) / 1e6,
            "finish": f / 1e6,
            "lowering": (t3 - t1) / 1e6,
            "front": (t3 - t0) / 1e6,
        }
        return ms

    _ = CompileLimits
    run({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}})
    rows: dict[str, dict[str, float]] = {}
    for f in files:
        schema = json.loads(f.read_text(encoding="utf-8")).get("schema")
        try:
            rows[f.name] = run(schema)
        except (FormcastError, RecursionError, ValueError):
            continue
    print(native_summary())
    print(f"{len(rows)} schemas (seed {args.seed})")
    for st in STAGES:
        xs = [r[st] for r in rows.values()]
        print(
            f"{st:10s} p50 {_pct(xs, 0.5):7.3f}  p90 {_pct(xs, 0.9):7.3f}  "
            f"p99 {_pct(xs, 0.99):7.3f}  max {max(xs):7.3f}  sum {sum(xs):8.1f} ms"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
