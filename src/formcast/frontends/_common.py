"""Helpers shared by the grammar-file front-ends (:mod:`.gbnf` and :mod:`.lark`).

* :func:`scalar_charset` builds a :class:`~.ir.CharSet` of Unicode scalar values (surrogates
  removed), or :data:`~.ir.NOTHING` when nothing is left.
* :class:`ExprBuilder` assembles one rule body from a flat stream of atoms, group brackets,
  ``|`` and postfix repetitions *without recursion*, so deeply nested grammar source cannot
  overflow the Python stack.  It also keeps the IR trees it returns shallow: a group whose tree
  would get deeper than :data:`HOIST_DEPTH` is moved into a synthesized rule (when the caller
  allows it), because the IR's dataclass ``__hash__``/``__eq__`` recurse.
* An optional *separator* node is interleaved between the items of every sequence and between
  the iterations of every repetition; Lark's ``%ignore`` uses it.

Lifetime: an :class:`ExprBuilder` lives for one rule body; nothing here keeps global state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..errors import GrammarSyntaxError
from ..ir.nodes import NOTHING, CharSet, Node, concat, merge_ranges, repeat
from ..ir.nodes import alt as ir_alt

__all__ = [
    "HOIST_DEPTH",
    "MAX_NESTING",
    "ExprBuilder",
    "location",
    "scalar_charset",
    "scalar_ranges",
    "sep_repeat",
    "sep_sequence",
    "syntax_error",
]

#: Most groups that may be open at once in grammar source; deeper nesting is a syntax error.
MAX_NESTING = 500
#: IR tree depth above which a finished group is moved into a synthesized rule.
HOIST_DEPTH = 40
#: Tree depth above which a body that cannot be hoisted (a terminal) is refused.
MAX_TREE_DEPTH = 400

_SURROGATES = (0xD800, 0xDFFF)


def scalar_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Merge ``ranges`` and cut out the surrogate block U+D800..U+DFFF."""
    out: list[tuple[int, int]] = []
    lo_s, hi_s = _SURROGATES
    for lo, hi in merge_ranges(ranges):
        if hi < lo_s or lo > hi_s:
            out.append((lo, hi))
            continue
        if lo < lo_s:
            out.append((lo, lo_s - 1))
        if hi > hi_s:
            out.append((hi_s + 1, hi))
    return tuple(out)


def scalar_charset(ranges: Iterable[tuple[int, int]], *, negate: bool = False) -> Node:
    """A :class:`CharSet` of the scalar values in ``ranges`` (or outside them if ``negate``)."""
    cs = CharSet(merge_ranges(ranges))
    if negate:
        cs = cs.negate()
    rs = scalar_ranges(cs.ranges)
    return CharSet(rs) if rs else NOTHING


def syntax_error(message: str, source: str, pos: int) -> GrammarSyntaxError:
    """A :class:`GrammarSyntaxError` at ``pos``, moved back from trailing blank lines.

    "Unexpected end of input" after a final newline is reported at the end of the last line
    (the exception quotes the line it points into, and there is none after a final newline).
    """
    end = len(source.rstrip("\r\n"))
    return GrammarSyntaxError(message, source=source, position=min(pos, end))


def location(source: str, pos: int) -> str:
    """``"line L, column C"`` (1-based) of character offset ``pos`` in ``source``."""
    before = source[:pos]
    line = before.count("\n") + 1
    return f"line {line}, column {pos - (before.rfind(chr(10)) + 1) + 1}"


def sep_sequence(items: list[Node], sep: Node | None) -> Node:
    """``items`` in sequence with ``sep`` between each adjacent pair (when given)."""
    if sep is None or len(items) < 2:
        return concat(items)
    out: list[Node] = [items[0]]
    for item in items[1:]:
        out.append(sep)
        out.append(item)
    return concat(out)


def sep_repeat(item: Node, lo: int, hi: int | None, sep: Node | None) -> Node:
    """``item{lo,hi}`` with ``sep`` between consecutive iterations (when given).

    ``x{lo,hi}`` becomes ``x (sep x){lo-1,hi-1}``, made optional when ``lo == 0``.
    """
    if sep is None or (hi is not None and hi <= 1):
        return repeat(item, lo, hi)
    tail = repeat(concat([sep, item]), max(lo - 1, 0), None if hi is None else hi - 1)
    body = concat([item, tail])
    return body if lo >= 1 else repeat(body, 0, 1)


