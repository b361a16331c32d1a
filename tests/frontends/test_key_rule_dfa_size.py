"""keydfa38 (#31): the undeclared-key rule's automaton is small.

* ``keys._diverge(())`` (where a declared key ends) is the plain branch plus the shared
  special tail, not "any character, then anything" as one concatenation, which the NFA
  folded into a loop of its own per declared key (a copy of every escape and UTF-8 state
  per key): the unminimized DFA of a key rule is now its minimal DFA plus one copy of those
  partial-character states, whatever the number of keys.
* Terminal rules (regular lexemes) are minimized even when the grammar's hints say no
  (JSON Schema's): their DFAs are minimal.
* The language is the one it was: every probe is accepted exactly when its decoded text is
  none of the words.
"""

from __future__ import annotations

import json
import random

import numpy as np

from formcast.automata.dfa import _hopcroft_partition, nfa_to_dfa
from formcast.automata.regular import build_nfa
from formcast.automata.rules import compile_grammar_automaton
from formcast.frontends.jsonschema import keys
from formcast.ir.nodes import JSON_HINTS, Grammar, concat, literal, make_rule, rule_ref
from formcast.limits import CompileLimits

_ALPHABET = "abcdeIdN_-xyz"


def _words(rng: random.Random) -> tuple[str, ...]:
    n = rng.randint(1, 14)
    return tuple(
        sorted(
            {"".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 10))) for _ in range(n)}
        )
    )


def _minimal_states(table: np.ndarray, accepting: np.ndarray) -> int:
    part = _hopcroft_partition(np.ascontiguousarray(table), np.asarray(accepting, dtype=bool))
    return int(part.max()) + 1


def _key_body(words: tuple[str, ...]) -> object:
    return concat([literal('"'), keys.not_in_set(list(words)), literal('"')])


def test_key_dfa_has_one_copy_of_the_free_characters_states() -> None:
    """Unminimized, a key rule's DFA is its minimal one plus one copy of the free
    characters' partial states (the special branch's first character: ~14 states, and the
    free state itself after it), for 1 to 14 declared keys (was: one more copy per key)."""
    rng = random.Random(3801)
    limits = CompileLimits()
    extras = set()
    for _ in range(40):
        words = _words(rng)
        body = _key_body(words)
        dfa = nfa_to_dfa(build_nfa(body, limits), limits, minimize=False)  # type: ignore[arg-type]
        n = dfa.table.shape[0]
        m = _minimal_states(dfa.table, dfa.accepting)
        extras.add(n - m)
        assert n - m <= 16, (words, n, m)
    assert len(extras) == 1, extras  # the same copy, whatever the keys


def test_terminal_rules_are_minimized_under_json_hints() -> None:
    rng = random.Random(3802)
    for _ in range(10):
        words = _words(rng)
        key = make_rule("key_1", _key_body(words), terminal=True)  # type: ignore[arg-type]
        first = concat([rule_ref("key_1"), literal(":1")])
        second = concat([rule_ref("key_1"), literal(":2")])
        root = make_rule("root", concat([literal("{"), first, literal(","), second, literal("}")]))
        grammar = Grammar((root, key), "root", hints=JSON_HINTS)
        auto = compile_grammar_automaton(
            grammar, expand_calls=JSON_HINTS.expand_calls, minimize=JSON_HINTS.minimize
        )
        r = auto.names.index("key_1")
        dfa = auto.dfas[r]
        assert dfa.table.shape[0] == _minimal_states(dfa.table, dfa.accepting), words
        # (the start rule is not a terminal: built as the hints say, unminimized)
        assert auto.names[0] == "root"


def test_key_language_is_the_complement_of_the_words() -> None:
    rng = random.Random(3803)
    limits = CompileLimits()
    probes_extra = ["", "é", '"', "\\", "\n", "\u2028", "\U0001f600", "a\x7f"]
    for _ in range(25):
        words = _words(rng)
        dfa = nfa_to_dfa(build_nfa(_key_body(words), limits), limits, minimize=False)  # type: ignore[arg-type]
        probes = set(words) | set(probes_extra)
        for w in words:
            probes.update({w[:-1], w + "a", w + "é", w[1:], w + '"', w + "\\"})
        for _ in range(60):
            probes.add("".join(rng.choice(_ALPHABET + 'é"\\\n') for _ in range(rng.randint(0, 8))))
        for p in probes:
            text = json.dumps(p, ensure_ascii=False).encode("utf-8")
            assert dfa.matches(text) == (p not in words), (words, p)
