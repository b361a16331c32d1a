"""Regex front-end: Python ``re`` and ECMA (JSON Schema ``pattern``) syntax → grammar IR.

The whole output must match (fullmatch semantics).  Supported: literals and escapes
(``\\n \\t \\r \\f \\v \\0 \\xHH \\uXXXX \\UXXXXXXXX \\N{NAME} \\d \\w \\s \\D \\W \\S \\p{Cat}``),
classes and negated classes, ``.``, capturing / non-capturing / named groups, alternation,
``* + ? {m} {m,} {m,n} {,n}`` (lazy forms accepted: same language), ``^``/``$``/``\\A``/``\\Z``
where they anchor the ends, the inline flags ``(?i)`` (simple case folding, as ``re``), ``(?s)``
and ``(?a)``, also scoped (``(?i:...)``).  Lookaround, backreferences, word boundaries,
possessive quantifiers, atomic groups and ``(?m)``/``(?x)`` raise
:class:`~formcast.errors.UnsupportedFeatureError` naming the feature and its position.

Lifetime: a pure function of its input; O(len(pattern)) plus the cost of Unicode class tables
on first use.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from ..errors import (
    GrammarSyntaxError,
    LimitExceededError,
    UnsupportedFeatureError,
    quote_text,
)
from ..ir.nodes import (
    ANY_CHAR,
    EMPTY,
    NOTHING,
    Alt,
    CharSet,
    Concat,
    Empty,
    Literal,
    Node,
    Repeat,
    alt,
    concat,
    merge_ranges,
    repeat,
)
from ..limits import CompileLimits
from .unicode_sets import case_closure, category_ranges, class_ranges

__all__ = ["parse_regex"]

_MAX_GROUP_DEPTH = 160  # the parser uses ~5 stack frames per group (limit 1000)
_DIALECTS = ("python", "ecma")


@dataclass(frozen=True, slots=True)
class _Anchor(Node):
    """A zero-width ``^`` (start) or ``$`` (end) assertion; removed by :func:`_resolve_anchors`."""

    end: bool
    pos: int


def parse_regex(
    pattern: str, *, dialect: str = "python", limits: CompileLimits | None = None
) -> Node:
    """Parse ``pattern`` into an IR node whose language is the set of full matches.

    Args:
        pattern: the regular expression.
        dialect: ``"python"`` (``re`` with ``str`` patterns: Unicode ``\\d\\w\\s``, ``.`` excludes
            ``\\n``) or ``"ecma"`` (ASCII ``\\d\\w``, ECMA ``\\s``, ``.`` excludes line
            terminators).
        limits: repeat-count and size limits.

    Raises:
        GrammarSyntaxError: malformed pattern (with position).
        UnsupportedFeatureError: lookaround, backreferences and the like (with position).
        LimitExceededError: a repeat count or the pattern length above the limits.
    """
    if dialect not in _DIALECTS:
        from ..errors import ConfigurationError

        raise ConfigurationError(f"unknown regex dialect {dialect!r}; use one of {_DIALECTS}")
    limits = limits or CompileLimits()
    if len(pattern) > limits.max_pattern_length:
        raise LimitExceededError(
            "max_pattern_length", limits.max_pattern_length, f"pattern has {len(pattern)} chars"
        )
    parser = _Parser(pattern, dialect, limits)
    node = parser.parse()
    return _resolve_anchors(node, "yes", "yes", pattern)


class _Parser:
    def __init__(self, src: str, dialect: str, limits: CompileLimits) -> None:
        self.src = src
        self.pos = 0
        self.dialect = dialect
        self.limits = limits
        self.dotall = False
        self.ascii = dialect == "ecma"
        self.ignorecase = False
        self.depth = 0

    # -- helpers --------------------------------------------------------------------------------
    def error(self, msg: str, pos: int | None = None) -> GrammarSyntaxError:
        return GrammarSyntaxError(
            f"invalid regex: {msg}", source=self.src, position=self.pos if pos is None else pos
        )

    def unsupported(self, feature: str, pos: int, hint: str = "") -> UnsupportedFeatureError:
        where = f"position {pos} of regex {quote_text(self.src)}"
        return UnsupportedFeatureError(feature, where, hint)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.src[i] if i < len(self.src) else ""

    def eof(self) -> bool:
        return self.pos >= len(self.src)

    # -- grammar --------------------------------------------------------------------------------
    def parse(self) -> Node:
        self._leading_flags()
        node = self.alternation()
        if not self.eof():
            if self.peek() == ")":
                raise self.error("unbalanced parenthesis ')'")
            raise self.error(f"unexpected {self.peek()!r}")
        return node

    def _leading_flags(self) -> None:
        while self.src.startswith("(?", self.pos) and self.pos + 2 < len(self.src):
            j = self.pos + 2
            flags = ""
            while j < len(self.src) and self.src[j].isalpha():
                flags += self.src[j]
                j += 1
            if not flags or j >= len(self.src) or self.src[j] != ")":
                return
            self._apply_flags(flags, self.pos)
            self.pos = j + 1

    def _apply_flags(self, flags: str, pos: int) -> None:
        for f in flags:
            if f == "s":
                self.dotall = True
            elif f == "a":
                self.ascii = True
            elif f in "uL":
                continue
            elif f == "i":
                self.ignorecase = True
            elif f == "m":
                raise self.unsupported("multiline flag (?m)", pos)
            elif f == "x":
                raise self.unsupported("verbose flag (?x)", pos)
            else:
                raise self.error(f"unknown flag {f!r}", pos)

    def alternation(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
            if len(branches) > self.limits.max_alternatives:
                raise LimitExceededError("max_alternatives", self.limits.max_alternatives)
        if len(branches) == 1:
            return branches[0]
        # keep _Anchor-bearing branches distinct: alt() would merge them otherwise fine
        return alt(branches)

    def sequence(self) -> Node:
        items: list[Node] = []
        while not self.eof() and self.peek() not in "|)":
            start = self.pos
            atom = self.atom()
            atom = self.quantifiers(atom, start)
            items.append(atom)
        return concat(items)

    def quantifiers(self, atom: Node, atom_pos: int) -> Node:
        while not self.eof():
            c = self.peek()
            qpos = self.pos
            if c in "*+?":
                self.pos += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{":
                bounds = self._braces()
                if bounds is None:
                    break
                lo, hi = bounds
            else:
                break
            if isinstance(atom, _Anchor):
                raise self.error("nothing to repeat", qpos)
            if atom_pos == qpos:
                raise self.error("nothing to repeat", qpos)
            if self.peek() == "?":
                self.pos += 1  # lazy: same language
            elif self.peek() == "+":
                raise self.unsupported("possessive quantifier", self.pos)
            nxt = self.peek()
            if nxt in ("*", "+", "?") or (nxt == "{" and self._braces_lookahead()):
                raise self.error("multiple repeat", self.pos)
            for v in (lo, hi):
                if v is not None and v > self.limits.max_repeat:
                    raise LimitExceededError(
                        "max_repeat", self.limits.max_repeat, f"at position {qpos}"
                    )
            atom = repeat(atom, lo, hi)
            if isinstance(atom, Repeat) and isinstance(atom.item, Repeat) and False:
                pass
        return atom

    def _braces(self) -> tuple[int, int | None] | None:
        """Parse ``{m}``, ``{m,}``, ``{m,n}``, ``{,n}`` at pos; None (literal brace) otherwise."""
        j = self.pos + 1
        s = self.src
        k = j
        while k < len(s) and s[k].isdigit():
            k += 1
        lo_txt = s[j:k]
        if k < len(s) and s[k] == "}":
            if not lo_txt:
                return None
            self.pos = k + 1
            v = int(lo_txt)
            return v, v
        if k >= len(s) or s[k] != ",":
            return None
        m = k + 1
        while m < len(s) and s[m].isdigit():
            m += 1
        hi_txt = s[k + 1 : m]
        if m >= len(s) or s[m] != "}":
            return None
        if not lo_txt and self.dialect == "ecma":
            return None
        lo = int(lo_txt) if lo_txt else 0
        hi = int(hi_txt) if hi_txt else None
        if hi is not None and hi < lo:
            raise self.error("min repeat greater than max repeat", self.pos)
        self.pos = m + 1
        return lo, hi

    def atom(self) -> Node:
        c = self.peek()
        start = self.pos
        if c == "(":
            return self.group()
        if c == "[":
            return self.char_class()
        if c == ".":
            self.pos += 1
            if self.dotall:
                return ANY_CHAR
            if self.dialect == "ecma":
                return CharSet.chars("\n\r\u2028\u2029").negate()
            return CharSet.chars("\n").negate()
        if c == "^":
            self.pos += 1
            return _Anchor(False, start)
        if c == "$":
            self.pos += 1
            return _Anchor(True, start)
        if c == "\\":
            return self._fold(self.escape(in_class=False))
        if c in "*+?":
            raise self.error("nothing to repeat")
        if c == "{" and self._braces_lookahead():
            raise self.error("nothing to repeat")
        if "\ud800" <= c <= "\udfff":  # a lone surrogate (a str can hold one; UTF-8 cannot)
            raise self.unsupported("lone surrogate", start, "surrogates have no UTF-8 form")
        self.pos += 1
        return self._fold(Literal(c))

    def _fold(self, node: Node) -> Node:
        """Apply case-insensitivity to a one-character literal (other nodes unchanged)."""
        if not self.ignorecase or not isinstance(node, Literal) or len(node.text) != 1:
            return node
        cp = ord(node.text)
        closed = case_closure(((cp, cp),))
        if len(closed) == 1 and closed[0] == (cp, cp):
            return node
        return CharSet(closed)

    def _braces_lookahead(self) -> bool:
        save = self.pos
        try:
            return self._braces() is not None
        finally:
            self.pos = save

    def group(self) -> Node:
        start = self.pos
        self.pos += 1  # (
        if self.peek() == "?":
            nxt = self.peek(1)
            if nxt == ":":
                self.pos += 2
            elif nxt == "P" and self.peek(2) == "<":
                self._group_name(self.pos + 3)
            elif nxt == "<" and self.peek(2) not in "=!":
                self._group_name(self.pos + 2)
            elif nxt in "=!":
                raise self.unsupported("lookahead", start)
            elif nxt == "<" and self.peek(2) in "=!":
                raise self.unsupported("lookbehind", start)
            elif nxt == "P" and self.peek(2) == "=":
                raise self.unsupported("backreference", start)
            elif nxt == ">":
                raise self.unsupported("atomic group", start)
            elif nxt == "#":
                end = self.src.find(")", self.pos)
                if end < 0:
                    raise self.error("missing ), unterminated comment", start)
                self.pos = end + 1
                return EMPTY
            elif nxt == "(":
                raise self.unsupported("conditional group", start)
            else:
                j = self.pos + 1
                flags = ""
                while j < len(self.src) and (self.src[j].isalpha() or self.src[j] == "-"):
                    flags += self.src[j]
                    j += 1
                if j < len(self.src) and self.src[j] == ":" and flags:
                    if "-" in flags:
                        raise self.unsupported(f"scoped flags (?{flags}:...)", start)
                    saved = (self.dotall, self.ascii, self.ignorecase)
                    self._apply_flags(flags, start)
                    self.pos = j + 1
                    inner = self._group_body(start)
                    self.dotall, self.ascii, self.ignorecase = saved
                    return inner
                if j < len(self.src) and self.src[j] == ")" and flags:
                    raise self.error("global flags not at the start of the expression", start)
                raise self.error("unknown extension ?" + nxt, start)
        return self._group_body(start)

    def _group_name(self, name_start: int) -> None:
        end = self.src.find(">", name_start)
        if end < 0:
            raise self.error("missing >, unterminated name", name_start)
        name = self.src[name_start:end]
        if not name.isidentifier():
            raise self.error(f"bad character in group name {name!r}", name_start)
        self.pos = end + 1

    def _group_body(self, start: int) -> Node:
        self.depth += 1
        if self.depth > _MAX_GROUP_DEPTH:
            raise LimitExceededError("max_group_depth", _MAX_GROUP_DEPTH, f"at position {start}")
        inner = self.alternation()
        self.depth -= 1
        if self.peek() != ")":
            raise self.error("missing ), unterminated subpattern", start)
        self.pos += 1
        return inner

    # -- escapes and classes --------------------------------------------------------------------
    def escape(self, *, in_class: bool) -> Node:
        """Parse an escape at pos (on the backslash); returns a Literal or CharSet."""
        start = self.pos
        self.pos += 1
        if self.eof():
            raise self.error("bad escape (end of pattern)", start)
        c = self.peek()
        self.pos += 1
        simple = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
        if c in simple and not (c == "a" and self.dialect == "ecma"):
            return Literal(simple[c])
        if c in "dwsDWS":
            if self.ascii and self.dialect == "python":
                return CharSet(class_ranges(c, "ascii"))
            dialect = "ecma" if self.ascii else self.dialect
            return CharSet(class_ranges(c, dialect))
        if c == "x":
            return Literal(chr(self._hex(2, start)))
        if c == "u":
            if self.peek() == "{" and self.dialect == "ecma":
                end = self.src.find("}", self.pos)
                if end < 0:
                    raise self.error("bad \\u{...} escape", start)
                try:
                    cp = int(self.src[self.pos + 1 : end], 16)
                except ValueError:
                    raise self.error("bad \\u{...} escape", start) from None
                self.pos = end + 1
                return self._cp_literal(cp, start)
            return self._cp_literal(self._hex(4, start), start)
        if c == "U" and self.dialect == "python":
            return self._cp_literal(self._hex(8, start), start)
        if c == "N" and self.peek() == "{":
            end = self.src.find("}", self.pos)
            if end < 0:
                raise self.error("missing } in \\N{...}", start)
            name = self.src[self.pos + 1 : end]
            try:
                ch = unicodedata.lookup(name)
            except KeyError:
                raise self.error(f"undefined character name {name!r}", start) from None
            self.pos = end + 1
            return Literal(ch)
        if c in "pP":
            if self.peek() == "{":
                end = self.src.find("}", self.pos)
                if end < 0:
                    raise self.error("missing } in \\p{...}", start)
                name = self.src[self.pos + 1 : end]
                self.pos = end + 1
            elif self.peek().isalpha():
                name = self.peek()
                self.pos += 1
            else:
                raise self.error("bad \\p escape", start)
            ranges = category_ranges(name, f"position {start} of regex {quote_text(self.src)}")
            cs = CharSet(ranges)
            return cs.negate() if c == "P" else cs
        if c == "0":
            # \0 followed by up to two octal digits
            digits = ""
            while len(digits) < 2 and self.peek() in "01234567" and self.peek():
                digits += self.peek()
                self.pos += 1
            return Literal(chr(int("0" + digits, 8)))
        if c == "c" and self.dialect == "ecma" and self.peek().isalpha():
            ch = self.peek()
            self.pos += 1
            return Literal(chr(ord(ch.upper()) - 64))
        if c.isdigit():
            if in_class:
                raise self.error(f"bad escape \\{c} in class", start)
            raise self.unsupported("backreference", start)
        if c == "k" and self.peek() == "<":
            raise self.unsupported("backreference", start)
        if c == "b":
            if in_class:
                return Literal("\b")
            raise self.unsupported("word boundary \\b", start)
        if c == "B":
            raise self.unsupported("word boundary \\B", start)
        if c == "A" and not in_class:
            return _Anchor(False, start)
        if c in "Zz" and not in_class:
            return _Anchor(True, start)
        if c == "G":
            raise self.unsupported("\\G", start)
        if c.isascii() and c.isalnum():
            raise self.error(f"bad escape \\{c}", start)
        return Literal(c)

    def _cp_literal(self, cp: int, start: int) -> Node:
        if 0xD800 <= cp <= 0xDFFF:
            # an ECMA surrogate pair \uD83D\uDE00 → one code point
            if 0xD800 <= cp <= 0xDBFF and self.src.startswith("\\u", self.pos):
                save = self.pos
                self.pos += 2
                lo = self._hex(4, start)
                if 0xDC00 <= lo <= 0xDFFF:
                    return Literal(chr(0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)))
                self.pos = save
            raise self.unsupported("lone surrogate escape", start, "surrogates have no UTF-8 form")
        if cp > 0x10FFFF:
            raise self.error("code point out of range", start)
        return Literal(chr(cp))

    def _hex(self, n: int, start: int) -> int:
        txt = self.src[self.pos : self.pos + n]
        if len(txt) != n or any(ch not in "0123456789abcdefABCDEF" for ch in txt):
            raise self.error(f"bad escape: expected {n} hex digits", start)
        self.pos += n
        return int(txt, 16)

    def char_class(self) -> Node:
        start = self.pos
        self.pos += 1  # [
        negate = False
        if self.peek() == "^":
            negate = True
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.eof():
                raise self.error("unterminated character set", start)
            c = self.peek()
            if c == "]" and not (first and self.dialect == "python"):
                self.pos += 1
                break
            if c == "]" and first and self.dialect == "python":
                self.pos += 1
                lo_item: Node = Literal("]")
            elif c == "[" and self.peek(1) == ":" and self.dialect == "python":
                # Python treats [: as literal characters (with a FutureWarning)
                self.pos += 1
                lo_item = Literal("[")
            elif c == "\\":
                lo_item = self.escape(in_class=True)
            else:
                self.pos += 1
                lo_item = Literal(c)
            first = False
            if (
                isinstance(lo_item, Literal)
                and self.peek() == "-"
                and self.peek(1) not in ("]", "")
            ):
                dash = self.pos
                self.pos += 1
                if self.peek() == "\\":
                    hi_item = self.escape(in_class=True)
                else:
                    hi_item = Literal(self.peek())
                    self.pos += 1
                if not isinstance(hi_item, Literal):
                    if self.dialect == "ecma":
                        # ECMA (annex B): [a-\d] is a, -, digits
                        ranges.append((ord(lo_item.text), ord(lo_item.text)))
                        ranges.append((ord("-"), ord("-")))
                        ranges.extend(_ranges_of(hi_item))
                        continue
                    raise self.error("bad character range", dash)
                lo, hi = ord(lo_item.text), ord(hi_item.text)
                if lo > hi:
                    raise self.error(f"bad character range {lo_item.text}-{hi_item.text}", dash)
                ranges.append((lo, hi))
                continue
            if isinstance(lo_item, _Anchor):
                raise self.error("bad escape in class", self.pos)
            if (
                isinstance(lo_item, CharSet)
                and self.dialect == "python"
                and self.peek() == "-"
                and self.peek(1) not in ("]", "")
            ):
                raise self.error("bad character range", self.pos)
            ranges.extend(_ranges_of(lo_item))
        merged = merge_ranges(r for r in _strip_surrogates(ranges))
        if self.ignorecase:
            merged = case_closure(merged)
        cs = CharSet(merged)
        if negate:
            cs = cs.negate()
            cs = CharSet(tuple(_strip_surrogates(cs.ranges)))
        if not cs.ranges:
            return NOTHING
        return cs


def _ranges_of(node: Node) -> list[tuple[int, int]]:
    if isinstance(node, Literal):
        return [(ord(node.text), ord(node.text))]
    if isinstance(node, CharSet):
        return list(node.ranges)
    return []


def _strip_surrogates(
    ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...],
) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if hi < 0xD800 or lo > 0xDFFF:
            out.append((lo, hi))
            continue
        if lo < 0xD800:
            out.append((lo, 0xD7FF))
        if hi > 0xDFFF:
            out.append((0xE000, hi))
    return out


# -- anchors ------------------------------------------------------------------------------------
def _min_len(node: Node) -> int:
    if isinstance(node, Literal):
        return len(node.text)
    if isinstance(node, CharSet):
        return 1
    if isinstance(node, Concat):
        return sum(_min_len(i) for i in node.items)
    if isinstance(node, Alt):
        return min(_min_len(i) for i in node.items)
    if isinstance(node, Repeat):
        return node.min * _min_len(node.item)
    return 0


def _only_empty(node: Node) -> bool:
    if isinstance(node, (Empty, _Anchor)):
        return True
    if isinstance(node, (Concat, Alt)):
        return all(_only_empty(i) for i in node.items)
    if isinstance(node, Repeat):
        return _only_empty(node.item)
    return False


def _has_anchor(node: Node) -> bool:
    if isinstance(node, _Anchor):
        return True
    if isinstance(node, (Concat, Alt)):
        return any(_has_anchor(i) for i in node.items)
    if isinstance(node, Repeat):
        return _has_anchor(node.item)
    return False


def _ctx_after(ctx: str, items: tuple[Node, ...]) -> str:
    """Context for a position after ``items`` given the context before them."""
    if ctx == "no" or any(_min_len(i) > 0 for i in items):
        return "no"
    if all(_only_empty(i) for i in items):
        return ctx
    return "maybe"


def _resolve_anchors(node: Node, at_start: str, at_end: str, src: str) -> Node:
    """Replace ``^``/``$`` by Empty where they hold, Nothing where they cannot."""
    if not _has_anchor(node):
        return node
    if isinstance(node, _Anchor):
        ctx = at_end if node.end else at_start
        if ctx == "yes":
            return EMPTY
        if ctx == "no":
            return NOTHING
        raise UnsupportedFeatureError(
            "anchor inside the pattern",
            f"position {node.pos} of regex {quote_text(src)}",
            "^ and $ are supported where they anchor the ends of the match",
        )
    if isinstance(node, Concat):
        items = node.items
        out = []
        for k, item in enumerate(items):
            s = _ctx_after(at_start, items[:k])
            e = _ctx_after(at_end, items[k + 1 :])
            out.append(_resolve_anchors(item, s, e, src))
        return concat(out)
    if isinstance(node, Alt):
        return alt(_resolve_anchors(i, at_start, at_end, src) for i in node.items)
    if isinstance(node, Repeat):
        if node.max is not None and node.max <= 1:
            return repeat(_resolve_anchors(node.item, at_start, at_end, src), node.min, node.max)
        # later iterations start after earlier ones
        inner_start = "maybe" if at_start != "no" else "no"
        inner_end = "maybe" if at_end != "no" else "no"
        if _only_empty(node.item):
            inner_start, inner_end = at_start, at_end
        return repeat(_resolve_anchors(node.item, inner_start, inner_end, src), node.min, node.max)
    return node