@dataclass
class _Frame:
    kind: str  # "" for the rule body itself, else the opening bracket
    pos: int
    alts: list[tuple[Node, int]] = field(default_factory=list)
    items: list[tuple[Node, int]] = field(default_factory=list)


class ExprBuilder:
    """Assembles one expression (``a b | (c d)* e``...) from parser events, iteratively.

    Args:
        source: the grammar text (for error positions).
        sep: a node placed between adjacent items and between repetitions (``%ignore``).
        hoist: turns a too-deep node into a reference to a new rule; None forbids hoisting
            (terminal bodies must stay regular), in which case a body deeper than
            :data:`MAX_TREE_DEPTH` is a :class:`GrammarSyntaxError`.
    """

    def __init__(
        self,
        source: str,
        *,
        sep: Node | None = None,
        hoist: Callable[[Node], Node] | None = None,
    ) -> None:
        self.source = source
        self.sep = sep
        self.hoist = hoist
        self.frames: list[_Frame] = [_Frame("", 0)]

    # -- events -------------------------------------------------------------------------------
    def atom(self, node: Node, depth: int = 1) -> None:
        """Append a finished item to the current sequence."""
        self.frames[-1].items.append((node, depth))

    def has_item(self) -> bool:
        return bool(self.frames[-1].items)

    def postfix(self, lo: int, hi: int | None, pos: int, what: str) -> None:
        """Apply ``{lo,hi}`` to the last item of the current sequence."""
        items = self.frames[-1].items
        if not items:
            raise syntax_error(f"{what} has nothing to repeat", self.source, pos)
        if hi is not None and hi < lo:
            raise syntax_error(
                f"repetition maximum {hi} is below the minimum {lo}", self.source, pos
            )
        node, depth = items[-1]
        items[-1] = self._bound(sep_repeat(node, lo, hi, self.sep), depth + 3, pos)

    def open(self, kind: str, pos: int) -> None:
        """Open a group (``(`` or ``[``)."""
        if len(self.frames) > MAX_NESTING:
            raise syntax_error(f"groups nested more than {MAX_NESTING} deep", self.source, pos)
        self.frames.append(_Frame(kind, pos))

    def bar(self) -> None:
        """End the current alternative (``|``)."""
        frame = self.frames[-1]
        frame.alts.append(self._seq(frame))
        frame.items = []

    def depth(self) -> int:
        """How many groups are open."""
        return len(self.frames) - 1

    def close(self, pos: int, *, optional: bool = False) -> None:
        """Close the innermost group; ``optional`` makes it ``[...]`` (zero or one)."""
        if len(self.frames) == 1:
            raise syntax_error("unmatched closing bracket", self.source, pos)
        frame = self.frames.pop()
        node, depth = self._alts(frame)
        if optional:
            node, depth = repeat(node, 0, 1), depth + 1
        self.frames[-1].items.append(self._bound(node, depth, pos))

    def finish(self) -> Node:
        """The finished expression; every group must be closed."""
        if len(self.frames) > 1:
            frame = self.frames[-1]
            raise syntax_error(f"unclosed {frame.kind!r}", self.source, frame.pos)
        node, _ = self._alts(self.frames[0])
        return node

    # -- internals ----------------------------------------------------------------------------
    def _seq(self, frame: _Frame) -> tuple[Node, int]:
        items = frame.items
        depth = 1 + max((d for _, d in items), default=0)
        return sep_sequence([n for n, _ in items], self.sep), depth

    def _alts(self, frame: _Frame) -> tuple[Node, int]:
        options = [*frame.alts, self._seq(frame)]
        if len(options) == 1:
            return options[0]
        depth = 1 + max(d for _, d in options)
        return ir_alt(n for n, _ in options), depth

    def _bound(self, node: Node, depth: int, pos: int) -> tuple[Node, int]:
        if depth <= HOIST_DEPTH:
            return node, depth
        if self.hoist is not None:
            return self.hoist(node), 1
        if depth > MAX_TREE_DEPTH:
            raise syntax_error(
                f"expression nested too deeply (tree depth above {MAX_TREE_DEPTH})",
                self.source,
                pos,
            )
        return node, depth
