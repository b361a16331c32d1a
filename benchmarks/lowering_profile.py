"""cProfile of the JSON-schema front-end's first lowerings (emit33, #31).

Lowers N MaskBench schemas once each (timing emit, thread CPU), picks those between the
``--lo`` and ``--hi`` quantiles of emit time, then profiles their FIRST
lowerings (normalize + emit + clean-up) in a fresh process (``--warm``: repeated lowerings in
the timing process instead)::

    PYTHONPATH=DIR python benchmarks/lowering_profile.py --sample 150 --seed 5 [--top 40]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
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
    ap.add_argument("--lo", type=float, default=0.2)
    ap.add_argument("--hi", type=float, default=0.8)
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warm", action="store_true", help="profile repeated (warm) lowerings")
    ap.add_argument("--picks", default="/tmp/emit33_picks.json")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    from formcast.errors import FormcastError
    from formcast.frontends.jsonschema.emit import Emitter
    from formcast.frontends.jsonschema.normalize import Normalizer
    from formcast.index.spec import JsonSchemaSpec
    from formcast.limits import WorkBudget, compile_scope

    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    schemas = [json.loads(f.read_text(encoding="utf-8")).get("schema") for f in files]

    def lower(schema: Any) -> float:
        spec = JsonSchemaSpec.of(schema)
        with compile_scope(WorkBudget(1 << 62, None)):
            norm = Normalizer(spec.loaded.value, spec.options, spec.loaded.local)
            root = norm.run()
            t0 = time.thread_time_ns()
            Emitter(norm, spec.options, []).grammar(root)
            return (time.thread_time_ns() - t0) / 1e6

    if args.child:
        lower({"type": "object", "properties": {"a": {"type": "integer"}}})
        chosen = [schemas[i] for i in json.loads(Path(args.child).read_text())]
        prof = cProfile.Profile(time.thread_time)  # thread CPU: a loaded machine
        prof.enable()
        for s in chosen:
            lower(s)
        prof.disable()
        pstats.Stats(prof).sort_stats(args.sort).print_stats(args.top)
        return 0
    times: list[tuple[float, int]] = []
    for i, s in enumerate(schemas):
        try:
            times.append((lower(s), i))
        except (FormcastError, RecursionError, ValueError):
            continue
    times.sort()
    n = len(times)
    pick = [i for _, i in times[int(args.lo * n) : int(args.hi * n)]]
    print(
        f"{len(pick)} of {n} schemas, emit+finish {times[int(args.lo * n)][0]:.3f}.."
        f"{times[int(args.hi * n) - 1][0]:.3f} ms"
    )
    if args.warm:
        runs = [schemas[i] for i in pick] * args.repeat
    else:  # first lowerings: a fresh process lowers the picked schemas once each
        import subprocess
        import sys

        Path(args.picks).write_text(json.dumps(sorted(pick)), encoding="utf-8")
        cmd = [
            sys.executable,
            __file__,
            "--child",
            args.picks,
            "--seed",
            str(args.seed),
            "--sample",
            str(args.sample),
            "--top",
            str(args.top),
            "--sort",
            args.sort,
        ]
        return subprocess.call(cmd)
    prof = cProfile.Profile(time.thread_time)  # thread CPU: a loaded machine
    prof.enable()
    for s in runs:
        lower(s)
    prof.disable()
    pstats.Stats(prof).sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
