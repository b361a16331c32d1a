"""What the server tests share: a fast deterministic model on a real tokenizer vocabulary, and a
REAL uvicorn server on 127.0.0.1 (a free port) in a thread of the test process.

:class:`ToyModel` has SmolLM2's vocabulary (49,152 byte-level BPE tokens, ChatML specials:
``<|im_end|>`` is a stop token), tokenizes by greedy longest match, and prefers, at each step:

* the longest token that continues its *reply* (``reply(prompt_text)``, by default a fixed
  sentence) while the output so far is a prefix of it, then a stop token;
* otherwise short tokens, closing bytes (``"``, ``}``, ``]``) and ``0``, and stop tokens: under
  a constraint (the mask decides what is allowed) greedy decoding writes a short document
  valid for it -- for ANY schema, which is what the tests check.

``delay_s`` sleeps in every model call (a slow model for queue and cancellation tests);
``calls`` counts the model calls.  Nothing here knows the server's code.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from formcast.model.base import ModelBase
from formcast.model.chat import SMOLLM2_CHAT, ChatTemplate
from formcast.vocab.loaders import load_vocabulary
from formcast.vocab.vocabulary import Vocabulary

DEFAULT_REPLY = "Hello! I am a toy model."

_VOCAB: Vocabulary | None = None


def smollm2_vocab() -> Vocabulary:
    global _VOCAB
    if _VOCAB is None:
        _VOCAB = load_vocabulary("smollm2")
    return _VOCAB


class ToyModel(ModelBase):
    """A deterministic :class:`formcast.model.protocol.LanguageModel` (see the module doc)."""

    def __init__(
        self,
        reply: Callable[[str], str] | None = None,
        *,
        delay_s: float = 0.0,
        name: str = "toy",
        chat_template: ChatTemplate | None = SMOLLM2_CHAT,
        max_context: int | None = 4096,
    ) -> None:
        self._vocab = smollm2_vocab()
        v = self._vocab
        self._reply = reply or (lambda prompt: DEFAULT_REPLY)
        self.delay_s = delay_s
        self._name = name
        self._chat = chat_template
        self._max_context = max_context
        self.calls = 0
        self.lock = threading.Lock()
        lengths = np.array([len(t) for t in v.tokens], dtype=np.float64)
        base = -lengths
        for i, t in enumerate(v.tokens):
            if not v.is_text_token(i):
                base[i] = -100.0
            elif t in (b'"', b"}", b"]"):
                base[i] = 10.0
            elif t == b"0":
                base[i] = 5.0
        for s in v.stop_token_ids:
            base[s] = 20.0
        self._base = base
        self._by_bytes: dict[bytes, int] = {}
        for i, t in enumerate(v.tokens):
            if t and t not in self._by_bytes:
                self._by_bytes[t] = i
        self._max_len = max(len(t) for t in v.tokens)
        self._prompt_len = 0
        self._seq: list[int] = []
        self._target = b""

    # -- the protocol ---------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        ids: list[int] = []
        i = 0
        while i < len(data):
            for n in range(min(self._max_len, len(data) - i), 0, -1):
                tid = self._by_bytes.get(data[i : i + n])
                if tid is not None:
                    ids.append(tid)
                    i += n
                    break
            else:  # pragma: no cover - every byte is a token of a byte-level BPE
                raise ValueError(f"cannot tokenize byte {data[i]}")
        return ids

    def start(self, prompt_ids: Sequence[int]) -> np.ndarray:
        self._seq = [int(t) for t in prompt_ids]
        self._prompt_len = len(self._seq)
        prompt = self._vocab.decode(self._seq).decode("utf-8", "replace")
        self._target = self._reply(prompt).encode("utf-8")
        return self._call()

    def step(self, token_ids: Sequence[int]) -> np.ndarray:
        self._seq.extend(int(t) for t in token_ids)
        return self._call()

    # -- the logits -----------------------------------------------------------------------------
    def _call(self) -> np.ndarray:
        with self.lock:
            self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        logits = self._base.copy()
        out = self._vocab.decode(self._seq[self._prompt_len :])
        target = self._target
        if target.startswith(out) and len(out) < len(target):
            rest = target[len(out) :]
            for n in range(min(self._max_len, len(rest)), 0, -1):
                tid = self._by_bytes.get(rest[:n])
                if tid is not None:
                    logits[tid] = 50.0
                    break
            for s in self._vocab.stop_token_ids:
                logits[s] = -50.0
        return logits


@contextmanager
def running_server(model: Any, config: Any = None, **app_kwargs: Any) -> Iterator[Any]:
    """A real uvicorn server on 127.0.0.1 serving ``model``; yields an object with ``url``
    (``http://127.0.0.1:PORT``), ``base_url`` (``.../v1``) and ``app``.  Stopped on exit."""
    import uvicorn

    from formcast.server import ServerConfig, create_app
    from formcast.server.http_protocol import http_protocol

    app = create_app(model, config or ServerConfig(model_name="toy"), **app_kwargs)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # uvicorn's HTTP protocol as `formcast serve` runs it (formcast.server.http_protocol)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                           http=http_protocol()))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the uvicorn server did not start")
        time.sleep(0.01)

    class Running:
        pass

    running = Running()
    running.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    running.base_url = f"{running.url}/v1"  # type: ignore[attr-defined]
    running.app = app  # type: ignore[attr-defined]
    running.port = port  # type: ignore[attr-defined]
    try:
        yield running
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


def metric(url: str, name: str) -> float:
    """The value of the sample ``name`` (with its labels) on ``GET /metrics`` (0 if absent)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            key, _, value = line.rpartition(" ")
            if key == name:
                return float(value)
    return 0.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_process(
    *args: str, timeout_s: float = 120
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m formcast serve --model smollm2 ARGS`` on a free 127.0.0.1 port, once
    ``/health`` says ok: yields ``(process, base url)``; terminated (killed past 30 s) at the end
    unless it already exited.  Raises AssertionError when it exits or is not healthy in time."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "formcast", "serve", "--model", "smollm2", "--host", "127.0.0.1",
         "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"formcast serve exited: {out}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if json.loads(resp.read())["status"] == "ok":
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"formcast serve did not become healthy in {timeout_s:g} s")
        time.sleep(0.2)
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
