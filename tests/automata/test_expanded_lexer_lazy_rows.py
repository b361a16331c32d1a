"""``LazyExpandedLexer`` builds nothing at construction, and the rows it builds on demand are
the eager ``build_expanded_lexer``'s.

The lazy lexer reads the rule DFAs' rows, the call lists and the closures when a row first needs
them (construction makes only the byte classes), so construction costs no global row and its
tables' pages stay untouched.  Here, on the grammars of test_expanded_lexer_matches_simulation
(calls whose first bytes overlap, recursive schemas): the byte classes are the eager build's,
no row is built after construction, and every state reachable from any rule position, built on
demand one row at a time, matches the eager lexer's state for the same position: the rule
positions share their numbers, union states are paired breadth-first (a lazy state must stand
for one eager state only), and rows and split flags agree on every byte.  A wrong closure owner
(a union numbered apart from the rule position whose closure it is) or a rule's rows read
wrong would break the pairing or a row.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from test_expanded_lexer_matches_simulation import _GBNF, _SCHEMAS, _VOCAB, _automata

import formcast.automata.lexer as lexer_module
from formcast import GrammarCompiler
from formcast.automata.dfa import DEAD
from formcast.automata.lexer import LazyExpandedLexer, build_expanded_lexer
from formcast.automata.rules import GrammarAutomaton
from formcast.index.cfg_program import CfgProgram

C_GBNF = Path(__file__).resolve().parents[3] / "shared/data/llama.cpp-grammars/grammars/c.gbnf"


def _automaton(which: int) -> GrammarAutomaton:
    """The test grammars, then the built-in JSON grammar and llama.cpp's C grammar (unions
    equal to a rule position's closure: numbered as that position)."""
    if which < len(_GBNF) + len(_SCHEMAS):
        return _automata()[which]
    compiler = GrammarCompiler(_VOCAB, cache_size=0)
    if which == len(_GBNF) + len(_SCHEMAS):
        program = compiler.compile_builtin_json_grammar().program
    else:
        if not C_GBNF.exists():
            pytest.skip("llama.cpp's c.gbnf is not in shared/data")
        program = compiler.compile_grammar(C_GBNF.read_text("utf-8")).program
    assert isinstance(program, CfgProgram)
    return program.auto


@pytest.mark.parametrize("which", range(len(_GBNF) + len(_SCHEMAS) + 2))
def test_rows_built_on_demand_are_the_eager_rows(which: int) -> None:
    auto = _automaton(which)
    eager = build_expanded_lexer(auto)
    assert eager is not None
    with mock.patch.object(lexer_module, "_LAZY_ROWS_FROM", 0):
        lazy = LazyExpandedLexer(auto)
    n_global = int(lazy.offsets[-1])
    assert np.array_equal(lazy.offsets, eager.offsets)
    # construction builds no row (the dead state's zeros aside)
    assert np.flatnonzero(lazy.built[: lazy.size]).tolist() == [DEAD]
    assert not lazy.table[:n_global].any()
    # the byte classes: columns equal in the eager tables exactly within a class
    cmap, first = lazy.classes
    assert np.array_equal(eager.table[:, first][:, cmap], eager.table)
    assert np.array_equal(eager.split[:, first][:, cmap], eager.split)
    assert np.unique(eager.table[:, first], axis=1).shape[1] == first.size
    pair: dict[int, int] = {DEAD: DEAD}
    todo = []
    for g in range(1, n_global):
        pair[g] = g  # rule positions share their numbers
        todo.append(g)
    visited = set(todo)
    while todo:
        s = todo.pop()
        lazy.ensure([s])  # one row (and a few ahead)
        assert lazy.built[s]
        e = pair[s]
        assert np.array_equal(lazy.split[s], eager.split[e]), s
        for b in range(256):
            got, want = int(lazy.table[s, b]), int(eager.table[e, b])
            seen = pair.setdefault(got, want)
            assert seen == want, (s, b)  # a lazy state stands for one eager state
            # unions are unions in both (one equal to a rule position's closure is that one)
            assert (got >= n_global) == (want >= n_global), (s, b)
            if got not in visited:
                visited.add(got)
                todo.append(got)
    assert len(set(pair.values())) == len(pair)  # and an eager state for one lazy state


@pytest.mark.parametrize("which", [len(_GBNF) + len(_SCHEMAS), len(_GBNF) + len(_SCHEMAS) + 1])
def test_closure_owner_is_the_least_state_with_that_closure(which: int) -> None:
    """The lazy lookup of a union's rule position (the eager build keys every closure of a
    state with calls, least state first) against that definition, brute force: unions of the
    closures of one state, of a state and a member of its closure, and of two states."""
    auto = _automaton(which)
    lexer = LazyExpandedLexer(auto)
    h = lexer._build_helpers()
    n_global = int(lexer.offsets[-1])
    closures = [h.closure(g) for g in range(n_global)]
    owner: dict[frozenset[int], int] = {}
    for g in range(1, n_global):
        if h._calls_of(g):
            owner.setdefault(closures[g], g)
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(2_000):  # the one-rule builtin JSON grammar has few owners: enough draws
        v = int(rng.integers(1, n_global))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            live = {v}
        elif kind == 1:
            live = {v, int(rng.choice(sorted(closures[v])))}
        else:
            live = {v, int(rng.integers(1, n_global))}
        members = frozenset().union(*(closures[x] for x in live))
        want = owner.get(members)
        assert h.closure_owner(tuple(sorted(members)), live) == want, (live, want)
        found += want is not None
    assert found > 20
