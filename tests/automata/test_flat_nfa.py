"""The Thompson construction's flat NFA (:class:`~formcast.automata.nfa.FlatNFA`) is the NFA the
per-state lists describe, and every DFA built from it is the DFA the general construction builds.

``thompson_nfa`` appends its states and edges to flat lists of ints (no list per state, no
tuple per edge); the compiled build's kernel reads them as they are (``determinize_flat``),
the Python path converts them (``FlatNFA.to_lists``).  Checked here:

* ``to_lists`` keeps every edge, each state's in insertion order; the fuel and the
  ``max_nfa_states`` error of ``new_state``/``new_states`` are :class:`NFA`'s;
* the oracle: for random NFAs, random grammars and the rule bodies of real JSON schemas
  (MaskBench, where the shared data is present), ``nfa_to_dfa`` of the flat NFA through the
  kernel gives the same table, accepting states, start, rule-call table and fuel as the
  Python reference construction of its lists (minimized and not), and ``determinize_flat``
  returns what ``determinize`` returns for the lists, including where a fuel or state limit
  stops it;
* corrupt flat inputs raise ValueError/TypeError (never a read out of bounds).
"""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import pytest

import formcast.automata.dfa as dfa_mod
import formcast.automata.regular as regular_mod
import formcast.automata.rules as rules_mod
from conftest import SHARED_DATA
from formcast.automata.dfa import nfa_to_dfa
from formcast.automata.nfa import NFA, FlatNFA
from formcast.errors import FormcastError, LimitExceededError
from formcast.frontends.gbnf import parse_gbnf
from formcast.limits import CompileLimits, WorkBudget

KERNEL = dfa_mod._KERNEL
needs_kernel = pytest.mark.skipif(
    KERNEL is None or not hasattr(KERNEL, "determinize_flat"),
    reason="the C kernel is not built (pure-Python package)",
)
_BYTES = [0, 9, 10, 32, 34, 48, 57, 65, 97, 122, 127, 128, 191, 192, 255]
_MASKBENCH = SHARED_DATA / "JSONSchemaBench" / "maskbench" / "data"


def _random_flat(rnd: random.Random) -> FlatNFA:
    """An arbitrary flat NFA: overlapping ranges, epsilon cycles, calls, unreachable and dead
    states, each state's edges interleaved with other states' in the flat lists."""
    nfa = FlatNFA()
    n = rnd.randint(2, 24)
    nfa.new_states(n)
    for _ in range(rnd.randint(0, 3 * n)):
        a, b = sorted((rnd.choice(_BYTES), rnd.choice(_BYTES)))
        if rnd.random() < 0.3:
            b = a
        nfa.byte_edge(rnd.randrange(n), a, b, rnd.randrange(n))
    for _ in range(rnd.randint(0, 2 * n)):
        nfa.eps_edge(rnd.randrange(n), rnd.randrange(n))
    if rnd.random() < 0.5:
        rules = rnd.sample(range(1, 40), rnd.randint(1, 4))
        for _ in range(rnd.randint(1, n)):
            nfa.ref_edge(rnd.randrange(n), rnd.choice(rules), rnd.randrange(n))
    nfa.start = rnd.randrange(n)
    nfa.accept = rnd.randrange(n)
    return nfa


def _fields(nfa: NFA | FlatNFA, kernel: Any, minimize: bool, fuel: int = 10**12) -> Any:
    """``nfa_to_dfa`` with ``kernel`` (None: the Python path): the DFA's fields and the fuel,
    or the error's limit name and the fuel."""
    budget = WorkBudget(fuel)
    saved = dfa_mod._KERNEL
    dfa_mod._KERNEL = kernel
    try:
        dfa = nfa_to_dfa(nfa, CompileLimits(), minimize=minimize, budget=budget)
    except LimitExceededError as e:
        return "error", e.limit, budget.used
    finally:
        dfa_mod._KERNEL = saved
    ref = None if dfa.ref_table is None else dfa.ref_table.tolist()
    fields = (dfa.table.tolist(), dfa.accepting.tolist(), dfa.start, dfa.ref_rules, ref)
    return "dfa", fields, budget.used


