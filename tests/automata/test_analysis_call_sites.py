"""``_all_call_sites`` (the call sites of every rule, read from the ``ref_table`` arrays of all
rules in one numpy pass) lists exactly the distinct ``(caller, callee, return state)`` triples
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

from formcast import GrammarCompiler
from formcast.automata.analysis import _all_call_sites
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
    callers, callees, rets, moves, accepting = _all_call_sites(auto.dfas)
    assert list(zip(callers, callees, rets, strict=True)) == want
    for i, (caller, _, ret) in enumerate(want):
        dfa = auto.dfas[caller]
        bits = sum(1 << b for b in range(256) if int(dfa.table[ret, b]) != DEAD)
        assert moves[i] == bits
        assert accepting[i] == bool(dfa.accepting[ret])


def test_no_calls() -> None:
    auto = _automaton(0)
    one = (auto.dfas[0].__class__(auto.dfas[0].table, auto.dfas[0].accepting, 1),)
    assert _all_call_sites(one) == ([], [], [], [], [])
    assert np.asarray(auto.dfas[0].table).ndim == 2
