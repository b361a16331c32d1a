"""Does a change of the JSON-schema front-end change what it emits?  Dumps, for N MaskBench
schemas, the lowered grammar's text (``str(grammar)``), the warnings and the fuel the lowering
charged (or the error), then compares two dumps.  Run it once per source tree::

    PYTHONPATH=/path/to/main/src python benchmarks/lowering_output_diff.py --out a.json
    PYTHONPATH=$PWD/src python benchmarks/lowering_output_diff.py --out b.json --compare a.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "JSONSchemaBench"
DATA = DATA / "maskbench" / "data"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", default="", help="an earlier dump: print the schemas that differ")
    args = ap.parse_args()
    from formcast.frontends.jsonschema.api import schema_to_grammar
    from formcast.limits import WorkBudget, compile_scope

    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    out: dict[str, Any] = {}
    for f in files:
        schema = json.loads(f.read_text(encoding="utf-8")).get("schema")
        budget = WorkBudget(1 << 62)
        try:
            with compile_scope(budget):
                grammar, ignored = schema_to_grammar(schema, marks=[])
            out[f.name] = [str(grammar), ignored, budget.used]
        except Exception as e:  # (the error is part of the output)
            out[f.name] = ["error", type(e).__name__, str(e)]
    Path(args.out).write_text(json.dumps(out))
    errors = sum(1 for v in out.values() if v[0] == "error")
    print(f"{len(out)} schemas ({errors} errors) -> {args.out}")
    if args.compare:
        old = json.loads(Path(args.compare).read_text())
        diff = sorted(k for k in out.keys() | old.keys() if out.get(k) != old.get(k))
        print(f"{len(diff)} differ" + (": " + ", ".join(diff[:20]) if diff else ""))
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
