"""``_LexerHelpers.rows_of`` (the rules of a few rows' members, found in Python, written) is
``rows`` on the same members (numpy look-ups): the same rules returned in the same order, the
same per-class rows and split flags written, the same rules left unfilled (ensure36).

On the grammars of test_expanded_lexer_matches_simulation and the built-in JSON grammar, with
nothing built at construction: random batches of global states (a few rows of a few members,
as ``_union_rows_small`` passes), fed in the same order to two fresh helpers.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_lexer_rule_rows import _N, _automaton, _lazy

from formcast.automata.lexer import _LexerHelpers


@pytest.mark.parametrize("which", range(_N))
def test_rows_of_is_rows(which: int) -> None:
    auto = _automaton(which)
    lazy = _lazy(auto)
    offsets = lazy.offsets
    n_global = int(offsets[-1])
    a = _LexerHelpers(auto, offsets)
    b = _LexerHelpers(auto, offsets)
    rng = random.Random(which)
    for _ in range(40):
        batch = [
            sorted(rng.sample(range(1, n_global), min(n_global - 1, rng.randint(1, 5))))
            for _ in range(rng.randint(1, 4))
        ]
        flat = np.asarray([g for m in batch for g in m], dtype=np.int64)
        assert a.rows_of(batch) == b.rows(flat)
        assert a.unfilled == b.unfilled
        assert np.array_equal(a.filled, b.filled)
        assert np.array_equal(a.g_succ, b.g_succ)
        assert np.array_equal(a.g_split, b.g_split)
    assert a.unfilled < len(auto.dfas) or n_global <= 1  # some rule was written
