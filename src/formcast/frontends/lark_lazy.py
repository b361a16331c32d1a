"""Lazy lexemes (llguidance's ``name[lazy]: ...``) as a rewrite of the grammar IR.

formcast's IR has no lexer: a grammar's language is every split of the text into lexemes.
llguidance's lexer ends a *lazy* lexeme at its first possible end, and that choice also cuts the
other lexemes the parser allows at the same position: in its combined lexer state, as soon as
the text read since the lexeme started (one byte or more) is in the language of an allowed lazy
lexeme ``K``, ``K`` is emitted and every other candidate dies.  So, for a lexeme ``T`` allowed
at a position where lazy lexemes ``K1, K2, ...`` are allowed too, ``T`` can only match a string
``w`` of ``L(T)``

* with no non-empty prefix (``w`` itself included) in any ``L(Ki)`` when ``T`` is greedy;
* with no non-empty *proper* prefix in any ``L(Ki)`` when ``T`` is lazy (a lazy lexeme is always
  allowed together with itself, so ``L(T)`` becomes the strings none of whose non-empty proper
  prefixes is in it: ``r[lazy]: /[a-z]+/`` is one letter, ``"ab" | "abc"`` is ``ab``).

Which lexemes are allowed together depends on the parser state.  This module computes a sound
over-approximation on the IR (:func:`apply_lazy_lexemes`): every reference to a terminal in a
rule body is an *occurrence*; Glushkov's first/last/follow construction, extended to rules by a
fixpoint, gives which occurrences can follow which.  Two occurrences are taken to be allowed
together when both can start the start rule, or when both can follow occurrences of terminals
whose languages overlap (the last lexeme read can be one text matching both).  Every occurrence
allowed together with a lazy occurrence gets the cut above, through a new terminal rule named
``"<T>%lazy:<K1>,<K2>"`` (no Lark source can spell it).  The result never accepts a string
llguidance's lexer rejects for laziness; it may reject more when two lexemes look allowed
together here and never are in a parse (a grammar where that matters can name different
terminals in the two places).  Greedy lexemes keep formcast's semantics (every split, no
maximal munch).

Lifetime: a pure function.  Cost: nothing when the grammar has no lazy terminal; otherwise the
fixpoint (rules × occurrences) plus one automaton product per cut terminal, charged to the
compile's fuel, within the ``max_automaton_states`` default of :mod:`formcast.automata.charfa`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..automata import charfa
from ..errors import LimitExceededError
from ..ir.nodes import (
    ANY_CHAR,
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
    alt,
    concat,
    repeat,
)
from ..limits import charge

__all__ = ["LAZY_SUFFIX", "apply_lazy_lexemes", "shortest_match_dfa"]

#: Separator of the names of the terminal rules this rewrite adds (``"<T>%lazy:<K>,..."``).
LAZY_SUFFIX = "%lazy:"

#: States any automaton built here may have (a cut terminal and its products).
_MAX_STATES = charfa.DEFAULT_MAX_STATES
#: Size of the expression a cut terminal becomes before it becomes right-linear rules instead.
_MAX_EXPRESSION = 4_000

_Occ = frozenset[int]
_NONE: _Occ = frozenset()


def _prefix_hit_dfa(k: charfa.CharDFA, *, proper: bool) -> charfa.CharDFA:
    """The strings with a non-empty prefix in ``L(k)`` (``proper``: a non-empty proper prefix,
    i.e. at least one more character after it)."""
    n = k.num_states
    if n == 0:
        return charfa.CharDFA([], [])
    # states: 0 a fresh start (k's start, before any character), 1..n k's states, then HIT
    # (a prefix in L(k) was just read; accepting unless ``proper``) and SINK (accepting, loops)
    hit, sink = n + 1, n + 2
    any_edges = [(lo, hi, sink) for lo, hi in ANY_CHAR.ranges]

    def row(s: int) -> list[charfa.Edge]:
        return [(lo, hi, hit if k.accept[t] else t + 1) for lo, hi, t in k.trans[s]]

    trans = [row(0)] + [row(s) for s in range(n)] + [any_edges, any_edges]
    accept = [False] * (n + 1) + [not proper, True]
    charge(n + 2)
    return charfa.minimize(charfa.CharDFA(trans, accept))


def shortest_match_dfa(dfa: charfa.CharDFA) -> charfa.CharDFA:
    """``L(dfa)`` restricted to the strings none of whose non-empty proper prefixes is in it (a
    lazy lexeme's language; the empty string stays when it is in ``L(dfa)``)."""
    return charfa.difference(dfa, _prefix_hit_dfa(dfa, proper=True), _MAX_STATES)


class _Glushkov:
    """First / last / follow sets over terminal occurrences, for the rules of a grammar."""

    def __init__(self, rules: dict[str, Rule], terminals: set[str], nullable_terms: set[str]):
        self.rules = rules
        self.terminals = terminals
        self.nullable_terms = nullable_terms
        self.occ_term: list[str | None] = []  # occurrence id -> terminal (None: raw characters)
        self.ids: dict[tuple[str, int], int] = {}  # (rule, k-th occurrence in the rule) -> id
        self.null: dict[str, bool] = {}
        self.first: dict[str, _Occ] = {}
        self.last: dict[str, _Occ] = {}
        self.pairs: list[tuple[_Occ, _Occ]] = []
        self._rule = ""
        self._k = 0
        self._collect = False

    def occurrence(self, term: str | None) -> int:
        key = (self._rule, self._k)
        self._k += 1
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = len(self.occ_term)
            self.occ_term.append(term)
        return got

    def run(self, names: list[str]) -> None:
        for n in names:
            self.null[n], self.first[n], self.last[n] = False, _NONE, _NONE
        changed = True
        while changed:
            changed = False
            for n in names:
                got = self.body(n)
                if got != (self.null[n], self.first[n], self.last[n]):
                    self.null[n], self.first[n], self.last[n] = got
                    changed = True
        self._collect = True
        for n in names:
            self.body(n)

    def body(self, name: str) -> tuple[bool, _Occ, _Occ]:
        self._rule, self._k = name, 0
        return self.node(self.rules[name].body)

    def node(self, n: Node) -> tuple[bool, _Occ, _Occ]:
        charge(1)
        if isinstance(n, Empty):
            return True, _NONE, _NONE
        if isinstance(n, Nothing):
            return False, _NONE, _NONE
        if isinstance(n, RuleRef):
            if n.name in self.terminals:
                o = frozenset((self.occurrence(n.name),))
                return n.name in self.nullable_terms, o, o
            if n.name not in self.null:  # undefined: no language
                return False, _NONE, _NONE
            return self.null[n.name], self.first[n.name], self.last[n.name]
        if isinstance(n, (CharSet, ByteSet, Literal)):  # raw text in a rule: an opaque lexeme
            o = frozenset((self.occurrence(None),))
            return isinstance(n, Literal) and not n.text, o, o
        if isinstance(n, Concat):
            null, first, last = True, _NONE, _NONE
            for item in n.items:
                inull, ifirst, ilast = self.node(item)
                if self._collect and last and ifirst:
                    self.pairs.append((last, ifirst))
                if null:
                    first = first | ifirst
                last = ilast | last if inull else ilast
                null = null and inull
            return null, first, last
        if isinstance(n, Alt):
            null, first, last = False, _NONE, _NONE
            for item in n.items:
                inull, ifirst, ilast = self.node(item)
                null, first, last = null or inull, first | ifirst, last | ilast
            return null, first, last
        if isinstance(n, Repeat):
            inull, ifirst, ilast = self.node(n.item)
            if self._collect and (n.max is None or n.max > 1) and ilast and ifirst:
                self.pairs.append((ilast, ifirst))
            return n.min == 0 or inull, ifirst, ilast
        raise TypeError(f"unexpected IR node {type(n).__name__}")  # pragma: no cover


def _rewrite(n: Node, names: Iterator[str | None], terminals: set[str]) -> Node:
    """``n`` with its terminal references renamed, in :class:`_Glushkov`'s visiting order
    (``None``: keep the reference)."""
    if isinstance(n, RuleRef):
        if n.name not in terminals:
            return n
        new = next(names)
        return n if new is None else RuleRef(new)
    if isinstance(n, (CharSet, ByteSet, Literal)):
        next(names)
        return n
    if isinstance(n, Concat):
        return concat([_rewrite(x, names, terminals) for x in n.items])
    if isinstance(n, Alt):
        return alt([_rewrite(x, names, terminals) for x in n.items])
    if isinstance(n, Repeat):
        return repeat(_rewrite(n.item, names, terminals), n.min, n.max)
    return n


def apply_lazy_lexemes(grammar: Grammar) -> Grammar:
    """``grammar`` with llguidance's lazy-lexeme semantics compiled into its terminals.

    Terminal rules (``Rule.terminal``) with ``Rule.lazy`` are lazy lexemes; every other
    terminal rule is a greedy lexeme; the references to terminals in the bodies of the other
    rules are the lexeme occurrences.  See the module docstring for the semantics and the
    approximation.  A grammar without lazy terminals is returned as is.

    Raises:
        LimitExceededError: a cut terminal's automaton exceeds the automaton state limit.
        UnsupportedFeatureError: a lazy terminal whose body is not regular.
    """
    by_name = {r.name: r for r in grammar.rules}
    terminals = {r.name for r in grammar.rules if r.terminal}
    lazies = {n for n in terminals if by_name[n].lazy}
    if not lazies:
        return grammar
    dfas: dict[str, charfa.CharDFA] = {}

    def dfa(name: str) -> charfa.CharDFA:
        got = dfas.get(name)
        if got is None:
            got = dfas[name] = charfa.dfa_from_node(by_name[name].body, _MAX_STATES)
        return got

    def cut(name: str, by: frozenset[str]) -> charfa.CharDFA:
        d = dfa(name)
        lazy = name in lazies
        for k in sorted(by):
            d = charfa.difference(d, _prefix_hit_dfa(dfa(k), proper=lazy), _MAX_STATES)
        return d

    added: list[Rule] = []
    bodies: dict[str, Node] = {}

    def to_rule(name: str, d: charfa.CharDFA, *, lazy: bool) -> Rule:
        try:
            return Rule(name, charfa.dfa_to_node(d, _MAX_EXPRESSION), terminal=True, lazy=lazy)
        except LimitExceededError:
            start, rules = charfa.dfa_to_rules(d, f"{name}%state")
            added.extend(rules)
            return Rule(name, start, lazy=lazy)

    if grammar.start in terminals:  # the whole text is one lexeme
        if grammar.start in lazies:
            bodies[grammar.start] = to_rule(
                grammar.start, cut(grammar.start, frozenset((grammar.start,))), lazy=True
            ).body
        return _replace(grammar, bodies, added, {})

    nullable_terms = {n for n in terminals if dfa(n).num_states and dfa(n).accept[0]}
    others = [r.name for r in grammar.rules if not r.terminal]
    g = _Glushkov(by_name, terminals, nullable_terms)
    g.run(others)
    occ_term = g.occ_term
    first_start = g.first.get(grammar.start, _NONE)

    overlap_memo: dict[tuple[str, str], bool] = {}

    def overlap(a: str | None, b: str | None) -> bool:
        if a is None or b is None or a == b:
            return True
        key = (a, b) if a < b else (b, a)
        got = overlap_memo.get(key)
        if got is None:
            got = overlap_memo[key] = not charfa.intersect(dfa(a), dfa(b), _MAX_STATES).is_empty()
        return got

    cutset: dict[int, set[str]] = {}
    lazy_occs = [o for o, t in enumerate(occ_term) if t in lazies]
    all_terms: list[str | None] = [*sorted(terminals), None]
    for h in lazy_occs:
        k = occ_term[h]
        assert k is not None
        together: set[int] = {h}
        if h in first_start:
            together |= first_start
        before = {occ_term[o] for a, b in g.pairs if h in b for o in a}
        if before:
            close = {t for t in all_terms if any(overlap(t, p) for p in before)}
            for a, b in g.pairs:
                if any(occ_term[o] in close for o in a):
                    together |= b
        for o in together:
            if occ_term[o] is not None:
                cutset.setdefault(o, set()).add(k)

    renamed: dict[int, str] = {}
    made: dict[tuple[str, frozenset[str]], str] = {}
    cuts_memo: dict[tuple[str, str], bool] = {}

    def cuts(t: str, k: str) -> bool:
        """Whether lazy ``k`` removes any string from terminal ``t``."""
        got = cuts_memo.get((t, k))
        if got is None:
            hit = _prefix_hit_dfa(dfa(k), proper=t in lazies)
            got = cuts_memo[(t, k)] = not charfa.intersect(dfa(t), hit, _MAX_STATES).is_empty()
        return got

    for o, all_ks in cutset.items():
        t = occ_term[o]
        assert t is not None
        ks = {k for k in all_ks if k == t or cuts(t, k)}  # a cut that removes nothing: none
        if not ks:
            continue
        key = (t, frozenset(ks))
        name = made.get(key)
        if name is None:
            if ks == {t}:
                name = t
            else:
                name = f"{t}{LAZY_SUFFIX}{','.join(sorted(ks))}"
                while name in by_name:
                    name += "'"
                added.append(to_rule(name, cut(t, frozenset(ks)), lazy=t in lazies))
            made[key] = name
        if name != t:
            renamed[o] = name
    for t in sorted(lazies):  # a lazy terminal's own rule: its shortest matches
        bodies[t] = to_rule(t, cut(t, frozenset((t,))), lazy=True).body

    new_bodies: dict[str, Node] = {}
    for r in grammar.rules:
        if r.terminal:
            continue
        ids = [g.ids[(r.name, i)] for i in range(_count(g, r.name))]
        names = iter([renamed.get(o) for o in ids])
        new_bodies[r.name] = _rewrite(r.body, names, terminals)
    return _replace(grammar, bodies, added, new_bodies)


def _count(g: _Glushkov, rule: str) -> int:
    k = 0
    while (rule, k) in g.ids:
        k += 1
    return k


def _replace(
    grammar: Grammar, terms: dict[str, Node], added: list[Rule], others: dict[str, Node]
) -> Grammar:
    out: list[Rule] = []
    for r in grammar.rules:
        body = terms.get(r.name) if r.terminal else others.get(r.name)
        if body is None or body == r.body:
            out.append(r)
        elif r.terminal and isinstance(body, RuleRef):  # right-linear fallback: not regular
            out.append(Rule(r.name, body, terminal=False, lazy=r.lazy))
        else:
            out.append(Rule(r.name, body, r.terminal, r.lazy))
    return Grammar(tuple(out + added), grammar.start)
