"""Thompson construction: regular IR → byte-level NFA.

States are integers; each has epsilon edges and byte-range edges ``(lo, hi, target)``.  The
construction appends them to flat lists of ints (:class:`FlatNFA`: no list per state, no tuple
per edge; the compiled build's subset construction reads them as they are); :class:`NFA` is
the same automaton as per-state lists (``FlatNFA.to_lists``: the Python subset construction,
tests).  Code point sets are lowered through
:func:`~formcast.automata.utf8.utf8_sequences`, sharing the continuation-byte suffixes of one
set.  Bounded repeats are unrolled (``X{2,4}`` = ``XX(X(X)?)?``) under
:attr:`~formcast.limits.CompileLimits.max_nfa_states`; separated lists (``x (y x)*``) are
first folded into loops by :func:`formcast.ir.loops.fold_loops`.

Subtrees worth compiling once (large character sets, items repeated or looped over) are not
expanded here: :func:`thompson_nfa` asks its ``sub_automaton`` callback for their minimal DFA
(:class:`SubAutomaton`) and copies it in.  :mod:`formcast.automata.regular` supplies that
callback with the compile's and the process's caches (:func:`~formcast.automata.regular.build_nfa`),
so this module needs no DFA code.  :func:`epsilon_closure` is the one epsilon closure of the
package (the byte subset construction and the code-point automata of :mod:`.charfa` use it).

Lifetime: built per compile and discarded after DFA construction.  Iterative (no recursion).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import LimitExceededError, UnsupportedFeatureError
from ..ir.loops import SepLoop, fold_loops
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
from ..limits import CompileLimits, WorkBudget
from .nfa_embedded import Embedded as _Embedded
from .utf8 import utf8_sequences

# the compiled build's C kernel (``SubAutomaton.of``'s edges in one C pass); absent from the
# pure-Python package, where numpy makes the same edges (tests set it to None for the reference:
# tests/automata/test_sub_edges.py)
_KERNEL: Any
try:
    from . import _subset as _KERNEL  # type: ignore[attr-defined,no-redef]
except ImportError:  # pragma: no cover - depends on the build
    _KERNEL = None

# fuel charged per NFA state created (relative to one unit of subset-construction work)
_NFA_STATE_COST = 15
_PROJECTED_DFA_COST = 50
# character sets with more ranges than this are compiled to a minimal DFA once and embedded
_EMBED_RANGES = 8
# composite nodes at least this large are built once per exit state and shared
_SHARE_MIN_NODES = 6

__all__ = ["NFA", "FlatNFA", "SubAutomaton", "epsilon_closure", "thompson_nfa"]

#: the UTF-8 byte-range sequences of the code point sets met so far, by their ranges (process
#: wide: JSON strings' character sets recur in every compile; read-only lists, no fuel is
#: charged for them either way), emptied when it reaches :data:`_UTF8_SEQS_MAX` entries
_UTF8_SEQS: dict[tuple[tuple[int, int], ...], list[list[tuple[int, int]]]] = {}
_UTF8_SEQS_MAX = 4096


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


class FlatNFA:
    """A byte NFA as flat parallel lists of ints: what :func:`thompson_nfa` builds.

    The same automaton as an :class:`NFA` (:meth:`to_lists` makes that one, each state's edges
    in the order they were added), without one list per state and one tuple per edge: a rule
    body's NFA is a dozen lists of ints (no object the garbage collector tracks per state or
    edge; the collector's passes and the allocations were a third of the construction's time
    in the compiled build), and the compiled build's subset construction reads them as they are
    (``formcast.automata._subset.determinize_flat``).

    Attributes:
        n: number of states (``0 .. n - 1``).
        e_src, e_lo, e_hi, e_tgt: byte edges ``e_src[k] --[e_lo[k], e_hi[k]]--> e_tgt[k]``.
        x_src, x_tgt: epsilon edges.
        r_src, r_rule, r_tgt: rule references (``r_rule[k]`` the rule id).

    Lifetime: built by one construction (appended to only), then read by the DFA construction
    and dropped.  Fuel: :meth:`new_state` and :meth:`new_states` charge exactly what
    :class:`NFA`'s do (the same sums at the same state counts).
    """

    __slots__ = (
        "accept",
        "budget",
        "e_hi",
        "e_lo",
        "e_src",
        "e_tgt",
        "limit",
        "n",
        "r_rule",
        "r_src",
        "r_tgt",
        "start",
        "x_src",
        "x_tgt",
    )

    def __init__(self, limit: int = 1_000_000, budget: WorkBudget | None = None) -> None:
        self.n = 0
        self.start = 0
        self.accept = 0
        self.limit = limit
        self.budget = budget
        self.e_src: list[int] = []
        self.e_lo: list[int] = []
        self.e_hi: list[int] = []
        self.e_tgt: list[int] = []
        self.x_src: list[int] = []
        self.x_tgt: list[int] = []
        self.r_src: list[int] = []
        self.r_rule: list[int] = []
        self.r_tgt: list[int] = []

    def new_states(self, k: int) -> int:
        """Allocate ``k`` states at once; returns the first id (they are consecutive)."""
        first = self.n
        if self.budget is not None:
            self.budget.spend(k * _NFA_STATE_COST)
            self.budget.check_projected((first + k) * _PROJECTED_DFA_COST)
        if first + k > self.limit:
            raise LimitExceededError(
                "max_nfa_states", self.limit, "bounded repeats are unrolled; lower the bounds"
            )
        self.n = first + k
        return first

    def new_state(self) -> int:
        """Allocate one state; returns its id (fuel charged 64 states at a time, as NFA's)."""
        n = self.n
        if self.budget is not None and n % 64 == 0:
            self.budget.spend(64 * _NFA_STATE_COST)
            # each NFA state will cost about one DFA state later: refuse hopeless sizes early
            self.budget.check_projected(n * _PROJECTED_DFA_COST)
        if n >= self.limit:
            raise LimitExceededError(
                "max_nfa_states", self.limit, "bounded repeats are unrolled; lower the bounds"
            )
        self.n = n + 1
        return n

    def eps_edge(self, a: int, b: int) -> None:
        """An epsilon edge ``a -> b``."""
        self.x_src.append(a)
        self.x_tgt.append(b)

    def byte_edge(self, a: int, lo: int, hi: int, b: int) -> None:
        """A byte-range edge ``a --[lo, hi]--> b``."""
        self.e_src.append(a)
        self.e_lo.append(lo)
        self.e_hi.append(hi)
        self.e_tgt.append(b)

    def ref_edge(self, a: int, rule: int, b: int) -> None:
        """A call of rule ``rule`` from ``a``, returning to ``b``."""
        self.r_src.append(a)
        self.r_rule.append(rule)
        self.r_tgt.append(b)

    def to_lists(self) -> NFA:
        """The same automaton as an :class:`NFA` (per state lists, edges in insertion order).
        O(states + edges)."""
        n = self.n
        eps: list[list[int]] = [[] for _ in range(n)]
        edges: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        refs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for a, b in zip(self.x_src, self.x_tgt, strict=True):
            eps[a].append(b)
        for a, lo, hi, b in zip(self.e_src, self.e_lo, self.e_hi, self.e_tgt, strict=True):
            edges[a].append((lo, hi, b))
        for a, r, b in zip(self.r_src, self.r_rule, self.r_tgt, strict=True):
            refs[a].append((r, b))
        return NFA(
            eps=eps,
            edges=edges,
            refs=refs,
            start=self.start,
            accept=self.accept,
            limit=self.limit,
            budget=self.budget,
        )

    @property
    def eps(self) -> list[list[int]]:
        """Epsilon targets per state (a fresh list of lists, O(size): for tests and reports)."""
        return self.to_lists().eps

    @property
    def edges(self) -> list[list[tuple[int, int, int]]]:
        """``(lo, hi, target)`` per state (a fresh list of lists, O(size))."""
        return self.to_lists().edges

    @property
    def refs(self) -> list[list[tuple[int, int]]]:
        """``(rule id, target)`` per state (a fresh list of lists, O(size))."""
        return self.to_lists().refs


def epsilon_closure(eps: list[list[int]], states: Iterable[int]) -> frozenset[int]:
    """The states reachable from ``states`` by epsilon moves (``eps[s]``: the epsilon targets
    of ``s``), ``states`` included.  Depth-first, O(states and epsilon edges reached)."""
    seen = set(states)
    stack = list(seen)
    while stack:
        s = stack.pop()
        for t in eps[s]:
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return frozenset(seen)


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
    def of(table: np.ndarray, accepting: np.ndarray, start: int) -> SubAutomaton:
        """From a byte DFA's ``int32[n, 256]`` table (state 0 dead), accepting flags and start.

        The compiled build lists the ranges in one C pass (``_subset.sub_edges``: ~4 us on a
        20-state table, where the numpy passes below cost ~20 us); a kernel without it (a
        test's stand-in, an older build) takes numpy.  Same edges, same order."""
        if _KERNEL is not None and hasattr(_KERNEL, "sub_edges"):
            edges_t, acc_t = _KERNEL.sub_edges(
                np.ascontiguousarray(table, dtype=np.int32),
                np.ascontiguousarray(accepting, dtype=bool),
            )
            return SubAutomaton(
                start=start, n_states=table.shape[0], accepting=acc_t, edges=edges_t
            )
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
        acc = tuple(int(x) for x in np.flatnonzero(accepting) if x)
        return SubAutomaton(start=start, n_states=n, accepting=acc, edges=tuple(edges))


# a work item: (node, from_state, to_state, own) -- ``own``: every edge leaving from_state
# belongs to this node's fragment (a fresh state), so the fragment can be shared
_Work = tuple[Node, int, int, bool]


def thompson_nfa(
    node: Node,
    limits: CompileLimits,
    budget: WorkBudget,
    sub_automaton: Callable[[Node], SubAutomaton],
    *,
    inline: Node | None = None,
    rule_ids: Mapping[str, int] | None = None,
) -> FlatNFA:
    """Build the NFA of an IR tree (a :class:`FlatNFA`).

    Without ``rule_ids`` the tree must be regular (a :class:`RuleRef` raises
    :class:`UnsupportedFeatureError`); with it, each ``RuleRef(name)`` becomes a reference edge
    labelled ``rule_ids[name]`` (used for the rules of a context-free grammar).
    ``sub_automaton(n)``: the minimal DFA of a subtree worth compiling once (a large character
    set, an item repeated or looped over), copied in instead of expanding the subtree;
    ``inline`` is a node that must be expanded in place rather than asked for (used when that
    sub-DFA is itself being built).
    """
    return _Thompson(limits, budget, sub_automaton, inline, rule_ids).run(node)


class _Thompson:
    """One NFA construction: a work list of (node, from, to, own) items, one method per node
    kind (called by kind in :meth:`run`), and the hash-consing
    tables that keep the NFA linear in the IR's DAG rather than in its tree unfolding."""

    __slots__ = (
        "byte_chain",
        "chained",
        "inline",
        "nfa",
        "rule_ids",
        "shared",
        "sub_automaton",
        "work",
    )

    def __init__(
        self,
        limits: CompileLimits,
        budget: WorkBudget,
        sub_automaton: Callable[[Node], SubAutomaton],
        inline: Node | None,
        rule_ids: Mapping[str, int] | None,
    ) -> None:
        self.nfa = FlatNFA(limit=limits.max_nfa_states, budget=budget)
        self.sub_automaton = sub_automaton
        self.inline = inline
        self.rule_ids = rule_ids
        self.work: list[_Work] = []
        # (node, to_state) -> entry state of a fragment already built for that node and exit:
        # an IR that is a DAG (inlined rules, shared suffixes of optional properties) is built
        # in space linear in the DAG rather than in its tree unfolding
        self.shared: dict[tuple[Node, int], int] = {}
        # (item, state where the rest of its concatenation starts) -> entry state of that item
        self.chained: dict[tuple[Node, int], int] = {}
        # (next state << 8 | byte) -> the state reading that byte into that next state (one
        # int key: no tuple made and hashed per byte)
        self.byte_chain: dict[int, int] = {}

    def run(self, node: Node) -> FlatNFA:
        nfa = self.nfa
        s = nfa.new_state()
        a = nfa.new_state()
        nfa.start, nfa.accept = s, a
        work = self.work
        work.append((node, s, a, True))
        shared = self.shared
        while work:
            n, frm, to, own = work.pop()
            tp = type(n)
            # (the composite kinds by exact type, the common leaves ruled out the same way,
            # isinstance only for anything else: a subclass would share as before)
            composite: Any = (
                n
                if tp is Concat
                or tp is Alt
                or tp is Repeat
                or (
                    tp is not Literal and tp is not CharSet and isinstance(n, (Concat, Alt, Repeat))
                )
                else None
            )
            if composite is not None and composite.size >= _SHARE_MIN_NODES:
                key = (n, to)
                if own:
                    entry = shared.get(key)
                    if entry is not None:
                        nfa.eps_edge(frm, entry)
                        continue
                    shared[key] = frm
                else:
                    # one hash of the key, not two: the next state's id stands for "not
                    # there" (no entry holds it, every entry is a state already made), and
                    # becomes the fresh entry state at once (new_state returns it)
                    fresh = nfa.n
                    entry = shared.setdefault(key, fresh)
                    if entry != fresh:
                        nfa.eps_edge(frm, entry)
                        continue
                    nfa.new_state()
                    nfa.eps_edge(frm, fresh)
                    frm = fresh
            # the handler of the node's kind, called directly (the compiled build then calls
            # the native method, not a Python-level callable through a table), by exact type
            # first (one pointer comparison each; the IR's kinds are final classes), then by
            # isinstance for anything else (a subclass); the order puts the common ones first
            if tp is Concat:
                self._concat(n, frm, to, own)  # type: ignore[arg-type]
            elif tp is Literal:
                self._literal(n, frm, to, own)  # type: ignore[arg-type]
            elif tp is Alt:
                self._alt(n, frm, to, own)  # type: ignore[arg-type]
            elif tp is CharSet:
                self._char_set(n, frm, to, own)  # type: ignore[arg-type]
            elif tp is Repeat:
                self._repeat(n, frm, to, own)  # type: ignore[arg-type]
            else:
                self._dispatch(n, frm, to, own)
        return nfa

    def _dispatch(self, n: Node, frm: int, to: int, own: bool) -> None:
        """The handler of ``n``'s kind, by ``isinstance`` (the kinds :meth:`run` does not
        match by exact type, and subclasses of any)."""
        if isinstance(n, Concat):
            self._concat(n, frm, to, own)
        elif isinstance(n, Literal):
            self._literal(n, frm, to, own)
        elif isinstance(n, Alt):
            self._alt(n, frm, to, own)
        elif isinstance(n, CharSet):
            self._char_set(n, frm, to, own)
        elif isinstance(n, Repeat):
            self._repeat(n, frm, to, own)
        elif isinstance(n, ByteSet):
            self._byte_set(n, frm, to, own)
        elif isinstance(n, RuleRef):
            self._rule_ref(n, frm, to, own)
        elif isinstance(n, Empty):
            self._empty(n, frm, to, own)
        elif isinstance(n, _Embedded):
            self._embedded(n, frm, to, own)
        elif isinstance(n, SepLoop):
            self._sep_loop(n, frm, to, own)
        elif not isinstance(n, Nothing):  # (Nothing: no edge)
            raise TypeError(f"not an IR node: {n!r}")

    def _empty(self, n: Empty, frm: int, to: int, own: bool) -> None:
        self.nfa.eps_edge(frm, to)

    def _literal(self, n: Literal, frm: int, to: int, own: bool) -> None:
        # built from the end, each byte hash-consed with the state it leads to: literals that
        # end alike (enum values, the keys' '":') share their tails
        nfa = self.nfa
        try:
            data = n.text.encode("utf-8")
        except UnicodeEncodeError:
            raise UnsupportedFeatureError(
                "lone surrogate",
                f"literal {n.text[:40]!r}",
                "a surrogate code point has no UTF-8 form, so no output can contain it",
            ) from None
        if not data:
            nfa.eps_edge(frm, to)
            return
        byte_chain = self.byte_chain
        nxt = to
        # (one dict operation per byte: ``setdefault`` with the next state's id, as _concat's)
        for k in range(len(data) - 1, 0, -1):
            b = data[k]
            fresh = nfa.n
            entry = byte_chain.setdefault(nxt << 8 | b, fresh)
            if entry == fresh:
                nfa.new_state()
                nfa.byte_edge(fresh, b, b, nxt)
            nxt = entry
        nfa.byte_edge(frm, data[0], data[0], nxt)

    def _byte_set(self, n: ByteSet, frm: int, to: int, own: bool) -> None:
        nfa = self.nfa
        for lo, hi in n.ranges:
            nfa.byte_edge(frm, lo, hi, to)

    def _char_set(self, n: CharSet, frm: int, to: int, own: bool) -> None:
        if len(n.ranges) > _EMBED_RANGES and n is not self.inline:
            _embed(self.nfa, self.sub_automaton(n), frm, to)
            return
        seqs = _UTF8_SEQS.get(n.ranges)
        if seqs is None:
            seqs = [seq for lo, hi in n.ranges for seq in utf8_sequences(lo, hi)]
            if len(_UTF8_SEQS) >= _UTF8_SEQS_MAX:
                _UTF8_SEQS.clear()
            _UTF8_SEQS[n.ranges] = seqs
        _add_sequences(self.nfa, seqs, frm, to)

    def _concat(self, n: Concat, frm: int, to: int, own: bool) -> None:
        # built from the end, each item hash-consed with the state where the rest of the
        # concatenation starts: concatenations that end alike share their tails (the optional
        # members of a JSON object reach the same next member after "{" and after ",", and
        # would otherwise copy its value's automaton for each)
        nfa, work, chained = self.nfa, self.work, self.chained
        items = n.items
        # (fold_loops, interpreted, only changes a concatenation with a ``x*`` after its
        # first item whose body's last item can match the item before the star: checked here
        # first, most concatenations have none; see _may_fold)
        for k in range(1, len(items)):
            item = items[k]
            if (
                isinstance(item, Repeat)
                and item.min == 0
                and item.max is None
                and _may_fold(items[k - 1], item.item)
            ):
                items = fold_loops(items)
                break
        # (each link hashed once: ``setdefault`` with the next state's id, which no entry
        # holds, and which ``new_state`` then returns; the item's hash is a Python-level call)
        nxt = to
        for k in range(len(items) - 1, 0, -1):
            item = items[k]
            fresh = nfa.n
            entry = chained.setdefault((item, nxt), fresh)
            if entry == fresh:
                nfa.new_state()
                work.append((item, fresh, nxt, True))
            nxt = entry
        first = items[0]
        link = (first, nxt)
        if own:
            found = chained.get(link)
            if found is not None:
                nfa.eps_edge(frm, found)
            else:
                chained[link] = frm
                work.append((first, frm, nxt, True))
        else:  # a fresh entry, so that the next occurrence (another alternative) links here
            fresh = nfa.n
            entry = chained.setdefault(link, fresh)
            if entry == fresh:
                nfa.new_state()
                work.append((first, fresh, nxt, True))
            nfa.eps_edge(frm, entry)

    def _alt(self, n: Alt, frm: int, to: int, own: bool) -> None:
        work = self.work
        for item in n.items:
            work.append((item, frm, to, False))

    def _repeat(self, n: Repeat, frm: int, to: int, own: bool) -> None:
        copies = max(n.min, n.max or 0) + 1
        # an item copied many times, or looped over (a JSON string's characters), is compiled
        # once to its minimal DFA: fewer NFA and DFA states than Thompson's copy
        if (
            (copies > 2 or n.max is None)
            and n.item is not self.inline
            and _worth_embedding(n.item)
            and (self.rule_ids is None or is_regular(n.item))
        ):
            n = Repeat(_Embedded(self.sub_automaton(n.item)), n.min, n.max)
        _add_repeat(self.nfa, n, frm, to, self.work)

    def _embedded(self, n: _Embedded, frm: int, to: int, own: bool) -> None:
        _embed(self.nfa, n.sub, frm, to)

    def _sep_loop(self, n: SepLoop, frm: int, to: int, own: bool) -> None:
        # frm -> L --x--> E -(sep)-> L, E -> to: one copy of x for "x (sep x)*"
        nfa, work = self.nfa, self.work
        loop = nfa.new_state()
        end = nfa.new_state()
        nfa.eps_edge(frm, loop)
        nfa.eps_edge(end, to)
        work.append((n.item, loop, end, True))
        if isinstance(n.sep, Empty):
            nfa.eps_edge(end, loop)
        else:
            work.append((n.sep, end, loop, False))

    def _rule_ref(self, n: RuleRef, frm: int, to: int, own: bool) -> None:
        if self.rule_ids is None:
            raise UnsupportedFeatureError(
                f"rule reference {n.name!r}",
                "a regular expression",
                "non-regular grammars compile with compile_grammar",
            )
        self.nfa.ref_edge(frm, self.rule_ids[n.name], to)


def _may_fold(before: object, body: Node) -> bool:
    """False when :func:`~formcast.ir.loops.fold_loops` cannot fold a star of ``body`` that
    follows ``before`` (when no earlier star of the concatenation folded).  Every fold of
    ``x*`` (``x`` = ``body``'s items) ends the items before it with a suffix ``x[t:]`` of
    ``x``: its last item equals ``x``'s last one (``fold_loops`` compares them with ``==``),
    or, for a one-item suffix, the two are literals one of which ends with the other.  So a
    concatenation none of whose stars passes this check comes back from ``fold_loops``
    unchanged (each star sees the items before it as they are), and the call is skipped.
    The operands are ``object``, so the compiled build compares them with the nodes' own
    ``__eq__`` (rules33: typed as nodes, the compiled comparison said False for equal nodes).
    O(1) plus one node comparison."""
    if isinstance(body, Concat) and not body.items:
        return False  # (no suffix to fold)
    last: object = body.items[-1] if isinstance(body, Concat) else body
    if before == last:
        return True
    if isinstance(before, Literal) and isinstance(last, Literal):
        a, b = before.text, last.text
        return a.endswith(b) or b.endswith(a)
    return False


def _worth_embedding(item: Node) -> bool:
    """True when an item repeated many times is better compiled once and copied as a DFA."""
    if isinstance(item, (Literal, Empty, Nothing, ByteSet)):
        return False
    # an ASCII set is one byte edge per range, fewer states than its embedded DFA's copy
    return not (
        isinstance(item, CharSet)
        and len(item.ranges) <= _EMBED_RANGES
        and item.ranges[-1][1] < 0x80
    )


def _single_byte_ranges(item: Node) -> tuple[tuple[int, int], ...] | None:
    """The byte ranges of an item that reads exactly one byte through plain edges and makes no
    state (a byte set, an ASCII character set the NFA does not embed, a one-byte ASCII
    literal): what its handler would add from ``frm`` to ``to``, in the same order; else None.
    O(ranges)."""
    if isinstance(item, ByteSet):
        return item.ranges
    if isinstance(item, CharSet):
        ranges = item.ranges
        if ranges and len(ranges) <= _EMBED_RANGES and ranges[-1][1] < 0x80:
            return ranges  # (each ASCII range is one UTF-8 sequence of one byte)
        return None
    if isinstance(item, Literal) and len(item.text) == 1 and ord(item.text) < 0x80:
        b = ord(item.text)
        return ((b, b),)
    return None


def _add_repeat(
    nfa: FlatNFA, n: Repeat, frm: int, to: int, work: list[tuple[Node, int, int, bool]]
) -> None:
    # an item of one byte (whitespace, digits: ``[ \t\n]{0,20}``, ``[0-9]{1,20}``) gets its
    # edges here rather than one work item per copy: the same NFA, states and edges, without
    # the dispatch per copy (most NFA states of the builtin JSON grammar are such copies)
    ranges = _single_byte_ranges(n.item)
    cur = frm
    for _ in range(n.min):
        nxt = nfa.new_state()
        if ranges is None:
            work.append((n.item, cur, nxt, False))
        else:
            for lo, hi in ranges:
                nfa.byte_edge(cur, lo, hi, nxt)
        cur = nxt
    if n.max is None:
        # cur --eps--> loop; loop --item--> loop; loop --eps--> to
        loop = nfa.new_state()
        nfa.eps_edge(cur, loop)
        body_end = nfa.new_state()
        if ranges is None:
            work.append((n.item, loop, body_end, False))
        else:
            for lo, hi in ranges:
                nfa.byte_edge(loop, lo, hi, body_end)
        nfa.eps_edge(body_end, loop)
        nfa.eps_edge(loop, to)
        return
    optional = n.max - n.min
    nfa.eps_edge(cur, to)
    for i in range(optional):
        nxt = to if i == optional - 1 else nfa.new_state()
        if ranges is None:
            work.append((n.item, cur, nxt, False))
        else:
            for lo, hi in ranges:
                nfa.byte_edge(cur, lo, hi, nxt)
        if nxt != to:
            nfa.eps_edge(nxt, to)
        cur = nxt


def _add_sequences(nfa: FlatNFA, seqs: list[list[tuple[int, int]]], frm: int, to: int) -> None:
    """Add UTF-8 range sequences from ``frm`` to ``to``, sharing common suffix states."""
    # suffix sharing: key = tuple of remaining ranges -> state that consumes them to `to`
    suffix_state: dict[tuple[tuple[int, int], ...], int] = {}
    for seq in seqs:
        if len(seq) == 1:
            nfa.byte_edge(frm, seq[0][0], seq[0][1], to)
            continue
        # build from the end so suffixes are shared
        nxt = to
        for k in range(len(seq) - 1, 0, -1):
            key = tuple(seq[k:])
            st = suffix_state.get(key)
            if st is None:
                st = nfa.new_state()
                lo, hi = seq[k]
                nfa.byte_edge(st, lo, hi, nxt)
                suffix_state[key] = st
            nxt = st
        lo, hi = seq[0]
        nfa.byte_edge(frm, lo, hi, nxt)


def _embed(nfa: FlatNFA, sub: SubAutomaton, frm: int, to: int) -> None:
    """Copy a sub-DFA into the NFA between ``frm`` and ``to``.  O(its edges), no numpy."""
    if sub.start == 0:
        return
    base = nfa.new_states(sub.n_states - 1) - 1  # local state s (>= 1) -> base + s
    nfa.eps_edge(frm, base + sub.start)
    for s in sub.accepting:
        nfa.eps_edge(base + s, to)
    for s, lo, hi, t in sub.edges:
        nfa.byte_edge(base + s, lo, hi, base + t)
