"""``charfa.restrict_length`` (a pattern under ``maxLength``, built directly) against the
intersection it replaces: the very automaton (states, numbering, edges, minimal flag) that
``intersect(d, length_dfa(lo, hi))`` returns, the same limit errors, and the language by
brute force on short strings.  Patterns: hand-picked shapes (chains of ``+`` loops as in
generated schemas' identifiers, optional groups, non-ASCII and surrogate-straddling ranges,
the empty language) and random regexes over a small alphabet.
"""

from __future__ import annotations

import itertools
import random
import re

import pytest

from formcast.automata import charfa
from formcast.errors import LimitExceededError
from formcast.frontends.jsonschema.regexlang import pattern_node

PATTERNS = [
    r"^([a-z0-9-]+):([a-z0-9\.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$",
    r"^([\w\/-]|[\w-][\w\/-]*[\w-])$",
    r"^[A-Za-z0-9:_\-]+$",
    r"^[^@]+@[^@]+\.[a-z]{2,}$",
    r"^(ab|a)*c?$",
    r"^x{3,7}y*$",
    "[\u00e9-\uffff]+",
    "^[\ud7f0-\ue010]*z$",
    r"^.*$",
    r"^$",
    r"^a{2}$",
]
BOUNDS = [(0, 0), (0, 1), (1, 1), (2, 9), (0, 40), (3, 40), (0, 146), (5, 3), (7, 7)]


def _same(a: charfa.CharDFA, b: charfa.CharDFA) -> None:
    assert b.trans == a.trans
    assert b.accept == a.accept
    assert b.minimal == a.minimal or a.num_states == 0


def _random_pattern(rng: random.Random, depth: int = 0) -> str:
    atoms = ["a", "b", "0", "[ab]", "[^a]", ".", "(a|b0)", "b?"]
    if depth > 2:
        return rng.choice(atoms)
    kind = rng.randrange(6)
    if kind == 0:
        return _random_pattern(rng, depth + 1) + _random_pattern(rng, depth + 1)
    if kind == 1:
        return f"({_random_pattern(rng, depth + 1)}|{_random_pattern(rng, depth + 1)})"
    if kind == 2:
        return f"({_random_pattern(rng, depth + 1)})" + rng.choice(["*", "+", "?", "{1,3}"])
    return rng.choice(atoms)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_automaton_as_the_intersection(pattern: str) -> None:
    d = charfa.dfa_from_node(pattern_node(pattern), 100_000)
    for lo, hi in BOUNDS:
        expected = charfa.intersect(d, charfa.length_dfa(lo, hi, 100_000), 100_000)
        _same(expected, charfa.restrict_length(d, lo, hi, 100_000))


def test_random_patterns_by_brute_force() -> None:
    rng = random.Random(33)
    words = ["".join(t) for n in range(7) for t in itertools.product("ab0c", repeat=n)]
    for _ in range(150):
        pattern = "^" + _random_pattern(rng) + "$"
        d = charfa.dfa_from_node(pattern_node(pattern), 100_000)
        lo = rng.randrange(4)
        hi = lo + rng.randrange(-1, 6)
        got = charfa.restrict_length(d, lo, hi, 100_000)
        _same(charfa.intersect(d, charfa.length_dfa(lo, hi, 100_000), 100_000), got)
        for w in words:
            want = re.fullmatch(pattern[1:-1], w, re.S) is not None and lo <= len(w) <= hi
            assert got.matches(w) == want, (pattern, lo, hi, w)


def test_non_minimal_input() -> None:
    # an unminimized automaton (two equivalent loop states) gives the intersection's result
    d = charfa.CharDFA([[(97, 97, 1)], [(97, 97, 2)], [(97, 97, 1)]], [False, True, True])
    for lo, hi in BOUNDS:
        expected = charfa.intersect(d, charfa.length_dfa(lo, hi, 1000), 1000)
        _same(expected, charfa.restrict_length(d, lo, hi, 1000))


def test_limits_as_the_intersection() -> None:
    d = charfa.dfa_from_node(pattern_node(r"^[a-z]+:[a-z]+$"), 100_000)
    for mx, hi in [(50, 60), (100, 60), (300, 200)]:
        with pytest.raises(LimitExceededError) as old:
            charfa.intersect(d, charfa.length_dfa(0, hi, mx), mx)
        with pytest.raises(LimitExceededError) as new:
            charfa.restrict_length(d, 0, hi, mx)
        assert str(new.value) == str(old.value)
