"""A slow compile (a cold schema with many patterned fields) runs in a compile worker process
(``compile_workers=1``, what ``formcast serve`` uses): while it runs, the event loop keeps
answering -- ``GET /health`` stays fast -- and the compiled grammar is cached for the next
request with the same schema (``formcast_compile_cache_hits_total``)."""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Any

import openai
from server_harness import ToyModel, metric, running_server

from formcast.server import ServerConfig


def big_schema(n: int) -> dict[str, Any]:
    props = {f"field_{i}": {"type": "string",
                            "pattern": f"^[a-z]{{{i % 5 + 1},{i % 7 + 8}}}-[0-9]{{2,{i % 4 + 3}}}$"}
             for i in range(n)}
    return {"type": "object", "properties": props, "required": sorted(props)}


def test_health_answers_while_a_schema_compiles() -> None:
    config = ServerConfig(model_name="toy", compile_workers=1)
    with running_server(ToyModel(), config) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=120)
        fmt = {"type": "json_schema", "json_schema": {"name": "big", "schema": big_schema(40)}}
        done = threading.Event()
        replies: list[Any] = []

        def ask() -> None:
            try:
                replies.append(client.chat.completions.create(
                    model="toy", messages=[{"role": "user", "content": "x"}], temperature=0,
                    max_tokens=2000, response_format=fmt))
            finally:
                done.set()

        worker = threading.Thread(target=ask)
        t0 = time.monotonic()
        worker.start()
        latencies = []
        while not done.is_set():
            t = time.monotonic()
            with urllib.request.urlopen(f"{srv.url}/health", timeout=30):
                pass
            latencies.append(time.monotonic() - t)
            time.sleep(0.02)
        worker.join()
        total = time.monotonic() - t0
        compile_s = metric(srv.url, "formcast_compile_seconds_sum")
        assert replies
        assert replies[0].choices[0].finish_reason == "stop"
        assert compile_s > 0.4, compile_s  # a real, slow compile happened
        assert len(latencies) >= 5
        # a blocked loop would hold /health for the whole compile
        assert max(latencies) < max(0.2, compile_s / 2), (max(latencies), compile_s, total)
        # the same schema again: a memory-cache hit, no second compile
        client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "y"}],
                                       temperature=0, max_tokens=2000, response_format=fmt)
        assert metric(srv.url, "formcast_compile_cache_hits_total") == 1
        assert metric(srv.url, "formcast_compile_seconds_count") == 1
