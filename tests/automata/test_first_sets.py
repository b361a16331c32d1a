"""FIRST, RESTART and nullable of ``GrammarAnalysis.of`` equal a direct reference fixpoint.

``GrammarAnalysis.of`` computes FIRST on 256-bit ints from each rule's start row (read for all
rules at once) and the FIRST of the rules its start calls; test_follow_sets checks FOLLOW
*given* that FIRST.  The reference here is the plain fixpoint on ``bool[256]`` arrays, state
by state: ``FIRST(r) = moves(start_r) | (every byte if a callee at start_r is nullable, else
FIRST(callee))``, RESTART the FIRST of a counted rule that may iterate again, nullable a rule
whose start reaches acceptance through nullable calls.  Random grammars (as
test_follow_sets'), counted rules, the built-in JSON grammar and MaskBench schemas' grammars;
a start row read from another rule, or rows out of rule order, breaks the equality.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from test_follow_sets import _BODIES

from conftest import SHARED_DATA
from formcast.automata.analysis import GrammarAnalysis
from formcast.automata.dfa import DEAD
from formcast.automata.rules import GrammarAutomaton, compile_grammar_automaton
from formcast.errors import FormcastError
from formcast.frontends.builtin_json import builtin_json_grammar
from formcast.frontends.gbnf import parse_gbnf
from formcast.ir.nodes import JSON_HINTS


def _reference(auto: GrammarAutomaton) -> tuple[list[bool], list[np.ndarray], list[np.ndarray]]:
    n = len(auto.dfas)
    nullable = [False] * n
    changed = True
    while changed:  # accepting reachable from the start through calls to nullable rules
        changed = False
        for r, dfa in enumerate(auto.dfas):
            if nullable[r]:
                continue
            count = auto.count_of(r)
            ok = count is not None and count[0] == 0
            seen, todo = {dfa.start}, [dfa.start]
            while todo and not ok:
                s = todo.pop()
                ok = bool(dfa.accepting[s])
                for callee, ret in auto.refs[r][s]:
                    if nullable[callee] and ret not in seen:
                        seen.add(ret)
                        todo.append(ret)
            if ok:
                nullable[r] = changed = True
    first = [np.zeros(256, dtype=bool) for _ in range(n)]
    changed = True
    while changed:
        changed = False
        for r, dfa in enumerate(auto.dfas):
            new = first[r] | (np.asarray(dfa.table[dfa.start]) != DEAD)
            for callee, _ in auto.refs[r][dfa.start]:
                new = new | (np.ones(256, dtype=bool) if nullable[callee] else first[callee])
            if (new != first[r]).any():
                first[r] = new
                changed = True
    restart = []
    for r in range(n):
        count = auto.count_of(r)
        iterates = count is not None and count[1] != 1
        restart.append(first[r] if iterates else np.zeros(256, dtype=bool))
    return nullable, first, restart


def _check(auto: GrammarAutomaton) -> None:
    got = GrammarAnalysis.of(auto)
    nullable, first, restart = _reference(auto)
    assert list(got.nullable) == nullable
    assert [f.tolist() for f in got.first] == [f.tolist() for f in first]
    assert [f.tolist() for f in got.restart] == [f.tolist() for f in restart]
    for arrays in (got.first, got.follow, got.restart):
        assert all(a.dtype == bool and a.shape == (256,) and not a.flags.writeable for a in arrays)


@pytest.mark.parametrize("seed", range(80))
def test_first_equals_the_reference_on_random_grammars(seed: int) -> None:
    rnd = random.Random(seed)
    names = ["root"] + [f"r{i}" for i in range(1, rnd.randint(2, 6))]
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


@pytest.mark.parametrize("body", ['("a" r1 | "b"){70,90}', '(r1 ","){0,}', '(r1 "-"){65,70}'])
def test_first_equals_the_reference_with_counted_rules(body: str) -> None:
    grammar = f'root ::= {body} | "z"\nr1 ::= "k" | "[" root? "]" | [0-9]+'
    _check(compile_grammar_automaton(parse_gbnf(grammar), expand_calls=False))


def test_first_equals_the_reference_on_real_grammars() -> None:
    _check(compile_grammar_automaton(builtin_json_grammar()))
    data = SHARED_DATA / "JSONSchemaBench" / "maskbench" / "data"
    files = sorted(data.glob("*.json"))
    if not files:
        pytest.skip(f"no MaskBench data in {data}")
    from formcast.frontends.jsonschema.api import schema_to_grammar

    checked = 0
    for f in random.Random(7).sample(files, 40):
        try:
            schema = json.loads(f.read_text(encoding="utf-8"))["schema"]
            grammar = schema_to_grammar(schema, marks=[])[0]
            auto = compile_grammar_automaton(
                grammar, expand_calls=JSON_HINTS.expand_calls, minimize=JSON_HINTS.minimize
            )
        except (FormcastError, RecursionError, ValueError):
            continue
        _check(auto)
        checked += 1
    assert checked >= 30
