#!/usr/bin/env python3
"""vLLM's structured-output backends side by side, inside one real vLLM engine (#31).

Runs in vLLM's own virtual environment (``bash scripts/test_engines.sh --build-only`` makes it)::

    VENV=~/.cache/formcast/vllm-venv
    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 \\
        PYTHONPATH=src $VENV/bin/python benchmarks/vllm_backends.py --repeat 3

Setup: the random-weight tiny Llama of ``tests/engines/_tiny_llama.py`` (the real Llama-3
tokenizer, logits padded past it) on the CPU, ``max_num_seqs=32``, no speculative decoding;
one *batch* is ``--requests`` (32) structured requests submitted at once with one
``LLM.generate`` call (8 JSON schemas round-robin, ``--temperature`` 1 with a per-request seed,
``max_tokens=--max-tokens``).  The timed value is that call's wall time; the process's CPU time
(every thread: the engine runs in this process) is reported beside it (steadier than wall time
on a shared machine), and so is the wall time per decoding step (wall / the longest output's
tokens: backends whose masks differ sample different outputs of different lengths), and the
time per step spent in the structured-output manager's per-step calls (``grammar_bitmask``,
``accept_tokens``, ``validate_tokens``: the backend's own per-step work plus vLLM's loop around
it; compiles run in vLLM's thread pool and are not in it).

The backends (``formcast``, ``xgrammar``, ``guidance``) share ONE engine (same model, scheduler,
KV cache): between batches the engine's ``structured_outputs_config.backend`` and the
structured-output manager's backend object are switched (each backend object is built once and
kept, as in a server that runs one backend for its lifetime).  The engine starts configured
with formcast (so formcast's plug-in builds its backend while the engine starts, as in a server
started with ``backend="formcast"``); each peer's backend is built by vLLM at its first request,
as vLLM does when the engine is configured with it.  ``disable_any_whitespace=True``
for the peers (formcast's JSON is compact anyway), so every backend writes the same language.
Backends take turns (interleaved) ``--repeat`` times, in a rotated order each round.

Two workloads:

* ``warm``: the same 8 schemas every round: after round 0 (the cold one, which also builds
  each backend's vocabulary), compiled grammars may come from each backend's cache
  (formcast's and xgrammar's compilers cache; guidance recompiles every request, cheaply);
* ``fresh``: every round's schemas differ (bounds depend on the round), so every round
  compiles 8 new schemas in every backend.

Every output is checked: finished ones (``finish_reason == "stop"``) with ``json.loads`` and
``jsonschema``; invalid and truncated (``length``) outputs are counted per backend (xgrammar
0.2.8 lets a raw control character into a JSON string); an invalid formcast output makes the
run exit non-zero.  The report also says
how many outputs are byte-identical to formcast's (the same seeds and the same language give
the same text where the masks agree).

Same outputs: ``formcast`` (canonical forcing, the default since session 17) writes the
tokenizer's own tokens of forced text, as ``guidance`` does; ``formcast-exact``
(``FORMCAST_VLLM_CANONICAL_FORCED=0``) allows every token that continues the language, as
``xgrammar`` does.  Each formcast variant is compared with each peer (wall, CPU, both per
step) with the number of byte-identical outputs of the pair; the load average (1 min) is
printed with every batch.

``--profile FILE``: cProfile of formcast's warm batches (the engine runs in this process:
``VLLM_ENABLE_V1_MULTIPROCESSING=0``), written to FILE (pstats) and its top entries printed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ["TOKENIZERS_PARALLELISM"] = "false"

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "engines"))

BACKENDS = ("formcast", "xgrammar", "guidance")
#: formcast variants (``--backends``): the environment variable set while the backend is built
VARIANTS = {
    "formcast-workers": ("FORMCAST_VLLM_COMPILE_WORKERS", "1"),  # one compile worker process
    # rows restricted to the tokenizer's first token of forced text (llguidance's masks; the
    # default since session 17: with an older formcast, 'formcast' is formcast-exact)
    "formcast-canonical": ("FORMCAST_VLLM_CANONICAL_FORCED", "1"),
    # the grammar's own rows (every token that continues the language: xgrammar's masks)
    "formcast-exact": ("FORMCAST_VLLM_CANONICAL_FORCED", "0"),
}


def schemas(round_no: int | None) -> list[dict[str, Any]]:
    """The 8 schemas of a batch; ``round_no`` (fresh workload) shifts their bounds."""
    k = 0 if round_no is None else round_no + 1
    return [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 6 + k},
                "age": {"type": "integer", "minimum": 0, "maximum": 120 + k},
                "ok": {"type": "boolean"},
            },
            "required": ["name", "age", "ok"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "city": {"enum": ["Paris", "Oslo", "Lima", f"Rome{k}"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7 + k},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 0, "maximum": 9999 + k},
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "maxLength": 5},
                    "maxItems": 3 + k,
                },
            },
            "required": ["id", "tags"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 8},
                "arguments": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "maxLength": 10 + k},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                    },
                    "required": ["query", "limit"],
                    "additionalProperties": False,
                },
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "status": {"enum": ["open", "closed", "pending"]},
                "priority": {"type": "integer", "minimum": 1, "maximum": 5 + k},
                "title": {"type": "string", "minLength": 1, "maxLength": 12},
            },
            "required": ["status", "priority", "title"],
            "additionalProperties": False,
        },
        {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 99},
            "minItems": 1,
            "maxItems": 4 + k,
        },
        {
            "type": "object",
            "properties": {
                "user": {
                    "type": "object",
                    "properties": {
                        "first": {"type": "string", "maxLength": 6},
                        "last": {"type": "string", "maxLength": 6 + k},
                    },
                    "required": ["first", "last"],
                    "additionalProperties": False,
                },
                "active": {"type": "boolean"},
            },
            "required": ["user", "active"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"},
                "count": {"type": "integer", "minimum": 0, "maximum": 1000 + k},
            },
            "required": ["code", "count"],
            "additionalProperties": False,
        },
    ]


PROMPTS = [
    "Write a JSON record:",
    "Ada is 36. Ada is 36. Ada is",
    "The weather in Oslo for two days:",
    "Call the search tool with a query.",
]


class Bench:
    """One vLLM engine whose structured-output backend can be switched between batches."""

    def __init__(self, model_dir: Path, requests: int, first: str) -> None:
        from vllm import LLM

        from formcast.integrations.vllm_plugin import register

        register()
        config: dict[str, Any] = {"backend": first}
        if first != "formcast":  # vLLM refuses the option for other backends than the two
            config["disable_any_whitespace"] = True
        t0 = time.perf_counter()
        self.llm = LLM(
            str(model_dir),
            enforce_eager=True,
            dtype="float32",
            max_model_len=512,
            max_num_seqs=requests,
            seed=0,
            structured_outputs_config=config,
        )
        self.start = time.perf_counter() - t0
        core = self.llm.llm_engine.engine_core.engine_core
        self.manager = core.scheduler.structured_output_manager
        self.configs = {id(c): c for c in self._configs()}
        for cfg in self.configs.values():  # the peers' option; formcast's JSON is compact anyway
            cfg.disable_any_whitespace = True
        self.backends: dict[str, Any] = {}
        self.current = first
        self.in_backend = 0.0  # seconds in the manager's per-step calls (see _time_manager)
        self._time_manager()
        self.gc_seconds = 0.0  # seconds in the cyclic garbage collector (every thread)
        self.gc_full = 0  # its generation-2 (whole heap) collections
        self._gc_start = 0.0
        import gc

        gc.callbacks.append(self._gc_event)

    def _gc_event(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks``: time every collection (a full one walks vLLM's and torch's whole
        heap, tens to hundreds of milliseconds with the GIL held)."""
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        self.gc_seconds += time.perf_counter() - self._gc_start
        self.gc_full += info.get("generation") == 2

    def _time_manager(self) -> None:
        """Time the structured-output manager's per-step entry points on this engine's manager
        (the mask fill of the batch, the sampled tokens' accept, draft validation): the
        backend's per-step cost, whatever the outputs' lengths."""
        manager = self.manager
        for name in ("grammar_bitmask", "accept_tokens", "validate_tokens"):
            original = getattr(manager, name)

            def timed(*a: Any, _f: Any = original, **k: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return _f(*a, **k)
                finally:
                    self.in_backend += time.perf_counter() - t0

            setattr(manager, name, timed)
        create = manager._create_grammar  # runs in vLLM's compile thread pool

        def created(request: Any, _f: Any = create) -> Any:
            t0 = time.perf_counter()
            try:
                return _f(request)
            finally:
                self.compile_seconds += time.perf_counter() - t0
                self.ready_at = max(self.ready_at, time.perf_counter())

        manager._create_grammar = created
        self.compile_seconds = 0.0  # wall seconds in compile_grammar (vLLM's compile thread)
        self.ready_at = 0.0  # when the batch's last grammar was ready (perf_counter)

    def _configs(self) -> list[Any]:
        """Every StructuredOutputsConfig object the engine's parts hold (one in-process)."""
        found = [self.llm.llm_engine.vllm_config.structured_outputs_config]
        core = self.llm.llm_engine.engine_core.engine_core
        found.append(core.scheduler.vllm_config.structured_outputs_config)
        found.append(self.manager.vllm_config.structured_outputs_config)
        for obj in (self.llm.llm_engine, getattr(self.llm.llm_engine, "input_processor", None)):
            cfg = getattr(obj, "structured_outputs_config", None)
            if cfg is not None:
                found.append(cfg)
        return found

    def use(self, backend: str) -> None:
        """Route the next requests to ``backend`` (its backend object kept between turns)."""
        if self.manager.backend is not None:
            self.backends[self.current] = self.manager.backend
        for cfg in self.configs.values():
            cfg.backend = backend.split("-")[0]
        if backend in VARIANTS and backend not in self.backends:
            # formcast with one environment setting, built as the plug-in builds it
            from formcast.integrations.vllm_plugin import _new_backend

            name, value = VARIANTS[backend]
            saved = os.environ.get(name)
            os.environ[name] = value
            try:
                self.backends[backend] = _new_backend(self.manager)
            finally:
                if saved is None:
                    del os.environ[name]
                else:
                    os.environ[name] = saved
            self.backends[backend].warm_up()
        self.manager.backend = self.backends.get(backend)
        self.manager._grammar_bitmask = None  # allocated by the backend in charge
        self.current = backend

    def batch(
        self, backend: str, docs: list[dict[str, Any]], n: int, max_tokens: int, temperature: float
    ) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        self.use(backend)
        params = [
            SamplingParams(
                max_tokens=max_tokens,
                temperature=temperature,
                seed=1000 + i,
                structured_outputs=StructuredOutputsParams(json=docs[i % len(docs)]),
            )
            for i in range(n)
        ]
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(n)]
        self.in_backend = 0.0
        self.gc_seconds, self.gc_full = 0.0, 0
        self.compile_seconds, self.ready_at = 0.0, 0.0
        t0, c0 = time.perf_counter(), time.process_time()
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        self.ready_after = self.ready_at - t0 if self.ready_at else 0.0
        assert self.manager.backend is not None
        assert type(self.manager.backend).__name__.lower().startswith(backend[:5]), (
            type(self.manager.backend).__name__,
            backend,
        )
        self.per_step_backend = self.in_backend / max(len(o.outputs[0].token_ids) for o in outs)
        return wall, cpu, [o.outputs[0] for o in outs]


