"""Left-recursion elimination on the grammar IR (the language is kept; parse trees are not).

formcast needs only the *language* of a grammar (which bytes may come next), never its parse
trees, so a left-recursive grammar (``expr ::= expr "+" term | term``, written for Lark,
llguidance or any LR parser) is rewritten into an equivalent one without left recursion
before automaton construction:

1. **Detection** (cheap, every grammar): a rule is left-recursive when it can reach itself
   without consuming input, through references in *left position* (the first item of a
   sequence, and the next one while everything before it can be empty).  Only rules of
   cyclic call-graph components are examined; most grammars stop here, returned unchanged.
2. **ε-split.** For a rule ``X`` that can derive the empty string, ``X::ne`` is a new rule for
   ``L(X)`` minus the empty string (built structurally: ``(a b)\\ε = a\\ε b | b\\ε`` when ``a``
   is nullable, ``x{m,n}\\ε = x\\ε x{0,n-1}`` when ``x`` is), and references in left position
   are read as ``ε | X::ne``.  The unknowns of the left-recursive components are then
   ε-free, which makes hidden left recursion (``a ::= b a "x"`` with ``b ::= "y"?``) visible.
3. **Left-linear equations.** Each rule body of a left-recursive component ``S`` is split into
   ``base | U1 rest1 | U2 rest2 ...`` where the ``Ui`` are the ε-free members of ``S`` in left
   position and ``base`` has none.  The system is solved by Paull's algorithm (substitute the
   earlier members, then Arden's rule ``A = A r | b  =>  A = b r*``, the least solution).
   Afterwards every member starts only with later members or with rules outside ``S``, so
   no cycle without input is left.

Everything is exact for any IR (repeats, nested alternatives, nullable rules, useless
cycles such as ``a ::= a``).  A component whose rewrite would exceed
:data:`MAX_REWRITE_NODES` IR nodes raises :class:`UnsupportedFeatureError` naming a rule.

Lifetime: a pure function of the grammar.  Costs: detection O(IR DAG of the recursive rules
x nullable-fixpoint rounds); the rewrite O(DAG x component size) for left-recursive grammars.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import UnsupportedFeatureError
from ..limits import check_deadline
from .nodes import (
    EMPTY,
    NOTHING,
    Alt,
    Concat,
    Grammar,
    Node,
    Repeat,
    Rule,
    RuleRef,
    alt,
    concat,
    node_refs,
    node_size,
    repeat,
)
from .passes import node_nullable, nullable_rules, reachable_rules, rule_sccs

__all__ = [
    "MAX_REWRITE_NODES",
    "eliminate_left_recursion",
    "left_recursive_rules",
]

#: a left-recursive component whose rewritten rules exceed this IR tree size is refused
MAX_REWRITE_NODES = 2_000_000

_HINT = (
    "it could not be rewritten automatically; write the recursion as a repetition, "
    'e.g. expr ::= term ("+" term)*'
)


def _left_refs(node: Node, nullable: set[str], memo: dict[int, tuple[Node, bool]]) -> set[str]:
    """Rules referenced in left position of ``node`` (reachable before any input)."""
    out: set[str] = set()
    stack = [node]
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen or not node_refs(n):
            continue
        seen.add(id(n))
        if isinstance(n, RuleRef):
            out.add(n.name)
        elif isinstance(n, Alt):
            stack.extend(n.items)
        elif isinstance(n, Repeat):
            stack.append(n.item)
        elif isinstance(n, Concat):
            for item in n.items:
                stack.append(item)
                if not node_nullable(item, nullable, memo):
                    break
    return out


def _cyclic(comps: list[list[str]], graph: Mapping[str, set[str]]) -> list[list[str]]:
    return [c for c in comps if len(c) > 1 or c[0] in graph[c[0]]]


def _analyse(grammar: Grammar) -> tuple[dict[str, Rule], list[str], set[str], list[list[str]]]:
    """(rules, reachable rule names, the nullable rules among those the recursive rules call
    (transitively; all that the rewrite asks about), left-recursive components)."""
    rules = dict(grammar.rule_map())
    # an undefined rule is skipped here: it is reported by the automaton layer
    reachable = reachable_rules(
        grammar.start, lambda name: sorted(node_refs(rules[name].body)), rules
    )
    call_graph = {n: {r for r in node_refs(rules[n].body) if r in rules} for n in reachable}
    call_comps = rule_sccs(call_graph)  # callees first
    recursive = {n for c in _cyclic(call_comps, call_graph) for n in c}
    if not recursive:
        return rules, reachable, set(), []
    # only the rules the recursive ones call (transitively) can matter to left recursion and
    # to its rewrite: the nullable fixpoint is run on those (a component is reachable whole),
    # not on every rule of the grammar (JSON Schema: the "any value" rules, not the hundreds
    # of property and pattern rules)
    needed = set(recursive)
    todo = list(recursive)
    while todo:
        for callee in call_graph[todo.pop()]:
            if callee not in needed:
                needed.add(callee)
                todo.append(callee)
    nullable = nullable_rules(rules, [c for c in call_comps if c[0] in needed])
    memo: dict[int, tuple[Node, bool]] = {}
    left_graph = {
        n: {r for r in _left_refs(rules[n].body, nullable, memo) if r in recursive}
        for n in reachable
        if n in recursive
    }
    return rules, reachable, nullable, _cyclic(rule_sccs(left_graph), left_graph)


def left_recursive_rules(grammar: Grammar) -> list[list[str]]:
    """The left-recursive components of ``grammar`` (rules that can reach one another, or
    themselves, without consuming input); empty when there is no left recursion."""
    return _analyse(grammar)[3]


class _Rewriter:
    """ε-free variants of rules and left-linear splits (see the module docstring)."""

    def __init__(self, rules: dict[str, Rule], nullable: set[str]) -> None:
        self.rules = rules
        self.nullable = nullable
        self.memo: dict[int, tuple[Node, bool]] = {}
        self.ne_names: dict[str, str] = {}  # rule -> its ε-free variant's name
        self.pending: list[str] = []  # ε-free variants still to be built (not in a component)
        self.solved: set[str] = set()  # rules whose ε-free variant comes from the equations
        self._ne_memo: dict[int, tuple[Node, Node]] = {}
        self._taken = set(rules)

    def is_nullable(self, node: Node) -> bool:
        return node_nullable(node, self.nullable, self.memo)

    def ne_name(self, rule: str) -> str:
        """Name of the rule for ``L(rule)`` minus the empty string (made on first use)."""
        name = self.ne_names.get(rule)
        if name is None:
            name = f"{rule}::ne"
            k = 1
            while name in self._taken:
                k += 1
                name = f"{rule}::ne{k}"
            self._taken.add(name)
            self.ne_names[rule] = name
            if rule not in self.solved:
                self.pending.append(rule)
        return name

    def unknown(self, rule: str) -> str:
        """The ε-free rule standing for ``rule`` in the equations."""
        return self.ne_name(rule) if rule in self.nullable else rule

    def ne(self, node: Node) -> Node:
        """``L(node)`` minus the empty string."""
        if not self.is_nullable(node):
            return node
        hit = self._ne_memo.get(id(node))
        if hit is not None:
            return hit[1]
        check_deadline()
        out: Node
        if isinstance(node, RuleRef):
            out = RuleRef(self.ne_name(node.name))
        elif isinstance(node, Alt):
            out = alt(self.ne(i) for i in node.items)
        elif isinstance(node, Concat):  # every item is nullable
            items = node.items
            out = alt(concat([self.ne(items[i]), *items[i + 1 :]]) for i in range(len(items)))
        elif isinstance(node, Repeat):
            if self.is_nullable(node.item):  # x{0,k} = (x\ε){0,k} for a nullable x
                item = self.ne(node.item)
                out = concat([item, repeat(item, 0, None if node.max is None else node.max - 1)])
            else:  # min == 0
                out = repeat(node.item, 1, node.max)
        else:  # Empty, an empty Literal
            out = NOTHING
        self._ne_memo[id(node)] = (node, out)
        return out

    def split(
        self,
        node: Node,
        comp: Mapping[str, str],
        memo: dict[int, tuple[Node, Node, dict[str, Node]]],
    ) -> tuple[Node, dict[str, Node]]:
        """``(base, rests)`` with ``L(node) = L(base) | U_X L(rests[X])`` over the members
        ``X`` of the component (``U_X`` = ``L(X)`` minus the empty string); ``base`` starts
        with no member.  ``comp`` maps each member's name, and the name of its ε-free variant,
        to the member."""
        if node_refs(node).isdisjoint(comp):
            return node, {}
        hit = memo.get(id(node))
        if hit is not None:
            return hit[1], hit[2]
        check_deadline()
        orig = node
        base: Node
        rests: dict[str, list[Node]] = {}
        if isinstance(node, RuleRef):  # a member (ε | U_X when nullable), or U_X itself
            member = comp[node.name]
            base = EMPTY if node.name == member and member in self.nullable else NOTHING
            out_rests: dict[str, Node] = {member: EMPTY}
        else:
            if isinstance(node, Repeat):
                item, lo, hi = node.item, node.min, node.max
                if self.is_nullable(item):
                    # x{m,n} = ε | x\ε (x\ε){0,n-1}  (a star of a nullable item is costly
                    # to determinize: every closure walks its empty paths)
                    item = self.ne(item)
                    tail = repeat(item, 0, None if hi is None else hi - 1)
                    node = alt([EMPTY, concat([item, tail])])
                else:  # x{m,n} = (ε if m = 0) | x x{m-1,n-1}
                    tail = repeat(item, max(lo - 1, 0), None if hi is None else hi - 1)
                    head = concat([item, tail])
                    node = alt([EMPTY, head]) if lo == 0 else head
            if isinstance(node, Alt):
                bases = []
                for item in node.items:
                    b, r = self.split(item, comp, memo)
                    bases.append(b)
                    for x, rest in r.items():
                        rests.setdefault(x, []).append(rest)
                base = alt(bases)
            elif isinstance(node, Concat):
                items = node.items
                bases = []
                for i, item in enumerate(items):
                    tail = concat(items[i + 1 :])
                    b, r = self.split(item, comp, memo)
                    for x, rest in r.items():
                        rests.setdefault(x, []).append(concat([rest, tail]))
                    if not self.is_nullable(b):
                        bases.append(concat([b, tail]))
                        break
                    bases.append(concat([self.ne(b), tail]))
                else:  # every item can be empty at once
                    bases.append(EMPTY)
                base = alt(bases)
            else:  # a node without members after the Repeat rewrite (e.g. Nothing)
                base = node
            out_rests = {x: alt(parts) for x, parts in rests.items()}
        memo[id(orig)] = (orig, base, out_rests)
        return base, out_rests


def _solve(rw: _Rewriter, comp: list[str]) -> dict[str, Node]:
    """Bodies of the ε-free unknowns of one left-recursive component (Paull + Arden)."""
    members = {x: x for x in comp}
    members.update((rw.unknown(x), x) for x in comp)
    memo: dict[int, tuple[Node, Node, dict[str, Node]]] = {}
    eqs: dict[str, tuple[Node, dict[str, Node]]] = {}
    for x in comp:
        base, rests = rw.split(rw.rules[x].body, members, memo)
        eqs[x] = (rw.ne(base), dict(rests))
    position = {x: i for i, x in enumerate(comp)}
    for i, x in enumerate(comp):
        base, rests = eqs[x]
        for y in comp[:i]:  # ascending: substituting y brings in only later members
            ry = rests.pop(y, None)
            if ry is None:
                continue
            y_base, y_rests = eqs[y]
            base = alt([base, concat([y_base, ry])])
            for z, rz in y_rests.items():
                rests[z] = alt([rests[z], concat([rz, ry])]) if z in rests else concat([rz, ry])
        own = rests.pop(x, None)
        if own is not None:  # Arden: X = X r | b  =>  X = b r*
            star = repeat(rw.ne(own), 0, None)  # r* = (r\ε)*
            base = concat([base, star])
            rests = {z: concat([rz, star]) for z, rz in rests.items()}
        assert all(position[z] > i for z in rests)  # only later members lead now
        eqs[x] = (base, rests)
        size = node_size(base) + sum(node_size(r) for r in rests.values())
        if size > MAX_REWRITE_NODES:
            raise UnsupportedFeatureError(
                "left recursion",
                f"rule {x!r}",
                f"eliminating it would take more than {MAX_REWRITE_NODES} grammar nodes; " + _HINT,
            )
    return {
        rw.unknown(x): alt(
            [base, *(concat([RuleRef(rw.unknown(z)), rz]) for z, rz in sorted(rests.items()))]
        )
        for x, (base, rests) in eqs.items()
    }


def eliminate_left_recursion(grammar: Grammar) -> Grammar:
    """An equivalent grammar without left recursion (``grammar`` itself when it has none).

    The start rule keeps its name; rules of left-recursive components keep their names and
    languages (a nullable one becomes ``ε | X::ne``), and ``X::ne`` rules are added."""
    rules, _reachable, nullable, comps = _analyse(grammar)
    if not comps:
        return grammar
    rw = _Rewriter(rules, nullable)
    for comp in comps:
        rw.solved.update(comp)
    try:
        bodies: dict[str, Node] = {}
        for comp in comps:
            bodies.update(_solve(rw, comp))
        while rw.pending:  # ε-free variants of rules outside the components
            rule = rw.pending.pop()
            bodies[rw.ne_names[rule]] = rw.ne(rules[rule].body)
    except RecursionError:
        raise UnsupportedFeatureError(
            "left recursion", f"rule {comps[0][0]!r}", "the grammar is nested too deeply; " + _HINT
        ) from None
    out: list[Rule] = []
    solved = rw.solved
    for r in grammar.rules:
        if r.name in solved:
            body = (
                alt([EMPTY, RuleRef(rw.ne_names[r.name])]) if r.name in nullable else bodies[r.name]
            )
            out.append(Rule(r.name, body, r.terminal, r.lazy))
        else:
            out.append(r)
    for rule, name in rw.ne_names.items():
        src = rules[rule]
        out.append(Rule(name, bodies[name], src.terminal and rule not in solved, src.lazy))
    return Grammar(tuple(out), grammar.start)
