"""Undeclared object keys as IR: the canonically encoded strings that are none of the
declared keys (:func:`not_in_set`), built as a trie complement.

Lifetime: pure functions; a build is memoized process-wide by its words, and so are the
branches past a trie node whose children are not all plain printable ASCII
(:func:`~formcast.limits.metered_cache`: a hit charges what a fresh build would); the plain
ones (the usual keys) are built directly, cheaper than a cache look-up.  A build is linear in
the total length of the declared keys.
"""

from __future__ import annotations

from typing import Any

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
    sorted order, so the node does not depend on the order the words came in)."""
    # a trie node: [children by character, a word ends here]; the words come sorted, so
    # every node's children are inserted in sorted order (those below a prefix are
    # contiguous, shortest first) and a node's dict order is the sorted order
    root: list[Any] = [{}, False]
    for w in words:
        t = root
        for ch in w:
            kids = t[0]
            nxt = kids.get(ch)
            if nxt is None:
                nxt = kids[ch] = [{}, False]
            t = nxt
        t[1] = True

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

    def build(t: list[Any]) -> Node:
        children: dict[str, Any] = t[0]
        ends = t[1]
        charge(2 + len(children) + ends)  # the compile's fuel (and deadline)
        kids = tuple(children)
        branches: list[Node] = [] if ends else [EMPTY]
        for k in kids:
            lit = lits.get(k)
            if lit is None:
                lit = lits[k] = literal(encode_text(k))
            branches.append(concat2(lit, build(children[k])))
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
        branches.extend(div)
        # (the branches are distinct and flat: ``Alt`` as given, not ``alt``)
        return branches[0] if len(branches) == 1 else new_alt(tuple(branches))

    return build(root)


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
    case) that is a plain character or "a character that needs escaping, DEL or is not ASCII",
    one node shared by every such trie node, so the automaton layer builds those escapes and
    UTF-8 sequences once.  Memoized (IR nodes are immutable): keys are made of few letters."""
    any_star = _any_star()
    taken = CharSet.of((ord(k), ord(k)) for k in kids)
    if kids and all(ord(k) in _PLAIN for k in kids):
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
    others = charfa.scalar_ranges(taken.negate().ranges) if kids else ANY_CHAR.ranges
    return (Concat((encode_ranges(others), any_star)),) if others else ()


@metered_cache(1)
def _special_tail() -> Node:
    special = charfa.scalar_ranges(((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x10FFFF)))
    return Concat((encode_ranges(special), _any_star()))
