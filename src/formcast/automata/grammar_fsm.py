"""Context-free grammar IR → one byte DFA per rule, with rule-reference edges.

Each remaining rule's body becomes a :class:`ByteDFA` whose ``ref_table`` holds the transitions
taken after a call to another rule returns.  Before that:

* **Inlining.** Rules that are not (mutually) recursive are substituted into their callers, so
  most of the grammar becomes plain byte transitions (a JSON string inside an object is bytes,
  not a call).  Only the start rule and recursive rules stay rules.
* **Productivity.** References to rules that can never finish are removed; an unproductive start
  rule raises :class:`UnsatisfiableGrammarError` (e.g. ``root ::= "a" root``).
* **Left recursion** (a rule reachable from itself without consuming a byte) is first
  eliminated on the IR (:mod:`formcast.ir.left_recursion`: same language, no left
  recursion); what is left of it after that would be a bug and is rejected with
  :class:`UnsupportedFeatureError` naming the rule.

Lifetime: per grammar; the result is immutable.  Work is bounded by :class:`CompileLimits`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from ..cache import LruCache
from ..errors import (
    GrammarError,
    LimitExceededError,
    UnsatisfiableGrammarError,
    UnsupportedFeatureError,
)
from ..ir.left_recursion import eliminate_left_recursion
from ..ir.nodes import (
    NOTHING,
    Alt,
    ByteSet,
    CharSet,
    Concat,
    Grammar,
    Literal,
    Node,
    Repeat,
    RuleRef,
    iter_nodes,
    iter_refs,
    node_copies,
    node_refs,
    node_size,
    rebuild,
    repeat,
    substitute,
)
from ..limits import CACHE_ENTRY_BYTES, CacheLimits, CompileLimits, WorkBudget, check_deadline
from .dfa import DEAD, ByteDFA, column_classes, nfa_to_dfa
from .nfa import SubAutomaton, build_nfa

__all__ = ["GrammarAutomaton", "compile_grammar_automaton", "has_counted_repeat"]

# inlining stops when an inlined body would exceed this many IR nodes per reference
_INLINE_MAX_NODES = 20_000
# rules used more than once are inlined only up to this size
_INLINE_SHARED_MAX_NODES = 300
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


_V = TypeVar("_V", str, int)


def _sccs(graph: Mapping[_V, AbstractSet[_V]]) -> list[list[_V]]:
    """Tarjan's strongly connected components, iterative; in reverse topological order (a
    component comes after every component it reaches: callees first)."""
    index: dict[_V, int] = {}
    low: dict[_V, int] = {}
    on_stack: set[_V] = set()
    stack: list[_V] = []
    result: list[list[_V]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[_V, Iterator[_V]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                result.append(comp)
    return result


def _inline(
    grammar: Grammar, expand_rounds: int = _EXPAND_ROUNDS
) -> tuple[list[str], dict[str, Node]]:
    """Inline non-recursive rules; returns (kept rule names, start first; bodies).

    ``expand_rounds``: rounds of call-site expansion of small recursive rules."""
    rules = grammar.rule_map()
    if grammar.start not in rules:
        raise GrammarError(f"the start rule {grammar.start!r} is not defined")
    # only rules reachable from the start matter
    reachable: set[str] = set()
    todo = [grammar.start]
    while todo:
        name = todo.pop()
        if name in reachable:
            continue
        if name not in rules:
            raise GrammarError(f"rule {name!r} is referenced but never defined")
        reachable.add(name)
        todo.extend(node_refs(rules[name].body))
    graph = {n: node_refs(rules[n].body) for n in reachable}
    uses: dict[str, int] = dict.fromkeys(reachable, 0)
    for n in reachable:
        check_deadline()
        for name in iter_refs(rules[n].body):
            uses[name] += 1
    comps = _sccs(graph)  # reverse topological order: callees first
    recursive: set[str] = set()
    for comp in comps:
        if len(comp) > 1 or comp[0] in graph[comp[0]]:
            recursive.update(comp)
    bodies: dict[str, Node] = {}
    inlinable: dict[str, Node] = {}
    for comp in comps:
        for name in comp:
            body = substitute(rules[name].body, inlinable)
            bodies[name] = body
            if name in recursive or name == grammar.start:
                continue
            size = node_size(body)
            # small rules are inlined everywhere; larger ones only where used once (a shared
            # definition stays one rule, compiled once, instead of one copy per use)
            if size <= _INLINE_SHARED_MAX_NODES or (uses[name] <= 1 and size <= _INLINE_MAX_NODES):
                inlinable[name] = body
    others = sorted(n for n in reachable if n not in inlinable and n != grammar.start)
    kept = [grammar.start, *others]
    # call-site expansion of small recursive rules (a few rounds): callers see the callees'
    # bytes directly (same language), so fewer tokens cross a call boundary
    small = {n: bodies[n] for n in kept if node_size(bodies[n]) <= _EXPAND_MAX_NODES}
    expanded: dict[str, Node] = {}
    for name in kept:
        body = bodies[name]
        for _ in range(expand_rounds):
            callees = {c: small[c] for c in node_refs(body) if c in small and c != name}
            if not callees:
                break
            new_body = substitute(body, callees)
            if node_size(new_body) > _EXPANDED_MAX_NODES:
                break
            body = new_body
        expanded[name] = body
    # drop rules no longer referenced
    live: set[str] = set()
    todo = [grammar.start]
    while todo:
        name = todo.pop()
        if name not in live:
            live.add(name)
            todo.extend(node_refs(expanded[name]))
    kept = [n for n in kept if n in live]
    return kept, {n: expanded[n] for n in kept}


def _consumes(node: Node, memo: dict[int, tuple[Node, bool]]) -> bool:
    """True when every string of ``node`` has at least one byte (a rule call may be empty).

    Post-order without recursion (deep IR would overflow the stack), memoized by identity
    in ``memo`` (shared across calls; it holds the node, so no id is reused while its entry
    exists), so linear in the DAG."""
    stack: list[tuple[Node, bool]] = [(node, False)]
    while stack:
        n, ready = stack.pop()
        if id(n) in memo:
            continue
        kids: tuple[Node, ...] = ()
        if isinstance(n, (Concat, Alt)):
            kids = n.items
        elif isinstance(n, Repeat):
            kids = (n.item,)
        if not ready and kids:
            stack.append((n, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
            continue
        if isinstance(n, Literal):
            out = bool(n.text)
        elif isinstance(n, (CharSet, ByteSet)):
            out = True
        elif isinstance(n, Concat):
            out = any(memo[id(k)][1] for k in n.items)
        elif isinstance(n, Alt):
            out = all(memo[id(k)][1] for k in n.items)
        elif isinstance(n, Repeat):
            out = n.min > 0 and memo[id(n.item)][1]
        else:  # Empty, Nothing (vacuous, but never counted), RuleRef
            out = False
        memo[id(n)] = (n, out)
    return memo[id(node)][1]


def has_counted_repeat(node: Node) -> bool:
    """True when compiling ``node`` would make a counted rule (a long bounded repeat), so a
    regular expression needs the pushdown program rather than one DFA.  O(tree size)."""
    if node_copies(node) < _COUNT_MIN_COPIES:
        return False
    memo: dict[int, tuple[Node, bool]] = {}
    return any(
        isinstance(n, Repeat)
        and max(n.min, n.max or n.min) >= _COUNT_MIN_COPIES
        and _consumes(n.item, memo)
        for n in iter_nodes(node)
    )


def _outline_repeats(
    names: list[str], bodies: dict[str, Node]
) -> dict[str, tuple[int, int | None]]:
    """Move large repeated items into rules of their own (in place); returns the counted rules.

    * ``X{lo,hi}`` with at least :data:`_COUNT_MIN_COPIES` copies of an ``X`` that always
      consumes becomes a call to a *counted rule* whose body is ``X`` (compiled once whatever
      the bounds; the parser counts iterations).
    * ``X{1,20}`` with a large ``X`` would copy X's automaton twenty times; as a rule, X is
      compiled once and the repeat becomes twenty calls.

    Iterative, shares identical items (and identical counted repeats).
    """
    made: dict[Node, str] = {}
    counted: dict[tuple[Node, int, int | None], str] = {}
    counts: dict[str, tuple[int, int | None]] = {}
    consumes: dict[int, tuple[Node, bool]] = {}
    todo = list(names)

    def new_rule(stem: str, body: Node) -> str:
        rule = f"{current[0]}#{stem}{len(made) + len(counted)}"
        bodies[rule] = body
        names.append(rule)
        todo.append(rule)
        return rule

    def leaf(n: Node) -> Node | None:
        if not isinstance(n, Repeat):
            return None
        copies = max(n.min, n.max or n.min)
        if copies >= _COUNT_MIN_COPIES and _consumes(n.item, consumes):
            key = (n.item, n.min, n.max)
            rule = counted.get(key)
            if rule is None:
                rule = new_rule("count", n.item)
                counted[key] = rule
                counts[rule] = (n.min, n.max)
            return RuleRef(rule)
        size = node_size(n.item)
        if copies > 1 and size >= _OUTLINE_MIN_ITEM and size * copies > _OUTLINE_MIN_NODES:
            rule = made.get(n.item)
            if rule is None:
                rule = new_rule("rep", n.item)
                made[n.item] = rule
            return repeat(RuleRef(rule), n.min, n.max)
        return None

    def descend(n: Node) -> bool:
        # only subtrees holding a repeat of two or more copies can change (the count is
        # cached per node), so strings' character loops and literals are not visited
        return node_copies(n) >= 2

    current = [""]
    while todo:
        name = todo.pop()
        current[0] = name
        bodies[name] = rebuild(bodies[name], leaf, descend)
    return counts


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
    names, bodies = _inline(grammar, _EXPAND_ROUNDS if expand_calls else 0)
    count_by_name = _outline_repeats(names, bodies)
    # productivity fixpoint: drop references to rules that can never finish
    sub_dfas: dict[Node, SubAutomaton] = {}  # shared by every rule's NFA
    while True:
        ids = {n: i for i, n in enumerate(names)}
        dfas = []
        for n in names:
            body = bodies[n]
            dead = {r for r in node_refs(body) if r not in ids}
            if dead:
                body = substitute(body, dict.fromkeys(dead, NOTHING))
                bodies[n] = body
            dfas.append(_rule_dfa(body, ids, names, limits, budget, sub_dfas, minimize))
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
        n = dfa.table.shape[0]
        per_state: list[tuple[tuple[int, int], ...]] = []
        bnd = np.array(dfa.accepting, dtype=bool)
        has_out = (dfa.table != DEAD).any(axis=1)
        for s in range(n):
            lst: list[tuple[int, int]] = []
            if dfa.ref_table is not None and s != DEAD:
                for j, callee in enumerate(dfa.ref_rules):
                    t = int(dfa.ref_table[s, j])
                    if t != DEAD:
                        lst.append((callee, t))
            per_state.append(tuple(lst))
            if lst:
                bnd[s] = True
                has_out[s] = True
        bnd[DEAD] = False
        refs.append(tuple(per_state))
        boundary.append(bnd)
        # an accepting state of a counted rule ends an iteration, not the rule: no tail calls
        no_tail = counts[r] is not None
        tail.append(np.asarray(dfa.accepting, dtype=bool) & ~has_out & (not no_tail))
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


#: Rule automata shared by every compile in the process: keyed by the rule body (IR nodes
#: compare structurally and cache their hash), the compile limits and whether it is minimized;
#: values are (DFA, callee *names* of its call edges, fuel its build cost), so a rule compiled
#: in one grammar serves another that numbers its rules differently.  What repeats across
#: compiles is the boilerplate: JSON Schema's "any value" rules, shared definitions, common
#: string formats.
RULE_DFA_CACHE: LruCache[
    tuple[Node, CompileLimits, bool], tuple[ByteDFA, tuple[str, ...], int]
] = LruCache(  # bounded in bytes: a state's transition row is 256 int32 (1 KiB)
    512,
    max_weight=CacheLimits().shared_cache_bytes,
    weight=lambda entry: 1024 * entry[0].num_states + CACHE_ENTRY_BYTES,
)


def _rule_dfa(
    body: Node,
    ids: dict[str, int],
    names: list[str],
    limits: CompileLimits,
    budget: WorkBudget,
    sub_dfas: dict[Node, SubAutomaton],
    minimize: bool = True,
) -> ByteDFA:
    """One rule's DFA, from :data:`RULE_DFA_CACHE` when an equal body was compiled before.

    A hit is charged the fuel its build cost, so whether a compile fits the limits does not
    depend on what the process compiled before (up to sub-automata that a cold compile would
    have shared between rules)."""
    key = (body, limits, minimize)
    found, hit = RULE_DFA_CACHE.get(key)
    if found and hit is not None:
        dfa, callees, work = hit
        budget.spend(work)
        if not callees:
            return dfa
        return replace(dfa, ref_rules=tuple(ids[c] for c in callees))
    before = budget.used
    nfa = build_nfa(body, limits, rule_ids=ids, budget=budget, sub_dfas=sub_dfas)
    dfa = nfa_to_dfa(nfa, limits, minimize=minimize, budget=budget)
    RULE_DFA_CACHE.put(key, (dfa, tuple(names[i] for i in dfa.ref_rules), budget.used - before))
    return dfa


def _productive_rules(dfas: list[ByteDFA]) -> set[int]:
    """Rules that can finish (least fixpoint).  Every state of a rule DFA is live (it reaches
    acceptance through bytes and calls), so a rule whose callees are all productive (or that
    has none) can finish when its language is not empty: O(calls).  Others are searched
    (:func:`_can_finish`), again only when more of their callees became productive."""
    # callees before callers, so most rules are settled in O(calls)
    graph = {r: set(dfa.ref_rules) for r, dfa in enumerate(dfas)}
    order = [r for comp in _sccs(graph) for r in comp]
    productive: set[int] = set()
    searched_with: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for r in order:
            dfa = dfas[r]
            if r in productive:
                continue
            k = sum(1 for c in dfa.ref_rules if c in productive)
            if k == len(dfa.ref_rules):
                ok = dfa.start != DEAD
            else:
                if searched_with.get(r) == k:
                    continue
                searched_with[r] = k
                ok = _can_finish(dfa, productive)
            if ok:
                productive.add(r)
                changed = True
    return productive


def _can_finish(dfa: ByteDFA, productive_ids: set[int]) -> bool:
    """Accepting state reachable from the start via bytes and calls to productive rules.

    Breadth-first, one level of states at a time (numpy): O(depth) array operations."""
    if dfa.start == DEAD:
        return False
    check_deadline()
    seen = np.zeros(dfa.table.shape[0], dtype=bool)
    seen[DEAD] = True
    seen[dfa.start] = True
    cols = [j for j, callee in enumerate(dfa.ref_rules) if callee in productive_ids]
    frontier = np.asarray([dfa.start], dtype=np.int64)
    while frontier.size:
        if bool(dfa.accepting[frontier].any()):
            return True
        nxt = dfa.table[frontier].reshape(-1)
        if cols and dfa.ref_table is not None:
            nxt = np.concatenate((nxt, dfa.ref_table[frontier][:, cols].reshape(-1)))
        nxt = np.unique(nxt)
        frontier = nxt[~seen[nxt]]
        seen[frontier] = True
    return False


def _check_left_recursion(auto: GrammarAutomaton) -> None:
    """Reject rules that can call themselves before consuming a byte (a safety net: the IR
    pass :func:`~formcast.ir.left_recursion.eliminate_left_recursion` removes left
    recursion before the automata are built, so this never fires on its output)."""
    n_rules = len(auto.dfas)
    # nullable rules: accept reachable from start through calls to nullable rules only
    nullable = [False] * n_rules
    changed = True
    while changed:
        changed = False
        for r in range(n_rules):
            if nullable[r]:
                continue
            if _epsilon_reach(auto, r, nullable)[1]:
                nullable[r] = True
                changed = True
    for r in range(n_rules):
        check_deadline()
        calls, _ = _epsilon_reach(auto, r, nullable)
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
            for c2 in _epsilon_reach(auto, c, nullable)[0]:
                if c2 not in seen:
                    seen.add(c2)
                    todo.append(c2)


def _epsilon_reach(auto: GrammarAutomaton, r: int, nullable: list[bool]) -> tuple[set[int], bool]:
    """Rules callable from rule r's start without consuming bytes, and whether r is nullable."""
    dfa = auto.dfas[r]
    calls: set[int] = set()
    seen = {dfa.start}
    todo = [dfa.start]
    count = auto.count_of(r)
    can_accept = count is not None and count[0] == 0  # zero iterations
    while todo:
        s = todo.pop()
        if dfa.accepting[s]:
            can_accept = True
        for callee, ret in auto.refs[r][s]:
            calls.add(callee)
            if nullable[callee] and ret not in seen:
                seen.add(ret)
                todo.append(ret)
    return calls, can_accept


