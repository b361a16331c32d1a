"""The compiled build's ``_subset.sub_edges`` (thompson34): a sub-DFA's edges as maximal byte
ranges and its accepting states in one C pass, as ``SubAutomaton.of``'s numpy path makes them.

Checked against the numpy path (``nfa._KERNEL`` set to None) on random tables (every size from
the dead state alone up, runs of every length, targets into the dead state), on the sub-DFAs
of real regular expressions and JSON schemas (compiled both ways: the same rule automata),
and on corrupt arguments (ValueError or BufferError, never a read out of bounds).

In the pure-Python package the kernel is absent and these tests skip.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import formcast.automata.nfa as nfa_mod
from formcast.automata import regular, rules
from formcast.automata.nfa import SubAutomaton
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.regex import parse_regex
from formcast.ir.nodes import JSON_HINTS
from formcast.limits import CompileLimits

KERNEL = nfa_mod._KERNEL
needs_kernel = pytest.mark.skipif(
    KERNEL is None or not hasattr(KERNEL, "sub_edges"), reason="the C kernel is not built"
)


def _of_both(table: np.ndarray, accepting: np.ndarray, start: int) -> tuple[Any, Any]:
    got = SubAutomaton.of(table, accepting, start)
    saved = nfa_mod._KERNEL
    nfa_mod._KERNEL = None
    try:
        want = SubAutomaton.of(table, accepting, start)
    finally:
        nfa_mod._KERNEL = saved
    return got, want


def _random_table(rnd: random.Random) -> tuple[np.ndarray, np.ndarray]:
    n = rnd.choice([0, 1, 2, 3, 5, 17, 64])
    table = np.zeros((n, 256), dtype=np.int32)
    for s in range(1, n):
        b = 0
        while b < 256:
            end = min(256, b + rnd.choice([1, 1, 2, 5, 30, 256]))
            table[s, b:end] = rnd.randrange(n) if rnd.random() < 0.6 else 0
            b = end
    accepting = np.asarray([rnd.random() < 0.4 for _ in range(n)], dtype=bool)
    return table, accepting


@needs_kernel
@pytest.mark.parametrize("seed", range(300))
def test_sub_edges_is_the_numpy_path(seed: int) -> None:
    rnd = random.Random(seed)
    table, accepting = _random_table(rnd)
    start = rnd.randrange(max(len(accepting), 1))
    got, want = _of_both(table, accepting, start)
    assert got.edges == want.edges
    assert got.accepting == want.accepting
    assert (got.start, got.n_states) == (want.start, want.n_states)
    assert all(type(x) is int for e in got.edges for x in e)
    assert all(type(x) is int for x in got.accepting)


@needs_kernel
@pytest.mark.parametrize(
    "pattern",
    [r"[a-z]+", r"\d{1,5}(\.\d+)?", r"[\u00e9-\u2000x]*", r"(ab|cd){3,7}", r"[^\"\\]*", r"\w+@\w+"],
)
def test_sub_edges_on_real_automata(pattern: str) -> None:
    limits = CompileLimits()
    dfa = regular.compile_dfa(parse_regex(pattern), limits)
    got, want = _of_both(dfa.table, dfa.accepting, dfa.start)
    assert (got.edges, got.accepting) == (want.edges, want.accepting)


def _rule_automata() -> list[Any]:
    schemas = [
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]{2,9}$"}}},
        {"type": "array", "items": {"type": "string", "format": "date-time"}},
        {"type": "object", "properties": {"x": {"type": "number"}, "y": {"enum": ["é", "ü"]}}},
    ]
    kw = {"expand_calls": JSON_HINTS.expand_calls, "minimize": JSON_HINTS.minimize}
    out = []
    for schema in schemas:
        rules.RULE_DFA_CACHE.clear()
        regular.SUB_DFA_CACHE.clear()
        grammar = schema_to_grammar(schema, marks=[])[0]
        auto = rules.compile_grammar_automaton(grammar, **kw)
        out.append([(d.table.tolist(), d.accepting.tolist(), d.start) for d in auto.dfas])
    return out


@needs_kernel
def test_rule_automata_same_with_numpy_path() -> None:
    with_kernel = _rule_automata()
    saved = nfa_mod._KERNEL
    nfa_mod._KERNEL = None
    try:
        without = _rule_automata()
    finally:
        nfa_mod._KERNEL = saved
    assert with_kernel == without


@needs_kernel
def test_sub_edges_rejects_corrupt_arguments() -> None:
    table = np.zeros((3, 256), dtype=np.int32)
    table[1, 5:9] = 2
    accepting = np.asarray([False, False, True])
    assert KERNEL.sub_edges(table, accepting) == (((1, 5, 8, 2),), (2,))
    out_of_range = table.copy()
    out_of_range[2, 7] = 3
    negative = table.copy()
    negative[1, 0] = -1
    for args in (
        (out_of_range, accepting),
        (negative, accepting),
        (table, accepting[:2]),  # 3 rows, 2 flags
        (table[:, :255].copy(), accepting),  # rows of 255
        (table.astype(np.int64), accepting),  # 8-byte items
        (table, accepting.astype(np.int32)),
        (np.asfortranarray(table), accepting),  # not C-contiguous
    ):
        with pytest.raises((ValueError, BufferError)):
            KERNEL.sub_edges(*args)
