"""The compiled build's ``_subset.rule_flags`` and ``_subset.rule_moves`` (thompson34): a rule
automaton's boundary / tail flags and call edges per state, and the CSR moves of the
productivity search, in one C pass each, as ``rules._rule_flags_numpy`` / ``rules._moves_numpy``
make them with numpy.

Checked against the numpy functions on random rule automata (with and without rule columns,
counted or not, the dead state alone, rows with long runs), end to end (the rule automata of
JSON schemas and grammars compiled with the kernel and with ``rules._KERNEL`` set to None:
equal refs, boundary and tail), and on corrupt arguments (ValueError or BufferError, never a
read out of bounds).  In the pure-Python package the kernel is absent and these tests skip.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import formcast.automata.rules as rules_mod
from formcast.automata import regular
from formcast.automata.dfa import ByteDFA
from formcast.frontends.gbnf import parse_gbnf
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.ir.nodes import JSON_HINTS

KERNEL = rules_mod._KERNEL
needs_kernel = pytest.mark.skipif(
    KERNEL is None or not hasattr(KERNEL, "rule_flags") or not hasattr(KERNEL, "rule_moves"),
    reason="the C kernel is not built",
)


def _random_dfa(rnd: random.Random) -> ByteDFA:
    m = rnd.choice([1, 2, 3, 6, 20, 70])
    table = np.zeros((m, 256), dtype=np.int32)
    for s in range(1, m):
        b = 0
        while b < 256:
            end = min(256, b + rnd.choice([1, 3, 40, 256]))
            table[s, b:end] = rnd.randrange(m) if rnd.random() < 0.4 else 0
            b = end
    accepting = np.asarray([s > 0 and rnd.random() < 0.4 for s in range(m)], dtype=bool)
    n_refs = rnd.choice([0, 0, 1, 2, 5])
    ref_rules = tuple(rnd.sample(range(1, 40), n_refs))
    ref_table = None
    if n_refs:
        ref_table = np.zeros((m, n_refs), dtype=np.int32)
        # (row 0 too: the dead state's calls, if any, are left out either way)
        for s in range(m):
            for j in range(n_refs):
                if rnd.random() < 0.3:
                    ref_table[s, j] = rnd.randrange(m)
    return ByteDFA(table, accepting, rnd.randrange(m), ref_rules, ref_table)


def _flags(got: Any) -> tuple[Any, ...]:
    bnd, tail, per = got
    for flags in (bnd, tail):
        assert flags.dtype == bool
        assert flags.flags.writeable
    return bnd.tolist(), tail.tolist(), per


@needs_kernel
@pytest.mark.parametrize("seed", range(300))
def test_rule_flags_and_moves_are_the_numpy_ones(seed: int) -> None:
    rnd = random.Random(seed)
    dfa = _random_dfa(rnd)
    counted = rnd.random() < 0.3
    assert _flags(rules_mod._rule_flags(dfa, counted)) == _flags(
        rules_mod._rule_flags_numpy(dfa, counted)
    )
    got, want = rules_mod._moves(dfa), rules_mod._moves_numpy(dfa)
    assert got == want
    assert all(type(x) is int for lst in got[:5] for x in lst)


def _automata() -> list[Any]:
    schemas: list[Any] = [
        {"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"type": "integer"}}},
        {"type": "array", "items": {"type": "string", "maxLength": 100}},
        {"type": "object", "additionalProperties": {"type": "number"}},
    ]
    kw = {"expand_calls": JSON_HINTS.expand_calls, "minimize": JSON_HINTS.minimize}
    grammars = [(schema_to_grammar(s, marks=[])[0], kw) for s in schemas]
    gbnf = 'root ::= "(" list ")"\nlist ::= item ("," item)*\nitem ::= [a-z]+ | root'
    grammars.append((parse_gbnf(gbnf), {}))
    out = []
    for grammar, options in grammars:
        rules_mod.RULE_DFA_CACHE.clear()
        regular.SUB_DFA_CACHE.clear()
        auto = rules_mod.compile_grammar_automaton(grammar, **options)
        out.append(
            (
                auto.names,
                auto.refs,
                [b.tolist() for b in auto.boundary],
                [t.tolist() for t in auto.tail],
                [d.table.tolist() for d in auto.dfas],
            )
        )
    return out


@needs_kernel
def test_rule_automata_same_without_kernel() -> None:
    with_kernel = _automata()
    saved = rules_mod._KERNEL
    rules_mod._KERNEL = None
    try:
        without = _automata()
    finally:
        rules_mod._KERNEL = saved
    assert with_kernel == without


@needs_kernel
def test_rule_flags_and_moves_reject_corrupt_arguments() -> None:
    table = np.zeros((3, 256), dtype=np.int32)
    table[1, 5:9] = 2
    acc = np.asarray([False, False, True])
    refs = np.asarray([[0, 0], [2, 0], [0, 1]], dtype=np.int32)
    bnd, tail, per = KERNEL.rule_flags(table, acc, refs, (7, 9), False)
    assert (list(bnd), list(tail), per) == ([0, 1, 1], [0, 0, 0], ((), ((7, 2),), ((9, 1),)))
    assert KERNEL.rule_moves(table, refs) == ([0, 0, 1, 1], [2], [0, 0, 1, 2], [0, 1], [2, 1])
    bad = table.copy()
    bad[2, 0] = 3
    negative = refs.copy()
    negative[1, 1] = -2
    for args in (
        (bad, acc, refs, (7, 9), False),
        (table, acc, negative, (7, 9), False),
        (table, acc[:2], refs, (7, 9), False),
        (table, acc, refs, (7,), False),  # two rule columns, one rule
        (table, acc, None, (7,), False),  # a rule, no column
        (table, acc, refs[:2].copy(), (7, 9), False),
        (table[:, :200].copy(), acc, refs, (7, 9), False),
        (table.astype(np.int64), acc, refs, (7, 9), False),
        (np.asfortranarray(table), acc, refs, (7, 9), False),
    ):
        with pytest.raises((ValueError, BufferError, TypeError)):
            KERNEL.rule_flags(*args)
    for margs in (
        (bad, refs),
        (table, negative),
        (table, refs[:2].copy()),
        (table[:, :200].copy(), None),
        (table.astype(np.int64), None),
    ):
        with pytest.raises((ValueError, BufferError)):
            KERNEL.rule_moves(*margs)
