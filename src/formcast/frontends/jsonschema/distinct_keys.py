"""Objects whose ``minProperties`` counts distinct undeclared keys, checked at run time.

A validator keeps the last value of a repeated key, so an object with ``minProperties: k``
needs ``k`` *distinct* keys; when that needs two or more undeclared members a grammar cannot
count them (it cannot remember which names were written).  :func:`distinct_keys_object` emits
such an object as an ordinary object rule *without* the count, marked
(:class:`~formcast.ir.marks.UniqueItemsMark` with ``kind="keys"``, ``min_len`` =
``minProperties``), and the matcher counts the keys
(:class:`~formcast.index.programs.unique.keys.DistinctKeysProgram`).

Soundness (never a dead end) needs a fresh undeclared name to exist whatever was written: the
object is marked only when its undeclared names (the extra-key classes whose values are
satisfiable, ``propertyNames`` and ``patternProperties`` applied) are more than any run can
write (a cycle in a key automaton, or at least :data:`~formcast.ir.marks.COUNT_CAP`), when it
has no ``maxProperties`` and no negated-``additionalProperties`` witness.  Elsewhere the caller
fails closed as before.  The marked rule reads its own ``{`` and ``}`` (the members are
sub-rules), so its frame stays on the parser's stacks while inside the object.

Lifetime: called once per object schema by the emitter; the rules and the mark it adds live in
the emitted grammar.
"""

from __future__ import annotations

from typing import Protocol

from ...automata import charfa
from ...ir.marks import COUNT_CAP, MARKED_RULE_PREFIX, UniqueItemsMark, state_counts
from ...ir.nodes import Node, Nothing, RuleRef, alt, concat, literal, repeat
from .layout import Layout
from .nodes import S

__all__ = ["distinct_keys_object", "inexhaustible_names"]


class _Emits(Protocol):
    """What :func:`distinct_keys_object` uses of the emitter (:class:`.emit.Emitter`)."""

    marks: list[UniqueItemsMark] | None

    def _name(self, stem: str) -> str: ...

    def add_rule(self, name: str, body: Node, *, terminal: bool = False) -> None: ...


def inexhaustible_names(cells: list[tuple[Node, S, charfa.CharDFA | None]]) -> bool:
    """Whether the undeclared names of ``cells`` (the emitter's extra-key classes, each with
    a satisfiable value schema) are more than any run can write (see the module docstring).
    A cell without an automaton is "every name but the declared ones": infinite."""
    total = 0
    for _, _, cell in cells:
        if cell is None:
            return True
        d = charfa.trim(cell)
        if not d.accept or not any(d.accept):
            continue
        trans = tuple(tuple(row) for row in d.trans)
        total += state_counts(trans, tuple(d.accept))[0]
        if total >= COUNT_CAP:
            return True
    return False


def distinct_keys_object(
    em: _Emits,
    where: str,
    lo: int,
    members: list[tuple[Node, bool]],
    extra: Node,
    lay: Layout,
) -> Node:
    """The marked object rule: ``{`` the declared ``members`` (``(member, required)`` in
    order, each at most once), then any number of ``extra`` members, ``}``; the mark asks
    ``lo`` distinct keys.  The caller checked :func:`inexhaustible_names` and that there is no
    ``maxProperties`` and that ``em.marks`` is not None.  Cost: 2 * (members + 1) rules."""
    assert em.marks is not None
    assert not isinstance(extra, Nothing)
    n = len(members)
    stem = em._name("keys")

    def ref(i: int, c: int) -> Node:
        return RuleRef(f"{stem}_{i}_{c}")

    # ``{stem}_{i}_{c}``: before declared member ``i`` with ``c`` (0 or "1 or more") members
    # written; the closing whitespace is read here, the ``}`` by the marked rule itself
    for c in (0, 1):
        rest = repeat(concat([lay.sep, extra]), 0, None)
        em.add_rule(
            f"{stem}_{n}_{c}",
            alt(
                [
                    lay.close0 if c == 0 else lay.close1,
                    concat([lay.lead(c), extra, rest, lay.close1]),
                ]
            ),
        )
    for i in range(n - 1, -1, -1):
        node, required = members[i]
        for c in (0, 1):
            options: list[Node] = [concat([lay.lead(c), node, ref(i + 1, 1)])]
            if not required:
                options.append(ref(i + 1, c))
            em.add_rule(f"{stem}_{i}_{c}", alt(options))
    name = MARKED_RULE_PREFIX + em._name("keys")
    em.add_rule(name, concat([literal("{"), ref(0, 0), literal("}")]))
    em.marks.append(UniqueItemsMark(name, where, canonical=False, min_len=lo, kind="keys"))
    return RuleRef(name)
