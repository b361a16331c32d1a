"""``TokenTrie._one_token_each`` (every distinct string is one token id; #31 walk32) counted
without a sort agrees with its definition on the id ranges of ``_token_ranges``, on random
vocabularies with duplicate, empty and special tokens, and on tries of plain strings."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from formcast.vocab.trie import TokenTrie


def _by_ranges(trie: TokenTrie) -> bool:
    starts, _ = trie._token_ranges()
    return bool(trie.num_strings > 0 and (np.diff(starts) == 1).all())


@given(
    st.lists(st.binary(min_size=0, max_size=3), min_size=0, max_size=40),
    st.sets(st.integers(0, 45), max_size=5),
    st.integers(0, 6),
)
@settings(max_examples=200, deadline=None)
def test_counted_matches_the_id_ranges(tokens: list[bytes], specials: set[int], extra: int) -> None:
    trie = TokenTrie(tokens, special_token_ids=specials, vocab_size=len(tokens) + extra)
    assert trie._one_token_each() == _by_ranges(trie)


def test_distinct_and_duplicated_vocabularies() -> None:
    assert TokenTrie([b"a", b"b", b"ab"], vocab_size=3)._one_token_each()
    assert not TokenTrie([b"a", b"b", b"a"], vocab_size=3)._one_token_each()
    assert not TokenTrie._of_strings([b"a", b"b"])._one_token_each()
    assert not TokenTrie([], vocab_size=0)._one_token_each()
