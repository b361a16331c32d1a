"""Named passes and analyses over the grammar IR, shared by every front-end and the compiler.

Each pass is one job, written once: the JSON Schema front-end's clean-up
(:func:`productive_rules` → :func:`drop_unproductive` → :func:`inline_single_use` →
:func:`drop_unreachable`), the automaton compiler's rule inlining (:func:`inline_rules`) and
repeat outlining (:func:`outline_repeats`), and the analyses behind them and behind
left-recursion elimination (:func:`rule_sccs`, :func:`reachable_rules`, :func:`nullable_rules`,
:func:`node_nullable`, :func:`node_productive`, :func:`always_consumes`, :func:`ir_depth`).
The thresholds are the callers' policy and come in as arguments.

Lifetime: pure functions of their arguments (the in-place passes mutate only the rule tables
handed to them); nothing outlives a call but the memo dicts a caller chooses to pass in.
Costs are stated per function; every walk is iterative or falls back to an iterative one, so
deep IR never overflows the stack.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import TypeVar

from ..errors import GrammarError
from ..limits import check_deadline
from .marks import is_marked_rule
from .nodes import (
    NOTHING,
    Alt,
    ByteSet,
    CharSet,
    Concat,
    Empty,
    Grammar,
    Literal,
    Node,
    Nothing,
    Repeat,
    Rule,
    RuleRef,
    node_copies,
    node_depth,
    node_refs,
    node_size,
    rebuild,
    repeat,
    substitute,
)

__all__ = [
    "always_consumes",
    "drop_unproductive",
    "drop_unreachable",
    "inline_rules",
    "inline_single_use",
    "ir_depth",
    "node_nullable",
    "node_productive",
    "nullable_rules",
    "outline_repeats",
    "productive_rules",
    "reachable_rules",
    "rule_fixpoint",
    "rule_refs",
    "rule_sccs",
]

_V = TypeVar("_V", str, int)

# -- graphs of rules ------------------------------------------------------------------------------


def rule_sccs(graph: Mapping[_V, AbstractSet[_V]]) -> list[list[_V]]:
    """Strongly connected components of a call graph (iterative Tarjan), callees first: a
    component comes after every component it reaches.  Members, and the successors of each
    vertex, are taken in ``graph`` order (so the result is deterministic).  Every successor
    must be a key of ``graph``.  O(V log V + E)."""
    order = {name: i for i, name in enumerate(graph)}
    index: dict[_V, int] = {}
    low: dict[_V, int] = {}
    on_stack: set[_V] = set()
    stack: list[_V] = []
    result: list[list[_V]] = []
    for root in graph:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[_V, Iterator[_V]]] = [
            (root, iter(sorted(graph[root], key=order.__getitem__)))
        ]
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w], key=order.__getitem__))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp: list[_V] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                result.append(sorted(comp, key=order.__getitem__))
    return result


def reachable_rules(
    start: str,
    callees: Callable[[str], Iterable[str]],
    defined: Collection[str],
    *,
    strict: bool = False,
) -> list[str]:
    """The rules reachable from ``start``, in visiting order (depth first, last callee first).

    ``callees(name)`` is asked once per rule reached; a name not in ``defined`` is skipped, or
    with ``strict`` raises :class:`GrammarError`.  O(rules + references)."""
    seen: dict[str, None] = {}
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in defined:
            if strict:
                raise GrammarError(f"rule {name!r} is referenced but never defined")
            continue
        seen[name] = None
        todo.extend(callees(name))
    return list(seen)


def rule_refs(by_name: Mapping[str, Rule]) -> dict[str, list[str]]:
    """Per rule, the names it references, once per occurrence (in :func:`iter_refs`' order).
    O(the part of the IR that leads to references)."""
    return {n: _ref_list(r.body) for n, r in by_name.items()}


def _ref_list(node: Node) -> list[str]:
    """``list(iter_refs(node))`` (the same names in the same order: a stack, each composite's
    children that hold a reference pushed in order) as a plain loop: no generator, and a
    child's references read from its cached ``refs`` (no ``frozenset`` made per
    :class:`RuleRef` child, as :func:`~.nodes.is_regular` makes).  Reads only.  O(the part of
    the tree that leads to references)."""
    out: list[str] = []
    stack: list[Node] = [node]
    while stack:
        n = stack.pop()
        tp = type(n)
        if tp is RuleRef:
            out.append(n.name)  # type: ignore[attr-defined]
        elif tp is Concat or tp is Alt:
            for it in n.items:  # type: ignore[attr-defined]
                ti = type(it)
                if ti is RuleRef or ((ti is Concat or ti is Alt or ti is Repeat) and it.refs):
                    stack.append(it)
        elif tp is Repeat:
            it = n.item  # type: ignore[attr-defined]
            if node_refs(it):
                stack.append(it)
    return out


def _users(refs: Mapping[str, list[str]]) -> dict[str, set[str]]:
    users: dict[str, set[str]] = {}
    for n, rs in refs.items():
        for m in rs:
            users.setdefault(m, set()).add(n)
    return users


# -- nullable / productive ------------------------------------------------------------------------
#
# One walk for both: a node "derives" when it has a string (productive) or the empty string
# (nullable, ``empty_only``), given the set of rules that do.  Only the leaves differ.


def _leaf(n: Node, rules: AbstractSet[str], empty_only: bool) -> bool | None:
    """The answer for a leaf, None for an inner node."""
    if isinstance(n, Empty):
        return True
    if isinstance(n, Literal):
        return not n.text if empty_only else True
    if isinstance(n, (CharSet, ByteSet)):
        return not empty_only
    if isinstance(n, Nothing):
        return False
    if isinstance(n, RuleRef):
        return n.name in rules
    if isinstance(n, (Concat, Alt, Repeat)):
        return None
    return not empty_only  # pragma: no cover - every IR node type is listed above



def _post_order(node: Node, done: Callable[[Node], bool]) -> Iterator[Node]:
    """The nodes under ``node`` (itself included) that are not ``done``, each after its
    children, without recursion (deep IR would overflow the stack).  The caller records each
    node it is given before asking for the next, so a node shared in the DAG is given once.
    O(nodes visited)."""
    stack: list[tuple[Node, bool]] = [(node, False)]
    while stack:
        n, ready = stack.pop()
        if done(n):
            continue
        kids: tuple[Node, ...] = ()
        if isinstance(n, (Concat, Alt)):
            kids = n.items
        elif isinstance(n, Repeat):
            kids = (n.item,)
        if not ready and kids:
            stack.append((n, True))
            stack.extend((k, False) for k in kids if not done(k))
            continue
        yield n

def _derives(
    node: Node,
    rules: AbstractSet[str],
    empty_only: bool,
    memo: dict[int, tuple[Node, bool]] | None,
    scratch: dict[int, tuple[Node, bool]] | None = None,
    settled: set[str] | None = None,
) -> bool:
    """Post-order without recursion (see :func:`node_nullable` for the memos); a memoized
    node is answered by :func:`_derives_lazy`'s first lookup."""
    try:  # short-circuit first: most bodies start with a byte, so little is visited
        return _derives_lazy(node, rules, empty_only, memo, scratch, settled)
    except RecursionError:  # a very deep tree: the full post-order below has no recursion
        pass
    if memo is None:
        memo = {}

    def get(k: Node) -> bool:
        assert memo is not None
        found = memo.get(id(k))
        if found is None and scratch is not None:
            found = scratch.get(id(k))
        assert found is not None  # children are done first
        return found[1]

    def known(k: Node) -> bool:
        assert memo is not None
        return id(k) in memo or (scratch is not None and id(k) in scratch)

    for n in _post_order(node, known):
        out = _leaf(n, rules, empty_only)
        if out is None:
            if isinstance(n, Concat):
                out = all(get(k) for k in n.items)
            elif isinstance(n, Alt):
                out = any(get(k) for k in n.items)
            else:
                assert isinstance(n, Repeat)
                out = n.min == 0 or get(n.item)
        if scratch is None or settled is None or node_refs(n) <= settled:
            memo[id(n)] = (n, out)
        else:
            scratch[id(n)] = (n, out)
    return get(node)


