"""The Thompson construction's one-hash memo lookups build exactly the NFA of the two-step ones.

``_Thompson.run``, ``_concat`` and ``_literal`` look up and record their hash-consing memos
(``shared``, ``chained``, ``byte_chain``) with one ``dict.setdefault`` whose default is the
next state's id (no entry holds it; ``new_state`` then returns it), where they used a ``get``
and then a store (two hashes of a key holding an IR node, whose ``__hash__`` is a
Python-level call), and dispatch on the node's exact type first.  The reference here is that
earlier code, run on the same construction's helpers: for every NFA built while compiling
random grammars and real JSON schemas (MaskBench where the shared data is present), both give
the same flat NFA (states, every edge list in order, start, accept) and charge the same fuel,
in the pure-Python package and in the compiled build alike.
"""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import pytest

import formcast.automata.regular as regular_mod
import formcast.automata.rules as rules_mod
from conftest import SHARED_DATA
from formcast.automata.nfa import FlatNFA, _Thompson
from formcast.automata.nfa_embedded import Embedded
from formcast.errors import FormcastError, UnsupportedFeatureError
from formcast.frontends.gbnf import parse_gbnf
from formcast.ir.loops import SepLoop, fold_loops
from formcast.ir.nodes import (
    Alt,
    ByteSet,
    CharSet,
    Concat,
    Empty,
    Literal,
    Node,
    Nothing,
    Repeat,
    RuleRef,
)
from formcast.limits import WorkBudget

_MASKBENCH = SHARED_DATA / "JSONSchemaBench" / "maskbench" / "data"


class _Reference:
    """The construction as it was written before the one-hash lookups (``get`` then a store),
    driving a :class:`_Thompson`'s own handlers and memos for every other node kind."""

    def __init__(self, t: _Thompson) -> None:
        self.t = t

    def run(self, node: Node) -> FlatNFA:
        t = self.t
        nfa = t.nfa
        s = nfa.new_state()
        a = nfa.new_state()
        nfa.start, nfa.accept = s, a
        work = t.work
        work.append((node, s, a, True))
        shared = t.shared
        while work:
            n, frm, to, own = work.pop()
            if isinstance(n, (Concat, Alt, Repeat)) and n.size >= 6:
                key = (n, to)
                entry = shared.get(key)
                if entry is not None:
                    nfa.eps_edge(frm, entry)
                    continue
                if not own:
                    entry = nfa.new_state()
                    nfa.eps_edge(frm, entry)
                    frm = entry
                shared[key] = frm
            if isinstance(n, Concat):
                self._concat(n, frm, to, own)
            elif isinstance(n, Literal):
                self._literal(n, frm, to, own)
            elif isinstance(n, Alt):
                t._alt(n, frm, to, own)
            elif isinstance(n, CharSet):
                t._char_set(n, frm, to, own)
            elif isinstance(n, Repeat):
                t._repeat(n, frm, to, own)
            elif isinstance(n, ByteSet):
                t._byte_set(n, frm, to, own)
            elif isinstance(n, RuleRef):
                t._rule_ref(n, frm, to, own)
            elif isinstance(n, Empty):
                t._empty(n, frm, to, own)
            elif isinstance(n, Embedded):
                t._embedded(n, frm, to, own)
            elif isinstance(n, SepLoop):
                t._sep_loop(n, frm, to, own)
            elif not isinstance(n, Nothing):
                raise TypeError(f"not an IR node: {n!r}")
        return nfa

    def _literal(self, n: Literal, frm: int, to: int, own: bool) -> None:
        t = self.t
        nfa = t.nfa
        data = n.text.encode("utf-8")
        if not data:
            nfa.eps_edge(frm, to)
            return
        byte_chain = t.byte_chain
        nxt = to
        for b in reversed(data[1:]):
            byte_link = nxt << 8 | b
            entry = byte_chain.get(byte_link)
            if entry is None:
                entry = nfa.new_state()
                nfa.byte_edge(entry, b, b, nxt)
                byte_chain[byte_link] = entry
            nxt = entry
        nfa.byte_edge(frm, data[0], data[0], nxt)

    def _concat(self, n: Concat, frm: int, to: int, own: bool) -> None:
        t = self.t
        nfa, work, chained = t.nfa, t.work, t.chained
        items = n.items
        for k in range(1, len(items)):
            item = items[k]
            if isinstance(item, Repeat) and item.min == 0 and item.max is None:
                items = fold_loops(items)
                break
        nxt = to
        for item in reversed(items[1:]):
            link = (item, nxt)
            entry = chained.get(link)
            if entry is None:
                entry = nfa.new_state()
                chained[link] = entry
                work.append((item, entry, nxt, True))
            nxt = entry
        link = (items[0], nxt)
        entry = chained.get(link)
        if entry is not None:
            nfa.eps_edge(frm, entry)
        elif own:
            chained[link] = frm
            work.append((items[0], frm, nxt, True))
        else:
            entry = nfa.new_state()
            nfa.eps_edge(frm, entry)
            chained[link] = entry
            work.append((items[0], entry, nxt, True))


