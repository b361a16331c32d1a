"""Context-free grammar IR → one byte DFA per rule, with rule-reference edges.

Each remaining rule's body becomes a :class:`ByteDFA` whose ``ref_table`` holds the transitions
taken after a call to another rule returns.  Before that, on the IR (passes of
:mod:`formcast.ir.passes`):

* **Inlining** (:func:`~formcast.ir.passes.inline_rules`). Rules that are not (mutually)
  recursive are substituted into their callers, so most of the grammar becomes plain byte
  transitions (a JSON string inside an object is bytes, not a call).  Only the start rule and
  recursive rules stay rules.
* **Outlining** (:func:`~formcast.ir.passes.outline_repeats`): long bounded repeats become
  *counted rules*, large repeated items rules of their own.
* **Productivity.** References to rules that can never finish are removed; an unproductive start
  rule raises :class:`UnsatisfiableGrammarError` (e.g. ``root ::= "a" root``).
* **Left recursion** (a rule reachable from itself without consuming a byte) is first
  eliminated on the IR (:mod:`formcast.ir.left_recursion`: same language, no left
  recursion); what is left of it after that would be a bug and is rejected with
  :class:`UnsupportedFeatureError` naming the rule.

Rule DFAs are shared process-wide through :data:`RULE_DFA_CACHE`.  The byte-level analyses of
the result (FIRST / FOLLOW) are :mod:`.analysis`, computed once per automaton
(:attr:`GrammarAutomaton.analysis`); the call-expanded lexer is :mod:`.lexer`.

Lifetime: per grammar; the result is immutable (its analysis is memoized on first use).  Work
is bounded by :class:`CompileLimits`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from .._native import interpreted_class
from ..cache import LruCache
from ..errors import LimitExceededError, UnsatisfiableGrammarError, UnsupportedFeatureError
from ..ir.left_recursion import eliminate_left_recursion
from ..ir.nodes import (
    NOTHING,
    Alt,
    Concat,
    Grammar,
    Node,
    Repeat,
    RuleRef,
    iter_nodes,
    node_copies,
    node_refs,
    node_size,
    substitute,
)
from ..ir.passes import always_consumes, inline_rules, outline_repeats, rule_fixpoint, rule_sccs
from ..limits import (
    CACHE_ENTRY_BYTES,
    CachedWork,
    CacheLimits,
    CompileLimits,
    HashedKey,
    WorkBudget,
    cached_work,
    check_deadline,
)
from .analysis import GrammarAnalysis, epsilon_reach, nullable_rules
from .dfa import DEAD, ByteDFA, nfa_to_dfa
from .regular import SUB_DFA_HIT_UNITS, SubDfaMemo, build_nfa, embedded_states

# the compiled build's C kernel (the per-rule flags, :func:`_rule_flags`, and the moves of the
# productivity search, :func:`_moves`, in one C pass each); absent from the pure-Python
# package, where numpy makes the same (tests set it to None for the reference:
# tests/automata/test_rule_flags.py)
_KERNEL: Any
try:
    from . import _subset as _KERNEL  # type: ignore[attr-defined,no-redef]
except ImportError:  # pragma: no cover - depends on the build
    _KERNEL = None

__all__ = [
    "RULE_DFA_CACHE",
    "GrammarAutomaton",
    "compile_grammar_automaton",
    "has_counted_repeat",
]

# rule bodies up to this many IR nodes are cached up to their callees' names
# (:func:`_canonical_body`); a larger one is keyed by itself
_CANONICAL_MAX_NODES = 200
# inlining stops when an inlined body would exceed this many IR nodes per reference
_INLINE_MAX_NODES = 20_000
# rules used more than once are inlined only up to this size (a string, a number, a short key
# set); a larger shared definition stays one rule, compiled once.  Was 300: inlining a
# 100-300-node definition into each of its callers multiplied the subset constructions of large
# configuration schemas (SchemaStore app-config 8.13M -> 6.36M fuel units, venvironment v4.2
# 7.65M -> 5.98M, partial-poe past the DFA-state limit -> 4.79M; held-out seed 2: 99 -> 103
# of 120 compile)
_INLINE_SHARED_MAX_NODES = 20
# a bounded repeat whose copies would exceed this many IR nodes calls its item as a rule
_OUTLINE_MIN_NODES = 2_000
# ... and whose item has at least this many IR nodes (a string character stays inline: a call
# per character would make every multi-character token cross a return)
_OUTLINE_MIN_ITEM = 60
# a bounded repeat of at least this many copies (of an item that always consumes a byte) becomes
# a *counted rule*: the item's automaton once, the iteration count kept in the parser frame,
# so ``maxLength: 100000`` costs what ``maxLength: 64`` costs
_COUNT_MIN_COPIES = 64
# recursive rules up to this size are expanded once at their call sites
_EXPAND_MAX_NODES = 400
_EXPAND_ROUNDS = 3
_EXPANDED_MAX_NODES = 4_000


@interpreted_class
@dataclass(frozen=True, eq=False)
class GrammarAutomaton:
    """Per-rule byte DFAs of a grammar (rule 0 is the start rule).

    Attributes:
        names: rule names by id.
        dfas: one :class:`ByteDFA` per rule (``ref_rules``/``ref_table`` give call edges).
        refs: per rule, per state: tuple of ``(callee rule id, return state)``.
        boundary: per rule, ``bool[n_states]``: the state can call a rule or return.
        tail: per rule, per state: True when the state is accepting and has no outgoing edge
            (a call whose return lands there is a tail call).
        counts: per rule, ``None`` or ``(lo, hi)`` for a *counted rule*: the rule's DFA is one
            iteration of its item, repeated ``lo`` to ``hi`` times (``hi`` None: unbounded); an
            accepting state ends an iteration.  The parser frame carries the count.
    """

    names: tuple[str, ...]
    dfas: tuple[ByteDFA, ...]
    refs: tuple[tuple[tuple[tuple[int, int], ...], ...], ...]
    boundary: tuple[np.ndarray, ...]
    tail: tuple[np.ndarray, ...]
    counts: tuple[tuple[int, int | None] | None, ...] = ()

    def count_of(self, rule: int) -> tuple[int, int | None] | None:
        """``(lo, hi)`` of a counted rule, None for an ordinary rule.  O(1)."""
        return self.counts[rule] if self.counts else None

    @property
    def is_regular(self) -> bool:
        return len(self.dfas) == 1 and not self.dfas[0].ref_rules

    @property
    def num_states(self) -> int:
        return sum(d.num_states for d in self.dfas)

    @property
    def analysis(self) -> GrammarAnalysis:
        """Nullable rules, FIRST / FOLLOW and restart bytes (:class:`GrammarAnalysis`),
        computed on first use and kept (two threads racing compute equal values; one wins)."""
        found: GrammarAnalysis | None = self.__dict__.get("_analysis")
        if found is None:
            found = GrammarAnalysis.of(self)
            object.__setattr__(self, "_analysis", found)
        return found


# serialized with its fields (formcast.index.persist): the analysis cached by ``analysis``.
# Set after the class: in a mypyc-compiled module a class attribute of a dataclass becomes a
# field (the two builds' serialized layouts would differ)
setattr(GrammarAutomaton, "_persist_extra", ("_analysis",))  # noqa: B010 (no attribute for mypy)


def has_counted_repeat(node: Node) -> bool:
    """True when compiling ``node`` would make a counted rule (a long bounded repeat), so a
    regular expression needs the pushdown program rather than one DFA.  O(tree size)."""
    if node_copies(node) < _COUNT_MIN_COPIES:
        return False
    memo: dict[int, tuple[Node, bool]] = {}
    return any(
        isinstance(n, Repeat)
        and max(n.min, n.max or n.min) >= _COUNT_MIN_COPIES
        and always_consumes(n.item, memo)
        for n in iter_nodes(node)
    )


def compile_grammar_automaton(
    grammar: Grammar,
    limits: CompileLimits | None = None,
    *,
    budget: WorkBudget | None = None,
    expand_calls: bool = True,
    minimize: bool = True,
) -> GrammarAutomaton:
    """Compile a grammar IR to per-rule byte DFAs (see the module docstring).

    ``budget``: the compile's fuel (and deadline), shared with later stages; a fresh one from
    ``limits`` by default.  ``expand_calls``: expand small recursive rules into their callers
    (fewer tokens cross a call boundary, so cold masks verify fewer candidates; it copies the
    callee into every call site, which costs compile time where the callee is called from
    many places — JSON Schema's "any value" — so the JSON Schema front-end turns it off).
    ``minimize``: minimize each rule's DFA.  The NFAs share the tails of concatenations and
    literals, so their DFAs come out close to minimal (JSON Schema objects: within about 15%),
    and the token index merges states with equal futures anyway (bounded equivalence): the
    JSON Schema front-end skips minimization, which measured faster end to end.
    """
    limits = limits or CompileLimits()
    budget = budget or limits.budget()
    rewritten = eliminate_left_recursion(grammar)
    if rewritten is not grammar:
        # the rewrite leaves mutually recursive rules under stars; expanding them into their
        # callers multiplies the ambiguity that subset construction has to resolve (random
        # ambiguous grammars went from milliseconds to seconds), so they are left as calls
        grammar, expand_calls = rewritten, False
    names, bodies = inline_rules(
        grammar,
        expand_rounds=_EXPAND_ROUNDS if expand_calls else 0,
        inline_max_nodes=_INLINE_MAX_NODES,
        inline_shared_max_nodes=_INLINE_SHARED_MAX_NODES,
        expand_max_nodes=_EXPAND_MAX_NODES,
        expanded_max_nodes=_EXPANDED_MAX_NODES,
    )
    count_by_name = outline_repeats(
        names,
        bodies,
        count_min_copies=_COUNT_MIN_COPIES,
        outline_min_nodes=_OUTLINE_MIN_NODES,
        outline_min_item=_OUTLINE_MIN_ITEM,
    )
    # the terminal rules (regular lexemes: a JSON key, string or number) are minimized
    # whatever ``minimize`` says (:func:`_minimized_rules`)
    minimized = _minimized_rules(grammar, names, minimize)
    # productivity fixpoint: drop references to rules that can never finish
    sub_dfas: SubDfaMemo = {}  # shared by every rule's NFA
    limits_hash = hash(limits)  # (an interpreted dataclass hash: once, not per rule)
    while True:
        ids = {n: i for i, n in enumerate(names)}
        dfas = []
        for n in names:
            body = bodies[n]
            dead = {r for r in node_refs(body) if r not in ids}
            if dead:
                body = substitute(body, dict.fromkeys(dead, NOTHING))
                bodies[n] = body
            dfas.append(
                _rule_dfa(body, ids, names, limits, budget, sub_dfas, n in minimized, limits_hash)
            )
        new_productive = {names[r] for r in _productive_rules(dfas)}
        if grammar.start not in new_productive:
            raise UnsatisfiableGrammarError(
                f"the start rule {grammar.start!r} can never finish: every derivation "
                'needs infinitely many steps (e.g. root ::= "a" root)'
            )
        if new_productive == set(names):
            break
        names = [n for n in names if n in new_productive]
        bodies = {n: bodies[n] for n in names}
    total = sum(d.num_states for d in dfas)
    if total > limits.max_dfa_states:
        raise LimitExceededError("max_dfa_states", limits.max_dfa_states, f"grammar has {total}")
    refs: list[tuple[tuple[tuple[int, int], ...], ...]] = []
    boundary: list[np.ndarray] = []
    tail: list[np.ndarray] = []
    counts = tuple(count_by_name.get(name) for name in names)
    for r, dfa in enumerate(dfas):
        check_deadline()
        bnd, tl, per_state = _rule_flags(dfa, counts[r] is not None)
        refs.append(per_state)
        boundary.append(bnd)
        tail.append(tl)
    auto = GrammarAutomaton(
        names=tuple(names),
        dfas=tuple(dfas),
        refs=tuple(refs),
        boundary=tuple(boundary),
        tail=tuple(tail),
        counts=counts if any(c is not None for c in counts) else (),
    )
    _check_left_recursion(auto)
    return auto


def _minimized_rules(grammar: Grammar, names: list[str], minimize: bool) -> set[str]:
    """The rules of ``names`` whose DFAs are minimized: all with ``minimize``, else the
    grammar's terminal rules (:attr:`~formcast.ir.nodes.Rule.terminal`: regular lexemes, a
    JSON key, string or number, small).  Their NFAs copy a character's states at each place
    a branch leaves a shared tail (the undeclared keys' trie complement: the partial UTF-8
    and escape states of its first free character and of the free loop, once each), so
    their subset DFAs come out up to ~2x their minimal ones (MaskBench: key rules 13.7k
    states, 10.6k minimal); every state of a rule's DFA is a lexer state the token index
    may build, search and refine (a key's interior is one region of all its trie's states,
    docs/notes/interior37.md), and the minimization of a lexeme's DFA costs ~10-50 us in
    the compiled build.  The language, hence every mask, is the same.  O(rules)."""
    if minimize:
        return set(names)
    rules = grammar.rule_map()
    out: set[str] = set()
    for n in names:
        rule = rules.get(n)
        if rule is not None and rule.terminal:
            out.add(n)
    return out


def _rule_flags(
    dfa: ByteDFA, counted: bool
) -> tuple[np.ndarray, np.ndarray, tuple[tuple[tuple[int, int], ...], ...]]:
    """A rule automaton's boundary flags (accepting or calling; the dead state never), tail
    flags (accepting, no byte move and no call; none for a counted rule: its accepting states
    end an iteration, not the rule) and call edges per state (``(callee, return state)`` in
    ``ref_rules`` order).  The compiled build makes the three in one C pass
    (``_subset.rule_flags``: the numpy passes below cost ~10 us per rule, most of it call
    overhead); a kernel without it (a test's stand-in, an older build) takes numpy.  Fresh
    writable arrays either way.  O(states x 256)."""
    if _KERNEL is not None and hasattr(_KERNEL, "rule_flags"):
        ref_table = dfa.ref_table
        b, t, per = _KERNEL.rule_flags(
            np.ascontiguousarray(dfa.table, dtype=np.int32),
            np.ascontiguousarray(dfa.accepting, dtype=bool),
            None if ref_table is None else np.ascontiguousarray(ref_table, dtype=np.int32),
            tuple(dfa.ref_rules) if ref_table is not None else (),
            counted,
        )
        # (copied into numpy-owned arrays, ~1 us: with views of the kernel's bytearrays the
        # rest of TTFM measured slower; whether the copy helps is within the noise, see
        # docs/notes/thompson34.md)
        return np.frombuffer(b, dtype=bool).copy(), np.frombuffer(t, dtype=bool).copy(), per
    return _rule_flags_numpy(dfa, counted)


def _rule_flags_numpy(
    dfa: ByteDFA, counted: bool
) -> tuple[np.ndarray, np.ndarray, tuple[tuple[tuple[int, int], ...], ...]]:
    """:func:`_rule_flags` with numpy (the pure-Python package's path, and the reference of
    tests/automata/test_rule_flags.py).  O(states x 256)."""
    n_states: int = dfa.table.shape[0]
    acc = np.asarray(dfa.accepting, dtype=bool)
    bnd = acc.copy()
    # (DEAD is 0: a row has a move when any entry is nonzero; one pass, no temporary)
    has_out = dfa.table.any(axis=1)
    if dfa.ref_table is None:
        per_state: list[tuple[tuple[int, int], ...]] = [()] * n_states
    else:
        # the rows of the states that call (most states only read bytes), each converted
        # once, not one numpy scalar per (state, callee)
        ref_rules = dfa.ref_rules
        calls = cast(np.ndarray, dfa.ref_table.any(axis=1))
        calls[DEAD] = False
        callers: list[int] = np.flatnonzero(calls).tolist()
        ref_rows: list[list[int]] = dfa.ref_table[callers].tolist()
        per_state = [()] * n_states
        for s, row in zip(callers, ref_rows, strict=True):
            per_state[s] = tuple(
                (callee, t) for callee, t in zip(ref_rules, row, strict=True) if t != DEAD
            )
        bnd |= calls
        has_out |= calls
    bnd[DEAD] = False
    # an accepting state of a counted rule ends an iteration, not the rule: no tail calls;
    # else accepting and no move out (on bools ``acc > has_out`` is ``acc & ~has_out``)
    tail = np.zeros(n_states, dtype=bool) if counted else np.greater(acc, has_out)
    return bnd, tail, tuple(per_state)


#: Rule automata shared by every compile in the process: keyed by the rule body with its callees
#: as positions by first occurrence (:func:`_canonical_body`; IR nodes compare structurally
#: and cache their hash), the compile limits and whether it is minimized; values are
#: :class:`~formcast.limits.CachedWork` of (DFA, each call edge's callee as its position in the
#: body's order of first references, or its name for a large body), with the fuel of the
#: build's own work and the sub-automata it embedded, so a rule compiled in one grammar serves
#: another that numbers (or names) its rules differently, and rules equal up to their callees'
#: names share an entry.  What repeats across compiles is the boilerplate: JSON Schema's "any
#: value" rules, shared definitions, common string formats.  A key is the
#: :class:`~formcast.limits.HashedKey` of ``(canonical body, limits, minimize)``.
RULE_DFA_CACHE: LruCache[HashedKey, CachedWork[tuple[ByteDFA, tuple[int | str, ...]]]] = (
    LruCache(  # bounded in bytes: a state's transition row is 256 int32 (1 KiB)
        512,
        max_weight=CacheLimits().shared_cache_bytes,
        weight=lambda entry: (
            1024 * (entry.value[0].num_states + embedded_states(entry.children)) + CACHE_ENTRY_BYTES
        ),
    )
)


def _rule_dfa(
    body: Node,
    ids: dict[str, int],
    names: list[str],
    limits: CompileLimits,
    budget: WorkBudget,
    sub_dfas: SubDfaMemo,
    minimize: bool = True,
    limits_hash: int | None = None,
) -> ByteDFA:
    """One rule's DFA, from :data:`RULE_DFA_CACHE` when an equal body was compiled before.
    ``limits_hash``: ``hash(limits)``, computed once per compile by the caller (None: here).

    A hit is charged what building it would cost in this compile (its own work, plus the
    sub-automata it embeds that this compile has not built yet, which then become this
    compile's: :func:`~formcast.limits.cached_work`), so whether a compile fits the limits
    does not depend on what the process compiled before."""

    canon, callee_names = _canonical_body(body)
    slot = {name: i for i, name in enumerate(callee_names or ())}
    if limits_hash is None:
        limits_hash = hash(limits)

    def build() -> tuple[ByteDFA, tuple[int | str, ...]]:
        nfa = build_nfa(
            body, limits, rule_ids=ids, budget=budget, sub_dfas=sub_dfas, limits_hash=limits_hash
        )
        dfa = nfa_to_dfa(nfa, limits, minimize=minimize, budget=budget)
        if callee_names is None:
            return dfa, tuple(names[i] for i in dfa.ref_rules)
        return dfa, tuple(slot[names[i]] for i in dfa.ref_rules)

    # (hashed once: ``(canon, limits, minimize)``'s hash walks the canonical body and the
    # limits' interpreted dataclass hash on every dict operation of the lookup)
    key = HashedKey((canon, limits, minimize), hash((hash(canon), limits_hash, minimize)))
    dfa, callees = cached_work(
        RULE_DFA_CACHE,
        key,
        ("rule", key),
        build,
        sub_dfas,
        hit_units=SUB_DFA_HIT_UNITS,
        budget=budget,
        memoize=False,
    )
    if not callees:
        return dfa
    by_slot = callee_names or ()
    refs = tuple(ids[by_slot[c] if isinstance(c, int) else c] for c in callees)
    if refs == dfa.ref_rules:
        return dfa
    # (``dataclasses.replace`` made directly: it reads the class's fields on every call)
    return ByteDFA(dfa.table, dfa.accepting, dfa.start, refs, dfa.ref_table)


#: :func:`_canonical_body` by body (an equal body is usually the same interned object: a hit
#: is a lookup by identity, and the key it returns is the object the rule cache holds)
_CANONICAL_KEYS: LruCache[Node, tuple[Hashable, tuple[str, ...] | None]] = LruCache(4096)


def _canonical_body(body: Node) -> tuple[Hashable, tuple[str, ...] | None]:
    """The cache key of a rule's automaton: ``body`` with its rule references replaced by their
    positions in its order of first references, and the names they stand for.  Rules equal up
    to the names of their callees (the per-state rules of one string automaton emitted for
    several properties: ``strdfa_5_17`` and ``strdfa_10_17``) share one key; the automaton
    depends on the callees only through their call symbols, which the lookup maps back.

    The key is the body itself when it has no references, else nested tuples (in a
    :class:`~formcast.limits.HashedKey`, which hashes them once): ``(0, *items)``
    for a concatenation, ``(1, *items)`` an alternation, ``(2, item, min, max)`` a repeat, an
    ``int`` a reference, the IR node itself a subtree without references (its hash cached,
    compared by identity when interned).  No IR node is built (a composite node's summary of
    the rules under it costs O(references) per node).  O(nodes with references below them).
    A body of more than :data:`_CANONICAL_MAX_NODES` nodes is its own key and its callees are
    stored by name (``None``): the walk and the hashing of the key would cost more than the
    rare sharing saves (a large rule is rarely repeated under other names)."""
    if not node_refs(body):
        return body, ()
    if node_size(body) > _CANONICAL_MAX_NODES:
        return body, None
    found, got = _CANONICAL_KEYS.get(body)
    if found and got is not None:
        return got
    order: dict[str, int] = {}
    top = _canonical_form(body, order, {})
    # (a body with references below it is a composite: its form is a tuple, hashed once here)
    out = (HashedKey(top) if isinstance(top, tuple) else top, tuple(order))
    _CANONICAL_KEYS.put(body, out)
    return out


def _canonical_form(n: Node, order: dict[str, int], memo: dict[int, Hashable]) -> Hashable:
    """:func:`_canonical_body`'s form of ``n``: ``order`` maps the callee names met so far to
    their positions (extended here, in order of first reference), ``memo`` the forms of the
    composite nodes met so far by ``id`` (both owned by the one call of
    :func:`_canonical_body`).  A module function, not a closure: a recursive closure is a
    reference cycle (the function holds its cell, the cell the function), freed only by the
    cyclic collector, with ``order`` and ``memo`` (docs/notes/ttfm37.md)."""
    if type(n) is RuleRef:
        i = order.get(n.name)
        if i is None:
            i = order[n.name] = len(order)
        return i
    if not node_refs(n):
        return n
    k = id(n)
    got = memo.get(k)
    if got is not None:
        return got
    out: Hashable
    if isinstance(n, Repeat):
        out = (2, _canonical_form(n.item, order, memo), n.min, n.max)
    elif isinstance(n, Concat):
        out = (0, *[_canonical_form(x, order, memo) for x in n.items])
    elif isinstance(n, Alt):
        out = (1, *[_canonical_form(x, order, memo) for x in n.items])
    else:  # pragma: no cover - every node with references is one of the above
        raise TypeError(f"unexpected IR node {type(n).__name__}")
    memo[k] = out
    return out


def _productive_rules(dfas: list[ByteDFA]) -> set[int]:
    """Rules that can finish (:func:`~formcast.ir.passes.rule_fixpoint` on the automata).
    Every state of a rule DFA is live (it reaches acceptance through bytes and calls), so a
    rule whose callees are all productive (or that has none) can finish when its language is
    not empty: O(calls).  Others are searched (:func:`_can_finish`), again only when more of
    their callees became productive (their moves, :func:`_moves`, listed once)."""
    # callees before callers, so most rules are settled in O(calls)
    graph = {r: set(dfa.ref_rules) for r, dfa in enumerate(dfas)}
    order = [r for comp in rule_sccs(graph) for r in comp]
    callers: dict[int, set[int]] = {}
    for r, callees in graph.items():
        for c in callees:
            callers.setdefault(c, set()).add(r)
    moves: dict[int, _Moves] = {}

    def can_finish(r: int, productive: set[int]) -> bool:
        dfa = dfas[r]
        if all(c in productive for c in dfa.ref_rules):
            return dfa.start != DEAD
        found = moves.get(r)
        if found is None:
            found = moves[r] = _moves(dfa)
        return _can_finish(dfa, productive, found)

    return rule_fixpoint(order, callers, can_finish)


#: a rule DFA's moves for reachability searches (:func:`_moves`): byte successors as CSR
#: (offsets, targets), calls as CSR (offsets, call column, return state), accepting flags
_Moves = tuple[list[int], list[int], list[int], list[int], list[int], list[bool]]


def _moves(dfa: ByteDFA) -> _Moves:
    """Each state's byte successors (one per run of equal targets in its row; the dead state
    left out) and its calls (column of ``ref_rules``, return state), as CSR lists, with the
    accepting flags.  A few array passes over the table, then lists: the searches of
    :func:`_can_finish` are then plain integer work, however deep the automaton (a search
    level by level in numpy cost microseconds per level: milliseconds for the long key
    chains of large objects, searched once per round of the productivity fixpoint).  The
    compiled build lists them in one C pass (``_subset.rule_moves``); a kernel without it
    takes numpy (:func:`_moves_numpy`, the reference of tests/automata/test_rule_flags.py)."""
    if _KERNEL is not None and hasattr(_KERNEL, "rule_moves"):
        ref_table = dfa.ref_table
        b_off, b_tgt, r_off, r_col, r_tgt = _KERNEL.rule_moves(
            np.ascontiguousarray(dfa.table, dtype=np.int32),
            None if ref_table is None else np.ascontiguousarray(ref_table, dtype=np.int32),
        )
        return b_off, b_tgt, r_off, r_col, r_tgt, dfa.accepting.tolist()
    return _moves_numpy(dfa)


def _moves_numpy(dfa: ByteDFA) -> _Moves:
    """:func:`_moves` with numpy (the pure-Python package's path).  O(states x 256)."""
    table = dfa.table
    n: int = table.shape[0]
    runs = np.empty(table.shape, dtype=bool)
    runs[:, 0] = True
    np.not_equal(table[:, 1:], table[:, :-1], out=runs[:, 1:])
    runs &= table != DEAD
    rows, cols = np.nonzero(runs)  # (row-major: grouped by state, in order)
    b_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=b_off[1:])
    b_tgt = table[rows, cols]
    if dfa.ref_table is None:
        r_off: list[int] = [0] * (n + 1)
        r_col: list[int] = []
        r_tgt: list[int] = []
    else:
        ref_table = dfa.ref_table
        r_rows, r_cols = np.nonzero(ref_table != DEAD)
        off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(r_rows, minlength=n), out=off[1:])
        r_off = off.tolist()
        r_col = r_cols.tolist()
        r_tgt = ref_table[r_rows, r_cols].tolist()
    return b_off.tolist(), b_tgt.tolist(), r_off, r_col, r_tgt, dfa.accepting.tolist()


