"""Regular IR → byte automata, end to end: :func:`compile_dfa` and the sub-automaton caches.

The NFA construction (:mod:`.nfa`) and the DFA construction (:mod:`.dfa`) call each other:
an NFA embeds the minimal DFAs of its large character sets and repeated items, and each of
those is built from an NFA of its own.  This module ties the knot from above, so that
``nfa`` knows nothing of DFAs and ``dfa`` only reads NFAs:

* :func:`build_nfa` — :func:`~.nfa.thompson_nfa` with its sub-automata taken from the
  compile's cache, else from the process-wide :data:`SUB_DFA_CACHE`, else built here
  (recursively, :func:`build_nfa` then :func:`~.dfa.nfa_to_dfa`);
* :func:`compile_dfa` — regular IR → minimized :class:`~.dfa.ByteDFA` within a work budget.

Lifetime: :data:`SUB_DFA_CACHE` lives for the process (bounded in bytes, see
:class:`~formcast.limits.CacheLimits`); everything else is per compile.  Costs: those of the
NFA and DFA constructions; a cache hit is charged the fuel its build cost, so whether a compile
fits its limits does not depend on what the process compiled before.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TypeAlias

from ..cache import LruCache
from ..ir.nodes import Node
from ..limits import (
    CACHE_ENTRY_BYTES,
    CachedWork,
    CacheLimits,
    CompileLimits,
    HashedKey,
    WorkBudget,
    cached_work,
)
from .dfa import ByteDFA, nfa_to_dfa
from .nfa import FlatNFA, SubAutomaton, thompson_nfa

__all__ = [
    "SUB_DFA_CACHE",
    "SUB_DFA_HIT_UNITS",
    "SubDfaMemo",
    "build_nfa",
    "compile_dfa",
    "embedded_states",
]

#: one compile's sub-automata by IR node (:func:`build_nfa`'s ``sub_dfas``; a
#: :func:`~formcast.limits.cached_work` memo)
#: (a string: the compiled build's ``CachedWork`` is not subscriptable at run time)
SubDfaMemo: TypeAlias = "dict[Hashable, CachedWork[SubAutomaton]]"

#: fuel of a sub-automaton the compile already built (a lookup: copying it into an NFA is
#: charged by the NFA construction); every cache whose entries embed sub-automata replays
#: them with this hit cost
SUB_DFA_HIT_UNITS = 0


def compile_dfa(
    node: Node, limits: CompileLimits | None = None, budget: WorkBudget | None = None
) -> ByteDFA:
    """Regular IR → minimized byte DFA (within the compile-work ``budget``)."""
    limits = limits or CompileLimits()
    budget = budget or limits.budget()
    return nfa_to_dfa(build_nfa(node, limits, budget=budget), limits, budget=budget)


def build_nfa(
    node: Node,
    limits: CompileLimits | None = None,
    *,
    inline: Node | None = None,
    rule_ids: Mapping[str, int] | None = None,
    budget: WorkBudget | None = None,
    sub_dfas: SubDfaMemo | None = None,
    limits_hash: int | None = None,
) -> FlatNFA:
    """Build the NFA of an IR tree (:func:`~.nfa.thompson_nfa`), its sub-automata compiled
    here.

    Without ``rule_ids`` the tree must be regular (a :class:`~formcast.ir.nodes.RuleRef`
    raises :class:`~formcast.errors.UnsupportedFeatureError`); with it, each
    ``RuleRef(name)`` becomes a reference edge labelled ``rule_ids[name]`` (used for the rules
    of a context-free grammar).  ``inline`` is a node that must be expanded in place rather
    than embedded as a sub-DFA (used when that sub-DFA is itself being built).  ``sub_dfas``:
    a cache of the sub-DFAs compiled for large character sets and repeated items, shared by
    the calls of one compile (e.g. every rule of a grammar).  ``limits_hash``:
    ``hash(limits)`` when the caller has it (an interpreted dataclass hash; None: here, once).
    """
    limits = limits or CompileLimits()
    budget = budget or limits.budget()
    cache: SubDfaMemo = {} if sub_dfas is None else sub_dfas
    lh = hash(limits) if limits_hash is None else limits_hash

    def sub_automaton(item: Node) -> SubAutomaton:
        return _sub_dfa(item, limits, budget, cache, lh)

    return thompson_nfa(node, limits, budget, sub_automaton, inline=inline, rule_ids=rule_ids)


#: Sub-automata shared by every compile in the process, keyed by the IR node and the limits (a
#: :class:`~formcast.limits.HashedKey` of ``(node, limits)``, hashed once per lookup);
#: values are :class:`~formcast.limits.CachedWork` (the automaton, the fuel of its own work and
#: the sub-automata its build embedded).  What repeats: a JSON string's characters, large
#: character classes, format pieces.  Bounded in bytes (``CacheLimits().shared_cache_bytes``;
#: a state's transition row is 256 int32, 1 KiB).
SUB_DFA_CACHE: LruCache[HashedKey, CachedWork[SubAutomaton]] = LruCache(
    1024,
    max_weight=CacheLimits().shared_cache_bytes,
    weight=lambda entry: 1024 * embedded_states((entry,)) + CACHE_ENTRY_BYTES,
)


def embedded_states(entries: Iterable[CachedWork[SubAutomaton]]) -> int:
    """States of the sub-automata ``entries`` and the ones they were built on keep alive (each
    distinct entry once): what a cache entry weighs, since its tree stays replayable
    (:class:`~formcast.limits.CachedWork`) whatever the cache evicts.  O(tree)."""
    seen: set[int] = set()
    stack = list(entries)
    total = 0
    while stack:
        e = stack.pop()
        if id(e) not in seen:
            seen.add(id(e))
            total += e.value.n_states
            stack.extend(e.children)
    return total


def _sub_dfa(
    node: Node, limits: CompileLimits, budget: WorkBudget, cache: SubDfaMemo, limits_hash: int
) -> SubAutomaton:
    """The minimal DFA of ``node`` ready to embed: from the compile's ``cache`` (free), else
    from :data:`SUB_DFA_CACHE` (charged what building it would cost in this compile: its own
    work plus the sub-automata it embeds that this compile has not built yet, which become
    this compile's; :func:`~formcast.limits.cached_work`), else built.  So whether a compile
    fits its limits does not depend on what the process compiled before.  ``limits_hash``:
    ``hash(limits)``."""

    def build() -> SubAutomaton:
        nfa = build_nfa(
            node, limits, inline=node, budget=budget, sub_dfas=cache, limits_hash=limits_hash
        )
        dfa = nfa_to_dfa(nfa, limits, budget=budget)
        return SubAutomaton.of(dfa.table, dfa.accepting, dfa.start)

    return cached_work(
        SUB_DFA_CACHE,
        HashedKey((node, limits), hash((hash(node), limits_hash))),
        node,
        build,
        cache,
        hit_units=SUB_DFA_HIT_UNITS,
        budget=budget,
    )
