"""``LazyExpandedLexer.ensure`` builds what its reference algorithm builds (session 19, ensure33).

Two shortcuts of ``ensure`` must change nothing that gets built: the ahead levels read the
successors of the rows built on one column per byte class (not 256), and
``_LexerHelpers.rows`` skips its look-up once every rule's per-class rows are written.  Here a
reference ``ensure`` (the 256-column ahead levels, the rows looked up on every call) and the
real one are run side by side, on two lexers of the same grammar, over the same random
sequences of ``ensure`` calls (rule positions and the unions met so far, one to a few states a
call), both with the rule rows written at construction and with them written as met; after
every call both lexers hold the same rows, split flags, built flags, unions and numbering, and
the helpers' count of rules still to write is the number of rules not written.  An ahead level
that read too few columns (a class missed) or a fast exit taken too early breaks it.

row33: the reference builds every batch with the numpy ``_union_rows``; the real ``ensure``
builds batches of at most ``_SCALAR_ROWS`` rows with the loops of ``_union_rows_small`` (here
also with every batch and with none going that way), and reads a level's successors as a
sorted set instead of ``np.unique``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from unittest import mock

import numpy as np
import pytest
from test_expanded_lexer_lazy_rows import _automaton
from test_expanded_lexer_matches_simulation import _GBNF, _SCHEMAS

import formcast.automata.lexer as lexer_module
from formcast.automata.lexer import LazyExpandedLexer, LexerStateCapError


@pytest.fixture(autouse=True)
def _ahead_rows_on() -> Iterator[None]:
    """The ahead (and chain) levels tested here, with the budget they had by default before
    exit37 (``_AHEAD_ROWS`` is 0 by default since: tests/automata/test_lexer_ahead_default.py)."""
    with mock.patch.object(lexer_module, "_AHEAD_ROWS", 48):
        yield


def _reference_build(lex: LazyExpandedLexer, todo: list[int]) -> None:
    """``_build`` with the numpy ``_union_rows`` for every batch (before row33)."""
    h = lex._build_helpers()
    n_global = int(lex.offsets[-1])
    batch = [list(h.closure(s)) if s < n_global else list(lex.sets[s - n_global]) for s in todo]
    block, split_block = lex._union_rows(h, batch)
    idx = np.asarray(todo, dtype=np.int64)
    lex.table[idx] = block[:, h.cls_of_byte]
    lex.split[idx] = split_block[:, h.cls_of_byte]
    lex.built[idx] = True


def _reference_ensure(lex: LazyExpandedLexer, states: list[int]) -> bool:
    """``ensure`` as before session 19: successors on all 256 columns, rows looked up."""
    todo = sorted({s for s in states if not lex.built[s]})
    if not todo:
        return False
    _reference_build(lex, todo)
    frontier = np.asarray(todo, dtype=np.int64)
    seen = set(todo)
    budget = lexer_module._AHEAD_ROWS
    for _ in range(lexer_module._AHEAD_LEVELS):
        if budget <= 0 or lex.size + 256 > lex.max_states - lexer_module._AHEAD_MARGIN:
            break
        met = [s for s in np.unique(lex.table[frontier]).tolist() if s not in seen]
        if not met:
            break
        seen.update(met)
        frontier = np.asarray(met, dtype=np.int64)
        build = frontier[~lex.built[frontier]][:budget]
        if build.size:
            try:
                _reference_build(lex, build.tolist())
            except LexerStateCapError:
                break
            budget -= int(build.size)
    return True


def _same(a: LazyExpandedLexer, b: LazyExpandedLexer) -> None:
    assert a.size == b.size
    n = a.size
    assert np.array_equal(a.built[:n], b.built[:n])
    assert np.array_equal(a.table[:n], b.table[:n])
    assert np.array_equal(a.split[:n], b.split[:n])
    assert a.ids == b.ids
    assert a.sets == b.sets
    for lex in (a, b):
        h = lex._helpers
        assert h is not None
        assert h.unfilled == int((~h.filled).sum())


@pytest.mark.parametrize("scalar_rows", [None, 0, 1 << 30])
@pytest.mark.parametrize("lazy_from", [0, 1 << 30])
@pytest.mark.parametrize("which", range(len(_GBNF) + len(_SCHEMAS) + 2))
def test_ensure_builds_what_the_reference_builds(
    which: int, lazy_from: int, scalar_rows: int | None
) -> None:
    auto = _automaton(which)
    if scalar_rows is None:
        scalar_rows = lexer_module._SCALAR_ROWS
    with (
        mock.patch.object(lexer_module, "_LAZY_ROWS_FROM", lazy_from),
        mock.patch.object(lexer_module, "_SCALAR_ROWS", scalar_rows),
        # (the chain levels past _AHEAD_LEVELS: tests/index/test_lexer_chain_ahead.py)
        mock.patch.object(lexer_module, "_CHAIN_ROWS", 0),
    ):
        real = LazyExpandedLexer(auto)
        ref = LazyExpandedLexer(auto)
        _same(real, ref)
        n_global = int(real.offsets[-1])
        rng = random.Random(which * 7 + (lazy_from > 0))
        for _ in range(60):
            pool = list(range(1, n_global)) + list(range(n_global, real.size))
            states = rng.sample(pool, min(len(pool), rng.choice((1, 1, 2, 4, 7))))
            got = real.ensure(np.asarray(states, dtype=np.int64))
            want = _reference_ensure(ref, states)
            assert got == want
            _same(real, ref)
    assert real.built[: real.size].sum() > 1
