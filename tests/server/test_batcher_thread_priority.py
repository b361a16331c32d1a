"""The batcher's thread runs at a lower OS priority than the server's event loop
(``ServerConfig.batch_nice``, ``ContinuousBatcher(worker_nice=)``): on Linux the worker
thread's niceness is the process's plus ``worker_nice`` (niceness is per thread there), and
no other thread's changes; replies are the same as at the process's own priority.

The oracle: ``os.getpriority`` of the worker's native thread id against the main thread's,
read in this process (the uvicorn server of the harness runs in a thread of it), and the
same greedy request answered identically with ``batch_nice=0``.
"""

from __future__ import annotations

import os
import sys
import threading

import openai
import pytest
from server_harness import running_server
from test_continuous_batching import TokenFunction, callable_model

from formcast.errors import ConfigurationError
from formcast.generation.batching import ContinuousBatcher
from formcast.model.batched_select import batched_decoder_for
from formcast.server import ServerConfig

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="per-thread niceness: Linux")


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def _ask(url: str) -> tuple[str | None, str | None]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    r = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "a name"}],
        temperature=0,
        max_tokens=64,
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "n",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "maxLength": 8}},
                    "required": ["name"],
                    "additionalProperties": False,
                },
            },
        },
    )
    return r.choices[0].message.content, r.choices[0].finish_reason


def test_config_default_and_bounds() -> None:
    assert ServerConfig().batch_nice == 5
    assert ServerConfig(batch_nice=0).batch_nice == 0
    for bad in (-1, True, 1.5):
        with pytest.raises(ConfigurationError, match="batch_nice"):
            ServerConfig(batch_nice=bad)  # type: ignore[arg-type]


def test_batcher_refuses_a_bad_worker_nice() -> None:
    decoder = batched_decoder_for(callable_model(TokenFunction()), n_slots=2)
    assert decoder is not None
    for bad in (-2, False, "3"):
        with pytest.raises(ConfigurationError, match="worker_nice"):
            ContinuousBatcher(decoder, worker_nice=bad)  # type: ignore[arg-type]


@linux_only
def test_only_the_batcher_thread_is_lowered() -> None:
    decoder = batched_decoder_for(callable_model(TokenFunction()), n_slots=2)
    assert decoder is not None
    me = threading.get_native_id()
    before = _nice(me)
    if before > 19 - 3:
        pytest.skip(f"this process runs at niceness {before}: no room to lower a thread by 3")
    batcher = ContinuousBatcher(decoder, worker_nice=3)
    batcher.start()
    try:
        req = batcher.submit([1, 2, 3], max_tokens=2)
        req.result(timeout=60)
        worker = batcher._worker
        assert worker is not None
        assert worker.native_id is not None
        assert _nice(worker.native_id) == before + 3
        assert _nice(me) == before  # the caller's (the event loop's) priority is untouched
    finally:
        batcher.close()


@linux_only
def test_the_server_lowers_its_batcher_and_answers_the_same() -> None:
    if _nice(threading.get_native_id()) > 19 - 4:
        pytest.skip("this process runs at a niceness with no room to lower a thread by 4")
    answers = []
    for nice in (4, 0):
        fn = TokenFunction()
        with running_server(callable_model(fn), ServerConfig(batch_nice=nice)) as srv:
            answers.append(_ask(srv.url))
            workers = [t for t in threading.enumerate() if t.name == "formcast-batcher"]
            assert len(workers) == 1
            assert workers[0].native_id is not None
            base = _nice(threading.get_native_id())
            assert _nice(workers[0].native_id) == base + nice
    assert answers[0] == answers[1]
    assert answers[0][1] == "stop"


def test_the_serve_command_passes_batch_nice_to_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """``formcast serve --batch-nice N`` reaches ``ServerConfig.batch_nice`` (default 5); a
    negative value is refused by the parser before anything loads."""
    import argparse

    import formcast.server
    from formcast.cli import serve

    seen: list[ServerConfig] = []
    monkeypatch.setattr(serve, "load_model_from_args", lambda args: object())
    monkeypatch.setattr(serve, "check_backend", lambda args: None)
    monkeypatch.setattr(
        formcast.server, "run_server", lambda model, config, **kw: seen.append(config)
    )
    for argv, want in ((["--batch-nice", "0"], 0), ([], 5), (["--batch-nice", "7"], 7)):
        p = argparse.ArgumentParser()
        serve.add_serve_arguments(p)
        serve.run_serve(p.parse_args(["--threads", "1", *argv]))
        assert seen[-1].batch_nice == want
    p = argparse.ArgumentParser()
    serve.add_serve_arguments(p)
    with pytest.raises(SystemExit):
        p.parse_args(["--batch-nice", "-1"])
