"""Thompson construction: regular IR → byte-level NFA.

States are integers; each has epsilon edges and byte-range edges ``(lo, hi, target)``.  Code
point sets are lowered through :func:`~formcast.automata.utf8.utf8_sequences`, sharing the
continuation-byte suffixes of one set.  Bounded repeats are unrolled (``X{2,4}`` = ``XX(X(X)?)?``)
under :attr:`~formcast.limits.CompileLimits.max_nfa_states`.

Lifetime: built per compile and discarded after DFA construction.  Iterative (no recursion).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..cache import LruCache
from ..errors import LimitExceededError, UnsupportedFeatureError
from ..ir.nodes import (
    Alt,
    ByteSet,
    CharSet,
    Concat,
    Empty,
    Literal,
    Node,
    Nothing,
    Repeat,
    RuleRef,
    is_regular,
)
from ..limits import CACHE_ENTRY_BYTES, CacheLimits, CompileLimits, WorkBudget
from .utf8 import utf8_sequences

if TYPE_CHECKING:  # pragma: no cover
    from .dfa import ByteDFA

# fuel charged per NFA state created (relative to one unit of subset-construction work)
_NFA_STATE_COST = 15
_PROJECTED_DFA_COST = 50
# character sets with more ranges than this are compiled to a minimal DFA once and embedded
_EMBED_RANGES = 8
# composite nodes at least this large are built once per exit state and shared
_SHARE_MIN_NODES = 6

__all__ = ["NFA", "SubAutomaton", "build_nfa"]


@dataclass
class NFA:
    """A byte NFA.  ``eps[s]``: epsilon targets; ``edges[s]``: ``(lo, hi, target)`` triples."""

    eps: list[list[int]] = field(default_factory=list)
    edges: list[list[tuple[int, int, int]]] = field(default_factory=list)
    refs: list[list[tuple[int, int]]] = field(default_factory=list)  # (rule id, target)
    start: int = 0
    accept: int = 0
    limit: int = 1_000_000
    budget: WorkBudget | None = None

    def new_states(self, k: int) -> int:
        """Allocate ``k`` states at once; returns the first id (they are consecutive)."""
        first = len(self.eps)
        if self.budget is not None:
            self.budget.spend(k * _NFA_STATE_COST)
            self.budget.check_projected((first + k) * _PROJECTED_DFA_COST)
        if first + k > self.limit:
            raise LimitExceededError(
                "max_nfa_states", self.limit, "bounded repeats are unrolled; lower the bounds"
            )
        self.eps.extend([] for _ in range(k))
        self.edges.extend([] for _ in range(k))
        self.refs.extend([] for _ in range(k))
        return first

    def new_state(self) -> int:
        if self.budget is not None and len(self.eps) % 64 == 0:
            self.budget.spend(64 * _NFA_STATE_COST)
            # each NFA state will cost about one DFA state later: refuse hopeless sizes early
            self.budget.check_projected(len(self.eps) * _PROJECTED_DFA_COST)
        if len(self.eps) >= self.limit:
            raise LimitExceededError(
                "max_nfa_states", self.limit, "bounded repeats are unrolled; lower the bounds"
            )
        self.eps.append([])
        self.edges.append([])
        self.refs.append([])
        return len(self.eps) - 1


def build_nfa(
    node: Node,
    limits: CompileLimits | None = None,
    *,
    inline: Node | None = None,
    rule_ids: Mapping[str, int] | None = None,
    budget: WorkBudget | None = None,
    sub_dfas: dict[Node, SubAutomaton] | None = None,
) -> NFA:
    """Build the NFA of an IR tree.

    Without ``rule_ids`` the tree must be regular (a :class:`RuleRef` raises
    :class:`UnsupportedFeatureError`); with it, each ``RuleRef(name)`` becomes a reference edge
    labelled ``rule_ids[name]`` (used for the rules of a context-free grammar).
    ``inline`` is a node that must be expanded in place rather than embedded as a sub-DFA
    (used when that sub-DFA is itself being built).  ``sub_dfas``: a cache of the sub-DFAs
    compiled for large character sets and repeated items, shared by the calls of one compile
    (e.g. every rule of a grammar).
    """
    limits = limits or CompileLimits()
    budget = budget or limits.budget()
    nfa = NFA(limit=limits.max_nfa_states, budget=budget)
    s = nfa.new_state()
    a = nfa.new_state()
    nfa.start, nfa.accept = s, a
    # work items: (node, from_state, to_state, own) -- ``own``: every edge leaving from_state
    # belongs to this node's fragment (a fresh state), so the fragment can be shared
    work: list[tuple[Node, int, int, bool]] = [(node, s, a, True)]
    charset_cache: dict[tuple[tuple[int, int], ...], list[list[tuple[int, int]]]] = {}
    if sub_dfas is None:
        sub_dfas = {}
    # (node, to_state) -> entry state of a fragment already built for that node and exit: an
    # IR that is a DAG (inlined rules, shared suffixes of optional properties) is built in
    # space linear in the DAG rather than in its tree unfolding
    shared: dict[tuple[Node, int], int] = {}
    # (item, state where the rest of its concatenation starts) -> entry state of that item
    chained: dict[tuple[Node, int], int] = {}
    byte_chain: dict[tuple[int, int], int] = {}  # (byte, next state) -> state that reads it
    while work:
        n, frm, to, own = work.pop()
        if isinstance(n, (Concat, Alt, Repeat)) and n.size >= _SHARE_MIN_NODES:
            key = (n, to)
            entry = shared.get(key)
            if entry is not None:
                nfa.eps[frm].append(entry)
                continue
            if not own:
                entry = nfa.new_state()
                nfa.eps[frm].append(entry)
                frm = entry
            shared[key] = frm
        if isinstance(n, Empty):
            nfa.eps[frm].append(to)
        elif isinstance(n, Nothing):
            pass
        elif isinstance(n, Literal):
            # built from the end, each byte hash-consed with the state it leads to: literals
            # that end alike (enum values, the keys' '":') share their tails
            try:
                data = n.text.encode("utf-8")
            except UnicodeEncodeError:
                raise UnsupportedFeatureError(
                    "lone surrogate",
                    f"literal {n.text[:40]!r}",
                    "a surrogate code point has no UTF-8 form, so no output can contain it",
                ) from None
            if not data:
                nfa.eps[frm].append(to)
                continue
            nxt = to
            for b in reversed(data[1:]):
                byte_link = (b, nxt)
                entry = byte_chain.get(byte_link)
                if entry is None:
                    entry = nfa.new_state()
                    nfa.edges[entry].append((b, b, nxt))
                    byte_chain[byte_link] = entry
                nxt = entry
            nfa.edges[frm].append((data[0], data[0], nxt))
        elif isinstance(n, ByteSet):
            for lo, hi in n.ranges:
                nfa.edges[frm].append((lo, hi, to))
        elif isinstance(n, CharSet):
            if len(n.ranges) > _EMBED_RANGES and n is not inline:
                _embed(nfa, _sub_dfa(n, limits, budget, sub_dfas), frm, to)
                continue
            seqs = charset_cache.get(n.ranges)
            if seqs is None:
                seqs = [seq for lo, hi in n.ranges for seq in utf8_sequences(lo, hi)]
                charset_cache[n.ranges] = seqs
            _add_sequences(nfa, seqs, frm, to)
        elif isinstance(n, Concat):
            # built from the end, each item hash-consed with the state where the rest of the
            # concatenation starts: concatenations that end alike share their tails (the
            # optional members of a JSON object reach the same next member after "{" and
            # after ",", and would otherwise copy its value's automaton for each)
            items = _fold_loops(n.items)
            nxt = to
            for item in reversed(items[1:]):
                link = (item, nxt)
                entry = chained.get(link)
                if entry is None:
                    entry = nfa.new_state()
                    chained[link] = entry
                    work.append((item, entry, nxt, True))
                nxt = entry
            link = (items[0], nxt)
            entry = chained.get(link)
            if entry is not None:
                nfa.eps[frm].append(entry)
            elif own:
                chained[link] = frm
                work.append((items[0], frm, nxt, True))
            else:  # a fresh entry, so that the next occurrence (another alternative) links here
                entry = nfa.new_state()
                nfa.eps[frm].append(entry)
                chained[link] = entry
                work.append((items[0], entry, nxt, True))
        elif isinstance(n, Alt):
            for item in n.items:
                work.append((item, frm, to, False))
        elif isinstance(n, Repeat):
            copies = max(n.min, n.max or 0) + 1
            # an item copied many times, or looped over (a JSON string's characters), is
            # compiled once to its minimal DFA: fewer NFA and DFA states than Thompson's copy
            if (
                (copies > 2 or n.max is None)
                and n.item is not inline
                and _worth_embedding(n.item)
                and (rule_ids is None or is_regular(n.item))
            ):
                n = Repeat(_Embedded(_sub_dfa(n.item, limits, budget, sub_dfas)), n.min, n.max)
            _repeat(nfa, n, frm, to, work)
        elif isinstance(n, _Embedded):
            _embed(nfa, n.sub, frm, to)
        elif isinstance(n, _SepLoop):
            # frm -> L --x--> E -(sep)-> L, E -> to: one copy of x for "x (sep x)*"
            loop = nfa.new_state()
            end = nfa.new_state()
            nfa.eps[frm].append(loop)
            nfa.eps[end].append(to)
            work.append((n.item, loop, end, True))
            if isinstance(n.sep, Empty):
                nfa.eps[end].append(loop)
            else:
                work.append((n.sep, end, loop, False))
        elif isinstance(n, RuleRef) and rule_ids is not None:
            nfa.refs[frm].append((rule_ids[n.name], to))
        elif isinstance(n, RuleRef):
            raise UnsupportedFeatureError(
                f"rule reference {n.name!r}",
                "a regular expression",
                "non-regular grammars compile with compile_grammar",
            )
        else:
            raise TypeError(f"not an IR node: {n!r}")
    return nfa


def _repeat(
    nfa: NFA, n: Repeat, frm: int, to: int, work: list[tuple[Node, int, int, bool]]
) -> None:
    cur = frm
    for _ in range(n.min):
        nxt = nfa.new_state()
        work.append((n.item, cur, nxt, False))
        cur = nxt
    if n.max is None:
        # cur --eps--> loop; loop --item--> loop; loop --eps--> to
        loop = nfa.new_state()
        nfa.eps[cur].append(loop)
        body_end = nfa.new_state()
        work.append((n.item, loop, body_end, False))
        nfa.eps[body_end].append(loop)
        nfa.eps[loop].append(to)
        return
    optional = n.max - n.min
    nfa.eps[cur].append(to)
    for i in range(optional):
        nxt = to if i == optional - 1 else nfa.new_state()
        work.append((n.item, cur, nxt, False))
        if nxt != to:
            nfa.eps[nxt].append(to)
        cur = nxt


def _add_sequences(nfa: NFA, seqs: list[list[tuple[int, int]]], frm: int, to: int) -> None:
    """Add UTF-8 range sequences from ``frm`` to ``to``, sharing common suffix states."""
    # suffix sharing: key = tuple of remaining ranges -> state that consumes them to `to`
    suffix_state: dict[tuple[tuple[int, int], ...], int] = {}
    for seq in seqs:
        if len(seq) == 1:
            nfa.edges[frm].append((seq[0][0], seq[0][1], to))
            continue
        # build from the end so suffixes are shared
        nxt = to
        for k in range(len(seq) - 1, 0, -1):
            key = tuple(seq[k:])
            st = suffix_state.get(key)
            if st is None:
                st = nfa.new_state()
                lo, hi = seq[k]
                nfa.edges[st].append((lo, hi, nxt))
                suffix_state[key] = st
            nxt = st
        lo, hi = seq[0]
        nfa.edges[frm].append((lo, hi, nxt))


@dataclass(frozen=True, eq=False)
class SubAutomaton:
    """A compiled sub-DFA ready to be copied into NFAs: its start, its accepting states and
    its edges as ``(state, lo, hi, target)`` with byte ranges merged (state 0, dead, dropped).
    Built once per sub-DFA; copying it is then plain list work."""

    start: int
    n_states: int
    accepting: tuple[int, ...]
    edges: tuple[tuple[int, int, int, int], ...]

    @staticmethod
    def of(dfa: ByteDFA) -> SubAutomaton:
        import numpy as np

        table = dfa.table
        n = table.shape[0]
        edges: list[tuple[int, int, int, int]] = []
        if n > 1:
            rows = table[1:]
            # a new range starts at byte 0 and wherever the target changes
            change = np.ones((n - 1, 256), dtype=bool)
            change[:, 1:] = rows[:, 1:] != rows[:, :-1]
            rr, starts = np.nonzero(change)
            ends = np.empty_like(starts)
            ends[:-1] = starts[1:] - 1
            ends[-1] = 255
            ends[np.r_[rr[1:] != rr[:-1], True]] = 255
            tgts = rows[rr, starts]
            keep = tgts != 0
            edges = list(
                zip(
                    (rr[keep] + 1).tolist(),
                    starts[keep].tolist(),
                    ends[keep].tolist(),
                    tgts[keep].tolist(),
                    strict=True,
                )
            )
        acc = tuple(int(x) for x in np.flatnonzero(dfa.accepting) if x)
        return SubAutomaton(start=dfa.start, n_states=n, accepting=acc, edges=tuple(edges))


@dataclass(frozen=True, eq=False)
class _Embedded(Node):
    """A precompiled sub-automaton standing in for an IR subtree (internal to this module)."""

    sub: SubAutomaton


@dataclass(frozen=True, eq=False)
class _SepLoop(Node):
    """``item (sep item)*`` built with one copy of ``item`` (internal to this module)."""

    item: Node
    sep: Node


def _fold_loops(items: tuple[Node, ...]) -> tuple[Node, ...]:
    """Concatenation items with ``x (y x)*`` (a separated list: JSON arrays, extra object
    members) and ``x x*`` folded into :class:`_SepLoop` (``x`` may span several items):
    Thompson's construction would copy ``x`` twice, and the DFA built from it would carry two
    equivalent copies of x's states for minimization to merge.  concat() merges adjacent
    literals ("[" with the first element's "{", "," with the next one's), so x's first item
    may match the end of a longer literal on either side.  O(items x loop body) equality
    checks (IR nodes cache their hash)."""
    out: list[Node] = []
    changed = False
    for node in items:
        if isinstance(node, Repeat) and node.min == 0 and node.max is None and out:
            body = node.item.items if isinstance(node.item, Concat) else (node.item,)
            for t in range(len(body)):
                x = body[t:]
                if len(x) > len(out):
                    continue
                j = len(out) - len(x)
                head, first = out[j], x[0]
                before = after = ""  # head = before + first, or first = after + head
                if head != first:
                    if not (isinstance(head, Literal) and isinstance(first, Literal)):
                        continue
                    if head.text.endswith(first.text):
                        before = head.text[: len(head.text) - len(first.text)]
                    elif first.text.endswith(head.text):
                        after = first.text[: len(first.text) - len(head.text)]
                    else:
                        continue
                if not all(p == q for p, q in zip(out[j + 1 :], x[1:], strict=True)):
                    continue
                del out[j:]
                if before:
                    out.append(Literal(before))
                loop_item: tuple[Node, ...] = (first if before else head, *x[1:])
                sep = (*body[:t], Literal(after)) if after else body[:t]
                out.append(
                    _SepLoop(
                        loop_item[0] if len(loop_item) == 1 else Concat(loop_item),
                        Empty() if not sep else sep[0] if len(sep) == 1 else Concat(sep),
                    )
                )
                changed = True
                break
            else:
                out.append(node)
            continue
        out.append(node)
    return tuple(out) if changed else items


def _worth_embedding(item: Node) -> bool:
    """True when an item repeated many times is better compiled once and copied as a DFA."""
    if isinstance(item, (Literal, Empty, Nothing, ByteSet)):
        return False
    return not (isinstance(item, CharSet) and len(item.ranges) <= 2 and item.ranges[-1][1] < 0x80)


#: Sub-automata shared by every compile in the process, keyed by the IR node and the limits;
#: values are (automaton, fuel its build cost).  What repeats: a JSON string's characters,
#: large character classes, format pieces.  Bounded in bytes (``CacheLimits().shared_cache_bytes``;
#: a state's transition row is 256 int32, 1 KiB).
SUB_DFA_CACHE: LruCache[tuple[Node, CompileLimits], tuple[SubAutomaton, int]] = LruCache(
    1024,
    max_weight=CacheLimits().shared_cache_bytes,
    weight=lambda entry: 1024 * entry[0].n_states + CACHE_ENTRY_BYTES,
)


def _sub_dfa(
    node: Node, limits: CompileLimits, budget: WorkBudget, cache: dict[Node, SubAutomaton]
) -> SubAutomaton:
    """The minimal DFA of ``node`` ready to embed: from the compile's ``cache``, else from
    :data:`SUB_DFA_CACHE` (charged the fuel its build cost, so whether a compile fits its
    limits does not depend on what the process compiled before), else built."""
    sub = cache.get(node)
    if sub is not None:
        return sub
    key = (node, limits)
    found, hit = SUB_DFA_CACHE.get(key)
    if found and hit is not None:
        sub, work = hit
        budget.spend(work)
    else:
        from .dfa import nfa_to_dfa

        before = budget.used
        nfa = build_nfa(node, limits, inline=node, budget=budget, sub_dfas=cache)
        sub = SubAutomaton.of(nfa_to_dfa(nfa, limits, budget=budget))
        SUB_DFA_CACHE.put(key, (sub, budget.used - before))
    cache[node] = sub
    return sub


def _embed(nfa: NFA, sub: SubAutomaton, frm: int, to: int) -> None:
    """Copy a sub-DFA into the NFA between ``frm`` and ``to``.  O(its edges), no numpy."""
    if sub.start == 0:
        return
    base = nfa.new_states(sub.n_states - 1) - 1  # local state s (>= 1) -> base + s
    nfa.eps[frm].append(base + sub.start)
    for s in sub.accepting:
        nfa.eps[base + s].append(to)
    edges = nfa.edges
    for s, lo, hi, t in sub.edges:
        edges[base + s].append((lo, hi, base + t))
