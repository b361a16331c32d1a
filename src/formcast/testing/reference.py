"""A slow, obviously-correct reference recognizer for IR grammars — a test oracle.

:class:`ReferenceRecognizer` answers, for a Python ``str`` (one code point at a time):

* :meth:`~ReferenceRecognizer.matches` — is the whole text in the grammar's language?
* :meth:`~ReferenceRecognizer.is_prefix` — does some string of the language start with it?

How it works (each step small enough to check by eye):

1. The IR is flattened, without recursion, into a plain context-free grammar: productions
   ``A -> X1 ... Xn`` over nonterminals and *character-set terminals*.  ``Literal`` becomes its
   characters, ``Alt`` one production per branch, ``Concat`` one production, ``Empty`` an empty
   production, ``Nothing`` a nonterminal without productions, ``RuleRef`` the rule's
   nonterminal.  ``Repeat(x, m, n)`` becomes ``x{m}`` followed by ``x*`` (``S -> S x | ε``) or
   by ``x{0,n-m}``.  Bounds are expanded by *binary decomposition* so a bound of a million costs
   a few dozen nonterminals: ``x{2j} = x{j} x{j}``, and ``x{0,k}`` picks the bits of the count
   from the highest down (see :meth:`_Flattener.up_to`); every count has one parse.
2. Nonterminals that derive no string at all are removed, with every production using them.
   After that, every item that survives in an Earley set can be completed, which is what makes
   ``is_prefix`` a simple "is the last set non-empty".
3. Earley's algorithm (predict / scan / complete) with the Aycock–Horspool fix for nullable
   nonterminals: predicting a nullable ``B`` also moves the dot over it.  Left recursion and
   nullable rules need nothing else.

It ignores the lexing hints of a :class:`~formcast.ir.nodes.Rule` (``terminal``, ``lazy``): it
decides membership in the context-free language the rules spell out.  :class:`ByteSet` is
supported for ASCII bytes only (a ``str`` has no raw bytes).

Cost: O(n³) time in the worst case, O(n²) memory; meant for inputs of a few hundred characters.
Lifetime: build once per grammar (flattening is linear in the grammar); each query is
independent and the object is never mutated after construction, so it may be shared.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable

from ..errors import GrammarError, UnsupportedFeatureError
from ..ir.nodes import (
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
)

__all__ = ["ReferenceRecognizer"]

_Item = tuple[int, int, int]  # (production, dot, origin)


class _Flattener:
    """IR → productions.  Symbols: nonterminal ``k >= 0``; terminal ``t`` is encoded ``-1 - t``."""

    def __init__(self) -> None:
        self.lhs: list[int] = []
        self.rhs: list[tuple[int, ...]] = []
        self.n_nt = 0
        self.terms: list[tuple[tuple[int, int], ...]] = []
        self._term_ids: dict[tuple[tuple[int, int], ...], int] = {}
        self._work: list[tuple[Node, int]] = []
        self._nothing: int | None = None
        self._pow: dict[tuple[str, int, int], int] = {}
        self.rule_nt: dict[str, int] = {}

    def new_nt(self) -> int:
        self.n_nt += 1
        return self.n_nt - 1

    def add(self, lhs: int, rhs: list[int]) -> None:
        self.lhs.append(lhs)
        self.rhs.append(tuple(rhs))

    def term(self, ranges: tuple[tuple[int, int], ...]) -> int:
        t = self._term_ids.get(ranges)
        if t is None:
            t = self._term_ids[ranges] = len(self.terms)
            self.terms.append(ranges)
        return -1 - t

    def symbols(self, node: Node) -> list[int]:
        """A symbol string deriving exactly ``node``'s language (composites are queued)."""
        if isinstance(node, Literal):
            return [self.term(((ord(c), ord(c)),)) for c in node.text]
        if isinstance(node, CharSet):
            return [self.term(node.ranges)]
        if isinstance(node, ByteSet):
            if any(hi > 0x7F for _, hi in node.ranges):
                raise UnsupportedFeatureError(
                    "ByteSet with non-ASCII bytes",
                    "reference recognizer",
                    "it reads str, not bytes",
                )
            return [self.term(node.ranges)]
        if isinstance(node, Empty):
            return []
        if isinstance(node, Nothing):
            if self._nothing is None:
                self._nothing = self.new_nt()
            return [self._nothing]
        if isinstance(node, RuleRef):
            nt = self.rule_nt.get(node.name)
            if nt is None:
                raise GrammarError(f"undefined rule {node.name!r}")
            return [nt]
        if isinstance(node, (Concat, Alt, Repeat)):
            nt = self.new_nt()
            self._work.append((node, nt))
            return [nt]
        raise GrammarError(f"unknown IR node {node!r}")

    def one_symbol(self, node: Node) -> int:
        syms = self.symbols(node)
        if len(syms) == 1:
            return syms[0]
        nt = self.new_nt()
        self.add(nt, syms)
        return nt

    def power(self, x: int, k: int) -> int:
        """Nonterminal for exactly ``x{k}``, ``k`` a power of two: ``x{2j} = x{j} x{j}``."""
        key = ("exact", x, k)
        nt = self._pow.get(key)
        if nt is None:
            nt = self.new_nt()
            self._pow[key] = nt
            half = x if k == 1 else self.power(x, k // 2)  # depth log2(k)
            self.add(nt, [x] if k == 1 else [half, half])
        return nt

    def exactly(self, x: int, k: int) -> list[int]:
        """``x{k}``: one power-of-two block per set bit of ``k`` (a unique parse)."""
        return [self.power(x, 1 << i) for i in range(k.bit_length()) if k >> i & 1]

    def up_to(self, x: int, k: int) -> list[int]:
        """``x{0,k}`` unambiguously, in O(log² k) symbols.

        With ``2^p <= k < 2^(p+1)``: a count below ``2^p`` is any ``p``-bit number (an optional
        block per bit), otherwise it is ``2^p`` plus a count up to ``k - 2^p``.
        """
        if k == 0:
            return []
        key = ("upto", x, k)
        nt = self._pow.get(key)
        if nt is None:
            nt = self.new_nt()
            self._pow[key] = nt
            p = k.bit_length() - 1
            self.add(nt, [self.optional_power(x, 1 << i) for i in reversed(range(p))])
            self.add(nt, [self.power(x, 1 << p), *self.up_to(x, k - (1 << p))])
        return [nt]

    def optional_power(self, x: int, k: int) -> int:
        key = ("opt", x, k)
        nt = self._pow.get(key)
        if nt is None:
            nt = self.new_nt()
            self._pow[key] = nt
            self.add(nt, [self.power(x, k)])
            self.add(nt, [])
        return nt

    def run(self) -> None:
        while self._work:
            node, nt = self._work.pop()
            if isinstance(node, Concat):
                seq: list[int] = []
                for item in node.items:
                    seq.extend(self.symbols(item))
                self.add(nt, seq)
            elif isinstance(node, Alt):
                for item in node.items:
                    self.add(nt, self.symbols(item))
            elif isinstance(node, Repeat):
                x = self.one_symbol(node.item)
                seq = self.exactly(x, node.min)
                if node.max is None:
                    star = self.new_nt()
                    self.add(star, [star, x])  # left recursive: cheap for Earley
                    self.add(star, [])
                    seq.append(star)
                elif node.max > node.min:
                    seq.extend(self.up_to(x, node.max - node.min))
                elif node.max < node.min:
                    seq = self.symbols(Nothing())
                self.add(nt, seq)


def _fixpoint(
    lhs: list[int],
    rhs: list[tuple[int, ...]],
    n_nt: int,
    term_ok: Callable[[int], bool],
) -> list[bool]:
    """Least fixpoint: a nonterminal holds when some production has only holding symbols.

    With ``term_ok`` true for non-empty terminals this is "derives some string" (productive);
    with ``term_ok`` always false it is "derives the empty string" (nullable).  Linear time.
    """
    holds = [False] * n_nt
    missing = [0] * len(rhs)
    users: dict[int, list[int]] = defaultdict(list)
    queue: list[int] = []
    for p, syms in enumerate(rhs):
        if not all(term_ok(-1 - s) for s in syms if s < 0):
            continue  # a terminal that never holds: this production never does
        distinct = {s for s in syms if s >= 0}
        missing[p] = len(distinct)
        for s in distinct:
            users[s].append(p)
        if not distinct:
            queue.append(p)
    while queue:
        a = lhs[queue.pop()]
        if holds[a]:
            continue
        holds[a] = True
        for q in users[a]:
            missing[q] -= 1
            if missing[q] == 0:
                queue.append(q)
    return holds


class ReferenceRecognizer:
    """Decides membership and viable prefixes for a :class:`Grammar` over ``str`` input.

    Args:
        grammar: any IR grammar (left recursion, nullable rules and cycles are fine).

    Raises:
        GrammarError: a rule reference to an undefined rule, or a missing start rule.
        UnsupportedFeatureError: a :class:`ByteSet` with bytes above 0x7F.
    """

    def __init__(self, grammar: Grammar) -> None:
        rules = grammar.rule_map()
        if grammar.start not in rules:
            raise GrammarError(f"start rule {grammar.start!r} is not defined")
        f = _Flattener()
        for name in rules:
            f.rule_nt[name] = f.new_nt()
        for rule in rules.values():
            f.add(f.rule_nt[rule.name], f.symbols(rule.body))
        f.run()
        start = f.new_nt()
        f.add(start, [f.rule_nt[grammar.start]])
        self._start_prod = len(f.rhs) - 1
        self._terms = f.terms
        self._term_lo = [[lo for lo, _ in t] for t in f.terms]
        keep = self._productive(f)
        self._lhs = [f.lhs[p] for p in keep]
        self._rhs = [f.rhs[p] for p in keep]
        self._start_prod = keep.index(self._start_prod) if self._start_prod in keep else -1
        self._by_lhs: list[list[int]] = [[] for _ in range(f.n_nt)]
        for p, a in enumerate(self._lhs):
            self._by_lhs[a].append(p)
        self._nullable = self._nullable_set(f.n_nt)

    @classmethod
    def for_node(cls, node: Node) -> ReferenceRecognizer:
        """A recognizer for a single (regular or rule-free) IR node."""
        return cls(Grammar((Rule("start", node),), "start"))

    # -- grammar analysis ---------------------------------------------------------------------
    @staticmethod
    def _productive(f: _Flattener) -> list[int]:
        """Indices of the productions whose symbols all derive some terminal string."""
        ok = _fixpoint(f.lhs, f.rhs, f.n_nt, lambda t: bool(f.terms[t]))
        return [
            p
            for p, rhs in enumerate(f.rhs)
            if ok[f.lhs[p]] and all(ok[s] if s >= 0 else bool(f.terms[-1 - s]) for s in rhs)
        ]

    def _nullable_set(self, n_nt: int) -> list[bool]:
        return _fixpoint(self._lhs, self._rhs, n_nt, lambda t: False)

    def _term_has(self, t: int, cp: int) -> bool:
        i = bisect_right(self._term_lo[t], cp) - 1
        return i >= 0 and self._terms[t][i][1] >= cp

    # -- Earley -------------------------------------------------------------------------------
    def _run(self, text: str) -> set[_Item] | None:
        """The Earley set after all of ``text``; None as soon as a set is empty."""
        if self._start_prod < 0:
            return None
        rhs_of, lhs_of, by_lhs, nullable = (
            self._rhs,
            self._lhs,
            self._by_lhs,
            self._nullable,
        )
        waiting_sets: list[dict[int, list[_Item]]] = []
        current: list[_Item] = [(self._start_prod, 0, 0)]
        k = 0
        while True:
            seen: set[_Item] = set(current)
            queue = list(current)
            waiting: dict[int, list[_Item]] = defaultdict(list)
            waiting_sets.append(waiting)
            predicted: set[int] = set()
            scanners: list[_Item] = []

            while queue:
                item = queue.pop()
                p, dot, origin = item
                rhs = rhs_of[p]
                new: list[_Item] = []
                if dot == len(rhs):  # complete
                    a = lhs_of[p]
                    for p2, d2, o2 in waiting_sets[origin].get(a, ()):
                        new.append((p2, d2 + 1, o2))
                else:
                    sym = rhs[dot]
                    if sym < 0:
                        scanners.append(item)
                    else:
                        waiting[sym].append(item)
                        if sym not in predicted:  # predict
                            predicted.add(sym)
                            new.extend((q, 0, k) for q in by_lhs[sym])
                        if nullable[sym]:  # Aycock-Horspool: step over a nullable symbol
                            new.append((p, dot + 1, origin))
                for x in new:
                    if x not in seen:
                        seen.add(x)
                        queue.append(x)
            if k == len(text):
                return seen
            cp = ord(text[k])
            current = [
                (p, dot + 1, origin)
                for p, dot, origin in scanners
                if self._term_has(-1 - rhs_of[p][dot], cp)
            ]
            if not current:
                return None
            k += 1

    def matches(self, text: str) -> bool:
        """True when ``text`` is in the language."""
        final = self._run(text)
        return final is not None and (self._start_prod, 1, 0) in final

    def is_prefix(self, text: str) -> bool:
        """True when some string of the language starts with ``text`` (itself included)."""
        final = self._run(text)
        return final is not None and bool(final)
