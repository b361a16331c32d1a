"""FOLLOW sets of ``GrammarAnalysis.of`` equal the call-site-by-call-site fixpoint.

The analysis computes FOLLOW from each distinct call site's fixed after-return bytes and a
fixpoint over rules (session 14); the reference here is the direct fixpoint it replaced: every
call site re-evaluated each round, ``FOLLOW(callee) |= moves(ret) | FIRST of the rules called
at ret | (FOLLOW(caller) | RESTART(caller) where ret accepts)``, until nothing changes.  Random
grammars (recursive, nullable, with and without call expansion), counted rules (long bounded
repeats, which have restart bytes) and the benchmark grammars.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from conftest import SHARED_DATA
from formcast.automata.analysis import GrammarAnalysis, nullable_rules, restart_bytes
from formcast.automata.dfa import DEAD
from formcast.automata.rules import GrammarAutomaton, compile_grammar_automaton
from formcast.errors import FormcastError
from formcast.frontends.builtin_json import builtin_json_grammar
from formcast.frontends.gbnf import parse_gbnf


def _reference_follow(auto: GrammarAutomaton, first: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    n_rules = len(auto.dfas)
    nullable = nullable_rules(auto)
    all_bytes = np.ones(256, dtype=bool)
    restart = restart_bytes(auto, list(first))
    follow = [np.zeros(256, dtype=bool) for _ in range(n_rules)]
    changed = True
    while changed:
        changed = False
        for caller in range(n_rules):
            dfa = auto.dfas[caller]
            for calls in auto.refs[caller]:
                for callee, ret in calls:
                    new = follow[callee] | (dfa.table[ret] != DEAD)
                    for c2, _ in auto.refs[caller][ret]:
                        new |= all_bytes if nullable[c2] else first[c2]
                    if dfa.accepting[ret]:
                        new |= follow[caller] | restart[caller]
                    if (new != follow[callee]).any():
                        follow[callee] = new
                        changed = True
    return follow


def _check(auto: GrammarAutomaton) -> None:
    got = GrammarAnalysis.of(auto)
    want = _reference_follow(auto, got.first)
    assert [f.tolist() for f in got.follow] == [f.tolist() for f in want]


_BODIES = [
    '"a" {r} "b"',
    "[0-9]+ ({r} | [a-z])*",
    '"(" {r} ("," {r})* ")" | [xyz]',
    '{r} "+" {r} | "n" [0-9]*',
    "[a-c] {r}? [d-f]",
    "{r} {r}",
    '({r} ";")* "."',
]


@pytest.mark.parametrize("seed", range(120))
def test_follow_equals_the_call_site_fixpoint_on_random_grammars(seed: int) -> None:
    rnd = random.Random(seed)
    names = ["root"] + [f"r{i}" for i in range(1, rnd.randint(1, 5))]
    lines = []
    for name in names:
        alts = [rnd.choice(_BODIES).format(r=rnd.choice(names)) for _ in range(rnd.randint(1, 3))]
        end = ' | "z"' if rnd.random() < 0.7 else ""
        lines.append(f"{name} ::= " + " | ".join(alts) + end)
    try:
        auto = compile_grammar_automaton(parse_gbnf("\n".join(lines)), expand_calls=seed % 2 == 0)
    except FormcastError:
        pytest.skip("not a grammar formcast compiles")
    _check(auto)


@pytest.mark.parametrize("expand", [True, False])
@pytest.mark.parametrize(
    "body",
    ['("a" r1 | "b"){70,90}', '(r1 ","){64,}', '[xy] (r1 | "q"){0,80} "e"', '(r1 "-"){65,70}'],
)
def test_follow_equals_the_call_site_fixpoint_with_counted_rules(body: str, expand: bool) -> None:
    grammar = f'root ::= {body} | "z"\nr1 ::= "k" | "[" root? "]" | [0-9]+'
    auto = compile_grammar_automaton(parse_gbnf(grammar), expand_calls=expand)
    # (most of these make a counted rule, whose call sites get its restart bytes)
    _check(auto)


def test_follow_equals_the_call_site_fixpoint_on_real_grammars() -> None:
    _check(compile_grammar_automaton(builtin_json_grammar()))
    for name in ("c.gbnf", "json.gbnf"):
        path = SHARED_DATA / "llama.cpp-grammars" / "grammars" / name
        if path.is_file():
            _check(compile_grammar_automaton(parse_gbnf(path.read_text(encoding="utf-8"))))
