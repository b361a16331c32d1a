"""``LazyExpandedLexer.ensure`` builds no rows ahead by default (exit37, session 23, #31).

Since walks stopped by an unbuilt row resume from their stops (``classify_walk_resume``), the
rows that ``ensure`` built ahead of them (up to 48 a call, three levels of successors, then
chains) cost more than the stops they spared (MaskBench TBM sum 0.96-0.97 without them:
docs/notes/exit37.md), so ``_AHEAD_ROWS`` is 0.  Here, with the defaults, on lazily built
lexers of the test grammars: each ``ensure`` call builds exactly the rows asked for (not built
before) and the rows without calls of the rules it meets for the first time (whose per-class
rows it writes), never a successor of theirs; the chain states stay empty.  Setting the
budget back (48) breaks it (mutation checked).  The masks do not depend on it:
tests/index/test_lexer_builds_ahead.py and test_lexer_chain_ahead.py compare masks with the
levels on and off.
"""

from __future__ import annotations

import random
from unittest import mock

import numpy as np
import pytest
from test_expanded_lexer_lazy_rows import _automaton
from test_expanded_lexer_matches_simulation import _GBNF, _SCHEMAS

import formcast.automata.lexer as lexer_module
from formcast.automata.lexer import LazyExpandedLexer


def test_the_default_budget_is_zero() -> None:
    assert lexer_module._AHEAD_ROWS == 0


@pytest.mark.parametrize("which", range(len(_GBNF) + len(_SCHEMAS) + 2))
def test_ensure_builds_the_rows_asked_and_their_new_rules_only(which: int) -> None:
    auto = _automaton(which)
    with mock.patch.object(lexer_module, "_LAZY_ROWS_FROM", 0):  # (rules written as met)
        lex = LazyExpandedLexer(auto)
    h = lex._build_helpers()
    n_global = int(lex.offsets[-1])
    rng = random.Random(which)
    calls = 0
    for _ in range(60):
        pool = list(range(1, n_global)) + list(range(n_global, lex.size))
        states = rng.sample(pool, min(len(pool), rng.choice((1, 1, 2, 3))))
        built_before = lex.built.copy()
        filled_before = h.filled.copy()
        got = lex.ensure(np.asarray(states, dtype=np.int64))
        asked = {s for s in states if not built_before[s]}
        assert got == bool(asked)
        new = set(np.flatnonzero(lex.built[: built_before.size] & ~built_before).tolist())
        new |= {s for s in range(built_before.size, lex.size) if lex.built[s]}
        # the rows without calls of the rules met for the first time (``_plain_rows``)
        plain: set[int] = set()
        for r in np.flatnonzero(h.filled & ~filled_before).tolist():
            off = int(lex.offsets[r])
            mask = h.plain_mask(r)
            n = int(auto.dfas[r].table.shape[0])
            rows = range(n) if mask is None else np.flatnonzero(mask)  # (its dead row too)
            plain |= {off + int(q) for q in rows if not built_before[off + int(q)]}
        assert new == asked | plain, (sorted(new - asked - plain), sorted(asked - new))
        calls += bool(asked)
        assert not h.chain_ends
    assert calls >= 1
