"""The rule and sub-automaton caches' keys (``limits.HashedKey``: of ``(canonical body, limits,
minimize)``, of a canonical body's nested tuples, of ``(node, limits)``) hash once and compare
as the tuples they replace.

A key of ``RULE_DFA_CACHE`` was the tuple ``(canonical body, limits, minimize)``, hashed again
by every dict operation of a lookup (a canonical body of nested tuples hashing each IR node in
it, the limits through an interpreted dataclass hash); it is now an object holding the hash it
computed once.  Checked here: two keys are equal exactly when their tuples are, equal keys hash
alike, a canonical body made twice (its memo emptied) is equal to the first and hashes alike,
and compiles hit the cache as before: across equal limits objects, not across other limits or
``minimize``; the same for ``SUB_DFA_CACHE``'s keys ``(node, limits)``.
"""

from __future__ import annotations

import itertools

import formcast.automata.rules as rules_mod
from formcast.automata.regular import SUB_DFA_CACHE
from formcast.automata.rules import RULE_DFA_CACHE, compile_grammar_automaton
from formcast.frontends.gbnf import parse_gbnf
from formcast.limits import CompileLimits, HashedKey

_GRAMMAR = r"""
root ::= "[" (item ("," item)*)? "]" | obj
item ::= [0-9]+ | "\"" [a-z]* "\"" | root
obj ::= "{" ("\"k\"" ":" item ("," "\"k\"" ":" item)*)? "}"
"""

#: with sub-automata (a JSON string's characters, a repeated non-ASCII class)
_SUB_GRAMMAR = r"""
root ::= "[" (str ("," str)*)? "]" | "{" str ":" root "}"
str ::= "\"" ([^"\\\x00-\x1f] | "\\" ["\\/bfnrt])* "\"" | [a-zα-ωа-я]{2,9}
"""


def _keys() -> list[HashedKey]:
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
    assert all(isinstance(k, HashedKey) and len(k.parts) == 3 for k in keys)
    assert any(isinstance(k.parts[0], HashedKey) for k in keys)
    _check_keys(keys)


def _check_keys(keys: list[HashedKey]) -> None:
    """Equal exactly when their part tuples are, equal keys hash alike, never equal to a
    tuple (both ways), and a copy made of equal but distinct parts is equal."""
    for a, b in itertools.product(keys, repeat=2):
        ta, tb = a.parts, b.parts
        assert (a == b) == (ta == tb)
        assert (a != b) == (ta != tb)
        if a == b:
            assert hash(a) == hash(b)
    assert all(k != k.parts and k.parts != k for k in keys)  # not equal to a tuple
    for k in keys:
        copy = HashedKey(tuple(p for p in k.parts), hash(k))
        assert copy == k
        assert not copy.__ne__(k)
        assert hash(copy) == hash(k)


def test_canonical_bodies_made_twice_are_equal() -> None:
    bodies = [rule.body for rule in parse_gbnf(_GRAMMAR).rules]
    firsts = []
    for body in bodies:
        rules_mod._CANONICAL_KEYS.clear()
        firsts.append(rules_mod._canonical_body(body))
    rules_mod._CANONICAL_KEYS.clear()
    seconds = [rules_mod._canonical_body(body) for body in bodies]
    assert any(isinstance(c, HashedKey) for c, _ in firsts)
    for (c1, n1), (c2, n2) in zip(firsts, seconds, strict=True):
        assert c1 == c2
        assert hash(c1) == hash(c2)
        assert n1 == n2
        if isinstance(c1, HashedKey):
            assert c1 is not c2
            assert c1.parts == c2.parts
            assert hash(c1) == hash(c1.parts)
    for (a, _), (b, _) in itertools.product(firsts, seconds):
        if isinstance(a, HashedKey) and isinstance(b, HashedKey):
            assert (a == b) == (a.parts == b.parts)


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


def test_sub_automaton_keys_compare_as_their_tuples() -> None:
    SUB_DFA_CACHE.clear()
    for limits in (CompileLimits(), CompileLimits(), CompileLimits(max_nfa_states=123_456)):
        RULE_DFA_CACHE.clear()
        compile_grammar_automaton(parse_gbnf(_SUB_GRAMMAR), limits, expand_calls=False)
    keys = [key for key, _ in SUB_DFA_CACHE.items()]
    assert keys
    assert all(isinstance(k, HashedKey) and len(k.parts) == 2 for k in keys)
    assert {k.parts[1] for k in keys} == {CompileLimits(), CompileLimits(max_nfa_states=123_456)}
    _check_keys(keys)


def test_sub_automata_hit_across_equal_limits_only() -> None:
    grammar = parse_gbnf(_SUB_GRAMMAR)
    SUB_DFA_CACHE.clear()
    RULE_DFA_CACHE.clear()
    compile_grammar_automaton(grammar, CompileLimits(), expand_calls=False)
    misses = SUB_DFA_CACHE.misses
    assert len(SUB_DFA_CACHE) > 0
    RULE_DFA_CACHE.clear()  # (else the rule cache's hits embed the sub-automata: no lookup)
    hits = SUB_DFA_CACHE.hits
    compile_grammar_automaton(parse_gbnf(_SUB_GRAMMAR), CompileLimits(), expand_calls=False)
    assert SUB_DFA_CACHE.misses == misses
    assert SUB_DFA_CACHE.hits > hits
    RULE_DFA_CACHE.clear()
    hits = SUB_DFA_CACHE.hits
    compile_grammar_automaton(grammar, CompileLimits(max_nfa_states=99_999), expand_calls=False)
    assert SUB_DFA_CACHE.misses > misses
    assert SUB_DFA_CACHE.hits == hits