def _oracle(flat: FlatNFA, minimize: bool, fuel: int = 10**12) -> None:
    """The flat NFA through the kernel (when built) and through the pure path of its lists
    give the same outcome."""
    want = _fields(flat.to_lists(), None, minimize, fuel)
    assert _fields(flat, None, minimize, fuel) == want  # (the Python path converts it)
    if KERNEL is not None:
        assert _fields(flat, KERNEL, minimize, fuel) == want


@pytest.mark.parametrize("seed", range(40))
def test_to_lists_keeps_every_edge_in_insertion_order(seed: int) -> None:
    rnd = random.Random(seed)
    flat = _random_flat(rnd)
    lists = flat.to_lists()
    assert len(lists.eps) == len(lists.edges) == len(lists.refs) == flat.n
    for s in range(flat.n):
        assert lists.eps[s] == [b for a, b in zip(flat.x_src, flat.x_tgt) if a == s]
        assert lists.edges[s] == [
            (lo, hi, b)
            for a, lo, hi, b in zip(flat.e_src, flat.e_lo, flat.e_hi, flat.e_tgt)
            if a == s
        ]
        assert lists.refs[s] == [
            (r, b) for a, r, b in zip(flat.r_src, flat.r_rule, flat.r_tgt) if a == s
        ]
    assert (flat.eps, flat.edges, flat.refs) == (lists.eps, lists.edges, lists.refs)
    assert (lists.start, lists.accept) == (flat.start, flat.accept)


def test_new_state_charges_what_the_list_nfa_charges() -> None:
    rnd = random.Random(7)
    steps = [rnd.choice([0, 0, 0, 1, 3, 70]) for _ in range(400)]
    outcomes = []
    for make in (lambda b: NFA(limit=900, budget=b), lambda b: FlatNFA(limit=900, budget=b)):
        budget = WorkBudget(10**9)
        nfa = make(budget)
        trace = []
        try:
            for k in steps:
                trace.append(nfa.new_state() if k == 0 else nfa.new_states(k))
                trace.append(budget.used)
        except LimitExceededError as e:
            trace.append(e.limit)
        outcomes.append(trace)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][-1] == "max_nfa_states"


