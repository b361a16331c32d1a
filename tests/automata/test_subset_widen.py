"""The compiled build's ``_subset.widen`` (rules33): the byte table and rule-call table of a
class table in one C pass, as ``nfa_to_dfa``'s numpy path makes them.

Checked directly against ``np.take`` / slicing on random class tables (every shape from one
class to 256, with and without rule columns, empty tables), on corrupt arguments (ValueError,
never a read out of bounds), and end to end: ``nfa_to_dfa`` with the kernel gives the DFA it
gives with a stand-in kernel that lacks ``widen`` (the numpy path), on random NFAs with rule
references, minimized and not.  The rule phase's boundary / tail flags (``rules33``: one pass
``table.any`` and ``acc > has_out``) are checked against the formulas they replace.

In the pure-Python package the kernel is absent and the kernel tests skip; the flag test runs
on both builds.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import formcast.automata.dfa as dfa_mod
from automata_helpers import KernelWithout, random_nfa
from formcast.automata.dfa import DEAD, nfa_to_dfa
from formcast.automata.nfa import NFA
from formcast.automata.rules import compile_grammar_automaton
from formcast.frontends.gbnf import parse_gbnf
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.ir.nodes import JSON_HINTS
from formcast.limits import CompileLimits

KERNEL = dfa_mod._KERNEL
needs_kernel = pytest.mark.skipif(
    KERNEL is None or not hasattr(KERNEL, "widen"), reason="the C kernel is not built"
)


def _random_class_table(rnd: random.Random) -> tuple[np.ndarray, int, np.ndarray]:
    n_classes = rnd.choice([1, 2, 3, 7, 40, 255, 256])
    n_refs = rnd.choice([0, 0, 1, 3])
    m = rnd.choice([0, 1, 2, 5, 33])
    table = np.asarray(
        [[rnd.randrange(max(m, 1)) for _ in range(n_classes + n_refs)] for _ in range(m)],
        dtype=np.int32,
    ).reshape(m, n_classes + n_refs)
    cuts = sorted(rnd.sample(range(1, 256), n_classes - 1))
    class_of = np.zeros(256, dtype=np.int32)
    for c in cuts:
        class_of[c:] += 1
    return table, n_classes, class_of


@needs_kernel
@pytest.mark.parametrize("seed", range(200))
def test_widen_is_take_and_slice(seed: int) -> None:
    rnd = random.Random(seed)
    table, n_classes, class_of = _random_class_table(rnd)
    m, k = table.shape
    wide, refs = KERNEL.widen(table, k, n_classes, class_of)
    got = np.frombuffer(wide, dtype=np.int32).reshape(m, 256)
    got_refs = np.frombuffer(refs, dtype=np.int32).reshape(m, k - n_classes)
    assert np.array_equal(got, np.take(table, class_of, axis=1))
    assert np.array_equal(got_refs, table[:, n_classes:])


@needs_kernel
def test_widen_rejects_corrupt_arguments() -> None:
    table = np.arange(12, dtype=np.int32).reshape(3, 4)
    class_of = np.zeros(256, dtype=np.int32)
    class_of[128:] = 1
    KERNEL.widen(table, 4, 2, class_of)  # (fine)
    bad_class = class_of.copy()
    bad_class[255] = 2  # not below n_classes
    negative = class_of.copy()
    negative[0] = -1
    for args in (
        (table, 4, 2, bad_class),
        (table, 4, 2, negative),
        (table, 4, 5, class_of),  # more classes than columns
        (table, 4, 0, class_of),
        (table, 0, 0, class_of),
        (table, 5, 2, class_of),  # 12 entries are not rows of 5
        (table, 4, 2, class_of[:255]),  # class_of must have 256 entries
        (table.astype(np.int64), 4, 2, class_of),  # 8-byte items
        (table, 4, 2, class_of.astype(np.int16)),
        (np.asfortranarray(table), 4, 2, class_of),  # not C-contiguous
    ):
        with pytest.raises((ValueError, BufferError)):
            KERNEL.widen(*args)


def _random_nfa(rnd: random.Random) -> NFA:
    return random_nfa(
        rnd,
        max_states=20,
        byte_points=(0, 9, 10, 32, 48, 57, 97, 122, 127, 128, 200, 255),
        min_edges=1,
        single_bytes=0.0,
        max_eps_per_state=1,
        refs=0.6,
        rule_ids=8,
    )


def _fields(dfa: Any) -> tuple[Any, ...]:
    ref = None if dfa.ref_table is None else (dfa.ref_table.tolist(), dfa.ref_table.shape)
    return (
        dfa.table.tolist(),
        dfa.table.shape,
        dfa.table.dtype,
        dfa.table.flags.writeable,
        dfa.accepting.tolist(),
        dfa.start,
        dfa.ref_rules,
        ref,
    )


@needs_kernel
@pytest.mark.parametrize("seed", range(150))
def test_nfa_to_dfa_with_and_without_widen(seed: int) -> None:
    nfa = _random_nfa(random.Random(seed))
    minimize = bool(seed % 2)
    dfa_mod._KERNEL = KernelWithout(KERNEL, "widen")
    try:
        ref = nfa_to_dfa(nfa, CompileLimits(), minimize=minimize)
    finally:
        dfa_mod._KERNEL = KERNEL
    got = nfa_to_dfa(nfa, CompileLimits(), minimize=minimize)
    assert _fields(got) == _fields(ref)
    if got.ref_table is not None:
        assert not got.ref_table.flags.writeable


_GRAMMARS = [
    'root ::= "a" root "b" | "c"',
    'root ::= item ("," item)*\nitem ::= "[" root? "]" | [0-9]+',
    'root ::= x*\nx ::= "(" root ")" | "z"',
]


def _grammars() -> list[Any]:
    out = [parse_gbnf(text) for text in _GRAMMARS]
    for schema in (
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
        {"type": "array", "items": {"$ref": "#"}, "maxItems": 3},
        {"anyOf": [{"type": "number"}, {"type": "array", "items": {"type": "boolean"}}]},
        {"type": "string", "maxLength": 300},  # a counted rule (no tail calls)
    ):
        out.append(schema_to_grammar(schema, marks=[])[0])
    return out


@pytest.mark.parametrize("index", range(7))
def test_boundary_and_tail_flags(index: int) -> None:
    grammar = _grammars()[index]
    if index == 6:
        assert compile_grammar_automaton(grammar).counts  # (the case is still met)
    for kwargs in ({}, {"expand_calls": JSON_HINTS.expand_calls, "minimize": False}):
        auto = compile_grammar_automaton(grammar, **kwargs)  # type: ignore[arg-type]
        for r, dfa in enumerate(auto.dfas):
            has_out = (dfa.table != DEAD).any(axis=1)
            bnd = np.array(dfa.accepting, dtype=bool)
            if dfa.ref_table is not None:
                calls = (dfa.ref_table != DEAD).any(axis=1)
                calls[DEAD] = False
                bnd |= calls
                has_out |= calls
            bnd[DEAD] = False
            no_tail = auto.count_of(r) is not None
            tail = np.asarray(dfa.accepting, dtype=bool) & ~has_out & (not no_tail)
            assert auto.boundary[r].dtype == bool
            assert auto.tail[r].dtype == bool
            assert auto.boundary[r].tolist() == bnd.tolist()
            assert auto.tail[r].tolist() == tail.tolist()
