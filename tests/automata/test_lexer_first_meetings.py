"""``LazyExpandedLexer.ensure`` builds what the pre-stops39 algorithm built (session 25, #31).

stops39 made a stop's rows cheaper: a rule met for the first time gets its per-class rows
(``_LexerHelpers._write_rules``: no ``np.unique`` look-up after ``rows_of``) and then its
rows without calls from those per-class rows (``_plain_rows``: one ``take`` through the byte
classes, not a gather through the shift of every DFA cell), a row of 3+ members takes its
split flags by ufuncs (not lists), and numpy's dispatching wrappers gave way to ndarray
methods.  Here a reference written the old way (the DFA's rows per class shifted, the plain
rows by the shift gather, every row by loops over the members' lists) and the real ``ensure``
run side by side on two lexers of the same grammar (nothing built at construction, so every
rule is met by some call), over random sequences of calls (rule positions and the unions met
so far, one to seven states a call: the loop path and the numpy ``_union_rows``); after every
call both hold the same rows, split flags, built flags, numbering, unions and helper rows.
"""

from __future__ import annotations

import random
from bisect import bisect_right

import numpy as np
import pytest
from test_lexer_rule_rows import _N, _automaton, _lazy

from formcast.automata.dfa import DEAD
from formcast.automata.lexer import LazyExpandedLexer, LexerStateCapError, _LexerHelpers


def _reference_rule(lex: LazyExpandedLexer, h: _LexerHelpers, r: int) -> None:
    """Rule ``r`` met: its per-class rows and (once) its rows without calls, the old way."""
    auto = lex.auto
    dfa = auto.dfas[r]
    off = h.offs[r]
    n = int(dfa.table.shape[0])
    analysis = auto.analysis
    vec = analysis.follow[r] | analysis.restart[r]
    acc = np.asarray(dfa.accepting, dtype=bool)
    count = auto.count_of(r)
    zero_start = count is not None and count[0] == 0
    reps = h.reps
    if not h.filled[r]:
        t = np.take(dfa.table, reps, axis=1).astype(np.int32)
        dest = h.g_succ[off : off + n]
        np.add(t, off, out=dest)
        dest[t == DEAD] = 0
        dest[0] = 0
        sp = h.g_split[off : off + n]
        sp[acc] = vec[reps]
        if zero_start:
            sp[dfa.start] |= analysis.follow[r][reps]
        h.filled[r] = True
        h.unfilled -= 1
    if h.plain_done[r]:
        return
    h.plain_done[r] = True
    shift = np.arange(off, off + n, dtype=np.int64)
    shift[DEAD] = 0
    has = np.zeros(n, dtype=bool)
    if dfa.ref_table is not None:
        has = (dfa.ref_table != DEAD).any(axis=1)
        has[DEAD] = False
    qs = np.flatnonzero(~has & ~lex.built[off : off + n])
    rows = shift[dfa.table[qs]]
    rows[qs == DEAD] = 0
    sp_rows = np.zeros((qs.size, 256), dtype=bool)
    sp_rows[acc[qs]] = vec
    if zero_start:
        sp_rows[qs == dfa.start] |= analysis.follow[r]
    lex.table[qs + off] = rows
    lex.split[qs + off] = sp_rows
    lex.built[qs + off] = True


def _reference_ensure(lex: LazyExpandedLexer, states: list[int]) -> None:
    """``ensure`` (no rows ahead, as by default) the old way: rules met, then row by row,
    classes ascending, by loops over the members' per-class rows as lists."""
    todo = sorted({s for s in states if not lex.built[s]})
    if not todo:
        return
    h = lex._build_helpers()
    n_global = int(lex.offsets[-1])
    batch = [list(h.closure(s)) if s < n_global else list(lex.sets[s - n_global]) for s in todo]
    for r in sorted({bisect_right(h.offs, g) - 1 for m in batch for g in m}):
        _reference_rule(lex, h, r)
    cmap = h.cls_of_byte
    for s, members in zip(todo, batch, strict=True):
        succ = [h.g_succ[g].tolist() for g in members]
        splits = [h.g_split[g].tolist() for g in members]
        row: list[int] = []
        for c in range(len(succ[0])):
            col = [m_row[c] for m_row in succ]
            live = [v for v in col if v]
            row.append(lex._union_state(h, tuple(col)) if len(live) >= 2 else max(col))
        sp = [any(m_sp[c] for m_sp in splits) for c in range(len(succ[0]))]
        lex.table[s] = np.asarray(row, dtype=np.int32)[cmap]
        lex.split[s] = np.asarray(sp, dtype=bool)[cmap]
        lex.built[s] = True


def _same(a: LazyExpandedLexer, b: LazyExpandedLexer) -> None:
    assert a.size == b.size
    n = a.size
    assert np.array_equal(a.table[:n], b.table[:n])
    assert np.array_equal(a.split[:n], b.split[:n])
    assert np.array_equal(a.built[:n], b.built[:n])
    assert a.ids == b.ids
    assert a.sets == b.sets
    ha, hb = a._build_helpers(), b._build_helpers()
    assert np.array_equal(ha.g_succ, hb.g_succ)
    assert np.array_equal(ha.g_split, hb.g_split)
    assert np.array_equal(ha.filled, hb.filled)
    assert np.array_equal(ha.plain_done, hb.plain_done)
    assert ha.unfilled == hb.unfilled


@pytest.mark.parametrize("which", range(_N))
@pytest.mark.parametrize("seed", [0, 1])
def test_ensure_is_the_old_algorithm(which: int, seed: int) -> None:
    auto = _automaton(which)
    real, ref = _lazy(auto), _lazy(auto)
    n_global = int(real.offsets[-1])
    rng = random.Random(1000 * which + seed)
    met_rules = 0
    for _ in range(60):
        pool = list(range(1, n_global)) + list(range(n_global, real.size))
        states = rng.sample(pool, min(len(pool), rng.randint(1, 7)))
        before = real._build_helpers().unfilled
        try:
            real.ensure(np.asarray(states, dtype=np.int64))
        except LexerStateCapError:
            return
        _reference_ensure(ref, states)
        _same(real, ref)
        met_rules += before - real._build_helpers().unfilled
    assert met_rules > 0 or n_global <= 1


@pytest.mark.parametrize("which", range(_N))
def test_small_rows_are_the_numpy_rows_on_any_members(which: int) -> None:
    """``_union_rows_small`` (loops; the split flags of 3+ members by ufuncs) and the numpy
    ``_union_rows`` on the same random member lists (any global states, 1 to 9 of them, so
    that accepting members' split flags meet): the same rows, split flags and new unions."""
    auto = _automaton(which)
    a, b = _lazy(auto), _lazy(auto)
    n_global = int(a.offsets[-1])
    if n_global <= 2:
        return
    ha, hb = a._build_helpers(), b._build_helpers()
    rng = random.Random(which)
    for _ in range(40):
        batch = [
            sorted(rng.sample(range(1, n_global), min(n_global - 1, rng.randint(1, 9))))
            for _ in range(rng.randint(1, 4))
        ]
        try:
            rows, splits = a._union_rows_small(ha, batch)
        except LexerStateCapError:
            return
        block, split_block = b._union_rows(hb, batch)
        assert np.array_equal(np.asarray(rows), block)
        assert np.array_equal(np.asarray(splits), split_block)
        assert a.size == b.size
        assert a.ids == b.ids
