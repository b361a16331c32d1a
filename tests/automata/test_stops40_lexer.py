"""stops40 (session 26, #31): ``LazyExpandedLexer.ensure``'s own work and ``_state_of``'s
writes cut, with the same rows, split flags, numbering and unions.

* ``_state_of`` no longer writes a new union state's split row (``split[j] = False``): rows
  from ``size`` on were never written, so they are zeros already.  Checked here as an
  invariant (every split row past ``size`` is zero after any calls, whatever grew the arrays)
  and differentially against a lexer running the old ``_state_of`` and ``ensure``.
* ``ensure`` reads its states by ``tolist`` (no ``np.asarray``), sorts only two or more, and
  returns right after building when no rows are built ahead (``_AHEAD_ROWS`` 0, the default).

The reference is a subclass whose ``ensure`` and ``_state_of`` are the pre-stops40 code,
verbatim; both lexers get the same random calls (arrays, lists, duplicates, unsorted, states
built already) and must hold the same arrays over their whole capacity after every call.
"""

from __future__ import annotations

import random
from unittest import mock

import numpy as np
import pytest
from test_lexer_rule_rows import _N, _automaton, _lazy

from formcast._native import compiled_modules
from formcast.automata import lexer as lexer_module
from formcast.automata.lexer import (
    _AHEAD_LEVELS,
    _AHEAD_MARGIN,
    LazyExpandedLexer,
    LexerStateCapError,
    _LexerHelpers,
)


class _OldLexer(LazyExpandedLexer):
    """The lexer with the pre-stops40 ``ensure`` and ``_state_of`` (verbatim)."""

    def ensure(self, states: np.ndarray | list[int]) -> bool:
        todo = [int(s) for s in np.asarray(states, dtype=np.int64).tolist() if not self.built[s]]
        if not todo:
            return False
        todo = sorted(set(todo))
        h = self._build_helpers()
        ends = h.chain_ends
        down = not ends.isdisjoint(todo)
        self._build(todo)
        frontier: list[int] = todo
        seen = set(todo)
        budget = lexer_module._AHEAD_ROWS
        last: list[int] = todo
        for _ in range(_AHEAD_LEVELS):
            if budget <= 0 or self.size + 256 > self.max_states - _AHEAD_MARGIN:
                return True
            met_all: set[int] = set()
            for q in frontier:
                met_all.update(self._successors(h, q))
            met = [s for s in sorted(met_all) if s not in seen]
            if not met:
                return True
            seen.update(met)
            frontier = met
            built = self.built
            last = [q for q in met if not built[q]][:budget]
            if last:
                try:
                    self._build(last)
                except LexerStateCapError:
                    return True
                budget -= len(last)
        self._chain(last, seen, budget, down, ends)
        return True

    def _state_of(self, h: _LexerHelpers, members: tuple[int, ...], live: set[int]) -> int:
        j = self.ids.get(members)
        if j is not None:
            return j
        j = h.closure_owner(members, live)
        if j is not None:
            self.ids[members] = j
            return j
        j = self.size
        if j >= self.max_states:
            raise LexerStateCapError
        if j >= self.capacity:
            self._grow()
        self.size = j + 1
        self.table[j] = j
        self.split[j] = False
        self.ids[members] = j
        self.sets.append(members)
        return j


def _old(auto: object) -> _OldLexer:
    with mock.patch.object(lexer_module, "_LAZY_ROWS_FROM", 0):
        return _OldLexer(auto)  # type: ignore[arg-type]


def _same_everywhere(a: LazyExpandedLexer, b: LazyExpandedLexer) -> None:
    """The same arrays over the whole capacity (unbuilt rows and rows past ``size``
    included), numbering and unions."""
    assert a.size == b.size
    assert a.capacity == b.capacity
    assert np.array_equal(a.table, b.table)
    assert np.array_equal(a.split, b.split)
    assert np.array_equal(a.built, b.built)
    assert a.ids == b.ids
    assert a.sets == b.sets


def _random_states(rng: random.Random, lex: LazyExpandedLexer) -> list[int]:
    n_global = int(lex.offsets[-1])
    pool = list(range(1, n_global)) + list(range(n_global, lex.size))
    states = rng.sample(pool, min(len(pool), rng.randint(1, 7)))
    unions = [s for s in range(n_global, lex.size) if not lex.built[s]]
    if len(unions) >= 2 and rng.random() < 0.5:  # unbuilt unions, most new states come of them
        states = rng.sample(unions, min(len(unions), rng.randint(2, 6)))
    if states and rng.random() < 0.3:  # duplicates, unsorted
        states = states + states[::-1]
    return states


def _call(lex: LazyExpandedLexer, states: list[int], as_list: bool) -> bool:
    arg: np.ndarray | list[int] = states if as_list else np.asarray(states, dtype=np.int64)
    return lex.ensure(arg)


#: a compiled lexer's methods take no subclass of its class (mypyc checks ``self``'s type):
#: the differential runs on the pure source, the invariants below on both
_PURE = not compiled_modules().get("formcast.automata.lexer")


@pytest.mark.skipif(not _PURE, reason="the reference subclasses the lexer: pure source only")
@pytest.mark.parametrize("which", range(_N))
@pytest.mark.parametrize("ahead", [0, 48])
def test_ensure_and_state_of_are_the_old_ones(which: int, ahead: int) -> None:
    auto = _automaton(which)
    with mock.patch.object(lexer_module, "_AHEAD_ROWS", ahead):
        new, old = _lazy(auto), _old(auto)
        rng = random.Random(7 * which + ahead)
        unions = 0
        for _ in range(60):
            states = _random_states(rng, new)
            as_list = rng.random() < 0.5
            try:
                got = _call(new, states, as_list)
            except LexerStateCapError:
                return
            assert got == _call(old, states, as_list)
            _same_everywhere(new, old)
            unions = len(new.sets)
        assert unions > 0 or int(new.offsets[-1]) <= 2 or not new.ids


@pytest.mark.parametrize("which", range(_N))
def test_split_rows_past_size_stay_zero(which: int) -> None:
    """What ``_state_of`` relies on: no split row from ``size`` on is ever written (the
    arrays grown, a row per new union state numbered)."""
    auto = _automaton(which)
    lex = _lazy(auto)
    rng = random.Random(which)
    grew = False
    cap0 = lex.capacity
    for _ in range(80):
        try:
            lex.ensure(_random_states(rng, lex))
        except LexerStateCapError:
            break
        assert not lex.split[lex.size :].any()
        assert not lex.built[lex.size :].any()
        grew = grew or lex.capacity > cap0
    n = lex.size
    n_global = int(lex.offsets[-1])
    # an unbuilt union row: its sentinel (every byte back to itself), no split flag
    for j in range(n_global, n):
        if not lex.built[j]:
            assert (lex.table[j] == j).all()
            assert not lex.split[j].any()


def test_ensure_of_nothing_new_returns_false() -> None:
    lex = _lazy(_automaton(_N - 1))
    states = [1, 2, 3]
    assert lex.ensure(states) is True
    assert lex.ensure(states) is False
    assert lex.ensure(np.asarray(states[::-1] * 2, dtype=np.int64)) is False
    assert lex.ensure([]) is False