#: deepest recursion of :func:`_derives_lazy` (deeper trees take :func:`_derives`'s loop)
_LAZY_MAX_DEPTH = 1000


def _derives_lazy(
    n: Node,
    rules: AbstractSet[str],
    empty_only: bool,
    memo: dict[int, tuple[Node, bool]] | None,
    scratch: dict[int, tuple[Node, bool]] | None,
    settled: set[str] | None,
    depth: int = 0,
) -> bool:
    """:func:`_derives` by short-circuit recursion (``all``/``any`` stop early).

    Raises RecursionError past :data:`_LAZY_MAX_DEPTH` levels too: the interpreter raises it
    first (each level is two frames), but a mypyc-compiled build (formcast._native) has no
    recursion limit of its own and would exhaust the C stack on a very deep tree instead."""
    if depth > _LAZY_MAX_DEPTH:
        raise RecursionError("a very deep tree")
    if memo is not None:
        hit = memo.get(id(n))
        if hit is None and scratch is not None:
            hit = scratch.get(id(n))
        if hit is not None:
            return hit[1]
    leaf = _leaf(n, rules, empty_only)
    if leaf is not None:
        return leaf
    # (``all``/``any`` written out as loops that stop where they would: no generator)
    if isinstance(n, Concat):
        out = True
        for k in n.items:
            if not _derives_lazy(k, rules, empty_only, memo, scratch, settled, depth + 1):
                out = False
                break
    elif isinstance(n, Alt):
        out = False
        for k in n.items:
            if _derives_lazy(k, rules, empty_only, memo, scratch, settled, depth + 1):
                out = True
                break
    else:
        assert isinstance(n, Repeat)
        out = n.min == 0 or _derives_lazy(
            n.item, rules, empty_only, memo, scratch, settled, depth + 1
        )
    if memo is not None:
        if scratch is None or settled is None or node_refs(n) <= settled:
            memo[id(n)] = (n, out)
        else:
            scratch[id(n)] = (n, out)
    return out


