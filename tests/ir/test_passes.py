"""The IR passes (``formcast.ir.passes``) and the per-automaton analysis memo.

Unit checks of each pass on small grammars; that the JSON Schema clean-up and the automaton
compiler produce the same grammars as before the passes were shared is covered end to end by
the MaskBench ratchet and the fuel tests.
"""

from __future__ import annotations

import numpy as np
import pytest

from formcast.automata.analysis import GrammarAnalysis, split_bytes
from formcast.automata.rules import compile_grammar_automaton
from formcast.errors import GrammarError
from formcast.frontends.gbnf import parse_gbnf
from formcast.ir.nodes import NOTHING, Grammar, Node, Rule, RuleRef, alt, concat, literal, repeat
from formcast.ir.passes import (
    drop_unproductive,
    drop_unreachable,
    inline_single_use,
    ir_depth,
    node_nullable,
    node_productive,
    productive_rules,
    reachable_rules,
    rule_refs,
    rule_sccs,
)


def _table(*rules: Rule) -> dict[str, Rule]:
    return {r.name: r for r in rules}


def test_sccs_come_callees_first_with_members_in_graph_order() -> None:
    graph = {"s": {"b", "a"}, "a": {"b"}, "b": {"a", "c"}, "c": set()}
    assert rule_sccs(graph) == [["c"], ["a", "b"], ["s"]]
    assert rule_sccs({0: {1}, 1: {0}, 2: {2}}) == [[0, 1], [2]]


def test_unproductive_rules_are_dropped_and_their_references_become_nothing() -> None:
    by_name = _table(
        Rule("s", alt([concat([literal("x"), RuleRef("b")]), literal("y")])),
        Rule("b", concat([literal("z"), RuleRef("b")])),
    )
    refs = rule_refs(by_name)
    ok = productive_rules(by_name, refs)
    assert ok == {"s"}
    drop_unproductive(by_name, refs, ok)
    assert list(by_name) == ["s"]
    assert by_name["s"].body == literal("y")
    assert refs == {"s": []}


def test_single_use_rules_are_inlined_and_unreachable_ones_dropped() -> None:
    by_name = _table(
        Rule("a", literal("a")),
        Rule("s", concat([RuleRef("a"), RuleRef("c"), RuleRef("c")])),
        Rule("c", literal("c")),
        Rule("orphan", literal("o")),
    )
    refs = rule_refs(by_name)
    inline_single_use(by_name, refs, "s", max_depth=40, max_passes=8)
    g = drop_unreachable(by_name, refs, "s")
    # "a" (used once) is inlined, "c" (used twice) stays a rule, the start comes first
    assert [r.name for r in g.rules] == ["s", "c"]
    assert g.rules[0].body == concat([literal("a"), RuleRef("c"), RuleRef("c")])


def test_reachability_reports_undefined_rules_only_when_strict() -> None:
    def callees(name: str) -> list[str]:
        return ["missing"]

    assert reachable_rules("s", callees, {"s"}) == ["s"]
    with pytest.raises(GrammarError, match="'missing' is referenced but never defined"):
        reachable_rules("s", callees, {"s"}, strict=True)


def test_nullable_and_productive_walks_survive_deep_trees() -> None:
    deep: Node = RuleRef("q")
    for _ in range(3_000):  # deeper than the interpreter's recursion limit
        deep = concat([repeat(literal("a"), 0, 1), alt([deep, RuleRef("r")])])
    assert ir_depth(deep) > 3_000
    assert node_nullable(deep, {"q"}, {}) is True
    assert node_nullable(deep, set(), {}) is False
    assert node_productive(deep, {"r"}) is True
    assert node_productive(deep, set()) is False
    assert node_productive(alt([NOTHING, deep]), {"q"}) is True


def test_the_analysis_is_computed_once_per_automaton_and_read_only() -> None:
    g = parse_gbnf('root ::= "[" item "]"\nitem ::= "a" | "(" item ")" | "b" item')
    auto = compile_grammar_automaton(g)
    a = auto.analysis
    assert isinstance(a, GrammarAnalysis)
    assert auto.analysis is a
    assert not a.first[0].flags.writeable
    assert not a.follow[1].flags.writeable
    item = auto.names.index("item")
    assert a.follow[item][ord("]")]
    assert a.follow[item][ord(")")]
    assert not a.nullable[item]
    # a fresh computation agrees with the memo
    fresh = GrammarAnalysis.of(auto)
    assert all(np.array_equal(x, y) for x, y in zip(fresh.follow, a.follow))
    assert len(split_bytes(auto)) == len(auto.dfas)


def test_grammar_type_of_drop_unreachable() -> None:
    g = drop_unreachable(_table(Rule("s", literal("s"))), {"s": []}, "s")
    assert isinstance(g, Grammar)
    assert g.start == "s"
