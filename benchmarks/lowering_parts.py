"""Where the JSON-schema front-end's first lowering goes, by part (#31; docs/notes/front34.md).

Like ``lowering_first.py`` (first lowering of each MaskBench schema, thread CPU), with the
emitter's named parts wrapped (inclusive times: ``not_in_set``, ``_members_after_lead``,
``extra_cells``, each IR pass of ``_finish``).  Prints, for the schemas between the ``--lo``
and ``--hi`` quantiles of front-end time, the mean ms of each part::

    PYTHONPATH=DIR python benchmarks/lowering_parts.py --sample 150 --seed 5
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--lo", type=float, default=0.3)
    ap.add_argument("--hi", type=float, default=0.7)
    args = ap.parse_args()
    from formcast.errors import FormcastError
    from formcast.frontends.jsonschema import emit as emit_mod
    from formcast.frontends.jsonschema.emit import Emitter
    from formcast.frontends.jsonschema.normalize import Normalizer
    from formcast.index.spec import JsonSchemaSpec
    from formcast.limits import WorkBudget, compile_scope

    clock = time.thread_time_ns
    acc: dict[str, int] = {}

    def wrap(owner: Any, name: str) -> None:
        real = getattr(owner, name)

        def timed(*a: Any, **k: Any) -> Any:
            t0 = clock()
            try:
                return real(*a, **k)
            finally:
                acc[name] = acc.get(name, 0) + clock() - t0

        setattr(owner, name, timed)

    for n in (
        "not_in_set",
        "_finish",
        "rule_refs",
        "productive_rules",
        "drop_unproductive",
        "inline_single_use",
        "drop_unreachable",
    ):
        wrap(emit_mod, n)
    for n in ("_members_after_lead", "extra_cells", "array_body"):
        wrap(Emitter, n)

    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))

    def run(schema: Any) -> dict[str, float]:
        acc.clear()
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
        out = {k: v / 1e6 for k, v in acc.items()}
        out.update(
            keying=(t1 - t0) / 1e6,
            normalize=(t2 - t1) / 1e6,
            emit_all=(t3 - t2) / 1e6,
            front=(t3 - t0) / 1e6,
        )
        return out

    run({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}})
    rows = []
    for f in files:
        schema = json.loads(f.read_text(encoding="utf-8")).get("schema")
        try:
            rows.append(run(schema))
        except (FormcastError, RecursionError, ValueError):
            continue
    rows.sort(key=lambda r: r["front"])
    band = rows[int(args.lo * len(rows)) : int(args.hi * len(rows))]
    keys: list[str] = []
    for r in band:
        keys += [k for k in r if k not in keys]
    lo, hi = band[0]["front"], band[-1]["front"]
    print(f"{len(band)} of {len(rows)} schemas, front {lo:.3f}..{hi:.3f} ms")
    for k in keys:
        xs = [r.get(k, 0.0) for r in band]
        used = sum(1 for r in band if k in r)
        print(f"{k:22s} mean {sum(xs) / len(xs):7.3f} ms  (in {used})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
