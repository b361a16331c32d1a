"""Word boundaries (``\\b``, ``\\B``) in JSON Schema patterns, compiled exactly.

A word boundary is a zero-width assertion on the two characters around a position: ``\\b``
holds where exactly one of them is a word character (ECMA 262 without the ``u``/``i`` flags:
``[A-Za-z0-9_]``), ``\\B`` where both or neither are; the start and the end of the string count
as non-word neighbours.  That is regular: :func:`eliminate_boundaries` takes the IR of a whole
string language (a ``pattern`` already in search semantics, :func:`~.regexlang.pattern_node`)
in which each assertion is a :class:`Boundary` node, and returns an ordinary regular node of
the same strings.

Construction: the assertions become two marker symbols outside Unicode (``0x110000`` for
``\\b``, ``0x110001`` for ``\\B``, so no character class can contain them), the node's minimal
automaton ``D`` is built over code points and markers (:func:`~formcast.automata.charfa.
dfa_from_node`), and a subset construction runs over the product of ``D`` with the class of
the previous character (word or not) and the class the next character must have (none, word,
not word): a marker edge is an epsilon move that sets that requirement (dead when it
contradicts one already set), a character edge is allowed when its class meets the
requirement, and a state accepts when ``D`` does and the requirement admits the end (non-word).
The result is minimized and read back as IR by state elimination.  Exact; the automata are
bounded by :data:`MAX_STATES` and the expression by :data:`MAX_SIZE`
(:class:`~formcast.errors.LimitExceededError`, fail closed).

Lifetime: pure functions; callers cache by pattern text.  Cost: one automaton of the pattern,
then O(product states x edges) charged to the compile's fuel.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...automata import charfa
from ...errors import LimitExceededError
from ...ir.nodes import NOTHING, Alt, CharSet, Concat, Node, Repeat, alt, concat, repeat
from ...limits import charge

__all__ = ["MAX_SIZE", "MAX_STATES", "Boundary", "eliminate_boundaries", "has_boundary"]

#: the most states of the automata built here
MAX_STATES = 2_000
#: the most nodes of the expression read back
MAX_SIZE = 5_000

_B = 0x110000  # marker of \b
_NB = 0x110001  # marker of \B
#: ECMA's word characters (no ``u``+``i`` flags), sorted disjoint ranges
WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))


@dataclass(frozen=True, slots=True)
class Boundary(Node):
    """A zero-width ``\\b`` (``negated=False``) or ``\\B`` assertion in a parsed pattern;
    removed by :func:`eliminate_boundaries`."""

    negated: bool


def has_boundary(node: Node) -> bool:
    """Whether ``node`` holds a :class:`Boundary`.  O(tree)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Boundary):
            return True
        if isinstance(n, (Concat, Alt)):
            stack.extend(n.items)
        elif isinstance(n, Repeat):
            stack.append(n.item)
    return False


def _markers(node: Node) -> Node:
    """``node`` with each :class:`Boundary` replaced by its marker symbol."""
    if isinstance(node, Boundary):
        m = _NB if node.negated else _B
        return CharSet(((m, m),))
    if isinstance(node, Concat):
        return concat(_markers(i) for i in node.items)
    if isinstance(node, Alt):
        return alt(_markers(i) for i in node.items)
    if isinstance(node, Repeat):
        return repeat(_markers(node.item), node.min, node.max)
    return node


def _split_by_class(lo: int, hi: int) -> list[tuple[int, int, int]]:
    """``[lo, hi]`` cut into ``(lo, hi, 1 if word characters else 0)`` pieces."""
    out: list[tuple[int, int, int]] = []
    cur = lo
    for wlo, whi in WORD:
        if whi < cur or wlo > hi:
            continue
        if wlo > cur:
            out.append((cur, wlo - 1, 0))
        a, b = max(cur, wlo), min(hi, whi)
        out.append((a, b, 1))
        cur = b + 1
    if cur <= hi:
        out.append((cur, hi, 0))
    return out


