"""``LazyExpandedLexer``'s rows of rule states without calls, written straight from the rule
DFAs (``_plain_rows``), are the eager ``build_expanded_lexer``'s rows.

A state without calls is its own closure, so its lexer row is its rule DFA's row shifted to the
global numbering (the dead state 0) and its split flags are its rule's split byte vector where
it accepts (for a counted rule allowing zero iterations, its start state adds the bytes that may
follow the rule).  The lazy lexer writes those rows from the DFA tables (all 256 columns) rather
than through per-byte-class rows; here, on the grammars of test_expanded_lexer_matches_simulation
and the built-in JSON grammar: after ``_plain_rows`` of every rule (``_all_rule_rows``) exactly
the states without calls are built and their rows and split flags equal the eager lexer's;
states with calls keep zero rows; rows built before (by ``ensure``, or before a load) are
kept; and every state then built on demand still pairs with the eager lexer's state
breadth-first (a wrong row would break it).
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from test_expanded_lexer_matches_simulation import _GBNF, _SCHEMAS, _VOCAB, _automata

import formcast.automata.lexer as lexer_module
from formcast import GrammarCompiler
from formcast.automata.dfa import DEAD
from formcast.automata.lexer import ExpandedLexer, LazyExpandedLexer, build_expanded_lexer
from formcast.automata.rules import GrammarAutomaton
from formcast.index.cfg_program import CfgProgram

_N = len(_GBNF) + len(_SCHEMAS) + 1


def _automaton(which: int) -> GrammarAutomaton:
    if which < len(_GBNF) + len(_SCHEMAS):
        return _automata()[which]
    program = GrammarCompiler(_VOCAB, cache_size=0).compile_builtin_json_grammar().program
    assert isinstance(program, CfgProgram)
    return program.auto


def _has_calls(auto: GrammarAutomaton, n_global: int, offsets: np.ndarray) -> np.ndarray:
    """Brute force: per global state, does its rule position call a rule?"""
    out = np.zeros(n_global, dtype=bool)
    for r, refs in enumerate(auto.refs):
        for q, lst in enumerate(refs):
            if lst and q != DEAD:
                out[int(offsets[r]) + q] = True
    return out


def _all_rule_rows(lazy: LazyExpandedLexer) -> None:
    """``_plain_rows`` of every rule not met yet (what a small lexer's construction does)."""
    h = lazy._build_helpers()
    for r in np.flatnonzero(~h.plain_done).tolist():
        lazy._plain_rows(h, r)


def _lazy(auto: GrammarAutomaton) -> LazyExpandedLexer:
    with mock.patch.object(lexer_module, "_LAZY_ROWS_FROM", 0):  # nothing built at construction
        return LazyExpandedLexer(auto)


def _pairs_with_eager(lazy: LazyExpandedLexer, eager: ExpandedLexer) -> None:
    """Every state reachable from a rule position, built on demand, matches the eager
    lexer's (rule positions share their numbers; unions are paired breadth-first)."""
    n_global = int(lazy.offsets[-1])
    pair: dict[int, int] = {g: g for g in range(n_global)}
    todo = list(range(1, n_global))
    visited = set(todo)
    while todo:
        s = todo.pop()
        lazy.ensure([s])
        assert lazy.built[s]
        e = pair[s]
        assert np.array_equal(lazy.split[s], eager.split[e]), s
        for got, want in zip(lazy.table[s].tolist(), eager.table[e].tolist()):
            assert pair.setdefault(got, want) == want, s
            if got not in visited:
                visited.add(got)
                todo.append(got)
    assert len(set(pair.values())) == len(pair)


@pytest.mark.parametrize("which", range(_N))
def test_rule_rows_are_the_eager_rows(which: int) -> None:
    auto = _automaton(which)
    eager = build_expanded_lexer(auto)
    assert eager is not None
    lazy = _lazy(auto)
    n_global = int(lazy.offsets[-1])
    _all_rule_rows(lazy)
    calls = _has_calls(auto, n_global, lazy.offsets)
    built = lazy.built[:n_global]
    assert np.array_equal(built[1:], ~calls[1:])  # exactly the states without calls
    plain = np.flatnonzero(built)
    assert np.array_equal(lazy.table[plain], eager.table[plain])
    assert np.array_equal(lazy.split[plain], eager.split[plain])
    assert not lazy.table[:n_global][~built].any()  # states with calls: still zeros
    assert not lazy.split[:n_global][~built].any()
    assert lazy.size == n_global  # no union numbered
    _all_rule_rows(lazy)  # again: nothing changes
    assert np.array_equal(lazy.built[:n_global], built)
    _pairs_with_eager(lazy, eager)


@pytest.mark.parametrize("which", range(_N))
def test_small_lexer_builds_rule_rows_at_construction(which: int) -> None:
    """Below ``_LAZY_ROWS_FROM`` rule states, construction builds what ``_all_rule_rows``
    builds (and the same rows)."""
    auto = _automaton(which)
    small = LazyExpandedLexer(auto)
    lazy = _lazy(auto)
    _all_rule_rows(lazy)
    n = lazy.size
    assert small.size == n
    assert np.array_equal(small.built[:n], lazy.built[:n])
    assert np.array_equal(small.table[:n], lazy.table[:n])
    assert np.array_equal(small.split[:n], lazy.split[:n])


@pytest.mark.parametrize("which", range(_N))
def test_rows_built_before_are_kept(which: int) -> None:
    """Rows built on demand first (unions numbered, rows of states with calls), then the
    helpers dropped as after a load: ``_all_rule_rows`` writes only the unbuilt rows of
    states without calls, and the lexer still pairs with the eager one."""
    auto = _automaton(which)
    eager = build_expanded_lexer(auto)
    assert eager is not None
    lazy = _lazy(auto)
    n_global = int(lazy.offsets[-1])
    rng = np.random.default_rng(which)
    some = sorted({int(x) for x in rng.integers(1, n_global, size=max(2, n_global // 4))})
    lazy.ensure(some)
    before_built = lazy.built.copy()
    before_table = lazy.table[: lazy.size].copy()
    before_split = lazy.split[: lazy.size].copy()
    lazy._helpers = None  # as after a load: rebuilt on first use
    _all_rule_rows(lazy)
    kept = np.flatnonzero(before_built[: before_table.shape[0]])
    assert np.array_equal(lazy.table[kept], before_table[kept])
    assert np.array_equal(lazy.split[kept], before_split[kept])
    calls = _has_calls(auto, n_global, lazy.offsets)
    assert lazy.built[:n_global][~calls].all()
    _pairs_with_eager(lazy, eager)


@pytest.mark.parametrize("which", range(_N))
def test_byte_classes_do_not_depend_on_the_path(which: int) -> None:
    """The byte classes of a small lexer (found on its global table, written at construction)
    and of a lazy one (found on one column per run of equal adjacent columns, no global
    table), and those of the helpers rebuilt after a load, are the same classes numbered the
    same (by least byte): the partition of the eager lexer's equal columns (table and split
    flags together)."""
    auto = _automaton(which)
    small = LazyExpandedLexer(auto)
    lazy = _lazy(auto)
    cmap, first = small.classes
    assert np.array_equal(cmap, lazy.classes[0])
    assert np.array_equal(first, lazy.classes[1])
    small._helpers = None  # as after a load
    again = small._build_helpers()
    assert np.array_equal(again.cls_of_byte, cmap)
    assert np.array_equal(again.first, first)
    assert np.array_equal(first, np.sort(first))  # numbered by least byte
    assert np.array_equal(cmap[first], np.arange(first.size))
    eager = build_expanded_lexer(auto)
    assert eager is not None
    cols = np.concatenate([eager.table, eager.split], axis=0)
    # same partition: equal columns share a class, and columns of one class are equal
    assert np.array_equal(cols[:, first][:, cmap], cols)
    _, inverse = np.unique(cols, axis=1, return_inverse=True)
    assert len(set(zip(cmap.tolist(), inverse.reshape(-1).tolist(), strict=True))) == first.size


@pytest.mark.parametrize("which", range(_N))
def test_small_lexer_helper_rows_are_the_per_rule_rows(which: int) -> None:
    """A small lexer writes its helpers' per-class rows (successors and split flags of every
    global state, those with calls included) from its global table at construction: they
    are the rows the lazy path writes rule by rule (``_LexerHelpers.rows``)."""
    auto = _automaton(which)
    small = LazyExpandedLexer(auto)._build_helpers()
    lazy = _lazy(auto)._build_helpers()
    n_global = int(lazy.rule_of.size)
    assert lazy.rows(np.arange(n_global, dtype=np.int64))  # every rule written now
    assert small.filled.all()
    assert np.array_equal(small.reps, lazy.reps)
    assert np.array_equal(small.g_succ, lazy.g_succ)
    assert np.array_equal(small.g_split, lazy.g_split)
    assert not small.rows(np.arange(n_global, dtype=np.int64))  # nothing left to write
