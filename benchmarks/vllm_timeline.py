#!/usr/bin/env python3
"""A wall-clock timeline of vLLM's engine steps for one batch per backend (#31, vllm32).

Where does a batch's wall time go beyond its CPU time?  Inside the engine of
``benchmarks/vllm_backends.py`` (same model, same 32-request batches, same backend switching;
run it in vLLM's virtual environment), every engine step is cut into its phases, each timed in
wall time (``perf_counter``) and in the main thread's CPU time (``thread_time``):

* ``sched``: ``Scheduler.schedule`` (admits the requests whose grammar is ready);
* ``model``: ``execute_model`` (the forward pass; torch's own threads work here too);
* ``mask``: ``Scheduler.get_grammar_bitmask`` (the backend's ``fill_bitmask`` of every row);
* ``sample``: ``sample_tokens`` (the bitmask applied, the sampler);
* ``update``: ``Scheduler.update_from_output`` (the backend's ``accept_tokens``);
* ``out``: the rest of ``LLMEngine.step`` (detokenizing, the request outputs) and of
  ``LLM.generate``'s loop.

Per step it also records how many requests ran, how many were admitted (prefills) and how many
still waited for their grammar (``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR``), and the compile
thread's calls (start, end, thread CPU).  Printed per batch: the step table (``--steps``) and
the phase totals, wall and main-thread CPU, and the process CPU (every thread).  A backend
name ending in ``-sync`` (``formcast-sync``) is that backend with vLLM's compile inline in
``grammar_init`` (``StructuredOutputManager._use_async_grammar_compilation = False``: every
grammar is ready when its request is added; no compile thread)::

    VENV=~/.cache/formcast/vllm-venv
    PYTHONPATH=/tmp/fc-x $VENV/bin/python benchmarks/vllm_timeline.py --rounds 2 --steps
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_backends import Bench, check, schemas  # (sets vLLM's environment)

PHASES = ("sched", "model", "mask", "sample", "update", "out")


class Timeline:
    """Wraps the engine's step phases (once); ``begin``/``end`` bracket one batch."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.recording = False
        self.steps: list[dict[str, Any]] = []
        self.compiles: list[tuple[float, float, float, str]] = []
        self.t0 = 0.0
        engine = bench.llm.llm_engine
        core = engine.engine_core.engine_core
        sched = core.scheduler
        self.sched = sched
        self._wrap(sched, "schedule", "sched")
        self._wrap(core.model_executor, "execute_model", "model")
        self._wrap(sched, "get_grammar_bitmask", "mask")
        self._wrap(core.model_executor, "sample_tokens", "sample")
        self._wrap(sched, "update_from_output", "update")
        step = engine.step

        def timed_step(*a: Any, _f: Any = step, **k: Any) -> Any:
            if not self.recording:
                return _f(*a, **k)
            rec: dict[str, Any] = {p: 0.0 for p in PHASES}
            rec.update({f"{p}_cpu": 0.0 for p in PHASES})
            rec["start"] = time.perf_counter() - self.t0
            self.steps.append(rec)
            w0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            try:
                return _f(*a, **k)
            finally:
                rec["wall"] = time.perf_counter() - w0
                rec["cpu"] = time.thread_time() - c0
                rec["proc_cpu"] = time.process_time() - p0

        engine.step = timed_step
        manager = bench.manager
        create = manager._create_grammar

        def created(request: Any, _f: Any = create) -> Any:
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return _f(request)
            finally:
                if self.recording:
                    self.compiles.append(
                        (w0 - self.t0, time.perf_counter() - self.t0, time.thread_time() - c0,
                         threading.current_thread().name)
                    )

        manager._create_grammar = created

    def _wrap(self, obj: Any, name: str, phase: str) -> None:
        original = getattr(obj, name)

        def timed(*a: Any, _f: Any = original, **k: Any) -> Any:
            if not self.recording or not self.steps:
                return _f(*a, **k)
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return _f(*a, **k)
            finally:
                rec = self.steps[-1]
                rec[phase] += time.perf_counter() - w0
                rec[f"{phase}_cpu"] += time.thread_time() - c0
                if phase == "sched":
                    self._count(rec)

        setattr(obj, name, timed)

    def _count(self, rec: dict[str, Any]) -> None:
        from vllm.v1.request import RequestStatus

        sched = self.sched
        rec["running"] = len(sched.running)
        rec["fsm_wait"] = sum(
            r.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
            for r in sched.requests.values()
        )

    def begin(self) -> None:
        self.steps, self.compiles = [], []
        self.t0 = time.perf_counter()
        self.recording = True

    def end(self, wall: float) -> dict[str, Any]:
        self.recording = False
        for rec in self.steps:
            inner = sum(rec[p] for p in PHASES if p != "out")
            rec["out"] = rec["wall"] - inner
            rec["out_cpu"] = rec["cpu"] - sum(rec[f"{p}_cpu"] for p in PHASES if p != "out")
        stepped = sum(r["wall"] for r in self.steps)
        totals = {p: sum(r[p] for r in self.steps) for p in PHASES}
        totals.update({f"{p}_cpu": sum(r[f"{p}_cpu"] for r in self.steps) for p in PHASES})
        totals["between"] = wall - stepped  # generate()'s loop outside LLMEngine.step
        totals["steps"] = len(self.steps)
        totals["proc_cpu"] = sum(r["proc_cpu"] for r in self.steps)
        totals["compile_wall"] = sum(e - s for s, e, _, _ in self.compiles)
        totals["compile_cpu"] = sum(c for _, _, c, _ in self.compiles)
        totals["last_ready"] = max((e for _, e, _, _ in self.compiles), default=0.0)
        totals["admitted_steps"] = sum(
            1 for r in self.steps if r.get("fsm_wait", 0) > 0
        )
        return totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="fresh rounds (each: every backend)")
    ap.add_argument("--warm-rounds", type=int, default=1)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--backends", default="formcast,xgrammar,guidance")
    ap.add_argument("--steps", action="store_true", help="print every step of every batch")
    args = ap.parse_args()
    from _tiny_llama import build_tiny_llama

    backends = args.backends.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
    bench = Bench(build_tiny_llama(tmp), args.requests, backends[0])
    tl = Timeline(bench)
    for b in backends:  # build every backend (and its vocabulary) outside the timed batches
        bench.manager._use_async_grammar_compilation = not b.endswith("-sync")
        bench.batch(b, schemas(None), 8, 4, 1.0)  # the warm schemas compiled
    plan = [("warm", None)] * args.warm_rounds + [("fresh", 50 + r) for r in range(args.rounds)]
    agg: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for n, (workload, round_no) in enumerate(plan):
        docs = schemas(round_no)
        order = backends[n % len(backends):] + backends[: n % len(backends)]
        for b in order:
            # "<backend>-sync": vLLM's compile inline in grammar_init (no compile thread)
            bench.manager._use_async_grammar_compilation = not b.endswith("-sync")
            tl.begin()
            wall, cpu, outs = bench.batch(b, docs, args.requests, args.max_tokens, 1.0)
            tot = tl.end(wall)
            invalid, truncated, _ = check(outs, docs)
            agg.setdefault((workload, b), []).append({**tot, "wall": wall, "cpu": cpu})
            longest = max(len(o.token_ids) for o in outs)
            print(
                f"\n{workload} {b}: wall {1000 * wall:.0f} ms, process CPU {1000 * cpu:.0f} ms, "
                f"{tot['steps']} steps (longest output {longest}), invalid {invalid}, "
                f"truncated {truncated}, load {os.getloadavg()[0]:.1f}\n  "
                + "  ".join(
                    f"{p} {1000 * tot[p]:.0f}/{1000 * tot[p + '_cpu']:.0f}" for p in PHASES
                )
                + f"  between {1000 * tot['between']:.0f}  (wall/main-thread CPU, ms)\n"
                f"  compile thread: {len(tl.compiles)} calls, wall {1000 * tot['compile_wall']:.0f}"
                f" ms, CPU {1000 * tot['compile_cpu']:.0f} ms, last ready at "
                f"{1000 * tot['last_ready']:.0f} ms; steps with requests waiting for a grammar: "
                f"{tot['admitted_steps']}",
                flush=True,
            )
            if args.steps:
                print("   #  start   wall  (cpu proc)  " + "  ".join(PHASES) + "  run fsm")
                for i, r in enumerate(tl.steps):
                    print(
                        f"  {i:2d} {1000 * r['start']:6.0f} {1000 * r['wall']:6.1f} "
                        f"({1000 * r['cpu']:5.1f} {1000 * r['proc_cpu']:5.1f})  "
                        + "  ".join(
                            f"{1000 * r[p]:5.1f}/{1000 * r[p + '_cpu']:5.1f}" for p in PHASES
                        )
                        + f"  {r.get('running', '-')} {r.get('fsm_wait', '-')}"
                    )
                for s, e, c, name in tl.compiles[:40]:
                    print(f"     compile {1000 * s:6.1f}-{1000 * e:6.1f} ms cpu {1000 * c:5.1f} "
                          f"{name}")
    print("\n== p50 per backend and workload (ms): wall, process CPU, steps, phases wall/CPU")
    for (workload, b), rows in agg.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"  {workload:5s} {b:9s} wall {1000 * med['wall']:.0f} CPU {1000 * med['cpu']:.0f} "
            f"steps {med['steps']:.0f}  "
            + "  ".join(f"{p} {1000 * med[p]:.0f}/{1000 * med[p + '_cpu']:.0f}" for p in PHASES)
            + f"  between {1000 * med['between']:.0f}"
        )


if __name__ == "__main__":
    main()