def node_nullable(
    node: Node,
    nullable: AbstractSet[str],
    memo: dict[int, tuple[Node, bool]],
    scratch: dict[int, tuple[Node, bool]] | None = None,
    settled: set[str] | None = None,
) -> bool:
    """Whether ``node`` derives the empty string, given the nullable rules.

    Memoized by identity in ``memo`` (it holds the nodes, so no id is reused while an entry
    exists), so linear in the IR DAG.  With ``scratch``, only nodes that reference ``settled``
    rules alone are stored in ``memo`` (their answer is final); the others go to ``scratch``
    (valid while ``nullable`` does not change)."""
    return _derives(node, nullable, True, memo, scratch, settled)


def node_productive(node: Node, productive: AbstractSet[str]) -> bool:
    """Whether ``node`` derives some string, given the productive rules.  Short-circuit walk
    without a memo (each call sees a different rule set): O(nodes visited)."""
    return _derives(node, productive, False, None)


def nullable_rules(rules: Mapping[str, Rule], comps: list[list[str]]) -> set[str]:
    """The rules of ``comps`` (call-graph components, callees first, see :func:`rule_sccs`)
    that derive the empty string: least fixpoint per component, so a rule outside a cycle is
    looked at once and subtrees whose rules are all settled are never walked again.
    O(IR DAG x fixpoint rounds of the largest component)."""
    nullable: set[str] = set()
    settled: set[str] = set()
    final: dict[int, tuple[Node, bool]] = {}
    for comp in comps:
        changed = True
        while changed:
            changed = False
            scratch: dict[int, tuple[Node, bool]] = {}  # one round (the set grows)
            for name in comp:
                check_deadline()
                body = rules[name].body
                if name not in nullable and node_nullable(body, nullable, final, scratch, settled):
                    nullable.add(name)
                    changed = len(comp) > 1  # a member may depend on it
        settled.update(comp)
    return nullable


