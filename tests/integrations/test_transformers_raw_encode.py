"""``TransformersModel.encode_bytes``: the raw tokenizer behind ``canonical=True``.

A tiny byte-level BPE built with ``tokenizers``, wrapped as a transformers fast tokenizer, and
a 1-layer random GPT-2 of the same width (in memory; skipped without torch/transformers):
``encode_bytes`` adds no special token, does not parse special markers in the text, refuses
bytes that are not UTF-8 (``None``), and ``generate(canonical=True)`` runs through it.
"""

from __future__ import annotations

from typing import Any

import pytest

from formcast.generation import generate
from formcast.vocab.canonical import is_canonical
from formcast.vocab.vocabulary import Vocabulary

CORPUS = ["abcabcab", "aabbcc", "abab", "cabca", "bcbcbca", "aaab", "ccab"] * 3


@pytest.fixture(scope="module")
def model() -> Any:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from formcast.model.transformers import TransformersModel

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS, trainers.BpeTrainer(vocab_size=14, special_tokens=["<eos>"], show_progress=False)
    )
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    vocab = Vocabulary.from_huggingface(tok, stop_token_ids=[0], name="tiny-bpe")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = transformers.GPT2Config(
        vocab_size=vocab.vocab_size, n_positions=32, n_embd=16, n_layer=1, n_head=2,
        bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    net = transformers.GPT2LMHeadModel(config).eval()
    return TransformersModel(net, hf, vocab=vocab, verify_vocab=False, chat_template=None), tok


def test_encode_bytes_is_the_raw_tokenizer(model: Any) -> None:
    lm, tok = model
    for text in ("abcab", "ccab", "a"):
        assert lm.encode_bytes(text.encode()) == tok.encode(text, add_special_tokens=False).ids
    assert lm.encode_bytes(b"") == []
    assert lm.encode_bytes(b"\xc3") is None  # not UTF-8: cannot be encoded exactly
    assert 0 not in lm.encode_bytes(b"a<eos>b")  # the marker is text, not the special id


def test_generate_canonical_through_transformers(model: Any) -> None:
    lm, _tok = model
    for seed in range(10):
        r = generate(
            lm, [0], regex="[abc]{1,4}", temperature=1.0, seed=seed, canonical=True, max_tokens=8
        )
        if r.finish_reason == "completed":
            assert is_canonical(lm.vocab, lm.encode_bytes, r.token_ids)
