"""Undeclared object keys as IR: the canonically encoded strings that are none of the
declared keys (:func:`not_in_set`), built as a trie complement.

Lifetime: pure functions; a build is memoized process-wide by its words, and so are the
branches past a trie node whose children are not all plain printable ASCII
(:func:`~formcast.limits.metered_cache`: a hit charges what a fresh build would); the plain
ones (the usual keys) are built directly, cheaper than a cache look-up.  A build is linear in
the total length of the declared keys.
"""

from __future__ import annotations

from collections.abc import Callable

from ...automata import charfa
from ...ir.nodes import (
    ANY_CHAR,
    EMPTY,
    CharSet,
    Concat,
    Node,
    Repeat,
    concat2,
    literal,
    new_alt,
)
from ...limits import MEMO_HIT_UNITS, charge, metered_cache
from .strings import encode_ranges, encode_text

__all__ = ["not_in_set"]


def not_in_set(words: list[str]) -> Node:
    """Canonically *encoded* strings whose decoded text is not one of ``words``.

    A trie complement built directly (no automaton, no re-encoding pass): at every trie node
    the string may end (unless a word ends there), continue into a child, or continue with any
    other character followed by anything (:func:`_plain_rest`, else :func:`_diverge`; once
    per build for each tuple of children).
    Memoized by the set of words (objects with the same declared keys, within a schema or
    across schemas, share one build; a hit charges what a fresh build would).
    """
    return _not_in_sorted(tuple(sorted(set(words))))


@metered_cache(1024)
def _not_in_sorted(words: tuple[str, ...]) -> Node:
    """:func:`not_in_set` of distinct, sorted ``words`` (the trie's children are visited in
    sorted order, so the node does not depend on the order the words came in).

    The trie is read off the sorted words without building it: the words below a trie node
    are a run ``words[lo:hi]`` sharing its prefix of length ``d`` (the shortest first, so a
    word ends at the node exactly when ``words[lo]`` has length ``d``), and its children are
    the runs of equal ``words[i][d]``, in sorted order.  A node with one word below it is a
    path, the word's suffix: built from its end in one loop (:func:`_tail` below), without
    a frame per character.  Every trie node is built and charged as before, children first
    (the fuel is the recursive build's, whatever the order: each node charges its own size
    and each repeated tuple of children one memo hit)."""
    # the branches of _diverge by children, within this build: a repeat is what a repeated
    # call would be, a hit in the compile's memo (MEMO_HIT_UNITS of fuel), and costs the
    # build's replay what it did (a repeated child entry replays as a memo hit too)
    diverged: dict[tuple[str, ...], tuple[Node, ...]] = {}
    # the two nodes every plain branch ends with (process-wide, one memo look-up per build)
    any_star = _any_star()
    special = _special_tail()
    # the literal of each character, within this build (the same few letters recur at many
    # trie nodes; a literal is a value, so sharing one is the same IR)
    lits: dict[str, Node] = {}

    def branches_past(kids: tuple[str, ...]) -> tuple[Node, ...]:
        """The branches of a node with children ``kids`` that leave the trie (memoized)."""
        div = diverged.get(kids)
        if div is None:
            plain = _plain_rest(kids)
            if plain is None:
                div = _diverge(kids)
            elif plain:
                div = (concat2(_plain_node(plain), any_star), special)
            else:
                div = (special,)
            diverged[kids] = div
        else:
            charge(MEMO_HIT_UNITS)
        return div

    def lit_of(k: str) -> Node:
        lit = lits.get(k)
        if lit is None:
            lit = lits[k] = literal(encode_text(k))
        return lit

    def tail(suffix: str) -> Node:
        """The trie node whose one word below it has ``suffix`` left: ``len(suffix)`` nodes
        with one child each, then the node where the word ends (no children)."""
        charge(3)  # (2 + no children + ends)
        div = branches_past(())
        node = div[0] if len(div) == 1 else new_alt(div)
        for k in reversed(suffix):
            charge(3)  # (2 + one child, no end)
            child = concat2(lit_of(k), node)
            node = new_alt((EMPTY, child, *branches_past((k,))))
        return node

    if not words:  # the root alone: no children, no word ends
        charge(2)
        return new_alt((EMPTY, *branches_past(())))
    return _trie_node(words, 0, len(words), 0, tail, lit_of, branches_past)