def _can_finish(dfa: ByteDFA, productive_ids: set[int], moves: _Moves) -> bool:
    """Accepting state reachable from the start via bytes and calls to productive rules.

    A depth-first search over the rule's :func:`_moves`: O(states + moves) integer work."""
    if dfa.start == DEAD:
        return False
    check_deadline()
    b_off, b_tgt, r_off, r_col, r_tgt, accepting = moves
    ok = [callee in productive_ids for callee in dfa.ref_rules]
    seen = [False] * len(accepting)
    seen[DEAD] = True
    seen[dfa.start] = True
    stack = [dfa.start]
    while stack:
        s = stack.pop()
        if accepting[s]:
            return True
        for k in range(b_off[s], b_off[s + 1]):
            t = b_tgt[k]
            if not seen[t]:
                seen[t] = True
                stack.append(t)
        for k in range(r_off[s], r_off[s + 1]):
            if ok[r_col[k]]:
                t = r_tgt[k]
                if not seen[t]:
                    seen[t] = True
                    stack.append(t)
    return False


def _check_left_recursion(auto: GrammarAutomaton) -> None:
    """Reject rules that can call themselves before consuming a byte (a safety net: the IR
    pass :func:`~formcast.ir.left_recursion.eliminate_left_recursion` removes left
    recursion before the automata are built, so this never fires on its output)."""
    n_rules = len(auto.dfas)
    # nullable rules: accept reachable from start through calls to nullable rules only
    nullable = nullable_rules(auto)
    # each rule's calls before consuming, once (the closures below visit a rule's calls from
    # every rule that reaches it: they were recomputed per visit)
    reach: list[set[int]] = []
    for r in range(n_rules):
        check_deadline()
        reach.append(epsilon_reach(auto, r, nullable)[0])
    for r in range(n_rules):
        check_deadline()
        calls = reach[r]
        # transitive closure of "calls before consuming"
        seen = set(calls)
        todo = list(calls)
        while todo:
            c = todo.pop()
            if c == r:
                raise UnsupportedFeatureError(
                    "left recursion",
                    f"rule {auto.names[r]!r}",
                    "the rule can still reach itself without consuming input after left-"
                    "recursion elimination (please report this grammar); rewrite it as a "
                    'repetition, e.g. expr ::= term ("+" term)*',
                )
            for c2 in reach[c]:
                if c2 not in seen:
                    seen.add(c2)
                    todo.append(c2)
