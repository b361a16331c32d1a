"""Marks: facts about a grammar that its rules cannot express, checked at run time.

A grammar IR describes a context-free language; JSON Schema's ``uniqueItems`` is not one (a
grammar cannot remember an unbounded set of values).  The JSON Schema front-end therefore emits
such an array as an ordinary array rule whose name starts with :data:`MARKED_RULE_PREFIX`, and
records a :class:`UniqueItemsMark` describing its items.  Marked rules are never inlined by the
IR passes (:func:`~formcast.ir.passes.inline_single_use`,
:func:`~formcast.ir.passes.inline_rules`), so they stay rules of the compiled automaton and the
run-time check (:mod:`formcast.index.unique_items`) finds them on the parser's stacks.

A mark is plain data (strings, ints, bools, tuples): a serialized compiled grammar carries it.

Lifetime: immutable values, per grammar.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COUNT_CAP",
    "MARKED_RULE_PREFIX",
    "SCALARS",
    "UniqueItemsMark",
    "is_marked_rule",
    "length_count",
    "state_counts",
]

#: Rules whose name starts with this are kept as rules by every inlining pass.
MARKED_RULE_PREFIX = "mark:"


def is_marked_rule(name: str) -> bool:
    """True for a rule the inlining passes must keep (see :data:`MARKED_RULE_PREFIX`)."""
    return name.startswith(MARKED_RULE_PREFIX)


@dataclass(frozen=True, slots=True)
class UniqueItemsMark:
    """An array rule whose items must be pairwise distinct, checked at run time.

    The marked rule's language is an array ``[ item (, item)* ]``; the check masks what would
    complete an item equal (as JSON values) to an earlier one, or leave no distinct completion.
    ``kind="string"``: every item is a JSON string (the exact string program, with the
    attributes below); ``kind="value"``: items of any type (numbers, booleans, null, objects,
    arrays, mixed), checked on the items' JSON values by the general program (see
    :mod:`formcast.index.unique_items`).

    Attributes:
        rule: name of the marked rule (starts with :data:`MARKED_RULE_PREFIX`).
        pointer: JSON pointer of the array schema (for messages).
        canonical: the item strings are written in the canonical JSON escaping (one spelling
            per value: patterns, formats, enums); else with any escapes (length-only strings).
        min_len, max_len: for ``canonical=False``: the item's length bounds in code points
            (``max_len`` None: unbounded).
        trans, accept: for ``canonical=True``: the automaton of the item's *decoded* strings
            over code points (state 0 the start; ``trans[s]`` sorted disjoint
            ``(lo, hi, target)`` edges, trimmed: every state reaches acceptance).
        kind: ``"string"`` or ``"value"`` (see above); ``"keys"``: an object's distinct keys
            (``min_len``: ``minProperties``); ``"residue"``: an integer's ``multipleOf``
            (``min_len``: the modulus, ``trans[0]``: its integer intervals, see
            :mod:`formcast.frontends.jsonschema.residue`); ``"oneof"``: an object whose
            ``oneOf`` groups must each have exactly one branch matching (``check``).
        check: for ``kind="oneof"``: the check as JSON text (the branches' normalized nodes,
            :mod:`formcast.frontends.jsonschema.oneof_check`), so that the grammar carries it
            into any process that loads it; empty for the other kinds.
    """

    rule: str
    pointer: str
    canonical: bool
    min_len: int = 0
    max_len: int | None = None
    trans: tuple[tuple[tuple[int, int, int], ...], ...] = ()
    accept: tuple[bool, ...] = ()
    kind: str = "string"
    check: str = ""


#: Counts of strings saturate here ("infinitely many" reads as this many).
COUNT_CAP = 1 << 62

#: Unicode scalar values (code points minus surrogates): the letters of a JSON string.
SCALARS = 0x110000 - 0x800


def _sat(x: int) -> int:
    return x if x < COUNT_CAP else COUNT_CAP


def length_count(done: int, lo: int, hi: int | None) -> int:
    """How many strings of ``lo`` to ``hi`` code points (``hi`` None: unbounded) extend a
    prefix of ``done`` code points, saturated at :data:`COUNT_CAP`.  O(1) amortized."""
    need = max(lo - done, 0)
    if hi is None:
        return COUNT_CAP
    top = hi - done
    if top < need:
        return 0
    total, term = 0, 1
    for j in range(top + 1):
        if j >= need:
            total = _sat(total + term)
        term = _sat(term * SCALARS)
        if total >= COUNT_CAP:
            break
    return total


def state_counts(
    trans: tuple[tuple[tuple[int, int, int], ...], ...], accept: tuple[bool, ...]
) -> list[int]:
    """Per state of a trimmed code-point DFA, how many strings it accepts (saturated at
    :data:`COUNT_CAP`; a state that reaches a cycle accepts infinitely many).
    O(states + edges): Tarjan's strongly connected components, callees first."""
    n = len(accept)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    comp_of = [-1] * n
    comps: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            edges = trans[v]
            if i < len(edges):
                work.append((v, i + 1))
                t = edges[i][2]
                if index[t] < 0:
                    work.append((t, 0))
                elif on_stack[t]:
                    low[v] = min(low[v], index[t])
                continue
            for _, _, t in edges:  # done with v: fold the children's low links
                if on_stack[t]:
                    low[v] = min(low[v], low[t])
            if low[v] == index[v]:
                comp: list[int] = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp_of[w] = len(comps)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(comp)
    counts = [0] * n
    for comp in comps:  # Tarjan emits components callees first
        cyclic = len(comp) > 1 or any(t == comp[0] for _, _, t in trans[comp[0]])
        for v in comp:
            if cyclic:
                counts[v] = COUNT_CAP
                continue
            total = 1 if accept[v] else 0
            for lo, hi, t in trans[v]:
                total = _sat(total + (hi - lo + 1) * counts[t])
            counts[v] = total
    return counts
