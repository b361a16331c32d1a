"""GBNF (llama.cpp's grammar format) → grammar IR.

The reader follows llama.cpp's ``llama_grammar_parser`` (``src/llama-grammar.cpp``) character by
character:

* ``name ::= alternatives`` rules; a rule ends at a newline, except inside parentheses and right
  after ``::=`` or ``|`` (a newline after ``|`` continues the rule).  ``#`` starts a comment that
  runs to the end of the line, anywhere whitespace may stand.
* Names are ``[a-zA-Z0-9-]+``; as an extension (shared with XGrammar and llguidance's converter)
  ``_`` is accepted too, which changes the meaning of no grammar llama.cpp accepts.
* ``"..."`` literals and ``[...]`` / ``[^...]`` classes with ranges; escapes ``\\xHH``,
  ``\\uHHHH``, ``\\UHHHHHHHH``, ``\\t \\r \\n \\\\ \\" \\[ \\] \\-``; any other escape is an error.
  ``-`` right before ``]`` is a literal dash.  ``.`` is any character.
* Postfix ``* + ?`` and ``{m}`` ``{m,}`` ``{m,n}``; ``{,n}`` is accepted as ``{0,n}``.
* The start rule is ``root``.  An undefined rule is a :class:`GrammarSyntaxError` naming it at
  its first use.

Departures from llama.cpp (all on input llama.cpp mishandles or that the IR cannot express):
a rule defined twice, an empty class ``[]`` and a reversed range ``[z-a]`` are errors (llama.cpp
keeps the last definition, matches the empty string, matches nothing); repetition bounds are kept
exactly (llama.cpp turns a maximum above 2000 into "unbounded" and refuses a minimum above 2000);
token references ``<...>`` / ``!<...>`` raise :class:`UnsupportedFeatureError` (the IR has no
tokens); left recursion is allowed (llama.cpp refuses it).  Surrogate code points cannot be
produced: they are cut out of classes, and a literal surrogate escape is an error.

Lifetime: :func:`parse_gbnf` is a pure function; O(len(text)).
"""

from __future__ import annotations

from ..errors import GrammarSyntaxError, UnsupportedFeatureError
from ..ir.nodes import ANY_CHAR, MAX_CODEPOINT, Grammar, Node, Rule, RuleRef, literal
from ._common import ExprBuilder, location, scalar_charset, syntax_error

__all__ = ["parse_gbnf"]

_HEX_LEN = {"x": 2, "u": 4, "U": 8}
_SIMPLE_ESCAPES = {
    "t": "\t",
    "r": "\r",
    "n": "\n",
    "\\": "\\",
    '"': '"',
    "[": "[",
    "]": "]",
    "-": "-",
}


