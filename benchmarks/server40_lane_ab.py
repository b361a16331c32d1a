#!/usr/bin/env python3
"""The generation routes' fast lane, A/B in one process: ``server_head.py``'s measurement (the
app called through ASGI, SmolLM2, 8 streamed schema requests; loop thread CPU to each first
content, lone and as a burst started in one loop turn) with the app's lane closed
(``app._lanes = None``: every request through FastAPI's middleware stack, the behaviour
before it) and open, alternating round by round (off, on, on, off, ...), so that both arms
share the process, its caches and the machine's load.

Printed per round and per arm: lone p50, burst p50 ("CPU ttft"), and their medians over the
arm's rounds.

Usage::

    PYTHONPATH=/tmp/fc-server40 python benchmarks/server40_lane_ab.py --rounds 12 --asgi-spec 2.3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import server_head as sh


async def run(args: argparse.Namespace) -> int:
    from formcast.model.loading import load_model
    from formcast.server import ServerConfig
    from formcast.server.app import create_app

    sl = sh._server_load()
    model = load_model("smollm2", n_threads=args.threads)
    cfg = ServerConfig(model_name="smollm2", max_queue=12, compile_workers=1,
                       n_threads=args.threads, request_timeout_s=600)
    app = create_app(model, cfg)
    lanes = app._lanes
    ns = argparse.Namespace(batch_tokens=48, kinds=4)
    bodies = [json.dumps(sl.batch_body(i, ns)).encode() for i in range(8)]
    port = [40000]

    def next_port() -> int:
        port[0] += 1
        return port[0]

    arms: dict[str, dict[str, list[float]]] = {"off": {"lone": [], "burst": []},
                                               "on": {"lone": [], "burst": []}}
    async with app.router.lifespan_context(app):
        for _ in range(2):  # warm-up, both arms
            for arm in ("off", "on"):
                app._lanes = lanes if arm == "on" else None
                for b in bodies:
                    await sh._call(app, b, next_port())
        for k in range(args.rounds):
            arm = ("off", "on", "on", "off")[k % 4]
            app._lanes = lanes if arm == "on" else None
            lone = [(await sh._call(app, b, next_port()))[0] for b in bodies]
            c0 = time.thread_time()
            res = await asyncio.gather(*(sh._call(app, b, next_port()) for b in bodies))
            burst = [at - c0 for _, at in res]
            lo, bu = statistics.median(lone), statistics.median(burst)
            arms[arm]["lone"].append(lo)
            arms[arm]["burst"].append(bu)
            print(f"round {k} lane {arm:3s}: lone p50 {lo * 1e3:.3f} ms, burst p50 "
                  f"{bu * 1e3:.3f} ms  load {os.getloadavg()[0]:.1f}", flush=True)
    for arm in ("off", "on"):
        lo = statistics.median(arms[arm]["lone"]) * 1e3
        bu = statistics.median(arms[arm]["burst"]) * 1e3
        print(f"lane {arm:3s}: median over {len(arms[arm]['lone'])} rounds: lone p50 {lo:.3f} "
              f"ms, burst p50 {bu:.3f} ms (x{bu / lo:.2f})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--asgi-spec", default="2.3")
    args = p.parse_args()
    sh._SPEC[0] = args.asgi_spec
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