def check(outputs: list[Any], docs: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
    """(invalid finished outputs, truncated outputs, texts); the first invalid one is printed."""
    import jsonschema

    invalid = truncated = 0
    for i, out in enumerate(outputs):
        schema = docs[i % len(docs)]
        if out.finish_reason != "stop":
            truncated += 1
            continue
        try:
            jsonschema.validate(json.loads(out.text), schema)
        except (ValueError, jsonschema.ValidationError) as exc:
            if not invalid:
                print(f"    INVALID output {out.text[:120]!r}: {str(exc)[:120]}", flush=True)
            invalid += 1
    return invalid, truncated, [o.text for o in outputs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds per workload")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument(
        "--temperature", type=float, default=1.0, help="0: greedy (outputs agree more often)"
    )
    ap.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="also 'formcast-workers' (formcast compiling in one worker process), "
        "'formcast-canonical' (FORMCAST_VLLM_CANONICAL_FORCED=1) and 'formcast-exact' "
        "(FORMCAST_VLLM_CANONICAL_FORCED=0: the grammar's rows, xgrammar's)",
    )
    ap.add_argument("--workloads", default="warm,fresh")
    ap.add_argument("--profile", help="cProfile formcast's warm batches into this file")
    ap.add_argument("--json", help="write the raw numbers and every output's text here")
    args = ap.parse_args()
    backends = args.backends.split(",")
    from _tiny_llama import build_tiny_llama

    import formcast
    from formcast._native import native_summary

    build = native_summary()
    print(f"formcast {formcast.__file__} ({build})", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
    first = "formcast" if "formcast" in backends else backends[0]
    bench = Bench(build_tiny_llama(tmp), args.requests, first)
    print(f"engine started with backend {first!r} in {bench.start:.1f} s", flush=True)
    results: dict[str, Any] = {}
    profiler = cProfile.Profile() if args.profile else None
    failed = False
    for workload in args.workloads.split(","):
        times: dict[str, list[float]] = {b: [] for b in backends}
        steps: dict[str, list[float]] = {b: [] for b in backends}
        cpus: dict[str, list[float]] = {b: [] for b in backends}
        cpu_steps: dict[str, list[float]] = {b: [] for b in backends}
        ready: dict[str, list[float]] = {b: [] for b in backends}
        loads: list[float] = []
        managed: dict[str, list[float]] = {b: [] for b in backends}
        outputs: list[dict[str, list[str]]] = []
        bad = dict.fromkeys(backends, 0)
        cold: dict[str, float] = {}
        same = total = 0
        pairs: dict[tuple[str, str], list[int]] = {}  # (formcast variant, peer): [same, total]
        rounds = args.repeat + (1 if workload == "warm" else 0)
        for r in range(rounds):
            docs = schemas(None if workload == "warm" else r)
            order = backends[r % len(backends):] + backends[: r % len(backends)]
            texts: dict[str, list[str]] = {}
            for b in order:
                prof = profiler if (b == "formcast" and workload == "warm" and r > 0) else None
                if prof is not None:
                    prof.enable()
                wall, cpu, outs = bench.batch(
                    b, docs, args.requests, args.max_tokens, args.temperature
                )
                if prof is not None:
                    prof.disable()
                invalid, truncated, texts[b] = check(outs, docs)
                bad[b] += invalid
                tag = "cold" if (workload == "warm" and r == 0) else "timed"
                lengths = [len(o.token_ids) for o in outs]
                print(
                    f"{workload} round {r} {b:9s} {wall:7.3f} s (CPU {cpu:6.3f} s)  "
                    f"invalid {invalid}  "
                    f"truncated {truncated}  tokens {sum(lengths)} (longest {max(lengths)}: "
                    f"{1000 * wall / max(lengths):.1f} ms per step; in the manager "
                    f"{1000 * bench.in_backend:.0f} ms, {1000 * bench.per_step_backend:.2f} "
                    f"ms per step)  compile thread {1000 * bench.compile_seconds:.0f} ms, last "
                    f"grammar ready at {1000 * bench.ready_after:.0f} ms  "
                    f"gc {1000 * bench.gc_seconds:.0f} ms ({bench.gc_full} full)  "
                    f"load {os.getloadavg()[0]:.1f}  ({tag})",
                    flush=True,
                )
                if workload == "warm" and r == 0:
                    cold[b] = wall
                else:
                    times[b].append(wall)
                    cpus[b].append(cpu)
                    managed[b].append(bench.per_step_backend)
                    steps[b].append(wall / max(lengths))
                    cpu_steps[b].append(cpu / max(lengths))
                    ready[b].append(bench.ready_after)
                    loads.append(os.getloadavg()[0])
            outputs.append(texts)
            if "formcast" in texts:
                for b, t in texts.items():
                    if not b.startswith("formcast"):
                        same += sum(x == y for x, y in zip(texts["formcast"], t))
                        total += len(t)
            for f in (b for b in texts if b.startswith("formcast")):
                for b in (b for b in texts if not b.startswith("formcast")):
                    pair = pairs.setdefault((f, b), [0, 0])
                    pair[0] += sum(x == y for x, y in zip(texts[f], texts[b]))
                    pair[1] += len(texts[b])
        failed = failed or any(n > 0 for b, n in bad.items() if b.startswith("formcast"))
        results[workload] = {
            "invalid": bad, "wall": times, "cpu": cpus, "manager_per_step": managed,
            "per_step": steps, "cpu_per_step": cpu_steps, "cold": cold, "texts": outputs,
            "load": loads, "last_grammar_ready": ready,
            "identical": {f"{f}/{b}": v for (f, b), v in pairs.items()},
        }
        print(
            f"\n== {workload}: p50 wall of {args.repeat} batches of {args.requests} requests "
            f"(load average {min(loads):.1f}-{max(loads):.1f}, p50 {statistics.median(loads):.1f})"
        )
        p50 = {b: statistics.median(v) for b, v in times.items() if v}
        for b in backends:
            line = (
                f"  {b:9s} p50 {p50[b]:.3f} s  min {min(times[b]):.3f}  max {max(times[b]):.3f}"
                f"  CPU p50 {statistics.median(cpus[b]):.3f} s"
                f"  per step p50 {1000 * statistics.median(steps[b]):.1f} ms"
                f" (CPU {1000 * statistics.median(cpu_steps[b]):.1f} ms)"
                f" (in the manager {1000 * statistics.median(managed[b]):.2f} ms)"
                f"  last grammar ready p50 {1000 * statistics.median(ready[b]):.0f} ms"
                f"  invalid outputs {bad[b]}"
            )
            if b in cold:
                line += f"  (cold round 0: {cold[b]:.3f} s)"
            print(line)
        peers = [b for b in p50 if not b.startswith("formcast")]
        for f in (b for b in p50 if b.startswith("formcast")):
            for b in peers:
                per_step = statistics.median(steps[f]) / statistics.median(steps[b])
                cpu_ratio = statistics.median(cpus[f]) / statistics.median(cpus[b])
                cpu_step = statistics.median(cpu_steps[f]) / statistics.median(cpu_steps[b])
                same_out = pairs.get((f, b), [0, 0])
                print(
                    f"  {f} / {b}: wall {p50[f] / p50[b]:.2f}x, "
                    f"CPU {cpu_ratio:.2f}x, wall per step {per_step:.2f}x, "
                    f"CPU per step {cpu_step:.2f}x  (identical outputs {same_out[0]}/{same_out[1]})"
                )
            if peers:
                best = min(peers, key=lambda b: p50[b])
                print(f"  {f} / fastest peer ({best}): {p50[f] / p50[best]:.2f}x")
        if "formcast" in p50 and total:
            print(f"  outputs identical to formcast's: {same}/{total}")
        print(flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if profiler is not None:
        import pstats

        profiler.dump_stats(args.profile)
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(30)
    if failed:
        sys.exit("formcast wrote an invalid output (see INVALID above)")


if __name__ == "__main__":
    main()
