"""A request on a grammar whose lead an earlier request took, with the same options, streams
that lead (its forced start) *before* its prompt is tokenized and submitted
(``Engine._lead_ahead``): in a burst, each request's head then costs the event loop no
tokenize and no submit, which run after the burst's heads.  Only when no error can come
after the head: the model bounds the prompt's tokens (``prompt_token_bound``) so that it fits
the context with ``max_tokens``; otherwise the prompt is tokenized first, as before (a prompt
too long is still a 400, not an error inside a 200 stream).

Checked at the ASGI level on a model whose calls wait at a gate (no logits exist while the
head is written): the order of the head and the tokenize, the same bytes as the path without
the bound, the options that change a lead (``max_tokens``) keep the old order, a long prompt
still gets its 400; and on SmolLM2, that the bound holds.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from test_continuous_batching import callable_model
from test_first_chunks_leave_in_the_request_task import Recorder, _events, _scope
from test_forced_start_streams_first import SCHEMA, GatedFunction

from formcast.server import ServerConfig
from formcast.server.app import create_app

ROUTE = "/v1/chat/completions"
FORMAT = {"name": "c", "schema": SCHEMA, "strict": True}


def _body(i: int, max_tokens: int = 30, content: str | None = None) -> bytes:
    text = f"Which city? ({i})" if content is None else content
    return json.dumps({
        "model": "toy", "stream": True, "temperature": 0, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
        "response_format": {"type": "json_schema", "json_schema": FORMAT},
    }).encode()


def _text(rec: Recorder) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or ""
                   for e in _events(b"".join(rec.bodies())) if e["choices"])


def _app(bounded: bool, **config: Any) -> tuple[Any, GatedFunction, list[tuple[str, str, Any]]]:
    """The app on the gated toy model; ``bounded``: the model has ``prompt_token_bound``
    (its tokenizer's tokens each cover at least one byte).  Every tokenize is logged."""
    fn = GatedFunction()
    model = callable_model(fn)
    log: list[tuple[str, str, Any]] = []
    tokenize = model.tokenize

    def logged(text: str) -> list[int]:
        log.append(("model", "tokenize", text))
        return tokenize(text)

    model.tokenize = logged  # type: ignore[method-assign]
    if bounded:
        model.prompt_token_bound = lambda text: len(text.encode("utf-8")) + 2  # type: ignore[attr-defined]
    return create_app(model, ServerConfig(model_name="toy", n_threads=1, **config)), fn, log


def _serve(bounded: bool, bodies: list[bytes]) -> tuple[list[tuple[str, str, Any]], list[Recorder]]:
    """Request 0 (the warm-up: compiles, takes the lead) with the gate open, then each other
    request alone with the gate closed until its head is out, then open.  The shared log has
    each request's sends and receives and the model's tokenize calls, in order."""
    app, fn, log = _app(bounded)
    engine = app.state.engine
    timer = threading.Timer(60, fn.gate.set)  # never hang the suite
    timer.start()

    async def go() -> list[Recorder]:
        recs = []
        for i, body in enumerate(bodies):
            rec = Recorder(str(i), log, body)
            recs.append(rec)
            if i == 0:
                fn.gate.set()
                await app(_scope(ROUTE, body, 1), rec.receive, rec.send)
                continue
            fn.gate.clear()
            task = asyncio.create_task(app(_scope(ROUTE, body, 1 + i), rec.receive, rec.send))
            for _ in range(2000):
                if rec.bodies() or task.done():
                    break
                await asyncio.sleep(0.005)
            log.append((str(i), "gate", "open"))
            fn.gate.set()
            await asyncio.wait_for(task, 60)
        return recs

    engine.start()
    try:
        recs = asyncio.run(go())
    finally:
        fn.gate.set()
        timer.cancel()
        engine.close()
    return log, recs


def _order(log: list[tuple[str, str, Any]], rec: Recorder, name: str) -> tuple[int, int]:
    """(index of ``rec``'s head write, index of the tokenize of its prompt) in ``log``."""
    head = log.index((name, "send", rec.bodies()[0]))
    prompt = json.loads(rec.body)["messages"][0]["content"]
    read = log.index((name, "receive", "body"))
    tok = next(k for k, e in enumerate(log)
               if e[1] == "tokenize" and prompt in str(e[2]) and k > read)
    return head, tok


def test_the_forced_start_leaves_before_the_prompt_is_tokenized_with_the_same_bytes() -> None:
    bodies = [_body(0), _body(1), _body(2)]
    log, recs = _serve(True, bodies)
    for k in (1, 2):
        head, tok = _order(log, recs[k], str(k))
        assert head < tok  # the head first, the tokenize after it
        assert head < log.index((str(k), "gate", "open"))  # no logits existed yet
        assert [e["choices"][0]["delta"] for e in _events(recs[k].bodies()[0])] == [
            {"role": "assistant", "content": ""}, {"content": '{"city":"'}]
    # the same replies, chunk for chunk, as without the bound (tokenize first, then the head)
    log0, recs0 = _serve(False, bodies)
    for k in (1, 2):
        head, tok = _order(log0, recs0[k], str(k))
        assert tok < head
    for a, b in zip(recs, recs0, strict=True):
        assert a.sent[0]["status"] == b.sent[0]["status"] == 200
        ea, eb = _events(b"".join(a.bodies())), _events(b"".join(b.bodies()))
        strip = [{k: v for k, v in e.items() if k not in ("id", "created")} for e in ea]
        assert strip == [{k: v for k, v in e.items() if k not in ("id", "created")} for e in eb]
        json.loads(_text(a))


def test_other_options_than_the_remembered_lead_tokenize_first() -> None:
    # max_tokens shapes a lead (the forced text is cut to the budget): 31 is not 30's lead
    log, recs = _serve(True, [_body(0, 30), _body(1, 31), _body(2, 31)])
    head, tok = _order(log, recs[1], "1")
    assert tok < head
    head, tok = _order(log, recs[2], "2")  # now remembered with 31
    assert head < tok
    assert _text(recs[1]).startswith('{"city":"')
    assert _text(recs[2]).startswith('{"city":"')


def test_a_prompt_the_bound_cannot_fit_is_tokenized_first_and_refused_with_a_400() -> None:
    long = "lorem ipsum dolor sit amet, " * 800  # ~22 k bytes: more tokens than the context
    _, recs = _serve(True, [_body(0), _body(1, content=long)])
    rec = recs[1]
    assert rec.sent[0]["status"] == 400
    error = json.loads(b"".join(rec.bodies()))["error"]
    assert error["code"] == "context_length_exceeded"


@pytest.mark.parametrize("text", [
    "", "a", "<|im_start|>user\nhi<|im_end|>\n", "  \n\n\t  ", "é€😀 " * 20,
    "<|im_start|><|im_end|><|endoftext|>" * 3, "x" * 300, "1234567890" * 10,
])
def test_smollm2_prompt_token_bound_holds(text: str) -> None:
    from formcast.model.loading import load_model

    try:
        model = load_model("smollm2", n_threads=1)
    except Exception as exc:  # pragma: no cover - the bundled model is not installed
        pytest.skip(f"SmolLM2 not available: {exc}")
    bound = model.prompt_token_bound(text)  # type: ignore[attr-defined]
    assert bound is not None  # SmolLM2: byte-level BPE
    assert len(model.tokenize(text)) <= bound


def test_the_batchers_forced_start_memo_gives_each_lead_what_a_fresh_batcher_does() -> None:
    """``ContinuousBatcher`` computes a grammar's forced bytes once per lead (keyed by the
    lead's tokens): a plain lead and a fast-forward lead on the same grammar (different lead
    tokens, so different forced bytes after them) each get what a batcher of their own gives."""
    from test_continuous_batching import TokenFunction
    from test_fast_forward_server import model_of

    from formcast.generation.batching import ContinuousBatcher
    from formcast.index.compiler import GrammarCompiler
    from formcast.model.batched_select import batched_decoder_for

    model = model_of(TokenFunction())
    compiled = GrammarCompiler(model.vocab).compile_regex(r'\{"city":"[a-z]{1,8}", "n":[0-9]\}')

    def lead(batcher: ContinuousBatcher, ff: bool) -> tuple[str, ...]:
        req = batcher.submit([1, 2, 3], compiled=compiled, max_tokens=30, fast_forward=ff,
                             wake=False)
        req.cancel()
        return req.lead

    def fresh(ff: bool) -> tuple[str, ...]:
        decoder = batched_decoder_for(model, n_slots=2, n_threads=1)
        assert decoder is not None
        return lead(ContinuousBatcher(decoder), ff)

    decoder = batched_decoder_for(model, n_slots=2, n_threads=1)
    assert decoder is not None
    shared = ContinuousBatcher(decoder)
    expected = {ff: fresh(ff) for ff in (False, True)}
    assert expected[False] == ('{"city":"',)  # no token forced alone: the text pushed ahead
    assert expected[True] != expected[False]
    for ff in (False, True, False, True):
        assert lead(shared, ff) == expected[ff]


def test_a_lead_that_differs_from_what_was_streamed_is_an_internal_error() -> None:
    from formcast.errors import FormcastError
    from formcast.server.engine import _after_lead

    class Req:
        def __init__(self, lead: tuple[str, ...], ready: list[str]) -> None:
            self.lead, self.ready = lead, ready

        def take_ready(self) -> list[str]:
            return self.ready

    class Job:
        def __init__(self, stopped: bool) -> None:
            self.cancel = threading.Event()
            if stopped:
                self.cancel.set()
            self.deadline = None

    ahead = ('{"a":"',)
    assert _after_lead(Req(ahead, ['{"a":"', "x"]), ahead, Job(False)) == ["x"]  # type: ignore[arg-type]
    with pytest.raises(FormcastError, match="differs"):
        _after_lead(Req(('{"b":"',), ['{"b":"']), ahead, Job(False))  # type: ignore[arg-type]
    with pytest.raises(FormcastError, match="differs"):
        _after_lead(Req((), []), ahead, Job(False))  # type: ignore[arg-type]
    assert _after_lead(Req((), []), ahead, Job(True)) == []  # type: ignore[arg-type]


def test_a_burst_split_over_two_loop_turns_joins_one_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn reads a burst's first request in one loop turn and the rest in the next: the
    first request's tokenize and submit wait until the others have written their heads, and
    the idle batcher is woken once the last of them is submitted, so all of them join its
    first step (one prefill round) instead of the first request's prompt going alone."""
    # the bound on the wait is a fallback (a loop preempted on a loaded machine): not tested
    monkeypatch.setattr("formcast.server.engine._WAKE_BOUND_S", 30.0)
    # share_prefix off: joiners sharing a start with one another would wait a step to copy it
    app, fn, _ = _app(True, share_prefix=None)
    engine = app.state.engine
    timer = threading.Timer(60, fn.gate.set)  # never hang the suite
    timer.start()

    async def go() -> tuple[list[int], list[int]]:
        fn.gate.set()
        warm = Recorder("w", [], _body(0))
        await app(_scope(ROUTE, warm.body, 1), warm.receive, warm.send)
        batcher = engine.batcher
        decoder = batcher.decoder
        for _ in range(200):  # the worker idle (its last step over), asleep until woken
            if batcher.running == batcher.queued == 0:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        fn.gate.clear()
        wake = batcher.wake
        seen: list[int] = []  # requests queued at each wake of the (idle) worker

        def logged_wake() -> None:
            seen.append(batcher.queued)
            wake()

        batcher.wake = logged_wake
        calls0 = len(decoder.batch_sizes)
        recs = [Recorder(str(i), [], _body(7 + i)) for i in range(3)]
        tasks: list[asyncio.Task[None]] = []

        def spawn(rs: list[Recorder]) -> None:
            tasks.extend(asyncio.create_task(app(_scope(ROUTE, r.body, 3 + int(r.name)),
                                                 r.receive, r.send)) for r in rs)

        spawn(recs[:1])  # turn 1: the first request; turn 2: it runs, the others are read
        asyncio.get_running_loop().call_soon(spawn, recs[1:])
        for _ in range(2000):
            if all(r.bodies() for r in recs) and seen:
                break
            await asyncio.sleep(0.005)
        fn.gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        for r in recs:
            json.loads(_text(r))
        return seen, decoder.batch_sizes[calls0:]

    engine.start()
    try:
        seen, sizes = asyncio.run(go())
    finally:
        fn.gate.set()
        timer.cancel()
        engine.close()
    assert seen[0] == 3  # the idle worker first woken with the whole burst queued
    assert sizes[0] == 3  # ... and its first model call has the three rows
