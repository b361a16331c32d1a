"""The rule automaton cache's keys (``rules._RuleKey``, ``rules._Canonical``) hash once and
compare as the tuples they replace.

A key of ``RULE_DFA_CACHE`` was the tuple ``(canonical body, limits, minimize)``, hashed again
by every dict operation of a lookup (a canonical body of nested tuples hashing each IR node in
it, the limits through an interpreted dataclass hash); it is now an object holding the hash it
computed once.  Checked here: two keys are equal exactly when their tuples are, equal keys hash
alike, a canonical body made twice (its memo emptied) is equal to the first and hashes alike,
and compiles hit the cache as before: across equal limits objects, not across other limits or
``minimize``.
"""

from __future__ import annotations

import itertools

import formcast.automata.rules as rules_mod
from formcast.automata.rules import RULE_DFA_CACHE, compile_grammar_automaton
from formcast.frontends.gbnf import parse_gbnf
from formcast.limits import CompileLimits

_GRAMMAR = r"""
root ::= "[" (item ("," item)*)? "]" | obj
item ::= [0-9]+ | "\"" [a-z]* "\"" | root
obj ::= "{" ("\"k\"" ":" item ("," "\"k\"" ":" item)*)? "}"
"""


def _keys() -> list[rules_mod._RuleKey]:
    RULE_DFA_CACHE.clear()
    for limits in (CompileLimits(), CompileLimits(max_nfa_states=123_456)):
        for minimize in (True, False):
            compile_grammar_automaton(
                parse_gbnf(_GRAMMAR), limits, expand_calls=False, minimize=minimize
            )
    return [key for key, _ in RULE_DFA_CACHE.items()]


def test_keys_compare_and_hash_as_their_tuples() -> None:
    keys = _keys()
    assert len(keys) >= 8
    assert any(isinstance(k.body, rules_mod._Canonical) for k in keys)
    for a, b in itertools.product(keys, repeat=2):
        ta, tb = (a.body, a.limits, a.minimize), (b.body, b.limits, b.minimize)
        assert (a == b) == (ta == tb)
        assert (a != b) == (ta != tb)
        if a == b:
            assert hash(a) == hash(b)
    assert all(k != (k.body, k.limits, k.minimize) for k in keys)  # not equal to a tuple


def test_canonical_bodies_made_twice_are_equal() -> None:
    bodies = [rule.body for rule in parse_gbnf(_GRAMMAR).rules]
    firsts = []
    for body in bodies:
        rules_mod._CANONICAL_KEYS.clear()
        firsts.append(rules_mod._canonical_body(body))
    rules_mod._CANONICAL_KEYS.clear()
    seconds = [rules_mod._canonical_body(body) for body in bodies]
    assert any(isinstance(c, rules_mod._Canonical) for c, _ in firsts)
    for (c1, n1), (c2, n2) in zip(firsts, seconds, strict=True):
        assert c1 == c2
        assert hash(c1) == hash(c2)
        assert n1 == n2
        if isinstance(c1, rules_mod._Canonical):
            assert c1 is not c2
            assert c1.key == c2.key
            assert hash(c1) == hash(c1.key)
    for (a, _), (b, _) in itertools.product(firsts, seconds):
        if isinstance(a, rules_mod._Canonical) and isinstance(b, rules_mod._Canonical):
            assert (a == b) == (a.key == b.key)


def test_compiles_hit_across_equal_limits_only() -> None:
    grammar = parse_gbnf(_GRAMMAR)
    RULE_DFA_CACHE.clear()
    compile_grammar_automaton(grammar, CompileLimits(), expand_calls=False)
    misses, hits = RULE_DFA_CACHE.misses, RULE_DFA_CACHE.hits
    compile_grammar_automaton(parse_gbnf(_GRAMMAR), CompileLimits(), expand_calls=False)
    assert RULE_DFA_CACHE.misses == misses
    assert RULE_DFA_CACHE.hits > hits
    for limits, minimize in ((CompileLimits(max_nfa_states=99_999), True), (None, False)):
        misses, hits = RULE_DFA_CACHE.misses, RULE_DFA_CACHE.hits
        compile_grammar_automaton(grammar, limits, expand_calls=False, minimize=minimize)
        assert RULE_DFA_CACHE.misses > misses
        assert RULE_DFA_CACHE.hits == hits
