"""IR grammar → GBNF or Lark text that formcast's own front-ends read back to the same language.

:func:`grammar_to_gbnf` writes llama.cpp's GBNF (start rule ``root``); :func:`grammar_to_lark`
the Lark dialect of :mod:`formcast.frontends.lark` (start rule ``start``; lower-case rules
only, character sets as ``/[...]/`` classes).  Rule names are made safe for each syntax
(characters outside ``[A-Za-z0-9]`` become ``-`` / ``_``, clashes get a number).  Printable
ASCII is written as itself except where a syntax gives it a meaning (``"`` and ``\\`` in
strings; ``[ ] - ^ / \\`` and space in classes); every other character is an escape
(``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH``), so the text survives any editor.

The IR is a DAG (front-ends share subtrees); printing it as a tree could repeat a shared
subtree exponentially often, so every composite node of at least ``_OUTLINE_MIN`` nodes that
is used more than once becomes a rule of its own (``sub-N``).  The output is linear in the
DAG.

Cost: linear in the grammar's DAG.  Lifetime: pure functions.  ``ByteSet`` (raw bytes, which
neither syntax can spell) and ``Nothing`` (the empty language) raise
:class:`~formcast.errors.UnsupportedFeatureError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import UnsupportedFeatureError
from ..ir import nodes as ir

__all__ = ["grammar_to_gbnf", "grammar_to_lark"]

_OUTLINE_MIN = 4
#: characters written as themselves in a string literal / in a character class (printable
#: ASCII less what either syntax gives a meaning there); every other one is an escape
_SAFE = re.compile(r"[ !#-\[\]-~]")
_CLASS_SAFE = re.compile(r"[!#-,.0-Z_-z{}~]")
_SURROGATES = (0xD800, 0xDFFF)


def _escape_char(cp: int) -> str:
    if cp < 0x100:
        return f"\\x{cp:02X}"
    if cp < 0x10000:
        return f"\\u{cp:04X}"
    return f"\\U{cp:08X}"


def _escape(text: str, safe: re.Pattern[str] = _SAFE) -> str:
    return "".join(c if safe.match(c) else _escape_char(ord(c)) for c in text)


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The scalar values (surrogates excluded) outside ``ranges``."""
    out: list[tuple[int, int]] = []
    nxt = 0
    merged = ir.merge_ranges((*ranges, _SURROGATES))
    for lo, hi in merged:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= ir.MAX_CODEPOINT:
        out.append((nxt, ir.MAX_CODEPOINT))
    return tuple(out)


def _class_char(cp: int) -> str:
    c = chr(cp)
    return c if _CLASS_SAFE.match(c) else _escape_char(cp)


def _class_body(ranges: tuple[tuple[int, int], ...]) -> str:
    parts: list[str] = []
    for lo, hi in ranges:
        if lo == hi:
            parts.append(_class_char(lo))
        elif hi == lo + 1:
            parts.append(_class_char(lo) + _class_char(hi))
        else:
            parts.append(f"{_class_char(lo)}-{_class_char(hi)}")
    return "".join(parts)


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    comp = _complement(ranges)
    if comp and len(comp) < len(ranges):
        return f"[^{_class_body(comp)}]"
    return f"[{_class_body(ranges)}]"


