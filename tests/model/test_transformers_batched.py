"""Batched decoding on transformers: a padded batch with a cache per slot, and the continuous
batcher on it.

A tiny random-weight Llama (2 layers, 4 heads, 2 KV heads, a 260-token byte vocabulary) is
built in memory.  Oracles: the single-sequence :class:`TransformersModel`.  Rows of a padded
batch -- prompts of different lengths joining next to sequences already running, slots
released and reused -- give the logits of each sequence decoded alone (to 1e-4); through the
batcher, 12 greedy requests (regexes, a JSON Schema, unconstrained, a stop string) joining at
different steps into 4 slots give exactly ``generate``'s text, tokens and finish reason.  In
CI a missing torch/transformers FAILS instead of skipping.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import numpy as np
import pytest

from _assets import in_ci
from formcast import ConfigurationError, GrammarCompiler, GrammarMatcher
from formcast.generation import generate
from formcast.generation.batching import ContinuousBatcher
from formcast.model.batched import BatchedDecoder
from formcast.vocab.vocabulary import Vocabulary


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if in_ci():
            raise AssertionError(f"CI installs {name} (scripts/test.sh): {exc}") from exc
        pytest.skip(f"{name} is not installed: pip install torch==2.13.0 transformers")


torch = _import("torch")
transformers = _import("transformers")

from formcast.model.transformers import TransformersModel  # noqa: E402
from formcast.model.transformers_batched import TransformersBatchedDecoder  # noqa: E402

EOS = 256
VOCAB = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>", b"ab", b"10", b'{"'],
    stop_token_ids=[EOS],
    name="bytes+",
)
COMPILER = GrammarCompiler(VOCAB)


@pytest.fixture(scope="module")
def model() -> TransformersModel:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=1, eos_token_id=EOS,
    )  # fmt: skip
    hf = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # spread the random logits: greedy choices are then far from ties
        hf.lm_head.weight.mul_(40.0)
    return TransformersModel(hf, None, vocab=VOCAB, chat_template=None, n_threads=1)


def test_padded_rows_give_each_sequence_its_lone_logits(model: TransformersModel) -> None:
    decoder = TransformersBatchedDecoder(model, n_slots=4)
    assert isinstance(decoder, BatchedDecoder)
    assert decoder.max_context == 512
    p = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]

    def alone(ids: list[int]) -> np.ndarray:
        return np.array(model.start(ids))

    rows = decoder.decode([(2, p[0]), (0, p[1])])
    assert rows.shape == (2, VOCAB.vocab_size)
    assert np.abs(rows[0] - alone(p[0])).max() < 1e-4
    assert np.abs(rows[1] - alone(p[1])).max() < 1e-4
    # one token, two tokens and a new prompt in one call
    rows = decoder.decode([(2, [20]), (0, [21, 22]), (1, p[2])])
    for row, seq in zip(rows, ([*p[0], 20], [*p[1], 21, 22], p[2])):
        assert np.abs(row - alone(seq)).max() < 1e-4
    assert [decoder.length(s) for s in range(4)] == [4, 3, 6, 0]
    decoder.release(2)  # the longest leaves; its slot takes a fresh sequence
    rows = decoder.decode([(2, p[1]), (0, [30]), (3, [40, 41, 42, 43, 44, 45, 46])])
    for row, seq in zip(rows, (p[1], [*p[1], 21, 22, 30], [40, 41, 42, 43, 44, 45, 46])):
        assert np.abs(row - alone(seq)).max() < 1e-4
    with pytest.raises(ConfigurationError, match="context full"):
        decoder.decode([(0, [1] * 510)])
    decoder.reset()
    assert all(decoder.length(s) == 0 for s in range(4))


def test_sliding_window_models_are_refused() -> None:
    config = transformers.MistralConfig(
        vocab_size=VOCAB.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, sliding_window=16,
        max_position_embeddings=64,
    )  # fmt: skip
    wrapped = TransformersModel(
        transformers.MistralForCausalLM(config), None, vocab=VOCAB, chat_template=None
    )
    with pytest.raises(ConfigurationError, match="full-attention layers only"):
        TransformersBatchedDecoder(wrapped)


def test_batcher_greedy_equals_generate_alone(model: TransformersModel) -> None:
    pats = [r"[a-c]{2,9}", r"(yes|no)!", r"\d{3}-\d{2}", None]
    requests: list[dict] = []
    for i in range(12):
        pat = pats[i % 4]
        requests.append(
            {
                "prompt": [3 + i, 40 + i, 7] * (1 + i % 3),
                "compiled": None if pat is None else COMPILER.compile_regex(pat),
                "max_tokens": 5 + 2 * (i % 4),
                "stop": ["q"] if i == 11 else None,
            }
        )
    decoder = TransformersBatchedDecoder(model, n_slots=4)
    batcher = ContinuousBatcher(decoder, max_queue=None)
    handles = []
    for i, kw in enumerate(requests):
        handles.append(
            batcher.submit(
                kw["prompt"], compiled=kw["compiled"], max_tokens=kw["max_tokens"],
                stop=kw["stop"],
            )
        )  # fmt: skip
        for _ in range(i % 3):
            batcher.step()
    batcher.run_until_idle()
    for i, (kw, handle) in enumerate(zip(requests, handles)):
        got = handle.result()
        want = generate(model, kw["prompt"], compiled=kw["compiled"],
                        max_tokens=kw["max_tokens"], stop=kw["stop"])  # fmt: skip
        assert (got.text, got.token_ids, got.finish_reason) == (
            want.text, want.token_ids, want.finish_reason,
        ), i  # fmt: skip
        pat = pats[i % 4]
        if pat is not None:
            matcher = GrammarMatcher(kw["compiled"])
            assert all(matcher.accept_token(t) for t in got.token_ids)
            if got.finish_reason == "completed":
                assert re.fullmatch(pat, got.text)
    assert all(decoder.length(s) == 0 for s in range(4))


def test_copy_prefix_gives_the_full_prefill_logits(model: TransformersModel) -> None:
    decoder = TransformersBatchedDecoder(model, n_slots=3)
    shared = [9, 8, 7, 6, 5, 4]
    decoder.decode([(0, [*shared, 1, 2])])
    decoder.copy_prefix(0, 2, len(shared))
    rows = decoder.decode([(2, [3, 3]), (0, [4])])
    assert np.abs(rows[0] - np.array(model.start([*shared, 3, 3]))).max() < 1e-4
    assert np.abs(rows[1] - np.array(model.start([*shared, 1, 2, 4]))).max() < 1e-4
    assert decoder.length(2) == len(shared) + 2
    with pytest.raises(ConfigurationError, match="cannot copy"):
        decoder.copy_prefix(0, 1, 99)