def first_follow(
    auto: GrammarAutomaton,
) -> tuple[list[bool], list[np.ndarray], list[np.ndarray]]:
    """(nullable, FIRST bytes, FOLLOW bytes) per rule; over-approximations where a callee is
    nullable (then every byte is assumed possible).  O(rules x states x 256) fixpoints."""
    n_rules = len(auto.dfas)
    all_bytes = np.ones(256, dtype=bool)
    nullable = [False] * n_rules
    changed = True
    while changed:
        changed = False
        for r in range(n_rules):
            if not nullable[r] and _epsilon_reach(auto, r, nullable)[1]:
                nullable[r] = True
                changed = True
    first = [np.zeros(256, dtype=bool) for _ in range(n_rules)]
    changed = True
    while changed:
        changed = False
        for r in range(n_rules):
            check_deadline()
            dfa = auto.dfas[r]
            new = first[r] | (dfa.table[dfa.start] != DEAD)
            for callee, _ in auto.refs[r][dfa.start]:
                new |= all_bytes if nullable[callee] else first[callee]
            if (new != first[r]).any():
                first[r] = new
                changed = True
    follow = [np.zeros(256, dtype=bool) for _ in range(n_rules)]
    restart = restart_bytes(auto, first)
    changed = True
    while changed:
        changed = False
        for caller in range(n_rules):
            check_deadline()
            dfa = auto.dfas[caller]
            for calls in auto.refs[caller]:
                for callee, ret in calls:
                    new = follow[callee] | (dfa.table[ret] != DEAD)
                    for c2, _ in auto.refs[caller][ret]:
                        new |= all_bytes if nullable[c2] else first[c2]
                    if dfa.accepting[ret]:
                        new |= follow[caller] | restart[caller]
                    if (new != follow[callee]).any():
                        follow[callee] = new
                        changed = True
    return nullable, first, follow