def rule_fixpoint(
    order: Iterable[_V],
    users: Mapping[_V, Collection[_V]],
    holds: Callable[[_V, set[_V]], bool],
) -> set[_V]:
    """The least set of rules closed under ``holds(rule, the set so far)`` (a monotone
    predicate: productive, can finish), driven by a worklist: every rule is asked once in
    ``order`` (callees first settles most rules at once), then a rule is asked again only
    when one of the rules it uses (``users``: rule -> its callers) joined the set.
    O(rules + calls) evaluations of ``holds``, at most."""
    ok: set[_V] = set()
    pending = list(order)
    while pending:
        nxt: list[_V] = []
        for n in pending:
            if n not in ok and holds(n, ok):
                ok.add(n)
                nxt.extend(u for u in users.get(n, ()) if u not in ok)
        pending = list(dict.fromkeys(nxt))
    return ok


def productive_rules(by_name: Mapping[str, Rule], refs: Mapping[str, list[str]]) -> set[str]:
    """The rules that derive some string (:func:`rule_fixpoint` over
    :func:`node_productive`).  ``refs`` as from :func:`rule_refs`.  O(IR size x times a rule
    is revisited).  The rules are asked in reverse table order first: the front-ends add a
    rule's name before the rules its body calls, so that is mostly callees first and most
    rules settle on their first visit (the least fixpoint does not depend on the order)."""
    return rule_fixpoint(
        list(by_name)[::-1],
        _users(refs),
        lambda n, ok: node_productive(by_name[n].body, ok),
    )


def always_consumes(node: Node, memo: dict[int, tuple[Node, bool]]) -> bool:
    """True when every string of ``node`` has at least one byte (a rule call may be empty;
    ``Nothing`` counts as not consuming).

    Post-order without recursion (deep IR would overflow the stack), memoized by identity
    in ``memo`` (shared across calls; it holds the node, so no id is reused while its entry
    exists), so linear in the DAG."""
    for n in _post_order(node, lambda k: id(k) in memo):
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


def ir_depth(node: Node) -> int:
    """Nesting depth of an IR tree (a leaf: 1).  O(1): composite nodes cache it at
    construction (:func:`~formcast.ir.nodes.node_depth`)."""
    return node_depth(node)


# -- in-place clean-up of a rule table (name -> Rule, in grammar order) ---------------------------


def drop_unproductive(
    by_name: dict[str, Rule], refs: dict[str, list[str]], productive: AbstractSet[str]
) -> None:
    """Delete the rules outside ``productive`` and replace references to them by ``Nothing``
    (in place; the surviving rules keep their order).  O(size of the rules touched)."""
    dead: dict[str, Node] = {name: NOTHING for name in by_name if name not in productive}
    if not dead:
        return
    users = _users(refs)
    touched = {t for d in dead for t in users.get(d, ())}
    for n in dead:
        del by_name[n]
        del refs[n]
    for t in touched:
        if t in by_name:
            r = by_name[t]
            by_name[t] = Rule(r.name, substitute(r.body, dead), r.terminal, r.lazy)
            refs[t] = _ref_list(by_name[t].body)


class _InlineState:
    """The bookkeeping of one :func:`inline_single_use` call (made and dropped by it; mutates
    ``by_name``): a class, not closures over the call's locals, because recursive or mutually
    referring closures are reference cycles (the closures hold their environment, the
    environment the closures), freed only by the cyclic collector with everything they hold
    (docs/notes/ttfm37.md)."""

    def __init__(self, by_name: dict[str, Rule], home: dict[str, str]) -> None:
        self.by_name = by_name
        self.home = home  # the rule whose own (stored) body holds the reference
        self.gone: dict[str, Rule] = {}  # rules inlined (out of ``by_name``), bodies as stored
        self.pending: dict[str, list[str]] = {}  # rule -> children still to substitute
        self.absorbed: dict[str, str] = {}  # a set-aside rule -> the rule whose body holds it
        self.bound: dict[str, int] = {}  # an upper bound of a rule's depth (exact when settled)

    def bound_of(self, name: str) -> int:
        got = self.bound.get(name)
        if got is None:
            got = self.bound[name] = ir_depth(self.by_name[name].body)
        return got

    def stored(self, name: str) -> Rule:
        rule = self.by_name.get(name)
        return rule if rule is not None else self.gone[name]

    def build(self, name: str) -> None:
        """Substitute the pending children (and theirs, bottom-up) into ``name``'s body."""
        pending = self.pending
        if name not in pending:
            return
        by_name = self.by_name
        order: list[str] = []
        stack = [name]
        while stack:  # pre-order of the pending tree: every rule before its children
            n = stack.pop()
            order.append(n)
            stack.extend(pending.get(n, ()))
        for n in reversed(order):
            kids = pending.pop(n, None)
            if not kids:
                continue
            r = self.stored(n)
            body = substitute(r.body, {k: self.stored(k).body for k in kids})
            built = Rule(r.name, body, r.terminal, r.lazy)
            if n in by_name:
                by_name[n] = built
            else:
                self.gone[n] = built
            self.bound[n] = ir_depth(body)
            for k in kids:
                self.absorbed[k] = n

    def exact_depth(self, name: str) -> int:
        self.build(name)
        return self.bound_of(name)

    def host(self, child: str) -> str:
        h = self.home[child]
        absorbed = self.absorbed
        while h in absorbed:
            h = absorbed[h]
        return h


