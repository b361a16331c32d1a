"""Punctuation of JSON objects and arrays (:class:`Layout`: compact, flexible or indented) and
the counted runs of separated elements and members (:func:`counted_run`, :func:`extras_run`).

Lifetime: one :class:`Layout` per depth per compile (kept by the emitter); the functions are
pure and build IR of a size independent of the bounds (``Repeat`` nodes, never unrolled).
"""

from __future__ import annotations

from ...ir.nodes import EMPTY, Node, Nothing, RuleRef, alt, concat, literal, repeat
from .options import JsonSchemaOptions

__all__ = ["Layout", "counted_run", "extras_run"]


class Layout:
    """Punctuation of objects/arrays at one depth (compact, flexible or indented)."""

    def __init__(self, options: JsonSchemaOptions, depth: int | None) -> None:
        ws: Node = RuleRef("ws")
        if options.whitespace == "flexible":
            self.lead0: Node = ws
            self.sep: Node = concat([ws, literal(","), ws])
            self.close0: Node = ws
            self.close1: Node = ws
            self.ksep: Node = concat([ws, literal(":"), ws])
        elif options.indent is not None and depth is not None:
            d = min(depth, options.max_indent_depth)
            inner = "\n" + " " * (options.indent * (d + 1))
            self.lead0 = literal(inner)
            self.sep = literal(options.item_sep.rstrip(" \t") + inner)
            self.close0 = EMPTY
            self.close1 = literal("\n" + " " * (options.indent * d))
            self.ksep = literal(options.key_sep)
        else:
            self.lead0 = EMPTY
            self.sep = literal(options.item_sep)
            self.close0 = EMPTY
            self.close1 = EMPTY
            self.ksep = literal(options.key_sep)

    def lead(self, count: int) -> Node:
        return self.lead0 if count == 0 else self.sep

    def close(self, count: int, bracket: str) -> Node:
        return concat([self.close0 if count == 0 else self.close1, literal(bracket)])


def counted_run(
    lay: Layout, placed: int, lo: int, hi: int | None, elem: Node, bracket: str
) -> Node:
    """After ``placed`` elements of an array/object: close ``bracket`` (once ``lo`` is
    reached) or go on with separated ``elem`` elements, at most ``hi`` in all."""
    need = max(0, lo - placed)
    room = None if hi is None else hi - placed
    options: list[Node] = []
    if need == 0:
        options.append(lay.close(placed, bracket))
    if not isinstance(elem, Nothing) and (room is None or room >= 1):
        rest = repeat(concat([lay.sep, elem]), max(need - 1, 0), None if room is None else room - 1)
        options.append(concat([lay.lead(placed), elem, rest, lay.close(1, bracket)]))
    return alt(options)


def extras_run(lay: Layout, placed: int, lo: int, hi: int | None, extra: Node) -> Node:
    """After ``placed`` declared members of an object: close it (once ``lo`` is reached) or go
    on with undeclared ``extra`` members, at most ``hi`` members in all.  Undeclared members
    may repeat a key (a validator keeps the last value), so however many are written they
    count as *one* member towards ``lo``."""
    options: list[Node] = []
    if placed >= lo:
        options.append(lay.close(placed, "}"))
    room = None if hi is None else hi - placed
    if placed + 1 >= lo and not isinstance(extra, Nothing) and (room is None or room >= 1):
        rest = repeat(concat([lay.sep, extra]), 0, None if room is None else room - 1)
        options.append(concat([lay.lead(placed), extra, rest, lay.close(1, "}")]))
    return alt(options)
