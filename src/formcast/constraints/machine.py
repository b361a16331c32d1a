"""``StateMachine``: a constraint written as a transition table.

``StateMachine(start, accepting, transitions)`` with ``transitions`` a list of
``(source, label, target)``: the language is every concatenation of the labels along a path
from ``start`` to a state in ``accepting``.  Labels are strings (literals) or any constraint
(``regex``, ``json``, a ``select``...), so a protocol such as
``greet → ask(question) → answer(json) → done`` is one table.

Checks (each a :class:`~formcast.errors.ConstraintError` naming the states or transitions):

* at construction: a malformed table (not triples, no accepting state), states that cannot be
  reached from ``start``, states from which no accepting state can be reached;
* at compile time (:meth:`StateMachine.check`, run by every lowering): a label that matches the
  empty string (a transition must consume output), and *ambiguous transitions*: two
  transitions out of one state whose labels match a common string (the same output would lead
  to two states).  Two regular labels (literals, regexes and their combinations) are compared
  exactly, on the product of their DFAs; a label with a ``json`` or a rule in it is compared
  to the others only for equality (a literal text against a schema is not checked).

Lowering: the table becomes one IR expression by state elimination (Brzozowski–McCluskey),
eliminating the state with the fewest ``in × out`` paths first; labels are lowered once and
shared.  A table of regular labels is thus a regular expression and compiles down the regex
path (one minimal DFA, the same program and masks as ``compile_regex`` of the equivalent
pattern); the elimination itself is O(edges) for a chain or a tree of states, and charges the
compile's fuel (a dense table can grow the expression; it fails closed with
:class:`~formcast.errors.CompileBudgetError` rather than running away).

Lifetime: immutable value object, like every constraint; checks and lowering are pure.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..automata.regular import compile_dfa
from ..errors import ConstraintError
from ..ir import nodes as ir
from ..ir.passes import node_nullable
from ..limits import CompileLimits, current_budget
from .core import Constraint, Literal, _join, _Lowering, as_constraint

__all__ = ["State", "StateMachine"]

State = Hashable
"""A state name: any hashable value (usually a ``str``)."""

_START = object()  # the elimination's own start and end (no user state is either)
_END = object()


def _show(state: Any) -> str:
    return repr(state)


@dataclass(frozen=True, eq=False)
class StateMachine(Constraint):
    """The concatenations of labels along the paths from ``start`` to an accepting state.

    Args:
        start: the initial state.
        accepting: the accepting states (an iterable of states; a ``str`` is one state).
        transitions: ``(source, label, target)`` triples; ``label`` is a ``str`` (a literal)
            or a :class:`Constraint`.

    Raises:
        ConstraintError: not a list of triples, no accepting state, unreachable states,
            states that can never reach acceptance (each error names the states).
    """

    start: State
    accepting: Any
    transitions: Any
    _edges: tuple[tuple[State, Constraint, State], ...] = field(init=False, repr=False)
    _accepting: frozenset[State] = field(init=False, repr=False)
    _digest: str | None = field(init=False, repr=False, default=None)
    kind: ClassVar[str] = "machine"

    def __post_init__(self) -> None:
        acc = self.accepting
        accepting = frozenset([acc] if isinstance(acc, (str, int)) else _states(acc))
        if not accepting:
            raise ConstraintError("a state machine needs at least one accepting state")
        if isinstance(self.transitions, (str, bytes)) or not isinstance(self.transitions, Iterable):
            raise ConstraintError(
                "transitions must be a list of (source, label, target) triples",
                path="transitions",
            )
        edges: list[tuple[State, Constraint, State]] = []
        for i, t in enumerate(self.transitions):
            where = f"transitions[{i}]"
            if not isinstance(t, tuple) or len(t) != 3:
                raise ConstraintError(
                    f"a transition is a (source, label, target) tuple, got {t!r}", path=where
                )
            src, label, dst = t
            for s in (src, dst):
                if not isinstance(s, Hashable):
                    raise ConstraintError(f"state {s!r} is not hashable", path=where)
            edges.append((src, as_constraint(label, where), dst))
        object.__setattr__(self, "_edges", tuple(edges))
        object.__setattr__(self, "_accepting", accepting)
        object.__setattr__(self, "accepting", accepting)
        object.__setattr__(self, "transitions", tuple(edges))
        self._check_structure()
        self._set_digest()

    # -- checks -------------------------------------------------------------------------------
    @property
    def states(self) -> tuple[State, ...]:
        """Every state, in order of first appearance (``start`` first)."""
        seen: dict[State, None] = {self.start: None}
        for src, _, dst in self._edges:
            seen.setdefault(src)
            seen.setdefault(dst)
        for a in self._accepting:
            seen.setdefault(a)
        return tuple(seen)

    def _check_structure(self) -> None:
        out: dict[State, list[State]] = {}
        back: dict[State, list[State]] = {}
        for src, _, dst in self._edges:
            out.setdefault(src, []).append(dst)
            back.setdefault(dst, []).append(src)
        reach = _closure([self.start], out)
        states = self.states
        unreachable = [s for s in states if s not in reach]
        if unreachable:
            raise ConstraintError(
                f"states {', '.join(map(_show, unreachable))} cannot be reached from the "
                f"start state {_show(self.start)}: add a transition to them or remove them",
                path="machine",
            )
        alive = _closure(self._accepting, back)
        dead = [s for s in states if s not in alive]
        if dead:
            raise ConstraintError(
                f"states {', '.join(map(_show, dead))} can never reach an accepting state "
                f"(accepting: {', '.join(map(_show, self._accepting))}): add a way out or "
                "make them accepting",
                path="machine",
            )

    def check(self, limits: CompileLimits | None = None, path: str = "") -> None:
        """The compile-time checks: no label matches the empty string, no two transitions
        out of one state match a common string (see the module docs).

        Raises:
            ConstraintError: naming the transitions.
        """
        lo = _Lowering(limits or CompileLimits())
        self._check_labels(lo, path, [lo.lower(lab, "") for _, lab, _ in self._edges])

    def _check_labels(self, lo: _Lowering, path: str, nodes: list[ir.Node]) -> None:
        def where(i: int) -> str:
            return _join(path, f"transitions[{i}]")

        def name(i: int) -> str:
            src, lab, dst = self._edges[i]
            shown = repr(lab.text) if isinstance(lab, Literal) else lab.kind
            return f"transitions[{i}] ({_show(src)} --{shown}--> {_show(dst)})"

        dfas: dict[int, Any] = {}

        def dfa_of(i: int) -> Any:
            if i not in dfas:
                # on the compile's fuel tank when there is one (GrammarCompiler.compile)
                dfas[i] = compile_dfa(nodes[i], lo.limits, current_budget())
            return dfas[i]

        regular = [ir.is_regular(n) for n in nodes]
        nullable_memo: dict[int, tuple[ir.Node, bool]] = {}
        by_source: dict[State, list[int]] = {}
        for i, (src, lab, _) in enumerate(self._edges):
            by_source.setdefault(src, []).append(i)
            if isinstance(lab, Literal):
                if not lab.text:
                    raise ConstraintError(
                        f"{name(i)} has an empty label: a transition must consume output "
                        "(make the source accepting, or merge the states)",
                        path=where(i),
                    )
            elif regular[i] and node_nullable(nodes[i], frozenset(), nullable_memo):
                raise ConstraintError(
                    f"{name(i)} can match the empty string: a transition must consume output",
                    path=where(i),
                )
        for ids in by_source.values():
            if len(ids) < 2:
                continue
            texts: dict[str, int] = {}
            others: list[int] = []
            for i in ids:
                lab = self._edges[i][1]
                if isinstance(lab, Literal):
                    j = texts.get(lab.text)
                    if j is not None:
                        raise _ambiguous(name(j), name(i), repr(lab.text), where(i))
                    texts[lab.text] = i
                else:
                    others.append(i)
            for k, i in enumerate(others):
                for j in others[:k]:
                    if nodes[i] == nodes[j]:
                        raise _ambiguous(name(j), name(i), "the same strings", where(i))
                    if regular[i] and regular[j]:
                        common = _common_string(dfa_of(j), dfa_of(i))
                        if common is not None:
                            raise _ambiguous(name(j), name(i), repr(common), where(i))
                if not regular[i]:
                    continue
                for text, j in texts.items():
                    if _accepts(dfa_of(i), text):
                        raise _ambiguous(name(j), name(i), repr(text), where(i))

    # -- lowering -----------------------------------------------------------------------------
    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        labels: list[ir.Node] = [
            lo.lower(lab, _join(path, f"transitions[{i}]"))
            for i, (_, lab, _) in enumerate(self._edges)
        ]
        self._check_labels(lo, path, labels)
        # R[p][q]: the expression from p to q; parallel edges are one alternation
        fwd: dict[Any, dict[Any, list[ir.Node]]] = {}

        def add(p: Any, q: Any, n: ir.Node) -> None:
            fwd.setdefault(p, {}).setdefault(q, []).append(n)

        add(_START, self.start, ir.EMPTY)
        for a in self._accepting:
            add(a, _END, ir.EMPTY)
        for (src, _, dst), n in zip(self._edges, labels):
            add(src, dst, n)
        edge: dict[Any, dict[Any, ir.Node]] = {
            p: {q: ir.alt(ns) for q, ns in qs.items()} for p, qs in fwd.items()
        }
        into: dict[Any, set[Any]] = {}
        for p, qs in edge.items():
            for q in qs:
                into.setdefault(q, set()).add(p)
        self._fold_chains(edge, into)
        # eliminate the state with the fewest in x out paths first (a heap, lazily updated:
        # an entry whose cost is stale is skipped), ties in order of first appearance
        order = {s: i for i, s in enumerate(self.states)}

        def cost(s: Any) -> int:
            return len(into.get(s, ())) * len(edge.get(s, {}))

        heap = [(cost(s), i, s) for s, i in order.items() if s in edge or s in into]
        heapq.heapify(heap)
        done: set[Any] = set()
        while heap:
            c, _, k = heapq.heappop(heap)
            if k in done or c != cost(k):
                if k not in done:
                    heapq.heappush(heap, (cost(k), order[k], k))
                continue
            done.add(k)
            outs = edge.pop(k, {})
            ins = into.pop(k, set())
            loop = outs.pop(k, None)
            ins.discard(k)
            star = ir.EMPTY if loop is None else ir.repeat(loop, 0, None)
            for p in ins:
                row = edge[p]
                head = ir.concat([row.pop(k), star])
                for q, tail in outs.items():
                    through = ir.concat([head, tail])
                    old = row.get(q)
                    row[q] = through if old is None else ir.alt([old, through])
                    into.setdefault(q, set()).add(p)
            for q in outs:
                into[q].discard(k)
        return edge.get(_START, {}).get(_END, ir.NOTHING)

    def _fold_chains(self, edge: dict[Any, dict[Any, ir.Node]], into: dict[Any, set[Any]]) -> None:
        """Replace each chain ``p -> k1 -> ... -> kn -> q`` of states with one way in and one
        way out by one edge ``p -> q`` labelled with the whole concatenation, built at once
        (eliminating the states one by one would rebuild a growing concatenation each time:
        quadratic in the chain's length)."""

        singles = set()
        for k in self.states:
            outs = edge.get(k)
            if len(into.get(k, ())) == 1 and outs is not None and len(outs) == 1 and k not in outs:
                singles.add(k)
        for k in self.states:
            if k not in singles or k not in into:
                continue  # (not a chain state, or folded into its chain's edge already)
            (p,) = into[k]
            if p in singles:
                continue  # not the head of its chain (a chain that is all one cycle stays)
            parts = [edge[p].pop(k)]
            into[k].discard(p)
            cur = k
            while cur in singles:
                ((nxt, label),) = edge.pop(cur).items()
                into.pop(cur, None)
                into[nxt].discard(cur)
                parts.append(label)
                cur = nxt
            through = ir.concat(parts)
            old = edge[p].get(cur)
            edge[p][cur] = through if old is None else ir.alt([old, through])
            into.setdefault(cur, set()).add(p)

    def _digest_parts(self) -> list[str] | None:
        parts = ["machine", repr(self.start), *sorted(map(repr, self._accepting)), "|"]
        for src, lab, dst in self._edges:
            key = lab.cache_key()
            if key is None:
                return None
            parts += [repr(src), key, repr(dst)]
        return parts


def _states(values: Iterable[Any]) -> list[State]:
    out = list(values)
    for s in out:
        if not isinstance(s, Hashable):
            raise ConstraintError(f"state {s!r} is not hashable", path="accepting")
    return out


def _closure(roots: Iterable[State], graph: dict[State, list[State]]) -> set[State]:
    seen = set(roots)
    todo = deque(seen)
    while todo:
        s = todo.popleft()
        for t in graph.get(s, ()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def _ambiguous(first: str, second: str, common: str, path: str) -> ConstraintError:
    return ConstraintError(
        f"ambiguous transitions: {first} and {second} both match {common}, so the same output "
        "leads to two states; make the labels disjoint or merge the targets",
        path=path,
    )


def _accepts(dfa: Any, text: str) -> bool:
    s = int(dfa.start)
    for b in text.encode("utf-8"):
        s = int(dfa.table[s, b])
        if s == 0:
            return False
    return bool(dfa.accepting[s])


def _common_string(a: Any, b: Any) -> str | None:
    """A shortest string both DFAs accept (breadth first on their product), or None."""
    start = (int(a.start), int(b.start))
    parent: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    todo = deque([start])
    while todo:
        pa, pb = todo.popleft()
        if a.accepting[pa] and b.accepting[pb]:
            out = bytearray()
            cur: tuple[int, int] = (pa, pb)
            while True:
                step = parent[cur]
                if step is None:
                    break
                cur, byte = step
                out.append(byte)
            return bytes(reversed(out)).decode("utf-8", "replace")
        ra = a.table[pa]
        rb = b.table[pb]
        live = np.nonzero((ra != 0) & (rb != 0))[0]
        for byte in live.tolist():
            nxt = (int(ra[byte]), int(rb[byte]))
            if nxt not in parent:
                parent[nxt] = ((pa, pb), byte)
                todo.append(nxt)
    return None
