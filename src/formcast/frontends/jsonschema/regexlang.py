"""Regular-language helpers over *decoded* strings (code points), for JSON Schema.

* :func:`pattern_node` — a JSON Schema ``pattern`` (ECMA 262 syntax, **search** semantics: the
  string must *contain* a match) as an IR node whose full matches are exactly the strings that
  contain a match, anchors resolved exactly (see its docstring).
* :func:`node_matches` — does a regular IR node fully match a string?  (A direct simulation on
  sets of positions, used to test enum values and property names against patterns.)
* :func:`length_bounds` — the least and greatest number of code points of a node's strings.
* :func:`restrict_length` — a node for ``L(node) ∩ {w : lo ≤ |w| ≤ hi}`` computed structurally
  when the node has a single variable-length repetition of fixed-width items (``^[a-z]+$``,
  ``^\\d{3}-\\d*$``…); None when that is not the case (callers then use automata).

Lifetime: pure functions; :func:`pattern_node` caches by pattern text.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from ...errors import LimitExceededError
from ...ir.nodes import (
    ANY_CHAR,
    EMPTY,
    NOTHING,
    Alt,
    ByteSet,
    CharSet,
    Concat,
    Empty,
    Literal,
    Node,
    Nothing,
    Repeat,
    alt,
    concat,
    repeat,
)
from ...limits import CompileLimits, metered_cache
from ..regex import _Parser, parse_regex
from .word_boundary import Boundary, eliminate_boundaries, has_boundary

__all__ = ["length_bounds", "node_matches", "pattern_node", "restrict_length", "split_top_level"]

_ANY = r"[\s\S]*"


def split_top_level(pattern: str) -> list[str]:
    """Split a regex at its top-level ``|`` (outside groups, classes and escapes)."""
    parts: list[str] = []
    depth = 0
    in_class = False
    start = 0
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            # a leading ']' is a literal in Python but closes the class in ECMA: ECMA rules
        elif c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


def _ends_with_anchor(branch: str) -> bool:
    if not branch.endswith("$"):
        return False
    k = len(branch) - 2
    slashes = 0
    while k >= 0 and branch[k] == "\\":
        slashes += 1
        k -= 1
    if slashes % 2:
        return False
    # a '$' inside a character class (e.g. "[$]") is not an anchor; "[$" never ends a class
    return not _open_class_at_end(branch[:-1])


def _open_class_at_end(text: str) -> bool:
    in_class = False
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if in_class and c == "]":
            in_class = False
        elif not in_class and c == "[":
            in_class = True
        i += 1
    return in_class


def _structure(p: str, i: int) -> Iterator[tuple[int, str, int]]:
    """``(index, character, group depth before it)`` of each character of ``p`` from ``i``
    that is outside character classes and escapes (depth counts ``(`` minus ``)`` so far)."""
    depth = 0
    in_class = False
    j = i
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if p[j + 1 : j + 2] == "]":  # a literal "]" first in a class: "[]...]"
                j += 1
        else:
            yield j, c, depth
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
        j += 1


def _group_end(p: str, i: int) -> int | None:
    """The index just past the group that opens at ``p[i] == "("`` (escapes and classes
    skipped), or None when it does not close."""
    for j, c, depth in _structure(p, i):
        if c == ")" and depth == 1:
            return j + 1
    return None


def _top_level_bar(p: str) -> bool:
    """True when ``p`` has a ``|`` outside every group and class."""
    return any(c == "|" and depth == 0 for _, c, depth in _structure(p, 0))


def leading_lookaheads(p: str) -> tuple[list[str], list[str]] | None:
    """``^(?!X)(?=Y)...R`` as patterns that must match (``^(?:Y)``, ``^(?:R)``) and patterns
    that must not (``^(?:X)``), or None when ``p`` is not of that shape.

    Exact for ``pattern``'s search semantics: with ``^`` (and no top-level ``|``, which would
    end the lookahead's scope) every lookahead is tested at the start of the string, so the
    string matches iff each ``Y`` and ``R`` match a prefix and no ``X`` does."""
    if not p.startswith("^(?") or p[3:4] not in ("!", "="):
        return None
    pos: list[str] = []
    neg: list[str] = []
    i = 1
    while p.startswith(("(?!", "(?="), i):
        end = _group_end(p, i)
        if end is None:
            return None
        body = p[i + 3 : end - 1]
        (neg if p[i + 2] == "!" else pos).append(f"^(?:{body})")
        i = end
    rest = p[i:]
    if _top_level_bar(rest):
        return None
    pos.append(f"^(?:{rest})")
    return pos, neg


@metered_cache(4096)
def pattern_node(pattern: str, limits: CompileLimits | None = None) -> Node:
    """IR node of the strings that *contain* a match of the ECMA ``pattern``.

    Lookaheads right after a leading ``^`` (``^(?!X)(?=Y)R``, no top-level ``|``) are exact:
    see :func:`leading_lookaheads` and :func:`_lookahead_node`; any other lookaround fails
    closed.

    The string is ``x m y`` with ``m`` a match; ``^`` holds only where ``x`` is empty and
    nothing was consumed before it, ``$`` likewise at the end.  The union over "``x`` empty or
    not" × "``y`` empty or not" resolves every anchor exactly; an anchor whose truth depends
    on what an optional part matched (``a?^b``) fails closed.

    Raises:
        GrammarSyntaxError, UnsupportedFeatureError, LimitExceededError: from the regex
        front-end (lookaround, backreferences...).
    """
    try:
        from ..regex import _has_anchor, _resolve_anchors
    except ImportError:  # pragma: no cover - the regex front-end changed: textual fallback
        return _pattern_node_textual(pattern, limits)
    limits = limits or CompileLimits()
    if len(pattern) > limits.max_pattern_length:
        raise LimitExceededError(
            "max_pattern_length", limits.max_pattern_length, f"pattern has {len(pattern)} chars"
        )
    split = leading_lookaheads(pattern)
    if split is not None:
        return _lookahead_node(*split, limits)
    raw = _BoundaryParser(pattern, "ecma", limits).parse()
    star = repeat(ANY_CHAR, 0, None)
    if not _has_anchor(raw):
        out = concat([star, _absorb(_absorb(raw, True), False), star])
        return eliminate_boundaries(out) if has_boundary(raw) else out
    plus = repeat(ANY_CHAR, 1, None)
    starts, ends = _anchor_kinds(raw)
    parts: list[Node] = []
    # a side without its anchor is one case, "anything there" (Σ*), not two (ε, Σ+)
    for before in ("yes", "no") if starts else ("any",):
        for after in ("yes", "no") if ends else ("any",):
            # (a side without anchors never reads its context: "maybe" would fail closed)
            core = _resolve_anchors(
                raw,
                "maybe" if before == "any" else before,
                "maybe" if after == "any" else after,
                pattern,
            )
            lead = {"yes": EMPTY, "no": plus, "any": star}[before]
            trail = {"yes": EMPTY, "no": plus, "any": star}[after]
            if before != "yes":
                core = _absorb(core, False)
            if after != "yes":
                core = _absorb(core, True)
            parts.append(concat([lead, core, trail]))
    return eliminate_boundaries(alt(parts)) if has_boundary(raw) else alt(parts)


class _BoundaryParser(_Parser):
    """The ECMA regex parser with ``\\b``/``\\B`` outside classes read as
    :class:`~.word_boundary.Boundary` assertions (compiled exactly by
    :func:`~.word_boundary.eliminate_boundaries`) instead of refused."""

    def escape(self, *, in_class: bool) -> Node:
        if not in_class and self.src.startswith(("\\b", "\\B"), self.pos):
            self.pos += 2
            return Boundary(self.src[self.pos - 1] == "B")
        return super().escape(in_class=in_class)

    def quantifiers(self, atom: Node, atom_pos: int) -> Node:
        # an assertion cannot be repeated (ECMA 262: a SyntaxError)
        nxt = "" if self.eof() else self.peek()
        quantified = nxt in ("*", "+", "?") or (nxt == "{" and self._braces_lookahead())
        if isinstance(atom, Boundary) and quantified:
            raise self.error("nothing to repeat", self.pos)
        return super().quantifiers(atom, atom_pos)


def _anchor_kinds(node: Node) -> tuple[bool, bool]:
    """Whether ``node`` (a parsed pattern) holds a ``^`` anchor, and a ``$`` anchor."""
    starts = ends = False
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (Concat, Alt)):
            stack.extend(n.items)
        elif isinstance(n, Repeat):
            stack.append(n.item)
        elif type(n).__name__ == "_Anchor":
            if getattr(n, "end", False):
                ends = True
            else:
                starts = True
    return starts, ends


def _absorb(node: Node, right: bool) -> Node:
    """A node ``n`` with ``n·T = node·T`` when ``right`` (``T·n = T·node`` otherwise) for
    ``T`` = Σ* or Σ+ (any text beside it): the parts at that edge that ``T`` already covers
    are dropped — a nullable item (``x?``, ``x*``, ``(#.*)?``) goes, a repeat keeps its
    minimum (``[^:]+`` → ``[^:]``), and an alternation absorbs branch by branch.  Same
    language; a much smaller automaton where a pattern without ``$`` ends in optional parts
    (``^[^:]+://[^/]+(:[0-9]+)?(/[^/]+)*`` has 6 states instead of hundreds once escaped).
    Exact: ``T·W·Y = T·Y`` for nullable ``W`` (ε ∈ W, and ``T·W ⊆ T``), ``T·x{k} ⊆ T·x{lo}``
    for ``k >= lo``, and ``·`` distributes over ``|``.  O(size of the edge path)."""
    if isinstance(node, Concat):
        items = list(node.items)
        edge = len(items) - 1 if right else 0
        while items and _nullable(items[edge]):
            items.pop(edge)
            edge = len(items) - 1 if right else 0
        if not items:
            return EMPTY
        items[edge] = _absorb(items[edge], right)
        return concat(items)
    if isinstance(node, Alt):
        if any(_nullable(i) for i in node.items):
            return EMPTY
        return alt(_absorb(i, right) for i in node.items)
    if isinstance(node, Repeat):
        if node.min == 0:
            return EMPTY
        first = _absorb(node.item, right)
        rest = repeat(node.item, node.min - 1, node.min - 1)
        return concat([rest, first] if right else [first, rest])
    return node


def _nullable(node: Node) -> bool:
    """Whether a regular ``node`` matches the empty string."""
    if isinstance(node, Empty):
        return True
    if isinstance(node, Concat):
        return all(_nullable(i) for i in node.items)
    if isinstance(node, Alt):
        return any(_nullable(i) for i in node.items)
    if isinstance(node, Repeat):
        return node.min == 0 or _nullable(node.item)
    return False


#: the most states of an automaton built for a pattern with leading lookaheads, and the most
#: nodes of the expression read back from it (past either: LimitExceededError, fail closed)
LOOKAHEAD_MAX_STATES = 2_000
LOOKAHEAD_MAX_SIZE = 5_000


def _lookahead_node(pos: list[str], neg: list[str], limits: CompileLimits) -> Node:
    """``^(?=Y)(?!X)R`` (split by :func:`leading_lookaheads`): the strings that contain a
    match of every ``pos`` pattern and of no ``neg`` one, as a regular node (the automata of
    the parts intersected and subtracted, then read back by state elimination).  Exact; a
    part that is itself unsupported, or an automaton or expression past
    :data:`LOOKAHEAD_MAX_STATES` / :data:`LOOKAHEAD_MAX_SIZE`, raises (fail closed)."""
    from ...automata import charfa

    mx = LOOKAHEAD_MAX_STATES
    d = charfa.dfa_from_node(pattern_node(pos[0], limits), mx)
    for p in pos[1:]:
        d = charfa.intersect(d, charfa.dfa_from_node(pattern_node(p, limits), mx), mx)
    for p in neg:
        d = charfa.difference(d, charfa.dfa_from_node(pattern_node(p, limits), mx), mx)
    return charfa.dfa_to_node(d, LOOKAHEAD_MAX_SIZE)


def _pattern_node_textual(pattern: str, limits: CompileLimits | None) -> Node:
    branches = []
    for b in split_top_level(pattern):
        head = "" if b.startswith("^") else _ANY
        tail = "" if _ends_with_anchor(b) else _ANY
        branches.append(f"(?:{head}(?:{b}){tail})")
    return parse_regex("|".join(branches), dialect="ecma", limits=limits)


#: the longest text whose :func:`node_matches` outcome is memoized (the memo's memory bound)
_MEMO_TEXT = 256


def node_matches(node: Node, text: str) -> bool:
    """True when the regular IR ``node`` matches the whole of ``text``.  Memoized for short
    texts (bounded, process-wide: a pure function of immutable inputs; a schema's ``oneOf``
    branches test the same constants against the same patterns many times)."""
    if len(text) <= _MEMO_TEXT:
        return _node_matches_memo(node, text)
    return len(text) in _ends(node, text, frozenset((0,)))


@lru_cache(maxsize=4096)
def _node_matches_memo(node: Node, text: str) -> bool:
    return len(text) in _ends(node, text, frozenset((0,)))


def _ends(node: Node, text: str, starts: frozenset[int]) -> frozenset[int]:
    if not starts:
        return starts
    if isinstance(node, Empty):
        return starts
    if isinstance(node, Nothing):
        return frozenset()
    if isinstance(node, Literal):
        k = len(node.text)
        return frozenset(i + k for i in starts if text.startswith(node.text, i))
    if isinstance(node, CharSet):
        return frozenset(i + 1 for i in starts if i < len(text) and ord(text[i]) in node)
    if isinstance(node, ByteSet):
        return frozenset(
            i + 1
            for i in starts
            if i < len(text) and any(lo <= ord(text[i]) <= hi for lo, hi in node.ranges)
        )
    if isinstance(node, Concat):
        cur = starts
        for item in node.items:
            cur = _ends(item, text, cur)
            if not cur:
                break
        return cur
    if isinstance(node, Alt):
        out: set[int] = set()
        for item in node.items:
            out |= _ends(item, text, starts)
        return frozenset(out)
    if isinstance(node, Repeat):
        cur = starts
        for _ in range(node.min):
            nxt = _ends(node.item, text, cur)
            if nxt == cur or not nxt:
                cur = nxt
                break
            cur = nxt
        result = set(cur)
        frontier = cur
        count = 0
        while frontier and (node.max is None or count < node.max - node.min):
            nxt = _ends(node.item, text, frontier) - result
            result |= nxt
            frontier = nxt
            count += 1
        return frozenset(result)
    raise TypeError(f"node_matches: unsupported IR node {type(node).__name__}")


def length_bounds(node: Node) -> tuple[int, int | None]:
    """Least and greatest length (code points) of the strings of ``node`` (None: unbounded).

    For the empty language this returns ``(0, 0)``.
    """
    if isinstance(node, Literal):
        return len(node.text), len(node.text)
    if isinstance(node, (CharSet, ByteSet)):
        return 1, 1
    if isinstance(node, (Empty, Nothing)):
        return 0, 0
    if isinstance(node, Concat):
        lo = 0
        hi_n: int | None = 0
        for item in node.items:
            a, b = length_bounds(item)
            lo += a
            if hi_n is not None:
                hi_n = None if b is None else hi_n + b
        return lo, hi_n
    if isinstance(node, Alt):
        bounds = [length_bounds(i) for i in node.items]
        highs = [b for _, b in bounds if b is not None]
        top = None if len(highs) < len(bounds) else max(highs)
        return min(a for a, _ in bounds), top
    if isinstance(node, Repeat):
        a, b = length_bounds(node.item)
        if node.max is None:
            return a * node.min, (0 if b == 0 else None)
        return a * node.min, (None if b is None else b * node.max)
    return 0, None


def _fixed(node: Node) -> int | None:
    a, b = length_bounds(node)
    return a if a == b else None


def restrict_length(
    node: Node, lo: int, hi: int | None, budget: list[int] | None = None
) -> Node | None:
    """``L(node) ∩ {lo ≤ |w| ≤ hi}`` structurally, or None when the shape is not simple.

    Exact when it returns a node.  Handles an alternation branch by branch and, within a
    concatenation, one repetition of a fixed-width item among fixed-width neighbours; other
    variable-width items of the concatenation that are small finite choices (an alternation,
    ``x{a,b}`` of a fixed-width ``x``) are split into one concatenation per choice, at most
    :data:`RESTRICT_SPLIT_BUDGET` in all (``budget``: what is left, shared by the recursion).
    ``^data:image/(png|jpeg);base64,[A-Za-z0-9+/]+={0,2}$`` with ``maxLength: 1400000`` is 6
    counted repeats, not an automaton of 1.4 M states.
    """
    if budget is None:
        budget = [RESTRICT_SPLIT_BUDGET]
    a, b = length_bounds(node)
    if a >= lo and (hi is None or (b is not None and b <= hi)):
        return node
    if (hi is not None and a > hi) or (b is not None and b < lo):
        return NOTHING
    if isinstance(node, Alt):
        parts = [restrict_length(i, lo, hi) for i in node.items]
        if any(p is None for p in parts):
            return None
        return alt(p for p in parts if p is not None)
    items = node.items if isinstance(node, Concat) else (node,)
    var = [i for i, item in enumerate(items) if _fixed(item) is None]
    if len(var) > 1:
        return _restrict_split(items, var, lo, hi, budget)
    if len(var) != 1:
        return None
    k = var[0]
    fixed_total = sum(_fixed(item) or 0 for j, item in enumerate(items) if j != k)
    r = items[k]
    if isinstance(r, Alt):
        # distribute: pre (x | y) post  ->  pre x post | pre y post
        options = [
            restrict_length(concat([*items[:k], o, *items[k + 1 :]]), lo, hi, budget)
            for o in r.items
        ]
        if any(p is None for p in options):
            return None
        return alt(p for p in options if p is not None)
    if not isinstance(r, Repeat):
        return None
    w = _fixed(r.item)
    if w is None or w == 0:
        return None
    n_lo = max(r.min, -(-(lo - fixed_total) // w))
    n_hi_len = None if hi is None else (hi - fixed_total) // w
    if n_hi_len is None:
        n_hi = r.max
    elif r.max is None:
        n_hi = n_hi_len
    else:
        n_hi = min(r.max, n_hi_len)
    if n_hi is not None and n_hi < n_lo:
        return NOTHING
    return concat([*items[:k], repeat(r.item, n_lo, n_hi), *items[k + 1 :]])


#: the most concatenations :func:`restrict_length` splits one node into (past it: None)
RESTRICT_SPLIT_BUDGET = 64


def _choices(item: Node) -> list[Node] | None:
    """``item`` as a small finite list of alternatives, or None."""
    if isinstance(item, Alt) and len(item.items) <= 16:
        return list(item.items)
    finite = isinstance(item, Repeat) and item.max is not None and item.max - item.min <= 16
    if (
        finite
        and isinstance(item, Repeat)
        and item.max is not None
        and _fixed(item.item) is not None
    ):
        return [repeat(item.item, n, n) for n in range(item.min, item.max + 1)]
    return None


def _restrict_split(
    items: tuple[Node, ...], var: list[int], lo: int, hi: int | None, budget: list[int]
) -> Node | None:
    """:func:`restrict_length` of ``concat(items)`` with several variable-width items: the
    first that is a small finite choice is split (one concatenation per choice)."""
    for k in var:
        options = _choices(items[k])
        if options is None:
            continue
        budget[0] -= len(options)
        if budget[0] < 0:
            return None
        parts = [
            restrict_length(concat([*items[:k], o, *items[k + 1 :]]), lo, hi, budget)
            for o in options
        ]
        if any(p is None for p in parts):
            return None
        return alt(p for p in parts if p is not None)
    return None


def any_string(lo: int = 0, hi: int | None = None) -> Node:
    """Every string of ``lo`` to ``hi`` code points (decoded level)."""
    return repeat(ANY_CHAR, lo, hi) if (lo, hi) != (0, 0) else EMPTY
