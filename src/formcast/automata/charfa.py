"""Small code-point automata for the Boolean operations JSON Schema needs on string languages.

A JSON Schema string constraint is often a *combination* of regular languages: ``pattern``
together with ``maxLength``, two patterns merged from ``allOf``, the keys that match one
``patternProperties`` pattern but not another, ``propertyNames``, ``not: {"const": ...}``.  The
IR has no intersection or complement, so these are computed here on deterministic automata over
Unicode scalar values and turned back into IR.

* :func:`dfa_from_node` — regular IR (code points) → minimal :class:`CharDFA` (Thompson NFA,
  subset construction with range partitioning, Moore minimization).  Bounded repeats are
  unrolled, so the caller's ``max_states`` bounds the work.
* :func:`intersect`, :func:`union`, :func:`complement`, :func:`difference` — product
  constructions; :meth:`CharDFA.is_empty`.
* :func:`finite_set_dfa`, :func:`length_dfa` — the automata of a finite set of strings and of
  "between ``lo`` and ``hi`` code points"; :func:`restrict_length` — an automaton intersected
  with the latter, built directly (what :func:`intersect` returns, without its partitioning
  and Hopcroft's loop: the product is acyclic).
* :func:`dfa_to_node` — back to IR by state elimination, with a size budget; when the budget is
  exceeded it raises :class:`~formcast.errors.LimitExceededError` and callers may fall back on
  :func:`dfa_to_rules` (one right-linear rule per state: always linear in the DFA's size).

Every function trims the states that cannot reach acceptance, so the IR produced never contains
a dead path (a generation could otherwise walk into a branch that can never finish).

Shared with the byte automata: the epsilon closure (:func:`formcast.automata.nfa.epsilon_closure`).
Kept apart, on purpose: the code-point NFA (no UTF-8 lowering, no embedded sub-automata, its own
``max_automaton_states`` limit); the range splitting :func:`_partition` (integer targets: the
byte subset construction's splitter takes target sets and is twice as slow on these inputs);
and :func:`minimize`'s Hopcroft loop, whose splitters are whole blocks over an inverse of
range edges (the states leading into a splitter are grouped by the code points that lead
there: no elementary-symbol alphabet), charging the compile's fuel as it goes.  The byte
minimizer (:func:`formcast.automata.dfa._minimize`) splits by whole blocks over a dense numpy
table and charges no fuel.  Both compute the coarsest partition (numbered canonically), so one
loop for both would change no result, only this module's fuel charges (hence which compiles
fit ``max_compile_work``) or the byte compile's speed.

Lifetime: pure functions over immutable-by-convention objects; costs are bounded by the
``max_states`` arguments (states × ranges per state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from ..errors import LimitExceededError, UnsupportedFeatureError
from ..ir.nodes import (
    ANY_CHAR,
    EMPTY,
    NOTHING,
    Alt,
    CharSet,
    Concat,
    Empty,
    Literal,
    Node,
    Nothing,
    Repeat,
    Rule,
    RuleRef,
    alt,
    concat,
    repeat,
)
from ..limits import charge, metered
from .nfa import epsilon_closure

__all__ = [
    "CharDFA",
    "complement",
    "dfa_from_node",
    "dfa_to_node",
    "dfa_to_rules",
    "difference",
    "finite_set_dfa",
    "intersect",
    "length_bounds",
    "length_dfa",
    "restrict_length",
    "union",
]

Edge = tuple[int, int, int]  # (lo, hi, target) over code points, inclusive

#: Default bound on the states of any automaton built here.
DEFAULT_MAX_STATES = 20_000


@dataclass
class CharDFA:
    """A deterministic automaton over code points.

    ``trans[s]`` is a sorted list of disjoint ``(lo, hi, target)`` edges (a missing code point
    leads to an implicit dead state); ``accept[s]`` tells whether ``s`` is final; the start
    state is 0.  An automaton with no state at all is the empty language.
    """

    trans: list[list[Edge]]
    accept: list[bool]
    minimal: bool = False

    @property
    def num_states(self) -> int:
        return len(self.accept)

    def is_empty(self) -> bool:
        return not any(self.accept)

    def matches(self, text: str) -> bool:
        if not self.accept:
            return False
        s = 0
        for ch in text:
            cp = ord(ch)
            nxt = -1
            for lo, hi, t in self.trans[s]:
                if lo <= cp <= hi:
                    nxt = t
                    break
                if lo > cp:
                    break
            if nxt < 0:
                return False
            s = nxt
        return self.accept[s]


_EMPTY_DFA = CharDFA([], [])

#: the top of the code-point range (rows are completed up to it by :func:`minimize`)
_TOP = 0x10FFFF

#: compile fuel per NFA state built (see :func:`formcast.limits.charge`; one unit ~ 0.7 us)
_NFA_STATE_FUEL = 2


def _limit(n: int, max_states: int, what: str) -> None:
    if n > max_states:
        raise LimitExceededError(
            "max_automaton_states", max_states, f"{what} needs more states than allowed"
        )


# -- NFA ------------------------------------------------------------------------------------------
class _NFA:
    def __init__(self, max_states: int) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[tuple[tuple[int, int], ...], int]]] = []
        self.max_states = max_states

    def new(self) -> int:
        self.eps.append([])
        self.edges.append([])
        _limit(len(self.eps), self.max_states * 4, "a string constraint's NFA")
        return len(self.eps) - 1

    def build(self, node: Node, frm: int, to: int) -> None:
        work: list[tuple[Node, int, int]] = [(node, frm, to)]
        while work:
            n, a, b = work.pop()
            if isinstance(n, Empty):
                self.eps[a].append(b)
            elif isinstance(n, Nothing):
                pass
            elif isinstance(n, Literal):
                cur = a
                for i, ch in enumerate(n.text):
                    nxt = b if i == len(n.text) - 1 else self.new()
                    self.edges[cur].append((((ord(ch), ord(ch)),), nxt))
                    cur = nxt
            elif isinstance(n, CharSet):
                ranges = scalar_ranges(n.ranges)
                if ranges:
                    self.edges[a].append((ranges, b))
            elif isinstance(n, Concat):
                cur = a
                for i, item in enumerate(n.items):
                    nxt = b if i == len(n.items) - 1 else self.new()
                    work.append((item, cur, nxt))
                    cur = nxt
            elif isinstance(n, Alt):
                for item in n.items:
                    work.append((item, a, b))
            elif isinstance(n, Repeat):
                cur = a
                for _ in range(n.min):
                    nxt = self.new()
                    work.append((n.item, cur, nxt))
                    cur = nxt
                if n.max is None:
                    loop = self.new()
                    self.eps[cur].append(loop)
                    back = self.new()
                    work.append((n.item, loop, back))
                    self.eps[back].append(loop)
                    self.eps[loop].append(b)
                else:
                    for _ in range(n.max - n.min):
                        nxt = self.new()
                        self.eps[cur].append(b)
                        work.append((n.item, cur, nxt))
                        cur = nxt
                    self.eps[cur].append(b)
            elif isinstance(n, RuleRef):
                raise UnsupportedFeatureError(
                    "rule reference inside a string constraint", "", "string languages are regular"
                )
            else:
                raise UnsupportedFeatureError(
                    f"IR node {type(n).__name__} in a string constraint", "", ""
                )


def scalar_ranges(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """``ranges`` without the surrogate block U+D800..U+DFFF (not Unicode scalar values)."""
    if not any(lo <= 0xDFFF and hi >= 0xD800 for lo, hi in ranges):
        return ranges
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if hi < 0xD800 or lo > 0xDFFF:
            out.append((lo, hi))
            continue
        if lo < 0xD800:
            out.append((lo, 0xD7FF))
        if hi > 0xDFFF:
            out.append((0xE000, hi))
    return tuple(out)


def _partition(edges: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, frozenset[int]]]:
    """Split overlapping ``(lo, hi, target)`` edges into disjoint ranges with target sets."""
    if not edges:
        return []
    events: list[tuple[int, int, int]] = []  # (point, +1/-1, target)
    for lo, hi, t in edges:
        events.append((lo, 1, t))
        events.append((hi + 1, -1, t))
    events.sort()
    active: dict[int, int] = {}
    out: list[tuple[int, int, frozenset[int]]] = []
    i = 0
    n = len(events)
    while i < n:
        point = events[i][0]
        while i < n and events[i][0] == point:
            _, d, t = events[i]
            c = active.get(t, 0) + d
            if c:
                active[t] = c
            else:
                active.pop(t, None)
            i += 1
        if active and i < n:
            nxt = events[i][0]
            targets = frozenset(active)
            if out and out[-1][1] == point - 1 and out[-1][2] == targets:
                out[-1] = (out[-1][0], nxt - 1, targets)
            else:
                out.append((point, nxt - 1, targets))
    return out


def dfa_from_node(node: Node, max_states: int = DEFAULT_MAX_STATES) -> CharDFA:
    """The minimal DFA of a regular IR node over code points.

    Raises:
        LimitExceededError: more than ``max_states`` states (DFA) or ``4 * max_states`` (NFA).
        UnsupportedFeatureError: a :class:`RuleRef` or another non-regular node.
    """
    nfa = _NFA(max_states)
    start, final = nfa.new(), nfa.new()
    nfa.build(node, start, final)
    charge(len(nfa.eps) * _NFA_STATE_FUEL)
    s0 = epsilon_closure(nfa.eps, [start])
    index: dict[frozenset[int], int] = {s0: 0}
    order = [s0]
    trans: list[list[Edge]] = []
    accept: list[bool] = []
    k = spent = 0
    while k < len(order):
        if not k & 63:
            charge(spent)  # the compile's fuel (and deadline): every 64 states
            spent = 0
        cur = order[k]
        k += 1
        accept.append(final in cur)
        raw = [(lo, hi, t) for s in cur for ranges, t in nfa.edges[s] for lo, hi in ranges]
        spent += 4 + len(cur) + 6 * len(raw)
        row: list[Edge] = []
        for lo, hi, targets in _partition(raw):
            tgt = epsilon_closure(nfa.eps, targets)
            j = index.get(tgt)
            if j is None:
                j = index[tgt] = len(order)
                order.append(tgt)
                _limit(len(order), max_states, "a string constraint's DFA")
            if row and row[-1][2] == j and row[-1][1] == lo - 1:
                row[-1] = (row[-1][0], hi, j)
            else:
                row.append((lo, hi, j))
        trans.append(row)
    charge(spent)
    return minimize(CharDFA(trans, accept))


# -- cleanup --------------------------------------------------------------------------------------
def trim(dfa: CharDFA) -> CharDFA:
    """Keep the states reachable from the start that can reach acceptance (renumbered)."""
    n = dfa.num_states
    if n == 0:
        return _EMPTY_DFA
    charge(n + sum(map(len, dfa.trans)) // 2)
    reach = [False] * n
    reach[0] = True
    stack = [0]
    while stack:
        s = stack.pop()
        for _, _, t in dfa.trans[s]:
            if not reach[t]:
                reach[t] = True
                stack.append(t)
    rev: list[list[int]] = [[] for _ in range(n)]
    for s in range(n):
        for _, _, t in dfa.trans[s]:
            rev[t].append(s)
    live = [False] * n
    stack = [s for s in range(n) if dfa.accept[s] and reach[s]]
    for s in stack:
        live[s] = True
    while stack:
        s = stack.pop()
        for p in rev[s]:
            if not live[p] and reach[p]:
                live[p] = True
                stack.append(p)
    if not live[0]:
        return _EMPTY_DFA
    keep = [s for s in range(n) if live[s]]
    new = {s: i for i, s in enumerate(keep)}
    trans: list[list[Edge]] = []
    for s in keep:
        row: list[Edge] = []
        for lo, hi, t in dfa.trans[s]:
            if t in new:
                row.append((lo, hi, new[t]))
        trans.append(row)
    return CharDFA(trans, [dfa.accept[s] for s in keep])


def _merged(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Disjoint inclusive ``ranges`` sorted, adjacent ones joined (a canonical form)."""
    ranges.sort()
    out = [ranges[0]]
    for lo, hi in ranges[1:]:
        if out[-1][1] == lo - 1:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def minimize(dfa: CharDFA) -> CharDFA:
    """Trim, then merge equivalent states: Hopcroft's algorithm with whole blocks as splitters
    (each splitter refines by every symbol at once: the states with an edge into it are
    grouped by the code points that lead into it) over rows completed by an explicit dead
    state.  The result is canonical (the coarsest partition, numbered by first state), so it
    does not depend on the order of the refinement.  Cost: O(edges x log states) splitter
    visits, each reading the rows of the states that lead into the splitter; charged as fuel.
    """
    if dfa.minimal:
        return dfa
    dfa = trim(dfa)
    n = dfa.num_states
    if n <= 1:
        dfa.minimal = True
        return dfa
    n_edges = sum(map(len, dfa.trans))
    charge(4 * n_edges)  # the compile's fuel (measured: ~10 units per edge in all)
    dead = n  # the implicit dead state, made explicit
    # inc[t]: the edges into ``t`` as (source, lo, hi), the missing ones leading to ``dead``
    inc: list[list[tuple[int, int, int]]] = [[] for _ in range(n + 1)]
    for src, row in enumerate(dfa.trans):
        cur = 0
        for lo, hi, t in row:
            if lo > cur:
                inc[dead].append((src, cur, lo - 1))
            inc[t].append((src, lo, hi))
            cur = hi + 1
        if cur <= _TOP:
            inc[dead].append((src, cur, _TOP))
    inc[dead].append((dead, 0, _TOP))
    charge(5 * n_edges + n)
    final = {s for s in range(n) if dfa.accept[s]}
    rest = {s for s in range(n) if not dfa.accept[s]}
    blocks: list[set[int]] = [b for b in (final, rest, {dead}) if b]
    block_of = [0] * (n + 1)
    for i, members in enumerate(blocks):
        for x in members:
            block_of[x] = i
    # the pending splitters: every initial block but a largest one
    largest = max(range(len(blocks)), key=lambda i: len(blocks[i]))
    work = [i for i in range(len(blocks)) if i != largest]
    pending = set(work)
    spent = 0
    while work:
        if spent > 4096:
            charge(spent)
            spent = 0
        bi = work.pop()
        pending.discard(bi)
        # the code points on which each state leads into the splitter
        into: dict[int, list[tuple[int, int]]] = {}
        for t in blocks[bi]:
            edges = inc[t]
            spent += 2 + len(edges)
            for src, lo, hi in edges:
                got = into.get(src)
                if got is None:
                    into[src] = [(lo, hi)]
                else:
                    got.append((lo, hi))
        # the touched states by block, then by those code points
        by_block: dict[int, dict[tuple[tuple[int, int], ...], list[int]]] = {}
        for src, ranges in into.items():
            sig = _merged(ranges) if len(ranges) > 1 else (ranges[0],)
            by_block.setdefault(block_of[src], {}).setdefault(sig, []).append(src)
        spent += len(into)
        for bj, groups in by_block.items():
            block = blocks[bj]
            touched_parts = [set(g) for g in groups.values()]
            inside = sum(map(len, touched_parts))
            if inside == len(block):
                if len(touched_parts) == 1:
                    continue
                # the block keeps its number for a largest part (fewer states renumbered)
                keep = max(range(len(touched_parts)), key=lambda i: len(touched_parts[i]))
                parts = [touched_parts[keep]]
                parts += [p for i, p in enumerate(touched_parts) if i != keep]
            else:  # the untouched states keep the block's number (and its set, made smaller)
                for part in touched_parts:
                    block.difference_update(part)
                parts = [block, *touched_parts]
            spent += 4 + inside
            ids = [bj]
            blocks[bj] = parts[0]
            for part in parts[1:]:
                nj = len(blocks)
                ids.append(nj)
                blocks.append(part)
                for x in part:
                    block_of[x] = nj
            if bj in pending:  # every part must split
                add = ids[1:]
            else:  # the block was a splitter already: all parts but a largest one
                big = max(range(len(parts)), key=lambda i: len(parts[i]))
                add = [j for i, j in enumerate(ids) if i != big]
            for j in add:
                if j not in pending:
                    pending.add(j)
                    work.append(j)
    charge(spent + 2 * n_edges)
    # the dead block disappears
    return _quotient(dfa.trans, dfa.accept, block_of, block_of[dead])


