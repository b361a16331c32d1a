"""``TokenTrie.token_words``: the bitmask words of the tokens of some distinct strings, on both
of its paths (bits set one by one for few strings, a packed boolean vector for many), against
the definition: bit ``t`` is set iff token ``t``'s bytes are one of the strings (or the bit is
set in ``base``).  Duplicate byte strings (several ids for one string) included."""

from __future__ import annotations

import numpy as np
import pytest

from formcast.bitmask import bitmask_to_bool, bitmask_words
from formcast.vocab import trie as trie_mod
from formcast.vocab.trie import TokenTrie


def _trie(rng: np.random.Generator) -> tuple[TokenTrie, list[bytes]]:
    tokens = [bytes([b]) for b in range(256)]
    tokens += [bytes(rng.integers(97, 100, size=int(rng.integers(1, 6)))) for _ in range(1500)]
    tokens += [b"dup", b"dup", b"dup"]  # one string, three ids
    return TokenTrie(tokens, vocab_size=len(tokens) + 5), tokens  # five ids without bytes


@pytest.mark.parametrize("k", [0, 1, 7, 300, 512, 513, 2000])
@pytest.mark.parametrize("with_base", [False, True])
def test_token_words_sets_exactly_the_strings_tokens(k: int, with_base: bool) -> None:
    rng = np.random.default_rng(k)
    trie, tokens = _trie(rng)
    size = len(tokens) + 5
    k = min(k, trie.num_strings)
    unique = rng.choice(trie.num_strings, size=k, replace=False).astype(np.int64)
    chosen = {trie.strings[i] for i in unique.tolist()}
    base = None
    base_bits = np.zeros(size, dtype=bool)
    if with_base:
        base_bits = rng.random(size) < 0.05
        base = np.packbits(
            np.concatenate([base_bits, np.zeros(bitmask_words(size) * 32 - size, dtype=bool)]),
            bitorder="little",
        ).view("<i4")
        before = base.copy()
    got = trie.token_words(unique, size, base=base)
    want = base_bits.copy()
    for t, s in enumerate(tokens):
        if s in chosen:
            want[t] = True
    assert got.dtype == np.int32
    assert got.shape == (bitmask_words(size),)
    assert np.array_equal(bitmask_to_bool(got, size), want)
    if base is not None:
        assert np.array_equal(base, before)  # the base is not written to
        assert got is not base


def test_both_paths_agree_around_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    trie, tokens = _trie(rng)
    size = len(tokens) + 5
    unique = rng.choice(trie.num_strings, size=200, replace=False).astype(np.int64)
    sparse = trie.token_words(unique, size)
    monkeypatch.setattr(trie_mod, "_SPARSE_WORDS_MAX", -1)
    dense = trie.token_words(unique, size)
    assert np.array_equal(sparse, dense)