def inline_single_use(
    by_name: dict[str, Rule],
    refs: dict[str, list[str]],
    start: str,
    *,
    max_depth: int,
    max_passes: int,
) -> None:
    """Substitute rules referenced exactly once (not the start, not terminals, not marked
    rules (:mod:`.marks`), not self-referencing) into their one user, in place, for up to
    ``max_passes`` rounds, as long as the user stays within ``max_depth`` levels of IR
    nesting (IR nodes hash recursively, so trees are kept shallow).

    The rounds are planned as before (a chain of single-use rules moves one level a round into
    its top user, which must have room for each child's depth), but no body is rebuilt while
    planning: a rule inlined into its user is set aside with the children inlined into it, and
    every user's body is built once at the end, bottom-up (``substitute`` of the children's
    finished bodies: the IR builders flatten associatively, so this is the body the rounds'
    successive substitutions would build).  The depth checks use an upper bound (a reference
    replaced by a body of depth ``d`` adds at most ``d - 1`` levels; the builders never add
    levels); where the bound does not settle a check, the user and its children are built
    then and checked exactly, so the rules inlined, and the grammar, are those of the
    round-by-round substitution.  O(passes x rules) plus the substituted bodies (each built
    once)."""
    counts: dict[str, int] = {}
    holder: dict[str, str] = {}  # the rule that uses it now (its reference may lie deeper)
    for n, rs in refs.items():
        for m in rs:
            counts[m] = counts.get(m, 0) + 1
            holder[m] = n
    st = _InlineState(by_name, dict(holder))
    gone = st.gone
    pending = st.pending
    bound = st.bound

    # the rules that may be inlined (in the order of their first reference); what rules them
    # out here never changes (a user keeps its kind), the other conditions are asked per pass
    cands = [
        n
        for n, c in counts.items()
        if c == 1
        and n != start
        and n in by_name
        and not by_name[n].terminal
        and not is_marked_rule(n)  # a run-time check finds it on the parser stack
    ]
    for _ in range(max_passes):
        plan: dict[str, list[str]] = {}
        for n in cands:
            if n not in by_name:  # inlined
                continue
            user = holder[n]
            if user == n or user not in by_name or n in refs[n] or n in plan:
                continue
            plan.setdefault(user, []).append(n)
        # a rule inlined this pass must not receive inlines itself in the same pass
        progress = False
        inlined = {c for cs in plan.values() for c in cs}
        for user, children in plan.items():
            if user not in by_name or user in inlined:
                continue
            room = max_depth - st.bound_of(user)
            chosen = [ch for ch in children if st.bound_of(ch) <= room]
            if len(chosen) < len(children):  # the bounds do not settle it: exact depths
                room = max_depth - st.exact_depth(user)
                chosen = [ch for ch in children if st.exact_depth(ch) <= room]
            if not chosen:
                continue
            grow = max(st.bound_of(ch) for ch in chosen) - 1
            if grow > 0:
                bound[user] = st.bound_of(user) + grow
            for child in chosen:
                pending.setdefault(st.host(child), []).append(child)
                gone[child] = by_name.pop(child)
            drop = set(chosen)
            refs[user] = [x for x in refs[user] if x not in drop]
            for child in chosen:
                refs[user].extend(refs[child])
                for m in refs[child]:
                    holder[m] = user
                del refs[child]
            progress = True
        if not progress:
            break
        cands = [n for n in cands if n in by_name]
    for name in list(pending):
        if name in by_name:
            st.build(name)


