"""The Thompson construction's fast paths build the NFA the generic construction builds.

``_add_repeat`` writes the edges of a repeated one-byte item (a byte set, an ASCII character
set, a one-byte ASCII literal: ``[ \\t\\n]{0,20}``, ``[0-9]+``) itself instead of one work item
per copy.  Here every NFA is built both ways (the fast path switched off by patching
``_single_byte_ranges`` to answer None) and must be identical: the same states, epsilon edges,
byte edges in the same order, rule references, start, accept and fuel; so the DFAs, their
state numbers and the compile's fuel do not change.  Random regular expressions and grammars
(hypothesis), the builtin JSON grammar and llama.cpp's grammars.  The rule automaton's call
table (``GrammarAutomaton.refs``) is checked against the dense formula it replaced.

Runs in the pure-Python package (patching a module function does not reach mypyc's native
calls, so under the compiled copy the two builds coincide and the test is vacuous there).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formcast.automata.nfa as nfa_mod
import formcast.automata.regular as regular_mod
import formcast.automata.rules as rules_mod
from conftest import SHARED_DATA
from formcast.automata.dfa import DEAD
from formcast.automata.regular import build_nfa
from formcast.frontends.builtin_json import builtin_json_grammar
from formcast.frontends.gbnf import parse_gbnf
from formcast.frontends.regex import parse_regex
from formcast.ir.nodes import Grammar
from formcast.limits import CompileLimits

_LLAMA = SHARED_DATA / "llama.cpp-grammars" / "grammars"


@contextmanager
def _generic() -> Iterator[None]:
    saved = nfa_mod._single_byte_ranges
    nfa_mod._single_byte_ranges = lambda item: None  # type: ignore[assignment]
    try:
        yield
    finally:
        nfa_mod._single_byte_ranges = saved


def _nfa_fields(node: Any, rule_ids: dict[str, int] | None = None) -> tuple[Any, ...]:
    limits = CompileLimits()
    budget = limits.budget()
    nfa = build_nfa(node, limits, rule_ids=rule_ids, budget=budget, sub_dfas={})
    return nfa.eps, nfa.edges, nfa.refs, nfa.start, nfa.accept, budget.used


def _both(node: Any, rule_ids: dict[str, int] | None = None) -> None:
    regular_mod.SUB_DFA_CACHE.clear()
    fast = _nfa_fields(node, rule_ids)
    regular_mod.SUB_DFA_CACHE.clear()
    with _generic():
        slow = _nfa_fields(node, rule_ids)
    assert fast == slow


def test_the_switch_reaches_the_construction() -> None:
    """(Guards the test itself: the patched builds do take the generic path.)"""
    if not hasattr(nfa_mod._add_repeat, "__code__"):
        pytest.skip("nfa.py is compiled (mypyc): the patch cannot reach it")
    calls: list[int] = []
    saved = nfa_mod._Thompson._char_set

    def counting(self: Any, n: Any, frm: int, to: int, own: bool) -> None:
        calls.append(frm)
        saved(self, n, frm, to, own)

    nfa_mod._Thompson._char_set = counting  # type: ignore[method-assign]
    try:
        node = parse_regex("[ \\t]{0,5}x")
        _nfa_fields(node)
        assert calls == []
        with _generic():
            _nfa_fields(node)
        assert len(calls) == 5
    finally:
        nfa_mod._Thompson._char_set = saved  # type: ignore[method-assign]


_ATOMS = ["a", "[0-9]", "[ \\t\\n]", "\\d", "[a-f]", "[^a]", "é", "[α-ω]", "(ab|c)", "-", "."]
_QUANT = ["", "*", "+", "?", "{2}", "{0,3}", "{1,4}", "{3,}", "{0,20}"]


@st.composite
def _regexes(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        atom = draw(st.sampled_from(_ATOMS))
        parts.append(atom + draw(st.sampled_from(_QUANT)))
        if draw(st.booleans()):
            parts.append("|")
    text = "".join(parts).strip("|") or "a"
    return text.replace("||", "|")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_regexes())
def test_random_regexes_build_the_same_nfa(pattern: str) -> None:
    _both(parse_regex(pattern))


def _grammar_nfas(grammar: Grammar) -> None:
    ids = {r.name: i for i, r in enumerate(grammar.rules)}
    for rule in grammar.rules:
        _both(rule.body, ids)


def test_builtin_json_grammar_rules_build_the_same_nfa() -> None:
    _grammar_nfas(builtin_json_grammar())


@pytest.mark.parametrize("name", ["json.gbnf", "c.gbnf", "arithmetic.gbnf", "list.gbnf"])
def test_llama_cpp_grammar_rules_build_the_same_nfa(name: str) -> None:
    path = _LLAMA / name
    if not path.exists():
        pytest.skip(f"{path} is not in shared/data")
    _grammar_nfas(parse_gbnf(path.read_text()))


def test_inlined_rule_bodies_build_the_same_nfa() -> None:
    """The bodies the rule automaton builder actually compiles (after ``inline_rules``)."""
    seen: list[Any] = []
    original = rules_mod._rule_dfa

    def capture(body: Any, ids: dict[str, int], *args: Any, **kwargs: Any) -> Any:
        seen.append((body, dict(ids)))
        return original(body, ids, *args, **kwargs)

    rules_mod._rule_dfa = capture  # type: ignore[assignment]
    try:
        rules_mod.RULE_DFA_CACHE.clear()
        rules_mod.compile_grammar_automaton(builtin_json_grammar())
    finally:
        rules_mod._rule_dfa = original  # type: ignore[assignment]
    if not seen:
        pytest.skip("rules.py is compiled (mypyc): the patch cannot reach it")
    for body, ids in seen:
        _both(body, ids)


@pytest.mark.parametrize("source", ["builtin", "json.gbnf", "c.gbnf"])
def test_rule_call_table_matches_the_dense_formula(source: str) -> None:
    if source == "builtin":
        grammar = builtin_json_grammar()
    else:
        path = _LLAMA / source
        if not path.exists():
            pytest.skip(f"{path} is not in shared/data")
        grammar = parse_gbnf(path.read_text())
    rules_mod.RULE_DFA_CACHE.clear()
    auto = rules_mod.compile_grammar_automaton(grammar)
    assert any(any(row) for row in auto.refs)
    for dfa, refs, boundary in zip(auto.dfas, auto.refs, auto.boundary, strict=True):
        if dfa.ref_table is None:
            assert all(row == () for row in refs)
            continue
        dense = [
            tuple((c, t) for c, t in zip(dfa.ref_rules, row, strict=True) if t != DEAD)
            for row in dfa.ref_table.tolist()
        ]
        dense[DEAD] = ()
        assert list(refs) == dense
        for s, row in enumerate(dense):
            if row:
                assert boundary[s]
