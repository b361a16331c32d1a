"""``rules._check_left_recursion`` (the safety net after the IR's left-recursion elimination)
computes each rule's calls before a byte once, and rejects exactly what the per-visit version
rejected.

The reference below is the earlier code, which recomputed a rule's calls
(``analysis.epsilon_reach``) each time a closure visited it.  On automata of real grammars whose
call edges are replaced by random ones (so that many are left-recursive, some through nullable
callees), both accept the same automata and name the same rule when they reject one.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

import formcast.automata.rules as rules_mod
from formcast.automata.analysis import epsilon_reach, nullable_rules
from formcast.errors import UnsupportedFeatureError
from formcast.frontends.gbnf import parse_gbnf

_GRAMMAR = r"""
root ::= "[" (a ("," a)*)? "]" | b | c
a ::= [0-9]+ | "\"" [a-z]* "\"" | root
b ::= "{" (a ":" c)? "}" | "x"?
c ::= "(" root ")" | a? "y" | d
d ::= "<" b ">" | "" | root
"""


def _reference(auto: rules_mod.GrammarAutomaton) -> str | None:
    nullable = nullable_rules(auto)
    for r in range(len(auto.dfas)):
        calls, _ = epsilon_reach(auto, r, nullable)
        seen = set(calls)
        todo = list(calls)
        while todo:
            c = todo.pop()
            if c == r:
                return auto.names[r]
            for c2 in epsilon_reach(auto, c, nullable)[0]:
                if c2 not in seen:
                    seen.add(c2)
                    todo.append(c2)
    return None


def _outcome(auto: rules_mod.GrammarAutomaton) -> str | None:
    try:
        rules_mod._check_left_recursion(auto)
    except UnsupportedFeatureError as e:
        message = str(e)
    else:
        return None
    assert "left recursion" in message
    return next(name for name in auto.names if repr(name) in message)


@pytest.mark.parametrize("seed", range(60))
def test_random_call_edges_give_the_reference_outcome(seed: int) -> None:
    base = rules_mod.compile_grammar_automaton(parse_gbnf(_GRAMMAR), expand_calls=False)
    assert _outcome(base) is None
    assert _reference(base) is None
    rnd = random.Random(seed)
    n_rules = len(base.dfas)
    refs = []
    for dfa in base.dfas:
        n = dfa.table.shape[0]
        per_state = []
        for s in range(n):
            k = rnd.choice([0, 0, 0, 1, 2]) if s else 0
            per_state.append(tuple((rnd.randrange(n_rules), rnd.randrange(1, n)) for _ in range(k)))
        refs.append(tuple(per_state))
    auto = dataclasses.replace(base, refs=tuple(refs))
    assert _outcome(auto) == _reference(auto)


def test_a_mutual_left_recursion_names_the_first_rule() -> None:
    base = rules_mod.compile_grammar_automaton(parse_gbnf(_GRAMMAR), expand_calls=False)
    assert len(base.dfas) >= 2
    refs = [list(per) for per in base.refs]
    for r, callee in ((0, 1), (1, 0)):
        start = base.dfas[r].start
        refs[r][start] = ((callee, start),)
    auto = dataclasses.replace(base, refs=tuple(tuple(per) for per in refs))
    assert _outcome(auto) == _reference(auto) == base.names[0]