def drop_unreachable(
    by_name: Mapping[str, Rule], refs: Mapping[str, list[str]], start: str
) -> Grammar:
    """The grammar of the rules reachable from ``start`` (start first, the others in table
    order).  O(rules + references)."""
    reach = set(reachable_rules(start, lambda n: [m for m in refs[n] if m in by_name], by_name))
    ordered = [r for n, r in by_name.items() if n in reach]
    ordered.sort(key=lambda r: r.name != start)
    return Grammar(tuple(ordered), start)


# -- the automaton compiler's rewrites ------------------------------------------------------------


def _count_refs(node: Node, uses: dict[str, int]) -> None:
    """Add one to ``uses[name]`` per :class:`RuleRef` occurrence under ``node`` (what counting
    :func:`iter_refs` gives: once per occurrence in the tree; ``KeyError`` for a name not in
    ``uses``), as a plain loop instead of a generator; reference-free subtrees are skipped.
    Mutates ``uses`` only.  O(the part of the tree that leads to references)."""
    stack: list[Node] = [node]
    while stack:
        n = stack.pop()
        tp = type(n)
        if tp is RuleRef:
            uses[n.name] += 1  # type: ignore[attr-defined]
        elif tp is Concat or tp is Alt:
            for it in n.items:  # type: ignore[attr-defined]
                ti = type(it)
                if ti is RuleRef or (
                    (ti is Concat or ti is Alt or ti is Repeat) and it.refs
                ):
                    stack.append(it)
        elif tp is Repeat:
            it = n.item  # type: ignore[attr-defined]
            if node_refs(it):
                stack.append(it)


def inline_rules(
    grammar: Grammar,
    *,
    expand_rounds: int,
    inline_max_nodes: int,
    inline_shared_max_nodes: int,
    expand_max_nodes: int,
    expanded_max_nodes: int,
) -> tuple[list[str], dict[str, Node]]:
    """Inline the non-recursive, unmarked (:mod:`.marks`) rules reachable from the start;
    returns (kept rule names, start first, the others sorted; their bodies).

    A non-recursive rule is substituted into its callers when its body has at most
    ``inline_shared_max_nodes`` IR nodes, or is used once and has at most
    ``inline_max_nodes`` (a larger shared definition stays one rule, compiled once).  Then,
    for ``expand_rounds`` rounds, recursive rules of at most ``expand_max_nodes`` are expanded
    into their callers while a caller stays within ``expanded_max_nodes`` (same language;
    fewer tokens cross a call boundary).  Rules no longer referenced are dropped.

    Raises :class:`GrammarError` for an undefined start rule or an undefined reference.
    O(IR DAG) plus the substituted bodies."""
    rules = grammar.rule_map()
    if grammar.start not in rules:
        raise GrammarError(f"the start rule {grammar.start!r} is not defined")
    # only rules reachable from the start matter
    reachable = set(
        reachable_rules(grammar.start, lambda n: node_refs(rules[n].body), rules, strict=True)
    )
    graph = {n: node_refs(rules[n].body) for n in reachable}
    uses: dict[str, int] = dict.fromkeys(reachable, 0)
    for n in reachable:
        check_deadline()
        _count_refs(rules[n].body, uses)
    comps = rule_sccs(graph)  # callees first
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
            if name in recursive or name == grammar.start or is_marked_rule(name):
                continue
            size = node_size(body)
            # small rules are inlined everywhere; larger ones only where used once (a shared
            # definition stays one rule, compiled once, instead of one copy per use)
            if size <= inline_shared_max_nodes or (uses[name] <= 1 and size <= inline_max_nodes):
                inlinable[name] = body
    others = sorted(n for n in reachable if n not in inlinable and n != grammar.start)
    kept = [grammar.start, *others]
    # call-site expansion of small recursive rules (a few rounds): callers see the callees'
    # bytes directly (same language), so fewer tokens cross a call boundary
    small = {n: bodies[n] for n in kept if node_size(bodies[n]) <= expand_max_nodes}
    expanded: dict[str, Node] = {}
    for name in kept:
        body = bodies[name]
        for _ in range(expand_rounds):
            callees = {c: small[c] for c in node_refs(body) if c in small and c != name}
            if not callees:
                break
            new_body = substitute(body, callees)
            if node_size(new_body) > expanded_max_nodes:
                break
            body = new_body
        expanded[name] = body
    # drop rules no longer referenced
    live = set(reachable_rules(grammar.start, lambda n: node_refs(expanded[n]), expanded))
    kept = [n for n in kept if n in live]
    return kept, {n: expanded[n] for n in kept}


