"""``_all_call_sites`` (the call sites of every rule, read from the ``ref_table`` arrays of all
rules in one numpy pass, or for a small grammar from ``refs`` themselves) lists exactly the
distinct ``(caller, callee, return state)`` triples
of ``GrammarAutomaton.refs``, sorted, with each return state's moves and accepting flag.

Brute force from ``refs`` (built state by state by ``compile_grammar_automaton``) on the
grammars of test_expanded_lexer_matches_simulation and the built-in JSON grammar: a site read
from the wrong rule's block, a callee taken from the wrong column, a dead row read, or a
return state's row gathered from another rule would break the equality.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_expanded_lexer_matches_simulation import _GBNF, _SCHEMAS, _VOCAB, _automata

import formcast.automata.analysis as analysis_mod
from formcast import GrammarCompiler
from formcast.automata.analysis import _all_call_sites, _call_sites_from_refs
from formcast.automata.dfa import DEAD
from formcast.automata.rules import GrammarAutomaton
from formcast.index.cfg_program import CfgProgram

_N = len(_GBNF) + len(_SCHEMAS) + 1


def _automaton(which: int) -> GrammarAutomaton:
    if which < len(_GBNF) + len(_SCHEMAS):
        return _automata()[which]
    program = GrammarCompiler(_VOCAB, cache_size=0).compile_builtin_json_grammar().program
    assert isinstance(program, CfgProgram)
    return program.auto


@pytest.mark.parametrize("which", range(_N))
def test_call_sites_are_the_refs(which: int) -> None:
    auto = _automaton(which)
    want = sorted(
        {
            (caller, callee, ret)
            for caller, per_state in enumerate(auto.refs)
            for q, calls in enumerate(per_state)
            if q != DEAD
            for callee, ret in calls
        }
    )
    assert want  # (the grammars call rules)
    # the numpy reader, the refs reader, and the dispatch (whichever it picks here)
    for got in (
        _all_call_sites(auto.dfas),
        _call_sites_from_refs(auto.dfas, auto.refs),
        _all_call_sites(auto.dfas, auto.refs),
    ):
        callers, callees, rets, moves, accepting = got
        assert list(zip(callers, callees, rets, strict=True)) == want
        assert all(type(a) is bool for a in accepting)
        for i, (caller, _, ret) in enumerate(want):
            dfa = auto.dfas[caller]
            bits = sum(1 << b for b in range(256) if int(dfa.table[ret, b]) != DEAD)
            assert moves[i] == bits
            assert accepting[i] == bool(dfa.accepting[ret])


def test_both_readers_are_used() -> None:
    """(Guards the test above: the dispatch reads ``refs`` for a small grammar only.)"""
    auto = _automaton(_N - 1)
    states = sum(d.table.shape[0] for d in auto.dfas)
    assert states <= analysis_mod._REFS_SITES_MAX_STATES
    seen: list[str] = []
    saved = analysis_mod._call_sites_from_refs
    analysis_mod._call_sites_from_refs = lambda d, r: seen.append("refs") or saved(d, r)  # type: ignore[assignment]
    try:
        analysis_mod._all_call_sites(auto.dfas, auto.refs)
        limit = analysis_mod._REFS_SITES_MAX_STATES
        analysis_mod._REFS_SITES_MAX_STATES = states - 1
        try:
            analysis_mod._all_call_sites(auto.dfas, auto.refs)
        finally:
            analysis_mod._REFS_SITES_MAX_STATES = limit
    finally:
        analysis_mod._call_sites_from_refs = saved  # type: ignore[assignment]
    assert seen == ["refs"]


def test_no_calls() -> None:
    auto = _automaton(0)
    one = (auto.dfas[0].__class__(auto.dfas[0].table, auto.dfas[0].accepting, 1),)
    assert _all_call_sites(one) == ([], [], [], [], [])
    assert _call_sites_from_refs(one, ((),)) == ([], [], [], [], [])
    assert np.asarray(auto.dfas[0].table).ndim == 2
