"""The productivity search of the rule automata (``rules._can_finish`` over ``rules._moves``)
answers what a plain breadth-first search of the tables answers.

``_productive_rules`` decides which rules can finish (a rule that cannot is dropped, an
unproductive start rule is an error); its search runs over each rule DFA's moves listed once
(byte successors by runs of a row, calls by column).  The reference here is the search it
replaced (numpy, one level at a time over the full tables) and a naive fixpoint over it: same
answer for every rule of random grammars and of real JSON schemas, for random sets of
productive callees, and the same productive set.
"""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import numpy as np
import pytest

import formcast.automata.rules as rules_mod
from conftest import SHARED_DATA
from formcast.automata.dfa import DEAD, ByteDFA
from formcast.errors import FormcastError
from formcast.frontends.gbnf import parse_gbnf

_MASKBENCH = SHARED_DATA / "JSONSchemaBench" / "maskbench" / "data"


def _reference_can_finish(dfa: ByteDFA, productive: set[int]) -> bool:
    """Breadth-first over the full tables: an accepting state reachable from the start via
    bytes and calls to ``productive`` rules."""
    if dfa.start == DEAD:
        return False
    seen = np.zeros(dfa.table.shape[0], dtype=bool)
    seen[DEAD] = seen[dfa.start] = True
    cols = [j for j, callee in enumerate(dfa.ref_rules) if callee in productive]
    frontier = np.asarray([dfa.start])
    while frontier.size:
        if bool(dfa.accepting[frontier].any()):
            return True
        nxt = dfa.table[frontier].reshape(-1)
        if cols and dfa.ref_table is not None:
            nxt = np.concatenate((nxt, dfa.ref_table[frontier][:, cols].reshape(-1)))
        nxt = np.unique(nxt)
        frontier = nxt[~seen[nxt]]
        seen[frontier] = True
    return False


def _reference_productive(dfas: list[ByteDFA]) -> set[int]:
    productive: set[int] = set()
    changed = True
    while changed:
        changed = False
        for r, dfa in enumerate(dfas):
            if r not in productive and _reference_can_finish(dfa, productive):
                productive.add(r)
                changed = True
    return productive


def _check(dfas: list[ByteDFA], rnd: random.Random) -> None:
    ids = list(range(len(dfas)))
    for dfa in dfas:
        moves = rules_mod._moves(dfa)
        for _ in range(4):
            productive = {r for r in ids if rnd.random() < 0.5}
            got = rules_mod._can_finish(dfa, productive, moves)
            assert got == _reference_can_finish(dfa, productive)
        assert rules_mod._can_finish(dfa, set(ids), moves) == _reference_can_finish(dfa, set(ids))
    assert rules_mod._productive_rules(dfas) == _reference_productive(dfas)


_BODIES = [
    '"a" {r} "b"',
    "{r} {r}",
    '"(" {r} ("," {r})* ")"',
    '{r} "+" {r} | [0-9]+',
    '"k" [a-z]* {r}?',
    '"x" {r} "y" {r} "z"',
]


@pytest.mark.parametrize("seed", range(60))
def test_random_grammars_productivity_matches_the_reference(seed: int) -> None:
    """Random grammars, some rules unproductive (every alternative calls a rule that never
    finishes), their automata built without the productivity pass's pruning."""
    rnd = random.Random(seed)
    names = ["root"] + [f"r{i}" for i in range(1, rnd.randint(2, 6))]
    lines = []
    for name in names:
        alts = [rnd.choice(_BODIES).format(r=rnd.choice(names)) for _ in range(rnd.randint(1, 3))]
        if rnd.random() < 0.5:
            alts.append('"z"')
        lines.append(f"{name} ::= " + " | ".join(alts))
    grammar = parse_gbnf("\n".join(lines))
    dfas: list[ByteDFA] = []
    original = rules_mod._productive_rules

    def record(found: list[ByteDFA]) -> set[int]:
        dfas[:] = found
        return original(found)

    rules_mod._productive_rules = record  # type: ignore[assignment]
    try:
        with contextlib.suppress(FormcastError):
            rules_mod.compile_grammar_automaton(grammar, expand_calls=False)
    finally:
        rules_mod._productive_rules = original  # type: ignore[assignment]
    if not dfas:
        pytest.skip("the compiled module's internal call cannot be patched")
    _check(dfas, rnd)


def test_real_json_schema_rule_automata_productivity_matches_the_reference() -> None:
    from _native_kernel import REAL_SCHEMA
    from formcast.frontends.jsonschema.api import schema_to_grammar
    from formcast.ir.nodes import JSON_HINTS

    schemas: list[Any] = [REAL_SCHEMA]
    if _MASKBENCH.is_dir():
        files = sorted(_MASKBENCH.glob("*.json"))
        for f in random.Random(3).sample(files, min(20, len(files))):
            schemas.append(json.loads(f.read_text(encoding="utf-8")).get("schema"))
    rnd = random.Random(0)
    checked = 0
    for schema in schemas:
        try:
            grammar = schema_to_grammar(schema, marks=[])[0]
            auto = rules_mod.compile_grammar_automaton(
                grammar, expand_calls=JSON_HINTS.expand_calls, minimize=JSON_HINTS.minimize
            )
        except (FormcastError, RecursionError, ValueError):
            continue
        _check(list(auto.dfas), rnd)
        checked += 1
    assert checked >= 1