def _quotient(
    trans: list[list[Edge]], accept: list[bool], block_of: list[int], dropped: int
) -> CharDFA:
    """The quotient automaton of ``trans``/``accept`` by the partition ``block_of`` (a block
    per state): blocks numbered canonically -- the start state's first, then by first state
    --, the states of block ``dropped`` left out (unless the start is one) with the edges into
    them, adjacent ranges into one block merged.  Marked minimal: callers pass the coarsest
    partition.  O(states + edges)."""
    n = len(accept)
    order: dict[int, int] = {block_of[0]: 0}
    for x in range(n):
        if block_of[x] != dropped:
            order.setdefault(block_of[x], len(order))
    out_trans: list[list[Edge]] = [[] for _ in range(len(order))]
    out_accept = [False] * len(order)
    done = [False] * len(order)
    for x in range(n):
        found = order.get(block_of[x])
        if found is None or done[found]:
            continue
        b = found
        done[b] = True
        out_accept[b] = accept[x]
        row: list[Edge] = []
        for lo, hi, t in trans[x]:
            tb = order.get(block_of[t])
            if tb is None:
                continue
            if row and row[-1][2] == tb and row[-1][1] == lo - 1:
                row[-1] = (row[-1][0], hi, tb)
            else:
                row.append((lo, hi, tb))
        out_trans[b] = row
    out = CharDFA(out_trans, out_accept)
    out.minimal = True
    return out