# a product state: (state of D, class of the previous character, class the next one must have:
# -1 none, 0 non-word or the end, 1 word)
_State = tuple[int, int, int]


def eliminate_boundaries(node: Node) -> Node:
    """The regular node of the strings ``node`` matches with its :class:`Boundary`
    assertions holding (see the module docstring).

    Raises:
        LimitExceededError: an automaton past :data:`MAX_STATES` or an expression past
            :data:`MAX_SIZE`.
    """
    d = charfa.dfa_from_node(_markers(node), MAX_STATES)
    if d.num_states == 0:
        return NOTHING

    def marker_target(s: int, m: int) -> int:
        for lo, hi, t in d.trans[s]:
            if lo <= m <= hi:
                return t
        return -1

    def closure(states: set[_State]) -> frozenset[_State]:
        todo = list(states)
        seen = set(states)
        while todo:
            s, prev, need = todo.pop()
            for m in (_B, _NB):
                t = marker_target(s, m)
                if t < 0:
                    continue
                # \b: the next character's class differs from the previous one's; \B: equal
                want = 1 - prev if m == _B else prev
                if need not in (-1, want):
                    continue
                nxt = (t, prev, want)
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return frozenset(seen)

    start = closure({(0, 0, -1)})
    index: dict[frozenset[_State], int] = {start: 0}
    order = [start]
    trans: list[list[charfa.Edge]] = []
    accept: list[bool] = []
    k = 0
    while k < len(order):
        cur = order[k]
        k += 1
        accept.append(any(d.accept[s] and need != 1 for s, _, need in cur))
        # (lo, hi, class, product target) pieces of every member's character edges
        pieces: list[tuple[int, int, _State]] = []
        for s, _, need in cur:
            for lo, hi, t in d.trans[s]:
                if lo > 0x10FFFF:
                    continue  # a marker: taken by the closure
                for a, b, cls in _split_by_class(lo, min(hi, 0x10FFFF)):
                    if need in (-1, cls):
                        pieces.append((a, b, (t, cls, -1)))
        charge(4 + len(cur) + 3 * len(pieces))
        row: list[charfa.Edge] = []
        for lo, hi, targets in _partition(pieces):
            tgt = closure(set(targets))
            j = index.get(tgt)
            if j is None:
                j = index[tgt] = len(order)
                order.append(tgt)
                if len(order) > MAX_STATES:
                    raise LimitExceededError(
                        "max_automaton_states", MAX_STATES, "a pattern with word boundaries"
                    )
            if row and row[-1][2] == j and row[-1][1] == lo - 1:
                row[-1] = (row[-1][0], hi, j)
            else:
                row.append((lo, hi, j))
        trans.append(row)
    out = charfa.minimize(charfa.CharDFA(trans, accept))
    return charfa.dfa_to_node(out, MAX_SIZE)


def _partition(
    pieces: list[tuple[int, int, _State]],
) -> list[tuple[int, int, frozenset[_State]]]:
    """Disjoint ranges with the set of product states they lead to (a sweep over the
    pieces' ends: O(p log p))."""
    events: list[tuple[int, int, int]] = []  # (point, +1/-1, piece)
    for i, (lo, hi, _) in enumerate(pieces):
        events.append((lo, 1, i))
        events.append((hi + 1, -1, i))
    events.sort()
    active: dict[_State, int] = {}
    out: list[tuple[int, int, frozenset[_State]]] = []
    i, n = 0, len(events)
    while i < n:
        point = events[i][0]
        while i < n and events[i][0] == point:
            _, delta, j = events[i]
            t = pieces[j][2]
            c = active.get(t, 0) + delta
            if c:
                active[t] = c
            else:
                del active[t]
            i += 1
        if active and i < n:
            tg = frozenset(active)
            end = events[i][0] - 1
            if out and out[-1][1] == point - 1 and out[-1][2] == tg:
                out[-1] = (out[-1][0], end, tg)
            else:
                out.append((point, end, tg))
    return out