def _trie_node(
    words: tuple[str, ...],
    lo: int,
    hi: int,
    d: int,
    tail: Callable[[str], Node],
    lit_of: Callable[[str], Node],
    branches_past: Callable[[tuple[str, ...]], tuple[Node, ...]],
) -> Node:
    """:func:`_not_in_sorted`'s trie node of the words ``words[lo:hi]`` (sharing their first
    ``d`` characters), with that call's helpers.  A module function, not a closure: a
    recursive closure is a reference cycle (its cell holds it), freed only by the cyclic
    collector with the nodes it holds (docs/notes/ttfm37.md)."""
    if hi - lo == 1:
        return tail(words[lo][d:])
    ends = len(words[lo]) == d
    # the children: runs of words[lo:hi] (past the one that ends here) by character d
    runs: list[tuple[str, int, int]] = []
    i = lo + 1 if ends else lo
    while i < hi:
        k = words[i][d]
        j = i + 1
        while j < hi and words[j][d] == k:
            j += 1
        runs.append((k, i, j))
        i = j
    charge(2 + len(runs) + ends)  # the compile's fuel (and deadline)
    branches: list[Node] = [] if ends else [EMPTY]
    for k, i, j in runs:
        lit = lit_of(k)
        branches.append(concat2(lit, _trie_node(words, i, j, d + 1, tail, lit_of, branches_past)))
    branches.extend(branches_past(tuple(k for k, _, _ in runs)))
    # (the branches are distinct and flat: ``Alt`` as given, not ``alt``)
    return branches[0] if len(branches) == 1 else new_alt(tuple(branches))


@metered_cache(1)
def _any_star() -> Node:
    return Repeat(encode_ranges(ANY_CHAR.ranges), 0, None)


_PLAIN = CharSet.of([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)])
#: the characters of :data:`_PLAIN` (a constant: one membership test per child)
_PLAIN_TEXT = "".join(chr(c) for lo, hi in _PLAIN.ranges for c in range(lo, hi + 1))


def _plain_rest(kids: tuple[str, ...]) -> list[tuple[int, int]] | None:
    """The plain printable ASCII characters (:data:`_PLAIN`, none of them escaped) that are
    none of ``kids`` (distinct single characters, as a trie node's children), as sorted
    disjoint ranges; None when ``kids`` is empty or one of them is not plain (then
    :func:`_diverge` builds the branches).  What :func:`_diverge`'s plain case computes with
    ``CharSet`` operations: the gaps between the taken characters and the two escaped ones
    (``"``, ``\\``) within U+0020..U+007E, in one pass (no process-wide cache: cheaper than
    its look-up).  O(len(kids) log len(kids))."""
    if not kids:
        return None
    cuts = [0x22, 0x5C]
    for k in kids:
        if k not in _PLAIN_TEXT:
            return None
        cuts.append(ord(k))
    cuts.sort()
    out: list[tuple[int, int]] = []
    nxt = 0x20
    for c in cuts:
        if c > nxt:
            out.append((nxt, c - 1))
        nxt = c + 1
    if nxt <= 0x7E:
        out.append((nxt, 0x7E))
    return out


def _plain_node(ranges: list[tuple[int, int]]) -> Node:
    """``encode_ranges(ranges)`` for non-empty disjoint sorted ranges of plain characters (each
    spelt as itself): the character's literal, else the set (the ranges are never adjacent:
    :func:`_plain_rest` cuts them at a taken character or at an escaped one)."""
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return literal(chr(ranges[0][0]))
    return CharSet(tuple(ranges))


@metered_cache(4096)
def _diverge(kids: tuple[str, ...]) -> tuple[Node, ...]:
    """Branches of an undeclared key at a trie node with children ``kids``: a character that
    is none of them, then anything.  Where the children are plain printable ASCII (the usual
    case, and a node without children: where a declared key ends) that is a plain character
    or "a character that needs escaping, DEL or is not ASCII", one node shared by every such
    trie node, so the automaton layer builds those escapes and UTF-8 sequences once.  (A
    node without children took "any character, then anything" as one concatenation, which
    the NFA folds into a loop of its own at each such node (``x x*``,
    :func:`~formcast.ir.loops.fold_loops`): a copy of every escape and UTF-8 state per
    declared key, ~40% of the key rules' DFA states on MaskBench; the language is the
    same.)  Memoized (IR nodes are immutable): keys are made of few letters."""
    any_star = _any_star()
    taken = CharSet.of((ord(k), ord(k)) for k in kids)
    if all(ord(k) in _PLAIN for k in kids):
        rest = CharSet.of(
            (max(lo, a), min(hi, b))
            for lo, hi in taken.negate().ranges
            for a, b in _PLAIN.ranges
            if lo <= b and a <= hi
        )
        out: list[Node] = []
        if rest.ranges:
            out.append(Concat((encode_ranges(rest.ranges), any_star)))
        out.append(_special_tail())
        return tuple(out)
    others = charfa.scalar_ranges(taken.negate().ranges)  # (``kids`` is not empty here)
    return (Concat((encode_ranges(others), any_star)),) if others else ()


@metered_cache(1)
def _special_tail() -> Node:
    special = charfa.scalar_ranges(((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x10FFFF)))
    return Concat((encode_ranges(special), _any_star()))