# -- Boolean operations ---------------------------------------------------------------------------
def _product(
    a: CharDFA, b: CharDFA, mode: str, max_states: int, *, complete: bool = False
) -> CharDFA:
    """Product automaton; with ``complete`` a missing edge goes to an explicit dead state (-1)."""
    if mode == "and" and (a.num_states == 0 or b.num_states == 0):
        return _EMPTY_DFA
    index: dict[tuple[int, int], int] = {(0 if a.num_states else -1, 0 if b.num_states else -1): 0}
    order = list(index)
    trans: list[list[Edge]] = []
    accept: list[bool] = []
    k = spent = 0
    while k < len(order):
        if not k & 63:
            charge(spent)  # the compile's fuel (and deadline): every 64 states
            spent = 0
        sa, sb = order[k]
        k += 1
        fa = sa >= 0 and a.accept[sa]
        fb = sb >= 0 and b.accept[sb]
        accept.append(fa and fb if mode == "and" else fa or fb)
        ea = a.trans[sa] if sa >= 0 else []
        eb = b.trans[sb] if sb >= 0 else []
        # tag each edge uniquely (even: a's, odd: b's) so that adjacent edges never merge
        raw = [(lo, hi, 2 * i) for i, (lo, hi, _) in enumerate(ea)]
        raw += [(lo, hi, 2 * i + 1) for i, (lo, hi, _) in enumerate(eb)]
        spent += 1 + 3 * len(raw)
        row: list[Edge] = []
        for lo, hi, tags in _partition(raw):
            ta = tb = -1
            for tag in tags:
                if tag % 2 == 0:
                    ta = ea[tag // 2][2]
                else:
                    tb = eb[tag // 2][2]
            if mode == "and" and (ta < 0 or tb < 0):
                continue
            pair = (ta, tb)
            j = index.get(pair)
            if j is None:
                j = index[pair] = len(order)
                order.append(pair)
                _limit(len(order), max_states, "a combination of string constraints")
            row.append((lo, hi, j))
        trans.append(row)
    charge(spent)
    return minimize(CharDFA(trans, accept))


def intersect(a: CharDFA, b: CharDFA, max_states: int = DEFAULT_MAX_STATES) -> CharDFA:
    """The DFA of ``L(a) ∩ L(b)``."""
    return _product(a, b, "and", max_states)


def union(a: CharDFA, b: CharDFA, max_states: int = DEFAULT_MAX_STATES) -> CharDFA:
    """The DFA of ``L(a) ∪ L(b)``."""
    return _product(a, b, "or", max_states)


def complement(a: CharDFA, max_states: int = DEFAULT_MAX_STATES) -> CharDFA:
    """The DFA of every string of scalar values not in ``L(a)``."""
    n = a.num_states
    if n == 0:
        return any_string_dfa()
    dead = n
    trans: list[list[Edge]] = []
    charge(n + sum(len(row) for row in a.trans) // 2)
    for s in range(n + 1):
        edges = a.trans[s] if s < n else []
        row: list[Edge] = []
        for lo, hi in ANY_CHAR.ranges:
            cur = lo
            for elo, ehi, t in edges:
                if ehi < lo or elo > hi:
                    continue
                if elo > cur:
                    row.append((cur, elo - 1, dead))
                row.append((max(elo, lo), min(ehi, hi), t))
                cur = min(ehi, hi) + 1
            if cur <= hi:
                row.append((cur, hi, dead))
        trans.append(row)
    accept = [not a.accept[s] for s in range(n)] + [True]
    _limit(n + 1, max_states, "a negated string constraint")
    out = CharDFA(trans, accept)
    if a.minimal:
        # the complement of a minimal DFA, completed, is minimal (the same Myhill-Nerode
        # classes); trimming drops at most the class of ``a``'s universal state.  So what
        # :func:`minimize` would return is the trimmed automaton as it is (its states keep
        # their order), its adjacent edges to one target joined as :func:`minimize` does
        out = trim(out)
        for row in out.trans:
            k = 1
            while k < len(row):
                if row[k][2] == row[k - 1][2] and row[k][0] == row[k - 1][1] + 1:
                    row[k - 1 : k + 1] = [(row[k - 1][0], row[k][1], row[k][2])]
                else:
                    k += 1
        out.minimal = True
        return out
    return minimize(out)


def difference(a: CharDFA, b: CharDFA, max_states: int = DEFAULT_MAX_STATES) -> CharDFA:
    """The DFA of ``L(a) \\ L(b)``."""
    return intersect(a, complement(b, max_states), max_states)


def finite_set_dfa(words: Iterable[str], max_states: int = DEFAULT_MAX_STATES) -> CharDFA:
    """The (trie-shaped, then minimized) DFA of a finite set of strings."""
    trans: list[dict[int, int]] = [{}]
    accept = [False]
    for w in words:
        s = 0
        for ch in w:
            cp = ord(ch)
            t = trans[s].get(cp)
            if t is None:
                t = len(accept)
                trans[s][cp] = t
                trans.append({})
                accept.append(False)
                _limit(len(accept), max_states, "a set of excluded strings")
            s = t
        accept[s] = True
    charge(len(accept) // 2 + 1)
    rows = [[(cp, cp, t) for cp, t in sorted(d.items())] for d in trans]
    return minimize(CharDFA(rows, accept))


def length_dfa(lo: int, hi: int | None, max_states: int = DEFAULT_MAX_STATES) -> CharDFA:
    """The DFA of the strings with ``lo`` to ``hi`` code points (``hi=None``: no upper bound)."""
    top = hi if hi is not None else lo
    _limit(top + 1, max_states, f"a length bound of {top} characters combined with a pattern")
    charge(top + 1)
    trans: list[list[Edge]] = []
    accept: list[bool] = []
    for s in range(top + 1):
        accept.append(s >= lo and (hi is None or s <= hi))
        if s < top:
            trans.append([(a, b, s + 1) for a, b in ANY_CHAR.ranges])
        elif hi is None:
            trans.append([(a, b, s) for a, b in ANY_CHAR.ranges])
        else:
            trans.append([])
    return minimize(CharDFA(trans, accept))


def restrict_length(
    dfa: CharDFA, lo: int, hi: int, max_states: int = DEFAULT_MAX_STATES
) -> CharDFA:
    """The DFA of ``L(dfa) ∩ {w : lo ≤ |w| ≤ hi}``: the automaton (states, numbering, edges)
    that ``intersect(dfa, length_dfa(lo, hi, max_states), max_states)`` returns, and the same
    limit errors, built directly (a ``pattern`` under a ``maxLength``).

    The product pairs each state of ``dfa`` with a count of code points read, so it is
    acyclic and discovered layer by layer (breadth first, in :func:`_product`'s order: a
    state's edges in code-point order, each split at the surrogate gap as the length
    automaton's edges split it).  No range partitioning is needed (the length automaton
    reads any scalar value), and instead of Hopcroft's loop the states are merged bottom-up,
    last layer first, by their acceptance and their rows over the classes already found: on
    an acyclic automaton that is the coarsest partition (the Myhill-Nerode classes), which
    :func:`minimize` also computes, numbered as :func:`minimize` numbers it.  Fuel: the
    product's charge as :func:`_product`'s, the merge's proportional to the edges (close to
    what Hopcroft's loop charges on these chains).  Cost: O((hi + 1) x edges of ``dfa``) for
    the product, O(its edges) for the rest.

    Raises:
        LimitExceededError: ``hi + 1`` or the product's states exceed ``max_states`` (the
            messages of :func:`length_dfa` and :func:`intersect`).
    """
    _limit(hi + 1, max_states, f"a length bound of {hi} characters combined with a pattern")
    charge(hi + 1)
    if lo > hi or dfa.num_states == 0:
        return _EMPTY_DFA
    gap = ANY_CHAR.ranges
    n_gap = len(gap)
    width = hi + 1
    index: dict[int, int] = {0: 0}  # q * width + count -> product state
    order: list[int] = [0]
    trans: list[list[Edge]] = []
    accept: list[bool] = []
    d_trans, d_accept = dfa.trans, dfa.accept
    k = spent = 0
    while k < len(order):
        if not k & 63:
            charge(spent)  # the compile's fuel (and deadline): every 64 states, as _product
            spent = 0
        q, i = divmod(order[k], width)
        k += 1
        accept.append(d_accept[q] and i >= lo)
        ea = d_trans[q]
        if i == hi:
            spent += 1 + 3 * len(ea)
            trans.append([])
            continue
        spent += 1 + 3 * (len(ea) + n_gap)
        row: list[Edge] = []
        for elo, ehi, t in ea:
            j = -1
            for glo, ghi in gap:
                a = elo if elo > glo else glo
                b = ehi if ehi < ghi else ghi
                if a > b:
                    continue
                if j < 0:
                    key = t * width + i + 1
                    got = index.get(key)
                    if got is None:
                        got = index[key] = len(order)
                        order.append(key)
                        _limit(len(order), max_states, "a combination of string constraints")
                    j = got
                row.append((a, b, j))
        trans.append(row)
    charge(spent)
    return _minimize_layered(trans, accept)


def _minimize_layered(trans: list[list[Edge]], accept: list[bool]) -> CharDFA:
    """:func:`minimize` of an acyclic automaton whose every state is reachable and whose edges
    all lead to later states (a breadth-first product with a counter): trimmed and merged in
    one backward pass, numbered as :func:`minimize` numbers its blocks."""
    n = len(accept)
    charge(n + sum(map(len, trans)) // 2)  # what trim charges
    live = list(accept)
    for s in range(n - 1, -1, -1):
        if not live[s]:
            for _, _, t in trans[s]:
                if live[t]:
                    live[s] = True
                    break
    if not live[0]:
        return _EMPTY_DFA
    # the classes, last state first: a state's targets are later states, classified already
    cls = [-1] * n
    sigs: dict[tuple[bool, tuple[Edge, ...]], int] = {}
    n_edges = 0
    for s in range(n - 1, -1, -1):
        if not live[s]:
            continue
        sig: list[Edge] = []
        for lo, hi, t in trans[s]:
            c = cls[t]
            if c < 0:
                continue
            if sig and sig[-1][2] == c and sig[-1][1] == lo - 1:
                sig[-1] = (sig[-1][0], hi, c)
            else:
                sig.append((lo, hi, c))
        n_edges += len(sig)
        key = (accept[s], tuple(sig))
        got = sigs.get(key)
        if got is None:
            got = sigs[key] = len(sigs)
        cls[s] = got
    charge(12 * n_edges + n)  # Hopcroft's charge on such chains: ~11 per edge
    # numbered as minimize numbers its blocks; the dead states (class -1) left out
    return _quotient(trans, accept, cls, -1)


def any_string_dfa() -> CharDFA:
    """Σ*: every string of scalar values."""
    return CharDFA([[(a, b, 0) for a, b in ANY_CHAR.ranges]], [True])


def length_bounds(dfa: CharDFA) -> tuple[int, int | None]:
    """Shortest and longest accepted length (None: unbounded); ``(0, 0)`` when empty."""
    d = trim(dfa)
    n = d.num_states
    if n == 0:
        return 0, 0
    dist = [-1] * n
    dist[0] = 0
    queue = [0]
    for s in queue:
        for _, _, t in d.trans[s]:
            if dist[t] < 0:
                dist[t] = dist[s] + 1
                queue.append(t)
    shortest = min(dist[s] for s in range(n) if d.accept[s])
    # longest path in a trimmed DFA: unbounded iff there is a cycle
    indeg = [0] * n
    for s in range(n):
        for _, _, t in d.trans[s]:
            indeg[t] += 1
    order: list[int] = [s for s in range(n) if indeg[s] == 0]
    for s in order:
        for _, _, t in d.trans[s]:
            indeg[t] -= 1
            if indeg[t] == 0:
                order.append(t)
    if len(order) < n:
        return shortest, None
    longest = [-1] * n
    longest[0] = 0
    for s in order:
        if longest[s] < 0:
            continue
        for _, _, t in d.trans[s]:
            longest[t] = max(longest[t], longest[s] + 1)
    return shortest, max(longest[s] for s in range(n) if d.accept[s])


# -- back to IR -----------------------------------------------------------------------------------
def _charset_node(ranges: list[tuple[int, int]]) -> Node:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return Literal(chr(ranges[0][0]))
    return CharSet.of(ranges)


_Memo = dict[int, tuple[Node, int]]


def _size(node: Node, memo: _Memo) -> int:
    """Tree size (shared subtrees counted every time: that is what hashing walks)."""
    got = memo.get(id(node))
    if got is not None and got[0] is node:  # ids of freed nodes are reused
        return got[1]
    if isinstance(node, (Concat, Alt)):
        v = 1 + sum(_size(i, memo) for i in node.items)
    elif isinstance(node, Repeat):
        v = 1 + _size(node.item, memo)
    elif isinstance(node, CharSet):
        v = len(node.ranges)
    elif isinstance(node, Literal):
        v = len(node.text)
    else:
        v = 1
    memo[id(node)] = (node, v)
    return v


def _depth(node: Node, memo: _Memo) -> int:
    got = memo.get(id(node))
    if got is not None and got[0] is node:
        return got[1]
    if isinstance(node, (Concat, Alt)):
        v = 1 + max(_depth(i, memo) for i in node.items)
    elif isinstance(node, Repeat):
        v = 1 + _depth(node.item, memo)
    else:
        v = 1
    memo[id(node)] = (node, v)
    return v


#: Deepest expression :func:`dfa_to_node` returns (IR nodes hash recursively).
MAX_EXPRESSION_DEPTH = 60


def dfa_to_node(
    dfa: CharDFA,
    max_size: int = 20_000,
    label: Callable[[list[tuple[int, int]]], Node] | None = None,
) -> Node:
    """A regular IR node for ``L(dfa)``, by state elimination.

    Raises:
        LimitExceededError: the expression would exceed ``max_size`` nodes/characters or
            :data:`MAX_EXPRESSION_DEPTH` levels of nesting.

    ``label`` turns an edge's code point ranges into a node (default: the CharSet itself);
    a JSON encoder there yields the encoded language directly.
    """
    label = label or _charset_node
    dfa = minimize(dfa)
    n = dfa.num_states
    if n == 0:
        return NOTHING
    # generalized NFA: states 0..n-1, start S=n, final F=n+1; edges[p][q] = node
    start, final = n, n + 1
    out: list[dict[int, Node]] = [{} for _ in range(n + 2)]
    inc: list[set[int]] = [set() for _ in range(n + 2)]

    def add(p: int, q: int, node: Node) -> None:
        old = out[p].get(q)
        out[p][q] = node if old is None else alt([old, node])
        inc[q].add(p)

    for s in range(n):
        by_target: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, t in dfa.trans[s]:
            by_target.setdefault(t, []).append((lo, hi))
        for t, ranges in by_target.items():
            add(s, t, label(ranges))
        if dfa.accept[s]:
            add(s, final, EMPTY)
    add(start, 0, EMPTY)
    memo: _Memo = {}
    depth_memo: _Memo = {}
    remaining = set(range(n))
    while remaining:
        # the compile's fuel: choosing the state is O(remaining), each new path O(1) nodes
        charge(len(remaining) // 4 + 1)
        # eliminate the state with the fewest in × out edges first
        q = min(
            remaining,
            key=lambda s: (len(inc[s] - {s}) * len(set(out[s]) - {s}), s),
        )
        remaining.discard(q)
        loop = out[q].pop(q, None)
        inc[q].discard(q)
        star = repeat(loop, 0, None) if loop is not None else EMPTY
        preds = [p for p in inc[q] if p != q]
        succs = list(out[q].items())
        star_size = _size(star, memo)
        star_depth = _depth(star, depth_memo)
        for p in preds:
            charge(1 + 3 * len(succs))
            a = out[p].pop(q)
            a_size, a_depth = _size(a, memo), _depth(a, depth_memo)
            for r, b in succs:
                old = out[p].get(r)
                # estimate before building: hashing a huge tree (alt() dedups) is the cost
                est = a_size + star_size + _size(b, memo) + 2
                deep = max(a_depth, star_depth, _depth(b, depth_memo)) + 2
                if old is not None:
                    est += _size(old, memo)
                    deep = max(deep, _depth(old, depth_memo) + 1)
                if est > max_size or deep > MAX_EXPRESSION_DEPTH:
                    raise LimitExceededError(
                        "max_expression_size",
                        max_size,
                        "a combination of string constraints has no compact regular expression",
                    )
                node = concat([a, star, b])
                out[p][r] = node if old is None else alt([old, node])
                inc[r].add(p)
        for r, _ in succs:
            inc[r].discard(q)
        out[q].clear()
        inc[q].clear()
    return out[start].get(final, NOTHING)


def dfa_to_rules(
    dfa: CharDFA,
    prefix: str,
    label: Callable[[list[tuple[int, int]]], Node] | None = None,
) -> tuple[Node, list[Rule]]:
    """Right-linear rules for ``L(dfa)``: one rule ``{prefix}_{state}`` per state.

    Returns the start node (a :class:`RuleRef`, or NOTHING for the empty language) and rules.
    """
    label = label or _charset_node
    dfa = minimize(dfa)
    if dfa.num_states == 0:
        return NOTHING, []
    rules: list[Rule] = []
    # the label of a range set, by the ranges: a chain of states (``pattern`` under a
    # ``maxLength``) labels hundreds of edges with one large set.  Reused only when ``label``
    # is memoized itself (its second call returns the very node: the IR shares structure as
    # before), and a reuse charges what the call it replaces would (that second call's fuel,
    # measured: its cache's hit), so the fuel is that of calling ``label`` for every edge.
    # key -> (first node, 0 seen once | 1 reusable | 2 not reusable, a repeat's fuel)
    labels: dict[tuple[tuple[int, int], ...], tuple[Node, int, int]] = {}
    for s in range(dfa.num_states):
        charge(2 + len(dfa.trans[s]))
        by_target: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, t in dfa.trans[s]:
            by_target.setdefault(t, []).append((lo, hi))
        branches: list[Node] = [EMPTY] if dfa.accept[s] else []
        for t, ranges in by_target.items():
            key = tuple(ranges)
            got = labels.get(key)
            if got is None:
                node = label(ranges)
                labels[key] = (node, 0, 0)
            elif got[1] == 1:
                node = got[0]
                charge(got[2])
            elif got[1] == 0:
                node, repeat_cost = metered(partial(label, ranges))
                labels[key] = (node, 1 if node is got[0] else 2, repeat_cost)
            else:
                node = label(ranges)
            branches.append(concat([node, RuleRef(f"{prefix}_{t}")]))
        rules.append(Rule(f"{prefix}_{s}", alt(branches)))
    return RuleRef(f"{prefix}_0"), rules