class _Outliner:
    """The state of one :func:`outline_repeats` call (made and dropped by it; grows ``names``
    and ``bodies``): a class, not closures over the call's locals (closures that refer to each
    other are a reference cycle through their environment, freed only by the cyclic
    collector; docs/notes/ttfm37.md).  :func:`~formcast.ir.nodes.rebuild` gets its bound
    methods for the one body it rebuilds."""

    def __init__(
        self,
        names: list[str],
        bodies: dict[str, Node],
        count_min_copies: int,
        outline_min_nodes: int,
        outline_min_item: int,
    ) -> None:
        self.names = names
        self.bodies = bodies
        self.count_min_copies = count_min_copies
        self.outline_min_nodes = outline_min_nodes
        self.outline_min_item = outline_min_item
        self.made: dict[Node, str] = {}
        self.counted: dict[tuple[Node, int, int | None], str] = {}
        self.counts: dict[str, tuple[int, int | None]] = {}
        self.consumes: dict[int, tuple[Node, bool]] = {}
        self.todo = list(names)
        self.current = ""  # the rule whose body is being rebuilt

    def new_rule(self, stem: str, body: Node) -> str:
        rule = f"{self.current}#{stem}{len(self.made) + len(self.counted)}"
        self.bodies[rule] = body
        self.names.append(rule)
        self.todo.append(rule)
        return rule

    def leaf(self, n: Node) -> Node | None:
        if not isinstance(n, Repeat):
            return None
        copies = max(n.min, n.max or n.min)
        if copies >= self.count_min_copies and always_consumes(n.item, self.consumes):
            key = (n.item, n.min, n.max)
            rule = self.counted.get(key)
            if rule is None:
                rule = self.new_rule("count", n.item)
                self.counted[key] = rule
                self.counts[rule] = (n.min, n.max)
            return RuleRef(rule)
        size = node_size(n.item)
        if copies > 1 and size >= self.outline_min_item and size * copies > self.outline_min_nodes:
            rule = self.made.get(n.item)
            if rule is None:
                rule = self.new_rule("rep", n.item)
                self.made[n.item] = rule
            return repeat(RuleRef(rule), n.min, n.max)
        return None

    def descend(self, n: Node) -> bool:
        # only subtrees holding a repeat of two or more copies can change (the count is
        # cached per node), so strings' character loops and literals are not visited
        return node_copies(n) >= 2


def outline_repeats(
    names: list[str],
    bodies: dict[str, Node],
    *,
    count_min_copies: int,
    outline_min_nodes: int,
    outline_min_item: int,
) -> dict[str, tuple[int, int | None]]:
    """Move large repeated items into rules of their own (in place: ``names`` and ``bodies``
    grow); returns the counted rules and their bounds.

    * ``X{lo,hi}`` with at least ``count_min_copies`` copies of an ``X`` that always consumes
      becomes a call to a *counted rule* whose body is ``X`` (compiled once whatever the
      bounds; the parser counts iterations).
    * ``X{1,20}`` with an ``X`` of at least ``outline_min_item`` nodes whose copies would
      exceed ``outline_min_nodes`` becomes twenty calls to a rule ``X``, compiled once.

    Iterative, shares identical items (and identical counted repeats).  Visits only subtrees
    holding a repeat of two or more copies: O(those subtrees).
    """
    o = _Outliner(names, bodies, count_min_copies, outline_min_nodes, outline_min_item)
    todo = o.todo
    while todo:
        name = todo.pop()
        o.current = name
        bodies[name] = rebuild(bodies[name], o.leaf, o.descend)
    return o.counts
