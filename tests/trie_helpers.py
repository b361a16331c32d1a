"""Test helpers for :class:`formcast.vocab.trie.TokenTrie` (kept out of the package).

* :func:`trie_of` - a fresh trie of a vocabulary's text tokens (``vocab.trie`` is cached on the
  vocabulary; the tests build their own).
* :func:`walk_alive` - per distinct string, whether the automaton is still alive after all of
  its bytes: ``trie.walk(...) != 0``.
"""

from __future__ import annotations

import numpy as np

from formcast.vocab.trie import TokenTrie
from formcast.vocab.vocabulary import Vocabulary

__all__ = ["trie_of", "walk_alive"]


def trie_of(vocab: Vocabulary) -> TokenTrie:
    """A new :class:`TokenTrie` of ``vocab`` (the same one ``vocab.trie`` builds)."""
    return TokenTrie(
        vocab.tokens, special_token_ids=vocab.special_token_ids, vocab_size=vocab.vocab_size
    )


def walk_alive(trie: TokenTrie, table: np.ndarray, start: int) -> np.ndarray:
    """Boolean per distinct string: the automaton is still alive after all its bytes."""
    alive: np.ndarray = trie.walk(table, start) != 0
    return alive