def restart_bytes(auto: GrammarAutomaton, first: list[np.ndarray]) -> list[np.ndarray]:
    """Per rule, the bytes that may follow the end of an iteration *within* the rule: the
    first bytes of a counted rule that can iterate again (none for ordinary rules)."""
    none = np.zeros(256, dtype=bool)
    out = []
    for r in range(len(auto.dfas)):
        count = auto.count_of(r)
        out.append(first[r] if count is not None and count[1] != 1 else none)
    return out


def split_bytes(auto: GrammarAutomaton) -> list[np.ndarray]:
    """Per rule, ``bool[n_states, 256]``: byte ``b`` may follow a call or return at state ``q``.

    Built from FIRST and FOLLOW byte sets: at a state with calls, the first bytes of the
    callees (all bytes when a callee can be empty); at an accepting state, the bytes that can
    follow the rule anywhere in the grammar.  A token that leaves a rule at ``q`` must continue
    with such a byte, so only tokens that do need verifying.
    """
    nullable, first, follow = first_follow(auto)
    restart = restart_bytes(auto, first)
    all_bytes = np.ones(256, dtype=bool)
    out: list[np.ndarray] = []
    for r in range(len(auto.dfas)):
        dfa = auto.dfas[r]
        n = dfa.table.shape[0]
        sb = np.zeros((n, 256), dtype=bool)
        for q in range(1, n):
            row = np.zeros(256, dtype=bool)
            for callee, _ in auto.refs[r][q]:
                row |= all_bytes if nullable[callee] else first[callee]
            if dfa.accepting[q]:
                row |= follow[r] | restart[r]
            sb[q] = row
        out.append(sb)
    return out


