"""``CanonicalPairs`` against a brute-force oracle on a tiny BPE built with ``tokenizers``.

The tokenizer is byte-level BPE *without* pre-tokenization (``ByteLevel(use_regex=False)``),
where Vieira et al. (arXiv 2506.07956) prove that a token sequence is canonical iff each of its
adjacent pairs is.  The oracle enumerates every string over ``{a, b, c}`` up to length 7 and
every segmentation of it into vocabulary tokens, and compares "every pair passes the test" with
"the segmentation is ``encode(string)``".
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest

from formcast.errors import ConfigurationError
from formcast.vocab.canonical import CanonicalPairs, is_canonical
from formcast.vocab.vocabulary import Vocabulary

tokenizers = pytest.importorskip("tokenizers")

CORPUS = ["abcabcab", "aabbcc", "abab", "cabca", "bcbcbca", "aaab", "ccab"] * 3


def tiny_bpe(vocab_size: int = 14) -> tuple[Vocabulary, object]:
    """A byte-level BPE over ``a b c`` (``<eos>`` id 0) and its ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<eos>"], show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    return Vocabulary.from_huggingface(tok, stop_token_ids=[0], name="tiny-bpe"), tok


def encoder(tok: object) -> object:
    def encode(data: bytes) -> list[int] | None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return list(tok.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]

    return encode


def segmentations(vocab: Vocabulary, s: bytes) -> Iterator[list[int]]:
    """Every way to write ``s`` as a sequence of text tokens."""
    if not s:
        yield []
        return
    for i, t in enumerate(vocab.tokens):
        if vocab.is_text_token(i) and s.startswith(t):
            for rest in segmentations(vocab, s[len(t) :]):
                yield [i, *rest]


def test_pair_test_is_exact_on_bpe_without_pretokenization() -> None:
    vocab, tok = tiny_bpe()
    encode = encoder(tok)
    pairs = CanonicalPairs(vocab, encode)  # type: ignore[arg-type]
    checked = non_canonical = 0
    for n in range(1, 8):
        for chars in itertools.product(b"abc", repeat=n):
            s = bytes(chars)
            canonical_ids = encode(s)  # type: ignore[operator]
            for seg in segmentations(vocab, s):
                by_pairs = all(
                    bool(pairs.allowed_after(a, np.array([b]))[0])
                    for a, b in itertools.pairwise(seg)
                )
                assert by_pairs == (seg == canonical_ids), (s, seg, canonical_ids)
                assert is_canonical(vocab, encode, seg) == (seg == canonical_ids)  # type: ignore[arg-type]
                checked += 1
                non_canonical += seg != canonical_ids
    assert checked > 2000
    assert non_canonical > 1000


def test_rows_are_cached_and_bounded() -> None:
    vocab, tok = tiny_bpe()
    calls: list[bytes] = []
    inner = encoder(tok)

    def counting(data: bytes) -> list[int] | None:
        calls.append(data)
        return inner(data)  # type: ignore[operator, no-any-return]

    pairs = CanonicalPairs(vocab, counting, max_rows=2)
    text_ids = np.array([i for i in range(vocab.vocab_size) if vocab.is_text_token(i)])
    first = pairs.allowed_after(1, text_ids)
    n_calls = len(calls)
    assert n_calls == text_ids.size  # one encode per pair, the first time
    assert (pairs.allowed_after(1, text_ids) == first).all()
    assert len(calls) == n_calls  # cached: no new encode
    for prev in (2, 3, 4):  # evicts row 1 (max_rows=2)
        pairs.allowed_after(prev, text_ids)
    pairs.allowed_after(1, text_ids)
    assert len(calls) == n_calls * 5  # recomputed after eviction, same answer
    assert pairs.rows == 5
    # bitmask form agrees with the id form
    from formcast.bitmask import bitmask_to_ids, ids_to_bitmask

    row = ids_to_bitmask(text_ids.tolist(), vocab.vocab_size)
    pairs.restrict_bitmask(1, row, text_ids)
    assert bitmask_to_ids(row).tolist() == text_ids[first].tolist()


def test_stop_tokens_and_unencodable_pairs_are_never_masked() -> None:
    tokens = [b"<eos>", b"a", b"\xc3", b"\xa9", b"\xc3\xa9"]
    vocab = Vocabulary.from_tokens(tokens, stop_token_ids=[0])

    def encode(data: bytes) -> list[int] | None:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return [4] if data == b"\xc3\xa9" else [1] * len(data)

    pairs = CanonicalPairs(vocab, encode)
    ids = np.arange(5)
    # after 0xC3: 0xA9 makes "é" (canonically one token) -> masked; 0xC3 0xC3 / 0xC3 "a" are
    # not UTF-8 -> not checked, allowed; the stop token is always allowed
    assert pairs.allowed_after(2, ids).tolist() == [True, True, True, False, True]
    assert pairs.allowed_after(-1, ids).all()
    assert pairs.allowed_after(0, ids).all()


def test_bad_arguments() -> None:
    vocab = Vocabulary.from_tokens([b"<eos>", b"a"], stop_token_ids=[0])
    with pytest.raises(ConfigurationError, match="callable"):
        CanonicalPairs(vocab, "nope")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_rows"):
        CanonicalPairs(vocab, lambda b: [1], max_rows=0)