@pytest.mark.parametrize("seed", range(150))
def test_random_flat_nfas_give_the_reference_dfa(seed: int) -> None:
    rnd = random.Random(seed)
    flat = _random_flat(rnd)
    _oracle(flat, minimize=bool(seed % 2))
    kind, _, used = _fields(flat.to_lists(), None, False)
    if kind == "dfa" and used > 1:
        for fuel in (1, used // 2, used - 1):
            _oracle(flat, minimize=False, fuel=fuel)


@needs_kernel
@pytest.mark.parametrize("seed", range(60))
def test_determinize_flat_returns_what_determinize_returns(seed: int) -> None:
    """The two entry points on the same NFA, also stopped by fuel and ``max_states``."""
    rnd = random.Random(500 + seed)
    flat = _random_flat(rnd)
    lists = flat.to_lists()
    for max_states, units in (
        (10**6, 10**12),
        (rnd.randint(1, 6), 10**12),
        (10**6, rnd.randint(1, 900)),
    ):
        rest = (max_states, 100, units, float("inf"))
        got = KERNEL.determinize_flat(
            flat.n, flat.e_src, flat.e_lo, flat.e_hi, flat.e_tgt, flat.x_src, flat.x_tgt,
            flat.r_src, flat.r_rule, flat.r_tgt, flat.start, flat.accept, *rest,
        )  # fmt: skip
        want = KERNEL.determinize(
            lists.eps, lists.edges, lists.refs, flat.start, flat.accept, *rest
        )
        assert got == want


def _recorded_nfas(action: Any) -> list[FlatNFA]:
    """The flat NFAs ``action``'s compiles build (rules and sub-automata), with the
    process-wide automaton caches emptied first so that every one is built."""
    seen: list[FlatNFA] = []
    original = regular_mod.thompson_nfa

    def record(*args: Any, **kwargs: Any) -> FlatNFA:
        nfa = original(*args, **kwargs)
        seen.append(nfa)
        return nfa

    rules_mod.RULE_DFA_CACHE.clear()
    regular_mod.SUB_DFA_CACHE.clear()
    regular_mod.thompson_nfa = record  # type: ignore[assignment]
    try:
        action()
    finally:
        regular_mod.thompson_nfa = original  # type: ignore[assignment]
    return seen


_RULE_BODIES = [
    '"a" {r} "b"',
    "[0-9]+ ({r} | [a-z])*",
    '"(" {r} ("," {r})* ")" | [xyz]',
    '{r} "+" {r} | "n" [0-9]*',
    '"[" ({r} ("," {r})*)? "]" | "\\"" [^"]* "\\""',
    "[a-c] {r}? [d-f] | [\u00e9-\u4e2d]{{2,4}}",
]


@pytest.mark.parametrize("seed", range(30))
def test_random_grammars_rule_automata_match_the_reference(seed: int) -> None:
    rnd = random.Random(seed)
    names = ["root"] + [f"r{i}" for i in range(1, rnd.randint(1, 4))]
    lines = []
    for name in names:
        alts = [rnd.choice(_RULE_BODIES).format(r=rnd.choice(names)) for _ in range(2)]
        lines.append(f"{name} ::= " + " | ".join(alts) + ' | "z"')
    grammar = parse_gbnf("\n".join(lines))

    def compile_it() -> None:
        with contextlib.suppress(FormcastError):
            rules_mod.compile_grammar_automaton(grammar)

    nfas = _recorded_nfas(compile_it)
    assert nfas
    for nfa in nfas:
        _oracle(nfa, minimize=False)
        _oracle(nfa, minimize=True)


def test_real_json_schema_rule_automata_match_the_reference() -> None:
    """The rule bodies of real JSON schemas (MaskBench; the kernels' own schema without it)."""
    from _native_kernel import REAL_SCHEMA
    from formcast.frontends.jsonschema.api import schema_to_grammar
    from formcast.ir.nodes import JSON_HINTS

    schemas: list[Any] = [REAL_SCHEMA]
    if _MASKBENCH.is_dir():
        files = sorted(_MASKBENCH.glob("*.json"))
        for f in random.Random(11).sample(files, min(25, len(files))):
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

    nfas = _recorded_nfas(compile_all)
    assert len(nfas) >= 5
    assert any(nfa.r_src for nfa in nfas)  # rule bodies with calls among them
    for nfa in nfas:
        _oracle(nfa, minimize=False)
    for nfa in nfas[::4]:
        _oracle(nfa, minimize=True)


@needs_kernel
def test_corrupt_flat_inputs_raise() -> None:
    def run(
        n: int = 2, e: Any = ([0], [97], [98], [1]), x: Any = ([], []), r: Any = ([], [], [])
    ) -> Any:
        return KERNEL.determinize_flat(n, *e, *x, *r, 0, 1, 10, 100, 10**9, float("inf"))

    assert run()[0][0] == 0  # the well-formed one
    with pytest.raises(ValueError, match="e_tgt 5 is out of range"):
        run(e=([0], [0], [0], [5]))
    with pytest.raises(ValueError, match="e_hi 300 is out of range"):
        run(e=([0], [0], [300], [1]))
    with pytest.raises(ValueError, match="empty"):
        run(e=([0], [9], [3], [1]))
    with pytest.raises(ValueError, match="x_src -1 is out of range"):
        run(x=([-1], [0]))
    with pytest.raises(ValueError, match="r_tgt 2 is out of range"):
        run(r=([0], [4], [2]))
    with pytest.raises(ValueError, match="states"):
        run(n=0)
    with pytest.raises(TypeError, match="e_lo must be a list of 1 ints"):
        run(e=([0], [97, 98], [98], [1]))
    with pytest.raises(TypeError):
        run(e=([0], [None], [98], [1]))
    with pytest.raises(TypeError):
        run(e=((0,), [97], [98], [1]))
    with pytest.raises(ValueError, match="start or accepting"):
        KERNEL.determinize_flat(
            2, [], [], [], [], [], [], [], [], [], 0, 2, 10, 100, 10**9, float("inf")
        )
