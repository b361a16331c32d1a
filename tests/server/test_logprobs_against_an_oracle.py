"""``logprobs`` / ``top_logprobs``: each output token's log-probability under the distribution
it was drawn from -- the model's logits restricted to the tokens the constraint allowed, at
temperature 1 (unconstrained: the model's own log-softmax; a forced token: 0).

Oracles independent of the server: the toy model's logits replayed step by step with numpy's
log-softmax, and, for an ``enum`` schema, the allowed set computed by hand from the vocabulary
(the tokens whose bytes continue one of the enum's JSON texts)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest
from server_harness import ToyModel, running_server

from formcast.server import ServerConfig

MSG = [{"role": "user", "content": "hi"}]
COLORS = ["red", "green", "blue"]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ToyModel, Any]]:
    model = ToyModel()
    with running_server(model, ServerConfig(model_name="toy")) as srv:
        yield model, openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)


def replay(model: ToyModel, token_ids: list[int]) -> list[np.ndarray]:
    """The toy's logits before each output token, recomputed by a fresh toy."""
    prompt = model._seq[: model._prompt_len]  # the last request's prompt, as the server sent it
    fresh = ToyModel()
    out = [fresh.start(prompt).copy()]
    for t in token_ids[:-1]:
        out.append(fresh.step([t]).copy())
    return out


def log_softmax(x: np.ndarray, ids: list[int]) -> dict[int, float]:
    sub = x[ids]
    z = np.log(np.exp(sub - sub.max()).sum()) + sub.max()
    return {i: float(x[i] - z) for i in ids}


def ids_of(model: ToyModel, entries: Any) -> list[int]:
    return [model._by_bytes[bytes(e.bytes)] for e in entries]


def test_unconstrained_logprobs_are_the_models_log_softmax(served: Any) -> None:
    model, client = served
    r = client.chat.completions.create(model="toy", messages=MSG, temperature=0, logprobs=True,
                                       top_logprobs=3)
    entries = r.choices[0].logprobs.content
    assert "".join(e.token for e in entries) == r.choices[0].message.content
    tokens = ids_of(model, entries)
    everything = list(range(model.vocab.vocab_size))
    for e, tok, logits in zip(entries, tokens, replay(model, tokens), strict=True):
        want = log_softmax(logits, everything)
        assert math.isclose(e.logprob, want[tok], rel_tol=1e-9, abs_tol=1e-9)
        assert len(e.top_logprobs) == 3
        assert e.top_logprobs[0].token == e.token  # greedy took the most likely token
        best = sorted(want.values(), reverse=True)[:3]
        assert [t.logprob for t in e.top_logprobs] == pytest.approx(best)


def test_constrained_logprobs_renormalize_over_the_allowed_tokens(served: Any) -> None:
    model, client = served
    schema = {"enum": COLORS}
    r = client.chat.completions.create(
        model="toy", messages=MSG, temperature=0, logprobs=True, top_logprobs=5,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )
    content = r.choices[0].message.content
    assert content in ('"red"', '"green"', '"blue"')
    entries = r.choices[0].logprobs.content
    tokens = ids_of(model, entries)
    texts = [f'"{c}"'.encode() for c in COLORS]
    vocab = model.vocab
    done = b""
    for e, tok, logits in zip(entries, tokens, replay(model, tokens), strict=True):
        allowed = [i for i, t in enumerate(vocab.tokens)
                   if t and vocab.is_text_token(i) and any(d.startswith(done + t) for d in texts)]
        if len(allowed) == 1:
            assert e.logprob == 0.0  # forced
        else:
            want = log_softmax(logits, allowed)
            assert math.isclose(e.logprob, want[tok], rel_tol=1e-9, abs_tol=1e-9)
            listed = {t.token.encode(): t.logprob for t in e.top_logprobs}
            # only allowed tokens are listed
            assert all(any(d.startswith(done + t) for d in texts) for t in listed)
            assert sum(math.exp(v) for v in listed.values()) <= 1 + 1e-9
        done += vocab.token_bytes(tok)
    assert done.decode() == content


def test_streamed_logprobs_come_in_the_final_chunk(served: Any) -> None:
    _, client = served
    whole = client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                           logprobs=True)
    chunks = list(client.chat.completions.create(model="toy", messages=MSG, temperature=0,
                                                 logprobs=True, stream=True))
    last = [c for c in chunks if c.choices and c.choices[0].finish_reason][-1]
    got = [(e.token, e.logprob) for e in last.choices[0].logprobs.content]
    assert got == [(e.token, e.logprob) for e in whole.choices[0].logprobs.content]


def test_completions_logprobs_in_the_legacy_shape(served: Any) -> None:
    _, client = served
    r = client.completions.create(model="toy", prompt="hi", max_tokens=32, temperature=0,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text
    assert len(lp.token_logprobs) == len(lp.tokens) == len(lp.text_offset)
    assert all(len(t) == 2 for t in lp.top_logprobs)
    assert lp.text_offset[0] == 0
    assert all(v <= 0 for v in lp.token_logprobs)


def test_without_logprobs_there_are_none(served: Any) -> None:
    _, client = served
    r = client.chat.completions.create(model="toy", messages=MSG, temperature=0)
    assert r.choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="toy", messages=MSG, top_logprobs=2)