def _flat(nfa: FlatNFA) -> tuple[Any, ...]:
    return (
        nfa.n, nfa.start, nfa.accept, nfa.e_src, nfa.e_lo, nfa.e_hi, nfa.e_tgt,
        nfa.x_src, nfa.x_tgt, nfa.r_src, nfa.r_rule, nfa.r_tgt,
    )  # fmt: skip


def _recorded_calls(action: Any) -> list[tuple[Any, ...]]:
    """The arguments of every ``thompson_nfa`` call ``action`` makes (caches emptied first)."""
    seen: list[tuple[Any, ...]] = []
    original = regular_mod.thompson_nfa

    def record(node: Any, limits: Any, budget: Any, sub: Any, **kw: Any) -> Any:
        seen.append((node, limits, sub, kw))
        return original(node, limits, budget, sub, **kw)

    rules_mod.RULE_DFA_CACHE.clear()
    regular_mod.SUB_DFA_CACHE.clear()
    regular_mod.thompson_nfa = record  # type: ignore[assignment]
    try:
        action()
    finally:
        regular_mod.thompson_nfa = original  # type: ignore[assignment]
    return seen


def _check(calls: list[tuple[Any, ...]]) -> int:
    """Both constructions on each recorded call (the sub-automata asked for made once, outside
    the budgets); returns how many were compared."""
    compared = 0
    for node, limits, sub, kw in calls:
        subs: dict[int, Any] = {}

        def stub(item: Node, subs: dict[int, Any] = subs, sub: Any = sub) -> Any:
            if id(item) not in subs:
                subs[id(item)] = (item, sub(item))
            return subs[id(item)][1]

        outcomes = []
        for reference in (False, True):
            budget = WorkBudget(10**12)
            t = _Thompson(limits, budget, stub, kw.get("inline"), kw.get("rule_ids"))
            try:
                built = _Reference(t).run(node) if reference else t.run(node)
                outcomes.append((_flat(built), budget.used))
            except UnsupportedFeatureError as e:
                outcomes.append((repr(e), budget.used))
        assert outcomes[0] == outcomes[1], node
        compared += 1
    return compared


_RULE_BODIES = [
    '"ab" {r} "b"',
    "[0-9]+ ({r} | [a-z])*",
    '"(" {r} ("," {r})* ")" | [xyz]',
    '{r} "+" {r} | "n" [0-9]* | "na" [0-9]*',
    '"[" ({r} ("," {r})*)? "]" | "\\"" [^"]* "\\""',
    "[a-c] {r}? [d-f] | [\u00e9-\u4e2d]{{2,4}}",
    '("key" | "keys" | "ey") ":" {r} ("," "key" ":" {r})*',
    '"\u00e9t\u00e9" {r}{{1,3}} | "t\u00e9" {r}',
]


@pytest.mark.parametrize("seed", range(40))
def test_random_grammars_build_the_reference_nfa(seed: int) -> None:
    rnd = random.Random(seed)
    names = ["root"] + [f"r{i}" for i in range(1, rnd.randint(1, 4))]
    lines = []
    for name in names:
        alts = [rnd.choice(_RULE_BODIES).format(r=rnd.choice(names)) for _ in range(3)]
        lines.append(f"{name} ::= " + " | ".join(alts) + ' | "z"')
    grammar = parse_gbnf("\n".join(lines))

    def compile_it() -> None:
        for expand in (True, False):
            with contextlib.suppress(FormcastError):
                rules_mod.compile_grammar_automaton(grammar, expand_calls=expand, minimize=False)

    assert _check(_recorded_calls(compile_it)) > 0


def test_real_json_schemas_build_the_reference_nfa() -> None:
    """Rule bodies and sub-automata of real JSON schemas (MaskBench; the kernels' schema
    without it): shared fragments, chained concatenations, literal tails."""
    from _native_kernel import REAL_SCHEMA
    from formcast.frontends.jsonschema.api import schema_to_grammar
    from formcast.ir.nodes import JSON_HINTS

    schemas: list[Any] = [REAL_SCHEMA]
    if _MASKBENCH.is_dir():
        files = sorted(_MASKBENCH.glob("*.json"))
        for f in random.Random(13).sample(files, min(30, len(files))):
            schemas.append(json.loads(f.read_text(encoding="utf-8")).get("schema"))

    def compile_all() -> None:
        for schema in schemas:
            try:
                grammar = schema_to_grammar(schema, marks=[])[0]
                rules_mod.compile_grammar_automaton(
                    grammar, expand_calls=JSON_HINTS.expand_calls, minimize=JSON_HINTS.minimize
                )
            except (FormcastError, RecursionError, ValueError):
                pass

    calls = _recorded_calls(compile_all)
    assert _check(calls) >= 20
