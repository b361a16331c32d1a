"""Separated lists folded into loops: ``x (y x)*`` → one :class:`SepLoop` node.

A concatenation such as a JSON array's ``"[" elem ("," elem)* "]"`` names its element twice;
Thompson's construction would copy it twice, and the DFA built from it would carry two
equivalent copies of the element's states for minimization to merge.  :func:`fold_loops`
rewrites the items of one concatenation so the automaton layer builds the element once.

:class:`SepLoop` is a construction-time node: it is produced here for the NFA builder
(:mod:`formcast.automata.nfa`) and consumed there at once; the other IR functions
(:func:`~formcast.ir.nodes.iter_nodes`, :func:`~formcast.ir.nodes.rebuild`, ...) never see it.

Lifetime: pure functions; the nodes built are per NFA construction.  Cost: O(items x loop
body) node equality checks per concatenation (IR nodes cache their hash).
"""

from __future__ import annotations

from dataclasses import dataclass

from .nodes import Concat, Empty, Literal, Node, Repeat

__all__ = ["SepLoop", "fold_loops"]


@dataclass(frozen=True, eq=False)
class SepLoop(Node):
    """``item (sep item)*`` built with one copy of ``item`` (compared by identity)."""

    item: Node
    sep: Node


def fold_loops(items: tuple[Node, ...]) -> tuple[Node, ...]:
    """Concatenation items with ``x (y x)*`` (a separated list: JSON arrays, extra object
    members) and ``x x*`` folded into :class:`SepLoop` (``x`` may span several items).
    concat() merges adjacent literals ("[" with the first element's "{", "," with the next
    one's), so x's first item may match the end of a longer literal on either side.  Returns
    ``items`` itself when nothing folds.  O(items x loop body) equality checks."""
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
                    SepLoop(
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