class _Printer:
    """One printing: the rule names of the syntax and the outlined shared subtrees."""

    def __init__(
        self,
        grammar: ir.Grammar,
        *,
        start_name: str,
        sanitize: Callable[[str], str],
        define: str,
        sep: str,
        literal: Callable[[str], str],
        char_class: Callable[[tuple[tuple[int, int], ...]], str],
    ) -> None:
        self.grammar = grammar
        self.define = define
        self.sep = sep
        self.literal = literal
        self.char_class = char_class
        self.sanitize = sanitize
        self.names: dict[str, str] = {}
        used = {start_name}
        self.names[grammar.start] = start_name
        for r in grammar.rules:
            if r.name in self.names:
                continue
            base = sanitize(r.name)
            name, k = base, 1
            while name in used:
                k += 1
                name = f"{base}{sep}{k}"
            used.add(name)
            self.names[r.name] = name
        self.used = used
        self.outlined: dict[int, str] = {}
        self.outline_bodies: list[tuple[str, ir.Node]] = []
        self._find_shared()

    def _find_shared(self) -> None:
        counts: dict[int, int] = {}
        nodes: dict[int, ir.Node] = {}
        stack: list[ir.Node] = [r.body for r in self.grammar.rules]
        while stack:
            n = stack.pop()
            if not isinstance(n, (ir.Concat, ir.Alt, ir.Repeat)):
                continue
            c = counts.get(id(n), 0)
            counts[id(n)] = c + 1
            if c:
                continue
            nodes[id(n)] = n
            stack.extend(n.items if isinstance(n, (ir.Concat, ir.Alt)) else (n.item,))
        tops = {id(r.body) for r in self.grammar.rules}
        for key, c in counts.items():
            if c > 1 and key not in tops and ir.node_size(nodes[key]) >= _OUTLINE_MIN:
                name = f"sub{self.sep}{len(self.outlined) + 1}"
                while name in self.used:
                    name += "x"
                self.used.add(name)
                self.outlined[key] = name
                self.outline_bodies.append((name, nodes[key]))

    def expr(self, n: ir.Node, prec: int = 0, top: bool = False) -> str:
        """``n`` as text; ``prec``: 0 inside an alternation, 1 inside a sequence, 2 an atom."""
        name = None if top else self.outlined.get(id(n))
        if name is not None:
            return name
        if isinstance(n, ir.Literal):
            return self.literal(n.text)
        if isinstance(n, ir.Empty):
            return '""'
        if isinstance(n, ir.CharSet):
            return self.char_class(n.ranges)
        if isinstance(n, ir.RuleRef):
            mapped = self.names.get(n.name)
            if mapped is None:
                raise UnsupportedFeatureError(
                    "reference to an undefined rule", repr(n.name), "the grammar is incomplete"
                )
            return mapped
        if isinstance(n, ir.ByteSet):
            raise UnsupportedFeatureError(
                "raw byte set", "", "GBNF and Lark spell characters, not bytes"
            )
        if isinstance(n, ir.Nothing):
            raise UnsupportedFeatureError(
                "the empty language", "", "a part that matches nothing has no spelling"
            )
        if isinstance(n, ir.Alt):
            text = " | ".join(self.expr(i, 0) for i in n.items)
            return text if prec == 0 else f"({text})"
        if isinstance(n, ir.Concat):
            text = " ".join(self.expr(i, 1) for i in n.items)
            return text if prec <= 1 else f"({text})"
        if isinstance(n, ir.Repeat):
            item = self.expr(n.item, 2)
            lo, hi = n.min, n.max
            if (lo, hi) == (0, 1):
                suffix = "?"
            elif (lo, hi) == (0, None):
                suffix = "*"
            elif (lo, hi) == (1, None):
                suffix = "+"
            elif hi is None:
                suffix = f"{{{lo},}}"
            elif lo == hi:
                suffix = f"{{{lo}}}"
            else:
                suffix = f"{{{lo},{hi}}}"
            return f"{item}{suffix}"
        raise UnsupportedFeatureError(type(n).__name__, "", "no spelling for this IR node")

    def text(self) -> str:
        lines: list[str] = []
        start = self.grammar.rule_map()[self.grammar.start]
        order = [start, *(r for r in self.grammar.rules if r.name != self.grammar.start)]
        for r in order:
            lines.append(f"{self.names[r.name]}{self.define}{self.expr(r.body, 0, top=True)}")
        for name, body in self.outline_bodies:
            lines.append(f"{name}{self.define}{self.expr(body, 0, top=True)}")
        return "\n".join(lines) + "\n"


def _gbnf_name(name: str) -> str:
    out = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")
    return out or "rule"


def _lark_name(name: str) -> str:
    out = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    if not out or not out[0].isalpha():
        out = f"r_{out}"
    return out


def grammar_to_gbnf(grammar: ir.Grammar) -> str:
    """``grammar`` as GBNF text (start rule ``root``)."""
    return _Printer(
        grammar,
        start_name="root",
        sanitize=_gbnf_name,
        define=" ::= ",
        sep="-",
        literal=lambda t: f'"{_escape(t)}"',
        char_class=_char_class,
    ).text()


def grammar_to_lark(grammar: ir.Grammar) -> str:
    """``grammar`` as Lark text (start rule ``start``; character sets as ``/[...]/``)."""
    return _Printer(
        grammar,
        start_name="start",
        sanitize=_lark_name,
        define=": ",
        sep="_",
        literal=lambda t: f'"{_escape(t)}"',
        char_class=lambda ranges: f"/{_char_class(ranges)}/",
    ).text()
