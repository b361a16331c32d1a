"""A request repeating a constraint takes the short path to its first chunk: its compiled
grammar is found on the event loop (``GrammarCompiler.cached``: no hop to the compile thread,
where a cache hit would wait behind any compile in progress), and, its grammar's lead
having been taken before, it is submitted on the loop.  Neither changes what is answered.

Oracles: the compiler's memory cache returns the very grammar compiled for an equal key,
never one for another schema or other options (a different grammar object, compiled);
a repeated streamed request still gets the forced start before any model call can finish,
and the same reply as the first time.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import openai
from server_harness import ToyModel, metric, running_server
from test_continuous_batching import callable_model
from test_forced_start_streams_first import GatedFunction, body

from formcast.frontends.jsonschema.options import JsonSchemaOptions
from formcast.index.compiled import CompiledGrammar
from formcast.index.spec import ConstraintSpec, JsonSchemaSpec
from formcast.server import ServerConfig
from formcast.server.engine import Engine
from formcast.server.metrics import ServerMetrics

SCHEMA = {"type": "object", "properties": {"a": {"const": "x"}}, "required": ["a"]}
OTHER = {"type": "object", "properties": {"a": {"const": "y"}}, "required": ["a"]}


def test_a_repeated_constraint_is_found_without_the_compiler() -> None:
    engine = Engine(ToyModel(), ServerConfig(model_name="toy", batching=False), ServerMetrics())
    calls: list[ConstraintSpec] = []
    compile_async = engine.compiler.compile_async

    async def spy(spec: Any) -> CompiledGrammar:
        calls.append(spec)
        return await compile_async(spec)

    engine.compiler.compile_async = spy  # type: ignore[method-assign]
    lenient = JsonSchemaOptions(lenient=True)

    async def go() -> list[CompiledGrammar]:
        return [
            await engine.compile(JsonSchemaSpec.of(SCHEMA), param="p"),
            await engine.compile(JsonSchemaSpec.of(dict(SCHEMA)), param="p"),  # an equal dict
            await engine.compile(lambda: JsonSchemaSpec.of(SCHEMA), param="p"),
            await engine.compile(JsonSchemaSpec.of(OTHER), param="p"),
            await engine.compile(JsonSchemaSpec.of(SCHEMA, lenient), param="p"),
        ]

    try:
        first, again, made, other, options = asyncio.run(go())
    finally:
        engine.close()
    assert again is first
    assert made is first
    assert other is not first
    assert options is not first
    assert len(calls) == 3  # SCHEMA once, OTHER, SCHEMA with other options
    assert '"x"' in first.source
    assert '"y"' in other.source


def test_a_repeated_stream_gets_its_forced_start_before_any_model_call() -> None:
    fn = GatedFunction()
    with running_server(callable_model(fn), ServerConfig(model_name="toy", n_threads=1)) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=60)
        release = threading.Timer(60, fn.gate.set)  # never hang the suite
        release.start()
        texts = []
        try:
            for _ in range(3):  # the first compiles and takes the lead on a thread; then not
                fn.gate.clear()
                chunks = iter(client.chat.completions.create(**body(stream=True)))
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
                assert gate_was_closed
                assert first == '{"city":"'
                texts.append(text)
        finally:
            release.cancel()
            fn.gate.set()
        assert texts[0] == texts[1] == texts[2]
        assert metric(srv.url, "formcast_compile_cache_hits_total") == 2


def test_a_new_constraint_is_keyed_once(monkeypatch: Any) -> None:
    """A miss (look-up on the loop, then the compile) reads and keys the schema once
    (``GrammarCompiler.keyed``), a hit once too."""
    engine = Engine(ToyModel(), ServerConfig(model_name="toy", batching=False), ServerMetrics())
    calls = [0]
    inner = JsonSchemaSpec.key_parts

    def counted(self: JsonSchemaSpec) -> Any:
        calls[0] += 1
        return inner(self)

    monkeypatch.setattr(JsonSchemaSpec, "key_parts", counted)

    async def go() -> tuple[CompiledGrammar, CompiledGrammar]:
        first = await engine.compile(JsonSchemaSpec.of(OTHER), param="p")
        assert calls[0] == 1
        return first, await engine.compile(JsonSchemaSpec.of(OTHER), param="p")

    try:
        first, again = asyncio.run(go())
    finally:
        engine.close()
    assert again is first
    assert calls[0] == 2
