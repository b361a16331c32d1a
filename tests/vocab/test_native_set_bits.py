"""``TokenTrie.set_string_bits`` and ``token_words`` (the compiled build's C ``set_bits``)
set the same bits as the numpy paths, on random string sets of every size (issue #31)."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

import formcast.vocab.trie as trie_mod
from formcast.bitmask import bitmask_set_many, bitmask_words
from formcast.vocab.loaders import load_vocabulary


@pytest.fixture(scope="module")
def trie() -> trie_mod.TokenTrie:
    return load_vocabulary("llama3").trie


@pytest.mark.parametrize("k", [0, 1, 7, 600, 20_000, 120_000])
def test_bits_match_numpy(trie: trie_mod.TokenTrie, k: int) -> None:
    size = int(trie.token_to_unique.size)
    rng = np.random.default_rng(k)
    unique = np.sort(rng.choice(trie.num_strings, size=min(k, trie.num_strings), replace=False))
    base = rng.integers(-(2**31), 2**31, size=bitmask_words(size)).astype(np.int32)
    want = base.copy()
    bitmask_set_many(want, trie.unique_token_ids(unique))
    got = base.copy()
    trie.set_string_bits(got, unique.astype(np.int64))
    assert np.array_equal(got, want)
    native = trie.token_words(unique, size, base=base)
    with mock.patch.object(trie_mod, "_KERNEL", None):
        plain = trie.token_words(unique, size, base=base)
    assert np.array_equal(native, plain)
    assert np.array_equal(native, want)


def test_bad_string_is_refused(trie: trie_mod.TokenTrie) -> None:
    kernel = trie_mod._KERNEL
    if kernel is None or not hasattr(kernel, "set_bits"):
        pytest.skip("the pure-Python package: no C set_bits")
    words = np.zeros(8, dtype=np.int32)
    with pytest.raises(ValueError, match="out of range"):
        kernel.set_bits(words, trie.first_token, np.array([trie.num_strings + 5]), 256)