def counted_splits(auto: GrammarAutomaton) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per counted rule: (``bool[n_states, 256]`` bytes that may start a callee at each state,
    ``bool[256]`` bytes that may follow the rule), for its window automaton
    (:func:`formcast.automata.counted.window_table`)."""
    if not auto.counts:
        return {}
    nullable, first, follow = first_follow(auto)
    all_bytes = np.ones(256, dtype=bool)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r, count in enumerate(auto.counts):
        if count is None:
            continue
        n = auto.dfas[r].table.shape[0]
        calls = np.zeros((n, 256), dtype=bool)
        for q in range(1, n):
            for callee, _ in auto.refs[r][q]:
                calls[q] |= all_bytes if nullable[callee] else first[callee]
        out[r] = (calls, follow[r])
    return out


@dataclass(frozen=True, eq=False)
class ExpandedLexer:
    """All rules' byte DFAs joined by call edges and determinized (returns are not followed).

    Attributes:
        table: ``int32[n, 256]`` (state 0 dead).
        split: ``bool[n, 256]``: some member may *return* here and continue with that byte.
        offsets: per rule, the lexer state of its state 0 (rule position ``(r, q)`` is lexer
            state ``offsets[r] + q``, see :meth:`entry`).
    """

    table: np.ndarray
    split: np.ndarray
    offsets: np.ndarray

    def entry(self, rule: int, state: int) -> int:
        """The lexer state of rule position ``(rule, state)`` (``state`` live).  O(1)."""
        return int(self.offsets[rule]) + state


class _TooLarge(Exception):
    """The expanded lexer outgrew its state cap."""


def build_expanded_lexer(
    auto: GrammarAutomaton, max_states: int = 30_000, *, budget: WorkBudget | None = None
) -> ExpandedLexer | None:
    """Determinize the call-expanded automaton; None if it exceeds ``max_states``.

    Walking a token through it follows calls into callees exactly, so a token that stays alive
    is allowed whatever the stack holds; only tokens that pass a plausible *return* (FOLLOW
    filtered) depend on the stack.  Cost: subset construction over byte classes.
    """
    _, first_bytes, follow = first_follow(auto)
    restart = restart_bytes(auto, first_bytes)
    offsets = np.cumsum([0] + [d.table.shape[0] for d in auto.dfas])
    n_global = int(offsets[-1])
    if budget is not None:  # the global tables and their byte classes (measured: ~20 units/state)
        budget.spend(20 * n_global + 20 * len(auto.dfas))
    # global tables: next global id per byte (0 = dead), accepting, follow per global state
    gtable = np.zeros((n_global, 256), dtype=np.int64)
    gsplit = np.zeros((n_global, 256), dtype=bool)
    calls: list[list[int]] = [[] for _ in range(n_global)]
    for r, dfa in enumerate(auto.dfas):
        check_deadline()
        off = int(offsets[r])
        t = dfa.table.astype(np.int64)
        gtable[off : off + t.shape[0]] = np.where(t != DEAD, t + off, 0)
        gtable[off] = 0
        acc = np.asarray(dfa.accepting, dtype=bool)
        gsplit[off : off + t.shape[0]] = acc[:, None] & (follow[r] | restart[r])[None, :]
        count = auto.count_of(r)
        if count is not None and count[0] == 0:  # zero iterations: the call may return at once
            gsplit[off + dfa.start] |= follow[r]
        for q, lst in enumerate(auto.refs[r]):
            for callee, _ in lst:
                calls[off + q].append(int(offsets[callee]) + auto.dfas[callee].start)
    # byte classes: identical columns everywhere (a rule's split rows are its accepting flag
    # times one byte vector, so those vectors stand for them)
    check_deadline()
    split_vectors = [(follow[r] | restart[r]).astype(np.int64) for r in range(len(auto.dfas))]
    split_vectors.extend(follow[r].astype(np.int64) for r in range(len(auto.dfas)))
    cols = np.concatenate([gtable, np.stack(split_vectors)], axis=0)
    cls_of_byte, first = column_classes(cols)
    check_deadline()
    reps = first.tolist()

    closure_cache: dict[int, frozenset[int]] = {}

    def closure1(g: int) -> frozenset[int]:
        hit = closure_cache.get(g)
        if hit is None:
            seen = {g}
            todo = [g]
            while todo:
                x = todo.pop()
                for y in calls[x]:
                    if y not in seen:
                        seen.add(y)
                        todo.append(y)
            hit = frozenset(seen)
            closure_cache[g] = hit
        return hit

    if auto.num_states >= max_states:
        return None
    # lexer state g (< n_global) is the closure of global state g: a state without calls is
    # its own closure, so its row is its global row (vectorized); states with calls and the
    # unions met while determinizing are appended after n_global (Python, per byte class)
    # (a union of two or more live states is never a singleton: only call closures are keyed)
    ids: dict[frozenset[int], int] = {frozenset(): 0}
    sets: list[frozenset[int]] = []
    check_deadline()
    with_calls = [g for g in range(n_global) if calls[g]]
    for g in with_calls:
        ids.setdefault(closure1(g), g)
    reps_arr = np.asarray(reps, dtype=np.int64)
    n_cls = len(reps)
    g_succ = gtable[:, reps_arr]  # per global state and byte class: successor (0: dead)
    g_split = gsplit[:, reps_arr]

    def set_id(target: frozenset[int]) -> int:
        j = ids.get(target)
        if j is None:
            j = n_global + len(sets)
            if j >= max_states:
                raise _TooLarge
            ids[target] = j
            sets.append(target)
        return j

    multi: dict[tuple[int, ...], int] = {}  # successors of several members -> lexer state
    rows: list[np.ndarray] = []
    split_rows: list[np.ndarray] = []

    def union_row(members: list[int]) -> None:
        # vectorized over byte classes: where at most one member lives on, the successor is
        # that member's (lexer state v is closure1(v)); only classes where several live on are
        # determinized in Python
        if budget is not None:
            budget.spend(n_cls)
        succ = g_succ[members]
        row = succ.max(axis=0)
        for c in np.flatnonzero(np.count_nonzero(succ, axis=0) >= 2).tolist():
            tup = tuple(succ[:, c].tolist())
            j = multi.get(tup)
            if j is None:
                live_ids = {v for v in tup if v}
                j = set_id(frozenset().union(*(closure1(v) for v in live_ids)))
                multi[tup] = j
            row[c] = j
        rows.append(row)
        split_rows.append(np.asarray(g_split[members].any(axis=0)))

    if budget is not None:
        budget.spend(n_global * n_cls // 16 + 1)
    try:
        for g in with_calls:
            union_row(sorted(closure1(g)))
        i = 0
        while i < len(sets):
            union_row(sorted(sets[i]))
            i += 1
    except _TooLarge:
        return None
    table = np.empty((n_global + len(sets), 256), dtype=np.int32)
    split = np.empty((n_global + len(sets), 256), dtype=bool)
    table[:n_global] = gtable
    split[:n_global] = gsplit
    if rows:
        small = np.asarray(rows, dtype=np.int32)[:, cls_of_byte]
        ssmall = np.asarray(split_rows, dtype=bool)[:, cls_of_byte]
        k = len(with_calls)
        if k:
            table[with_calls] = small[:k]
            split[with_calls] = ssmall[:k]
        table[n_global:] = small[k:]
        split[n_global:] = ssmall[k:]
    table[0] = 0
    split[0] = False
    return ExpandedLexer(table=table, split=split, offsets=offsets.astype(np.int64))
