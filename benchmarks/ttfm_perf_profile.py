"""Profile TTFM (compile + first mask) of a MaskBench sample as MaskBench's workers see it.

One process: load the vocabulary, one warm-up compile, then per schema of the sample (in a
fixed order, the process-wide caches warm from the schemas before) a fresh
``GrammarCompiler(vocab, cache_size=0)``, ``compile_json_schema`` and the first mask, exactly
as ``benchmarks/ttfm_rule_phase_ab.py`` times it.  ``--perf-ctl FIFO``: write ``enable`` to a
``perf record --control fifo:FIFO -D -1`` control fifo after the warm-up, so that perf samples
the TTFM loop only (not imports or the vocabulary)::

    mkfifo /tmp/ctl; PYTHONPATH=/tmp/fc-x perf record -g --call-graph dwarf -F 2000 \
        --control fifo:/tmp/ctl -D -1 -o /tmp/p.data -- \
        python benchmarks/ttfm_perf_profile.py --sample 300 --seed 3 --perf-ctl /tmp/ctl

``--cprofile OUT``: cProfile the loop instead (interpreted code, and the mypyc functions it
calls as built-ins).  ``--times OUT``: each schema's TTFM (thread CPU, ms) as JSON;
``--band FILE LO HI``: profile only the schemas whose TTFM in FILE (a ``--times`` output) lies
between its LO and HI quantiles (the p50 band: ``0.3 0.7``), the others still compiled in
order (unprofiled) so that the caches are as warm as in the timing run.  Prints the loop's
thread CPU in ms.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lowering_ttfm import DATA


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--perf-ctl", default="")
    ap.add_argument("--cprofile", default="")
    ap.add_argument("--times", default="")
    ap.add_argument("--band", nargs=3, default=None)
    args = ap.parse_args()
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    files = sorted(DATA.glob("*.json"))
    names = [f.name for f in sorted(random.Random(args.seed).sample(files, args.sample))]
    schemas = [json.loads((DATA / n).read_text(encoding="utf-8")).get("schema") for n in names]

    def ttfm(schema: Any) -> None:
        compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        m = GrammarMatcher(compiled)
        mask = allocate_token_bitmask(1, vocab.vocab_size)
        m.fill_next_token_bitmask(mask, 0)

    band = set(names)
    if args.band:
        known = json.loads(Path(args.band[0]).read_text())
        order = sorted((v, k) for k, v in known.items() if v >= 0)
        lo, hi = (int(float(q) * len(order)) for q in args.band[1:])
        band = {k for _, k in order[lo:hi]}
    ttfm({"type": "object", "properties": {"a": {"type": "integer"}}})  # warm-up
    prof = cProfile.Profile() if args.cprofile else None
    ctl = open(args.perf_ctl, "w") if args.perf_ctl else None  # noqa: SIM115
    times: dict[str, float] = {}
    t0 = time.thread_time_ns()
    for name, schema in zip(names, schemas, strict=True):
        on = name in band
        if on and prof is not None:
            prof.enable()
        if on and ctl is not None:
            ctl.write("enable\n")
            ctl.flush()
        t1 = time.thread_time_ns()
        try:
            ttfm(schema)
            times[name] = (time.thread_time_ns() - t1) / 1e6
        except (FormcastError, RecursionError, ValueError):
            times[name] = -1.0
        if on and ctl is not None:
            ctl.write("disable\n")
            ctl.flush()
        if on and prof is not None:
            prof.disable()
    if prof is not None:
        prof.dump_stats(args.cprofile)
    if ctl is not None:
        ctl.close()
    if args.times:
        Path(args.times).write_text(json.dumps(times))
    print(f"{len(schemas)} schemas, loop {(time.thread_time_ns() - t0) / 1e6:.1f} ms thread CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
