"""The compiled build's subset construction and Hopcroft minimization
(``formcast.automata._subset``) build the DFAs the Python path builds.

``nfa_to_dfa`` runs its subset construction, live-state pruning and minimization in C when the
compiled build is installed (docs/native.md); here every construction is made both ways (the
kernel switched off for the Python reference) and must give the same DFA (the same table,
accepting states, start, rule-call table: the same minimal DFA with the same state numbers),
charge the same fuel, and stop with the same error at the same fuel when a limit is hit:
random NFAs (epsilon cycles, overlapping byte ranges, rule references, unreachable and dead
states), random regular expressions and grammars, fuel limits and ``max_dfa_states`` that stop
the construction at every state, and the automata met compiling real inputs (a JSON schema,
the builtin JSON grammar, llama.cpp's C grammar).  The Hopcroft kernel alone gives the
coarsest partition the Python one gives, numbered breadth-first; corrupt inputs raise
ValueError (never a read out of bounds).

In the pure-Python package the kernel is absent and these tests skip;
``tests/project/test_native_build.py`` runs tests/automata against the compiled copy, where
``FORMCAST_EXPECT_NATIVE=1`` makes a missing kernel a failure.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formcast.automata.dfa as dfa_mod
import formcast.automata.regular as regular_mod
import formcast.automata.rules as rules_mod
from _native_kernel import compile_real_inputs, kernel_or_skip
from automata_helpers import random_nfa
from conftest import SHARED_DATA
from formcast.automata.dfa import ByteDFA, nfa_to_dfa
from formcast.automata.nfa import NFA
from formcast.automata.regular import build_nfa
from formcast.errors import LimitExceededError
from formcast.frontends.gbnf import parse_gbnf
from formcast.frontends.regex import parse_regex
from formcast.limits import CompileLimits, WorkBudget

KERNEL = kernel_or_skip(dfa_mod._KERNEL, "formcast.automata._subset")

_Outcome = tuple[str, Any, int]


def _run(nfa: NFA, limits: CompileLimits, minimize: bool, fuel: int, kernel: Any) -> _Outcome:
    """``nfa_to_dfa`` with ``kernel`` (None: the Python path): ("dfa", fields, fuel used) or
    ("error", (type, limit name), fuel used)."""
    budget = WorkBudget(fuel)
    dfa_mod._KERNEL = kernel
    try:
        dfa = nfa_to_dfa(nfa, limits, minimize=minimize, budget=budget)
    except LimitExceededError as e:
        return "error", (type(e).__name__, e.limit), budget.used
    finally:
        dfa_mod._KERNEL = KERNEL
    return "dfa", _fields(dfa), budget.used


def _fields(dfa: ByteDFA) -> tuple[Any, ...]:
    ref = None if dfa.ref_table is None else dfa.ref_table.tolist()
    return dfa.table.tolist(), dfa.accepting.tolist(), dfa.start, dfa.ref_rules, ref


def _both(
    nfa: NFA,
    limits: CompileLimits | None = None,
    minimize: bool = True,
    fuel: int = 10**12,
) -> _Outcome:
    limits = limits or CompileLimits()
    py = _run(nfa, limits, minimize, fuel, None)
    c = _run(nfa, limits, minimize, fuel, KERNEL)
    assert c[0] == py[0], (py[0], c[0], py[1] if py[0] == "error" else c[1])
    assert c[2] == py[2], f"fuel: Python {py[2]}, C {c[2]}"
    assert c[1] == py[1]
    return py


# -- random NFAs ----------------------------------------------------------------------------
def _random_nfa(rnd: random.Random) -> NFA:
    """An arbitrary NFA: overlapping byte ranges, epsilon cycles, rule references, states
    that reach nothing and states nothing reaches."""
    return random_nfa(rnd)


@pytest.mark.parametrize("seed", range(300))
def test_random_nfas_give_the_same_dfa_and_fuel(seed: int) -> None:
    rnd = random.Random(seed)
    nfa = _random_nfa(rnd)
    _both(nfa, minimize=bool(seed % 2))


@pytest.mark.parametrize("seed", range(60))
def test_fuel_and_state_limits_stop_both_paths_alike(seed: int) -> None:
    """A fuel limit or ``max_dfa_states`` that stops the construction at every state: the same
    error (or DFA) and the same fuel charged."""
    rnd = random.Random(1000 + seed)
    nfa = _random_nfa(rnd)
    kind, _, used = _both(nfa)
    if kind != "dfa" or used == 0:
        return
    for fuel in sorted({1, used // 3, used // 2, used - 1, used, rnd.randrange(used + 1)}):
        _both(nfa, fuel=fuel)
    for states in range(1, 8):
        _both(nfa, CompileLimits(max_dfa_states=states))


def test_a_past_deadline_stops_the_kernel() -> None:
    pattern = "(?:[a-z]+[0-9]*|[a-f]{3}x)*(?:y[b-q]+|z)" * 6
    nfa = build_nfa(parse_regex(pattern))
    budget = WorkBudget(10**12, seconds=0.0)
    with pytest.raises(LimitExceededError) as err:
        nfa_to_dfa(nfa, budget=budget)
    assert err.value.limit == "max_compile_seconds"


# -- regular expressions and grammars -------------------------------------------------------
_ATOMS = ["a", "b", "0", "é", "中", "[ab]", "[^a]", r"\d", ".", "[a-c0]", "(?:)", "[a-zA-Z_]"]


@st.composite
def small_regex(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(_ATOMS))
    kind = draw(st.sampled_from(["cat", "alt", "rep"]))
    if kind == "cat":
        return "".join(draw(st.lists(small_regex(depth - 1), min_size=2, max_size=3)))
    if kind == "alt":
        return (
            "(?:" + "|".join(draw(st.lists(small_regex(depth - 1), min_size=2, max_size=3))) + ")"
        )
    q = draw(st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,}", "{3,5}"]))
    return "(?:" + draw(small_regex(depth - 1)) + ")" + q


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=small_regex(), minimize=st.booleans())
def test_random_regexes_give_the_same_dfa(pattern: str, minimize: bool) -> None:
    _both(build_nfa(parse_regex(pattern)), minimize=minimize)


_RULE_BODIES = [
    '"a" {r} "b"',
    "[0-9]+ ({r} | [a-z])*",
    '"(" {r} ("," {r})* ")" | [xyz]',
    '{r} "+" {r} | "n" [0-9]*',
    '"[" ({r} ("," {r})*)? "]" | "\\"" [^"]* "\\""',
    "[a-c] {r}? [d-f]",
]


@pytest.mark.parametrize("seed", range(40))
def test_random_grammars_compile_to_the_same_rule_automata(seed: int) -> None:
    """Every automaton a grammar's compile builds (rules and embedded sub-automata), built
    both ways from the very NFA the compile made (minimized and not)."""
    rnd = random.Random(seed)
    n_rules = rnd.randint(1, 4)
    names = ["root"] + [f"r{i}" for i in range(1, n_rules)]
    lines = []
    for name in names:
        alts = [
            rnd.choice(_RULE_BODIES).format(r=rnd.choice(names)) for _ in range(rnd.randint(1, 2))
        ]
        lines.append(f"{name} ::= " + " | ".join(alts) + ' | "z"')
    grammar = parse_gbnf("\n".join(lines))
    seen = _record_constructions(lambda: _compile_grammar(grammar))
    assert seen
    for nfa, minimize in seen:
        _both(nfa, minimize=minimize)


def _compile_grammar(grammar: Any) -> None:
    with contextlib.suppress(LimitExceededError):
        rules_mod.compile_grammar_automaton(grammar)


class _Recorder:
    """A stand-in for the kernel that records the NFA of every construction (the compiled
    build's modules call each other directly, so the kernel hook is where to listen)."""

    def __init__(self) -> None:
        self.seen: list[NFA] = []

    def determinize(
        self, eps: Any, edges: Any, refs: Any, start: int, accept: int, *rest: Any
    ) -> Any:
        nfa = NFA(eps=[list(x) for x in eps], edges=[list(x) for x in edges])
        nfa.refs = [list(x) for x in refs]
        nfa.start, nfa.accept = start, accept
        self.seen.append(nfa)
        return KERNEL.determinize(eps, edges, refs, start, accept, *rest)

    def hopcroft(self, *args: Any) -> Any:
        return KERNEL.hopcroft(*args)


def _record_constructions(action: Any) -> list[tuple[NFA, bool]]:
    """The NFAs that ``action`` determinizes, with the process-wide automaton caches emptied
    first (so every one is built), each to be built minimized and not."""
    recorder = _Recorder()
    rules_mod.RULE_DFA_CACHE.clear()
    regular_mod.SUB_DFA_CACHE.clear()
    dfa_mod._KERNEL = recorder
    try:
        action()
    finally:
        dfa_mod._KERNEL = KERNEL
    return [(nfa, minimize) for nfa in recorder.seen for minimize in (True, False)]


def test_real_inputs_give_the_same_automata() -> None:
    """The automata of a JSON schema, the builtin JSON grammar and llama.cpp's c.gbnf (where
    the shared data is present)."""
    seen = _record_constructions(compile_real_inputs)
    c_grammar = SHARED_DATA / "llama.cpp-grammars" / "grammars" / "c.gbnf"
    if c_grammar.is_file():
        text = c_grammar.read_text(encoding="utf-8")
        seen += _record_constructions(lambda: _compile_grammar(parse_gbnf(text)))
    assert len(seen) >= 5
    assert max(len(nfa.eps) for nfa, _ in seen) > 500
    for nfa, minimize in seen:
        _both(nfa, minimize=minimize)


# -- the Hopcroft kernel alone --------------------------------------------------------------
def _canonical(part: np.ndarray) -> list[int]:
    seen: dict[int, int] = {}
    return [seen.setdefault(int(b), len(seen)) for b in part]


@pytest.mark.parametrize("seed", range(80))
def test_hopcroft_kernel_gives_the_coarsest_partition(seed: int) -> None:
    rnd = np.random.default_rng(seed)
    n = int(rnd.integers(2, 60))
    k = int(rnd.integers(1, 6))
    # few distinct rows, so that many states are equivalent
    table = rnd.integers(0, n, size=(n, k)).astype(np.int32)
    table[0] = 0
    if seed % 3 == 0:
        table[1:] = table[rnd.integers(1, n, size=n - 1)]
        table[table >= n] = 0
    accepting = rnd.random(n) < 0.3
    accepting[0] = False
    want = dfa_mod._hopcroft_partition(table, accepting)
    got = np.empty(n, dtype=np.int64)
    KERNEL.hopcroft(np.ascontiguousarray(table), k, accepting, 1, got)
    assert _canonical(got) == _canonical(want)
    assert got[0] == 0
    assert sorted(set(got.tolist())) == list(range(int(got.max()) + 1))


def _determinize(eps: Any, edges: Any, refs: Any, start: int = 0, accept: int = 1) -> Any:
    return KERNEL.determinize(eps, edges, refs, start, accept, 10, 100, 10**9, float("inf"))


def test_corrupt_inputs_raise_value_or_type_error() -> None:
    e: list[list[Any]] = [[], []]
    assert _determinize(e, [[(97, 98, 1)], []], e)[0][0] == 0  # the well-formed one
    with pytest.raises(ValueError, match="edges 5 is out of range"):  # a missing state
        _determinize(e, [[(0, 0, 5)], []], e)
    with pytest.raises(ValueError, match="out of range"):  # not a byte
        _determinize(e, [[(0, 300, 1)], []], e)
    with pytest.raises(ValueError, match="out of range"):  # an empty range
        _determinize(e, [[(9, 3, 1)], []], e)
    with pytest.raises(ValueError, match="eps -1 is out of range"):
        _determinize([[-1], []], e, e)
    with pytest.raises(ValueError, match="refs 2 is out of range"):
        _determinize(e, e, [[(4, 2)], []])
    with pytest.raises(ValueError, match="start or accepting"):
        _determinize(e, e, e, start=2)
    with pytest.raises(TypeError, match="tuples of 3 ints"):
        _determinize(e, [[(0, 0)], []], e)
    with pytest.raises(TypeError, match="one list per state"):
        _determinize(e, [[]], e)
    with pytest.raises(TypeError, match="integer"):
        _determinize(e, [[(0, 0, "1")], []], e)
    table = np.array([[0], [7]], dtype=np.int32)
    with pytest.raises(ValueError, match="state it lacks"):
        KERNEL.hopcroft(table, 1, np.zeros(2, dtype=bool), 1, np.empty(2, dtype=np.int64))
    table = np.array([[1], [1]], dtype=np.int32)
    with pytest.raises(ValueError, match="state 0 is live"):
        KERNEL.hopcroft(table, 1, np.zeros(2, dtype=bool), 1, np.empty(2, dtype=np.int64))