def _is_word_char(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c in ("-", "_")


class _GbnfParser:
    def __init__(self, text: str) -> None:
        self.src = text
        self.n = len(text)
        self.pos = 0
        self.rules: dict[str, Rule] = {}
        self.order: list[str] = []
        self.defined_at: dict[str, int] = {}
        self.first_ref: dict[str, int] = {}
        self.synth: list[Rule] = []

    # -- helpers ------------------------------------------------------------------------------
    def error(self, msg: str, pos: int | None = None) -> GrammarSyntaxError:
        return syntax_error(msg, self.src, self.pos if pos is None else pos)

    def where(self, pos: int) -> str:
        return location(self.src, pos)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.src[i] if i < self.n else ""

    def skip_space(self, newline_ok: bool) -> None:
        src, n, pos = self.src, self.n, self.pos
        while pos < n:
            c = src[pos]
            if c in " \t" or (newline_ok and c in "\r\n"):
                pos += 1
            elif c == "#":
                while pos < n and src[pos] not in "\r\n":
                    pos += 1
            else:
                break
        self.pos = pos

    def parse_name(self) -> str:
        start = self.pos
        while self.pos < self.n and _is_word_char(self.src[self.pos]):
            self.pos += 1
        if self.pos == start:
            c = self.peek()
            raise self.error(
                f"expecting a rule name, found {c!r}" if c else "expecting a rule name"
            )
        return self.src[start : self.pos]

    def parse_int(self) -> int:
        start = self.pos
        while self.pos < self.n and self.src[self.pos] in "0123456789":
            self.pos += 1
        if self.pos == start:
            raise self.error("expecting an integer")
        return int(self.src[start : self.pos])

    def parse_char(self) -> int:
        """One (possibly escaped) character of a literal or class; returns its code point."""
        start = self.pos
        c = self.peek()
        if not c:
            raise self.error("unexpected end of input")
        if c != "\\":
            self.pos += 1
            return ord(c)
        e = self.peek(1)
        if e in _HEX_LEN:
            size = _HEX_LEN[e]
            digits = self.src[self.pos + 2 : self.pos + 2 + size]
            if len(digits) != size or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"expecting {size} hex digits after \\{e}", start)
            cp = int(digits, 16)
            if cp > MAX_CODEPOINT:
                raise self.error(f"code point {digits} is above U+10FFFF", start)
            self.pos += 2 + size
            return cp
        if e in _SIMPLE_ESCAPES:
            self.pos += 2
            return ord(_SIMPLE_ESCAPES[e])
        if not e:
            raise self.error("unexpected end of input", start)
        raise self.error(f"unknown escape \\{e}", start)

    # -- grammar ------------------------------------------------------------------------------
    def parse(self, start: str) -> Grammar:
        self.skip_space(True)
        while self.pos < self.n:
            self.parse_rule()
        for name, pos in self.first_ref.items():
            if name not in self.rules:
                raise self.error(f"undefined rule {name!r}", pos)
        if start not in self.rules:
            raise self.error(f"the grammar has no {start!r} rule (the start rule)", 0)
        rules = [self.rules[name] for name in self.order] + self.synth
        return Grammar(tuple(rules), start)

    def parse_rule(self) -> None:
        name_pos = self.pos
        name = self.parse_name()
        self.skip_space(False)
        if not self.src.startswith("::=", self.pos):
            raise self.error("expecting '::='")
        self.pos += 3
        self.skip_space(True)
        body = self.parse_alternates(name)
        c = self.peek()
        if c == "\r":
            self.pos += 2 if self.peek(1) == "\n" else 1
        elif c == "\n":
            self.pos += 1
        elif c == ")":
            raise self.error("unmatched ')'")
        elif c:
            raise self.error(f"expecting newline or end of input, found {c!r}")
        self.skip_space(True)
        if name in self.rules:
            raise self.error(
                f"rule {name!r} is defined twice (first at {self.where(self.defined_at[name])})",
                name_pos,
            )
        self.rules[name] = Rule(name, body)
        self.order.append(name)
        self.defined_at[name] = name_pos

    def parse_alternates(self, rule_name: str) -> Node:
        """The body of one rule, up to (not including) the newline that ends it."""
        counter = [0]

        def hoist(node: Node) -> Node:
            counter[0] += 1
            sub = f"{rule_name}::{counter[0]}"
            self.synth.append(Rule(sub, node))
            return RuleRef(sub)

        b = ExprBuilder(self.src, hoist=hoist)
        while True:
            nested = b.depth() > 0
            c = self.peek()
            start = self.pos
            if c == '"':
                self.pos += 1
                chars: list[str] = []
                while self.peek() != '"':
                    if not self.peek():
                        raise self.error("unterminated string literal", start)
                    chars.append(self._scalar(self.parse_char(), start))
                self.pos += 1
                b.atom(literal("".join(chars)))
                self.skip_space(nested)
            elif c == "[":
                b.atom(self.parse_class())
                self.skip_space(nested)
            elif c in ("<", "!"):
                raise UnsupportedFeatureError(
                    "token reference",
                    self.where(start),
                    "GBNF <token> / !<token> references need a vocabulary; formcast grammars "
                    "work on characters",
                )
            elif _is_word_char(c):
                ref = self.parse_name()
                self.first_ref.setdefault(ref, start)
                b.atom(RuleRef(ref))
                self.skip_space(nested)
            elif c == "(":
                b.open("(", start)
                self.pos += 1
                self.skip_space(True)
            elif c == ")" and nested:
                self.pos += 1
                b.close(start)
                self.skip_space(b.depth() > 0)
            elif c == ".":
                self.pos += 1
                b.atom(ANY_CHAR)
                self.skip_space(nested)
            elif c in ("*", "+", "?"):
                self.pos += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                b.postfix(lo, hi, start, f"'{c}'")
                self.skip_space(nested)
            elif c == "{":
                lo, hi = self.parse_braces(nested)
                b.postfix(lo, hi, start, "'{...}'")
            elif c == "|":
                self.pos += 1
                b.bar()
                self.skip_space(True)
            else:
                if nested:
                    raise self.error(
                        "expecting ')'" if c else "unexpected end of input: expecting ')'",
                    )
                return b.finish()

    def parse_braces(self, nested: bool) -> tuple[int, int | None]:
        self.pos += 1
        self.skip_space(nested)
        if self.peek() == ",":  # {,n}: an extension of llama.cpp's syntax
            lo = 0
        else:
            lo = self.parse_int()
            self.skip_space(nested)
        hi: int | None
        if self.peek() == "}":
            hi = lo
        elif self.peek() == ",":
            self.pos += 1
            self.skip_space(nested)
            hi = None
            if self.peek() in "0123456789" and self.peek():
                hi = self.parse_int()
                self.skip_space(nested)
            if self.peek() != "}":
                raise self.error("expecting '}'")
        else:
            raise self.error("expecting ',' or '}'")
        self.pos += 1
        self.skip_space(nested)
        return lo, hi

    def parse_class(self) -> Node:
        start = self.pos
        self.pos += 1
        negate = self.peek() == "^"
        if negate:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            if not self.peek():
                raise self.error("unterminated character class", start)
            item = self.pos
            lo = self.parse_char()
            hi = lo
            if self.peek() == "-" and self.peek(1) != "]":
                if not self.peek(1):
                    raise self.error("unterminated character class", start)
                self.pos += 1
                hi = self.parse_char()
                if hi < lo:
                    raise self.error("reversed range in character class", item)
            ranges.append((lo, hi))
        self.pos += 1
        if not ranges:
            raise self.error("empty character class", start)
        return scalar_charset(ranges, negate=negate)

    def _scalar(self, cp: int, start: int) -> str:
        if 0xD800 <= cp <= 0xDFFF:
            raise self.error(f"surrogate code point U+{cp:04X} in a literal", start)
        return chr(cp)


def parse_gbnf(text: str, *, start: str = "root") -> Grammar:
    """Parse a GBNF grammar (llama.cpp's format) into the grammar IR.

    Args:
        text: the grammar source.
        start: the start rule (``root`` in llama.cpp).

    Returns:
        A :class:`~formcast.ir.nodes.Grammar` whose rules are the grammar's rules in source
        order, followed by rules synthesized for very deeply nested groups (named
        ``"<rule>::<n>"``, a name GBNF source cannot spell).

    Raises:
        GrammarSyntaxError: malformed source, an undefined or twice-defined rule, a missing
            start rule; the message carries line, column and the offending line.
        UnsupportedFeatureError: token references (``<...>``, ``!<...>``).
    """
    parser = _GbnfParser(text)
    try:
        return parser.parse(start)
    except RecursionError:  # pragma: no cover - a safety net; the parser itself is iterative
        raise parser.error("grammar nested too deeply") from None
