"""With continuous batching, the text a response format forces at the start of a reply
(``{"city":"`` for a schema whose first property is ``city``) is streamed before the model is
called for that request; the reply is the same as without batching.

The model is a :class:`CallableModel` on SmolLM2's vocabulary whose calls wait at a gate: while
the gate is closed no logits exist, so a content chunk read then can only be text the grammar
forces.  The oracle for the whole reply: the same request to a server that serves one request
after another (``batching=False``, the ``generate`` loop), on the same logits function.
"""

from __future__ import annotations

import threading
from typing import Any

import openai
from server_harness import metric, running_server
from test_continuous_batching import TokenFunction, callable_model

from formcast.server import ServerConfig

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}},
    "required": ["city", "n"],
    "additionalProperties": False,
}


class GatedFunction(TokenFunction):
    """:class:`TokenFunction` whose calls wait until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def __call__(self, ids: list[int]) -> Any:
        self.gate.wait(60)
        return super().__call__(ids)


def body(stream: bool) -> dict[str, Any]:
    return {
        "model": "toy",
        "messages": [{"role": "user", "content": "Which city? And a number."}],
        "temperature": 0,
        "max_tokens": 40,
        "stream": stream,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "c", "schema": SCHEMA, "strict": True},
        },
    }


def test_forced_start_is_streamed_before_the_first_model_call() -> None:
    fn = GatedFunction()
    with running_server(callable_model(fn), ServerConfig(model_name="toy", n_threads=1)) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=60)
        release = threading.Timer(30, fn.gate.set)  # never hang the suite
        release.start()
        try:
            stream = client.chat.completions.create(**body(stream=True))
            chunks = iter(stream)
            first = ""
            for chunk in chunks:
                first = "".join(c.delta.content or "" for c in chunk.choices)
                if first:
                    break
            gate_was_closed = not fn.gate.is_set()
            fn.gate.set()
            text = first + "".join(
                c.delta.content or "" for chunk in chunks for c in chunk.choices
            )
        finally:
            release.cancel()
            fn.gate.set()
        assert gate_was_closed  # the first content came while no model call could finish
        assert first == '{"city":"'
        assert metric(srv.url, "formcast_batch_rows") > 0  # served by the batcher
    sequential = ServerConfig(model_name="toy", batching=False)
    with running_server(callable_model(TokenFunction()), sequential) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=60)
        alone = client.chat.completions.create(**body(stream=False))
    assert text == alone.choices[0].message.content
    assert text.startswith(first)
