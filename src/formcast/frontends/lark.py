"""Lark grammars (the dialect llguidance accepts) → grammar IR.

Supported:

* rules ``name: expansions`` (lower case; the ``?`` / ``!`` prefixes are accepted and do not
  change the language) and terminals ``NAME: expansions`` (upper case), marked
  ``Rule(terminal=True)``; a terminal's body must be regular: terminals it names are inlined,
  and naming a rule, or itself (directly or not), is an error.
* ``|``, grouping ``( )``, ``[ ]`` (optional), postfix ``? * +``, ``~ n``, ``~ n..m`` and
  llguidance's ``{n}``, ``{n,}``, ``{,m}``, ``{n,m}``; ``-> alias`` is accepted and ignored.
* ``"..."`` strings (JSON escapes plus ``\\xHH``, ``\\UHHHHHHHH``), ``"..."i`` (every character
  becomes a class of its simple case variants), ``"a".."z"`` ranges, ``/regex/flags`` (lowered by
  :func:`formcast.frontends.regex.parse_regex`, Python dialect; flags are passed on as an inline
  ``(?flags)`` group, so whatever that front-end refuses is refused here).  Inside a rule, every
  string or regex is an anonymous terminal rule named by its source text (e.g. ``'"("'``).
* ``%import common.NAME [-> ALIAS]`` and ``%import common (A, B)`` for the terminals of Lark's
  ``common.lark`` (defined here directly as IR).
* ``%ignore``: see below.  ``%llguidance {...}``: accepted when its options do not change the
  language (``no_forcing``, ``allow_invalid_utf8: false``), otherwise unsupported.
* Priorities ``name.N:`` on rules and terminals are accepted and ignored: they steer Lark's lexer
  and parser choices, never the language.  llguidance's ``[lazy]`` sets ``Rule.lazy`` (and makes
  a lower-case rule a terminal, as llguidance does) and its semantics are compiled into the
  terminals (:func:`formcast.frontends.lark_lazy.apply_lazy_lexemes`); ``[capture]`` /
  ``[capture="x"]`` / ``[capture_name="x"]`` are ignored (no change to the language).
* ``//`` and ``#`` comments; names may contain ``-`` (llguidance); newlines inside ``( )`` /
  ``[ ]`` are tolerated (Lark itself only allows a newline right before ``|``).

``%ignore`` — the IR has no "skip" concept, so it is compiled in: every ignored expansion becomes
a terminal, one rule ``%ignore`` is ``(T1 | T2 | ...)*``, and a reference to it is placed between
every two adjacent symbols of every rule body (``a b`` → ``a %ignore b``), between the iterations
of every repetition (``x+`` → ``x (%ignore x)*``) and at the start and end of the start rule.
Terminal bodies are left alone, so ignored text can appear exactly between lexemes, as in Lark.
``%ignore %ignore`` (next to an empty item) is the same language as ``%ignore`` because the rule
is a star.

Refused with :class:`~formcast.errors.UnsupportedFeatureError` naming the feature: templates
(``name{a, b}: ...`` and their uses), ``%declare``, ``%override``, relative or non-``common``
imports, ``%json``, ``%regex {...}``, special tokens ``<...>``, grammar references ``@name``,
llguidance's ``&`` / ``~`` regex operators, the ``stop`` / ``suffix`` / ``max_tokens`` /
``temperature`` lexeme options (any option but ``lazy`` and ``capture``).

Lifetime: :func:`parse_lark` is a pure function; linear in the source plus the regexes' cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..errors import GrammarSyntaxError, UnsupportedFeatureError
from ..ir.nodes import (
    EMPTY,
    Alt,
    CharSet,
    Concat,
    Grammar,
    Node,
    Repeat,
    Rule,
    RuleRef,
    alt,
    concat,
    iter_nodes,
    literal,
    repeat,
)
from ._common import ExprBuilder, location, scalar_charset, syntax_error
from .lark_lazy import apply_lazy_lexemes

__all__ = ["COMMON_TERMINALS", "IGNORE_RULE", "parse_lark"]

#: Name of the rule that ``%ignore`` compiles to (no Lark source can spell it).
IGNORE_RULE = "%ignore"

_PUNCT = ("->", "..", ":", "(", ")", "[", "]", "{", "}", ",", "|", "~", ".", "=", "!")
_DIRECTIVES = (
    "%ignore",
    "%import",
    "%override",
    "%declare",
    "%json",
    "%regex",
    "%llguidance",
)
_JSON_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "'": "'",
    "v": "\v",
    "a": "\a",
    "0": "\0",
}
_HEX = "0123456789abcdefABCDEF"


# -- common.lark ----------------------------------------------------------------------------------
def _seq(*items: Node) -> Node:
    return concat(items)


def _star(item: Node) -> Node:
    return repeat(item, 0, None)


def _plus(item: Node) -> Node:
    return repeat(item, 1, None)


def _opt(item: Node) -> Node:
    return repeat(item, 0, 1)


def _but(chars: str) -> Node:
    """Any scalar value except ``chars``."""
    return scalar_charset([(ord(c), ord(c)) for c in chars], negate=True)


def _common_terminals() -> dict[str, tuple[Node, bool]]:
    """Lark's ``common.lark`` terminals as IR: name -> (body, lazy)."""
    digit = CharSet(((0x30, 0x39),))
    int_ = _plus(digit)
    sign = _opt(CharSet.chars("+-"))
    signed_int = _seq(sign, int_)
    decimal = alt([_seq(int_, literal("."), _opt(int_)), _seq(literal("."), int_)])
    exp = _seq(CharSet.chars("eE"), signed_int)
    float_ = alt([_seq(int_, exp), _seq(decimal, _opt(exp))])
    number = alt([float_, int_])
    escaped = _seq(literal("\\"), _but("\n"))  # a backslash and any character but newline
    letter = CharSet(((0x41, 0x5A), (0x61, 0x7A)))
    line_rest = _star(_but("\n"))
    stars = _plus(literal("*"))
    return {
        "DIGIT": (digit, False),
        "HEXDIGIT": (CharSet.chars(_HEX), False),
        "INT": (int_, False),
        "SIGNED_INT": (signed_int, False),
        "DECIMAL": (decimal, False),
        "_EXP": (exp, False),
        "FLOAT": (float_, False),
        "SIGNED_FLOAT": (_seq(sign, float_), False),
        "NUMBER": (number, False),
        "SIGNED_NUMBER": (_seq(sign, number), False),
        # _STRING_INNER /.*?/ and _STRING_ESC_INNER (the same, not ending in an odd number of
        # backslashes) are lazy patterns in Lark: lazy lexemes here
        "_STRING_INNER": (line_rest, True),
        "_STRING_ESC_INNER": (_star(alt([_but("\n\\"), escaped])), True),
        # "\"" _STRING_ESC_INNER "\"": ends at the first quote that no backslash escapes
        "ESCAPED_STRING": (
            _seq(literal('"'), _star(alt([_but('\n"\\'), escaped])), literal('"')),
            False,
        ),
        "LCASE_LETTER": (CharSet(((0x61, 0x7A),)), False),
        "UCASE_LETTER": (CharSet(((0x41, 0x5A),)), False),
        "LETTER": (letter, False),
        "WORD": (_plus(letter), False),
        "CNAME": (
            _seq(alt([literal("_"), letter]), _star(alt([literal("_"), letter, digit]))),
            False,
        ),
        "WS_INLINE": (_plus(CharSet.chars(" \t")), False),
        "WS": (_plus(CharSet.chars(" \t\f\r\n")), False),
        "CR": (literal("\r"), False),
        "LF": (literal("\n"), False),
        "NEWLINE": (_plus(_seq(_opt(literal("\r")), literal("\n"))), False),
        "SH_COMMENT": (_seq(literal("#"), line_rest), False),
        "CPP_COMMENT": (_seq(literal("//"), line_rest), False),
        # "/*" /(.|\n)*?/ "*/"  ==  /\*[^*]*\*+([^/*][^*]*\*+)*\//
        "C_COMMENT": (
            _seq(
                literal("/*"),
                _star(_but("*")),
                stars,
                _star(_seq(_but("*/"), _star(_but("*")), stars)),
                literal("/"),
            ),
            False,
        ),
        "SQL_COMMENT": (_seq(literal("--"), line_rest), False),
    }


#: The ``common`` terminals available to ``%import``: name -> (IR body, lazy).
COMMON_TERMINALS: dict[str, tuple[Node, bool]] = _common_terminals()


# -- lexer ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # NAME STRING REGEX NUMBER OP NL EOF DIRECTIVE SPECIAL GREF, or the punctuation
    text: str  # the source text
    pos: int
    value: str = ""  # STRING: the decoded text; REGEX: the pattern
    flags: str = ""  # STRING / REGEX flags
    number: int = 0  # NUMBER
    payload: object = None  # the JSON after %json / %regex / %llguidance


def _is_name_start(c: str) -> bool:
    return c == "_" or ("a" <= c <= "z") or ("A" <= c <= "Z")


def _is_name_char(c: str) -> bool:
    return _is_name_start(c) or ("0" <= c <= "9")


class _Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.n = len(src)
        self.pos = 0
        self.toks: list[_Tok] = []
        self.brackets: list[_Tok] = []

    def error(self, msg: str, pos: int) -> GrammarSyntaxError:
        return syntax_error(msg, self.src, pos)

    def emit(self, kind: str, text: str, pos: int) -> None:
        self.toks.append(_Tok(kind, text, pos))

    def run(self) -> list[_Tok]:
        src, n = self.src, self.n
        while self.pos < n:
            c = src[self.pos]
            start = self.pos
            if c in " \t\f\v":
                self.pos += 1
            elif c in "\r\n":
                self.pos += 1
                if not self.brackets and self.toks and self.toks[-1].kind != "NL":
                    self.emit("NL", "\n", start)
            elif c == "#" or src.startswith("//", start):
                while self.pos < n and src[self.pos] not in "\r\n":
                    self.pos += 1
            elif c == '"':
                self.lex_string()
            elif c == "/":
                self.lex_regex()
            elif c == "%":
                self.lex_directive()
            elif c == "<":
                end = start + 1
                while end < n and src[end] not in "<> \t\r\n":
                    end += 1
                if end >= n or src[end] != ">" or end == start + 1:
                    raise self.error("unexpected '<'", start)
                self.pos = end + 1
                self.emit("SPECIAL", src[start : self.pos], start)
            elif c == "@":
                end = start + 1
                while end < n and (_is_name_char(src[end]) or src[end] == "-"):
                    end += 1
                self.pos = end
                self.emit("GREF", src[start:end], start)
            elif _is_name_start(c):
                end = start + 1
                while end < n and (
                    _is_name_char(src[end])
                    or (src[end] == "-" and end + 1 < n and _is_name_char(src[end + 1]))
                ):
                    end += 1
                self.pos = end
                self.emit("NAME", src[start:end], start)
            elif self.peek_digit(start) or (c == "-" and self.peek_digit(start + 1)):
                end = start + 1
                while end < n and src[end].isascii() and src[end].isdigit():
                    end += 1
                self.pos = end
                self.toks.append(_Tok("NUMBER", src[start:end], start, number=int(src[start:end])))
            elif c in "+*?":
                self.pos += 1
                self.emit("OP", c, start)
            elif c == "&":
                raise UnsupportedFeatureError(
                    "'&' (and) operator",
                    location(src, start),
                    "llguidance regex extension",
                )
            else:
                for p in _PUNCT:
                    if src.startswith(p, start):
                        self.pos += len(p)
                        self.emit(p, p, start)
                        self.track_bracket(self.toks[-1])
                        break
                else:
                    raise self.error(f"unexpected character {c!r}", start)
        if self.brackets:
            open_tok = self.brackets[-1]
            raise self.error(f"unclosed {open_tok.text!r}", open_tok.pos)
        self.emit("EOF", "", self.n)
        return self.toks

    def peek_digit(self, i: int) -> bool:
        return i < self.n and self.src[i].isascii() and self.src[i].isdigit()

    def track_bracket(self, tok: _Tok) -> None:
        if tok.kind in ("(", "["):
            self.brackets.append(tok)
        elif tok.kind in (")", "]"):
            if not self.brackets:
                raise self.error(f"unmatched {tok.kind!r}", tok.pos)
            open_tok = self.brackets.pop()
            if {"(": ")", "[": "]"}[open_tok.kind] != tok.kind:
                raise self.error(
                    f"{tok.kind!r} does not close {open_tok.text!r} "
                    f"(opened at {location(self.src, open_tok.pos)})",
                    tok.pos,
                )

    def lex_string(self) -> None:
        src, n, start = self.src, self.n, self.pos
        i = start + 1
        out: list[str] = []
        while True:
            if i >= n or src[i] in "\r\n":
                raise self.error("unterminated string", start)
            c = src[i]
            if c == '"':
                i += 1
                break
            if c != "\\":
                out.append(c)
                i += 1
                continue
            e = src[i + 1] if i + 1 < n else ""
            if e in ("x", "u", "U"):
                size = {"x": 2, "u": 4, "U": 8}[e]
                digits = src[i + 2 : i + 2 + size]
                if len(digits) != size or any(d not in _HEX for d in digits):
                    raise self.error(f"expecting {size} hex digits after \\{e}", i)
                cp = int(digits, 16)
                if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                    raise self.error(f"\\{e}{digits} is not a Unicode scalar value", i)
                out.append(chr(cp))
                i += 2 + size
            elif e in _JSON_ESCAPES:
                out.append(_JSON_ESCAPES[e])
                i += 2
            else:
                raise self.error(f"unknown escape \\{e}" if e else "unterminated string", i)
        flags = ""
        if i < n and src[i] == "i" and not (i + 1 < n and _is_name_char(src[i + 1])):
            flags = "i"
            i += 1
        self.pos = i
        self.toks.append(_Tok("STRING", src[start:i], start, value="".join(out), flags=flags))

    def lex_regex(self) -> None:
        src, n, start = self.src, self.n, self.pos
        i = start + 1
        while True:
            if i >= n or src[i] in "\r\n":
                raise self.error("unterminated regular expression", start)
            if src[i] == "\\" and i + 1 < n:
                i += 2
                continue
            if src[i] == "/":
                break
            i += 1
        if i == start + 1:
            raise self.error("empty regular expression", start)
        pattern = src[start + 1 : i]
        i += 1
        flag_start = i
        while i < n and src[i] in "imslux":
            i += 1
        self.pos = i
        self.toks.append(_Tok("REGEX", src[start:i], start, value=pattern, flags=src[flag_start:i]))

    def lex_directive(self) -> None:
        src, start = self.src, self.pos
        end = start + 1
        while end < self.n and _is_name_char(src[end]):
            end += 1
        word = src[start:end]
        if word not in _DIRECTIVES:
            raise self.error(f"unknown directive {word!r}", start)
        self.pos = end
        payload: object = None
        if word in ("%json", "%regex", "%llguidance"):
            j = end
            while j < self.n and src[j] in " \t\r\n":
                j += 1
            try:
                payload, self.pos = json.JSONDecoder().raw_decode(src, j)
            except json.JSONDecodeError as e:
                raise self.error(f"{word} needs a JSON value: {e.msg}", e.pos) from None
        self.toks.append(_Tok("DIRECTIVE", word, start, payload=payload))


# -- parser ---------------------------------------------------------------------------------------
@dataclass
class _Def:
    name: str
    pos: int
    terminal: bool
    body: list[_Tok]
    lazy: bool = False


@dataclass
class _State:
    defs: dict[str, _Def] = field(default_factory=dict)
    imports: dict[str, tuple[str, int]] = field(default_factory=dict)  # alias -> (common name, pos)
    ignores: list[list[_Tok]] = field(default_factory=list)


def _is_terminal_name(name: str) -> bool:
    return name.lstrip("_")[:1].isupper()


class _LarkParser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.toks = _Lexer(src).run()
        self.i = 0
        self.st = _State()
        # filled while compiling
        self.anon: dict[str, Node] = {}
        self.anon_order: list[str] = []
        self.refs: dict[str, int] = {}
        self.synth: list[Rule] = []

    # -- token helpers ------------------------------------------------------------------------
    def tok(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def error(self, msg: str, pos: int) -> GrammarSyntaxError:
        return syntax_error(msg, self.src, pos)

    def where(self, pos: int) -> str:
        return location(self.src, pos)

    def expect(self, kind: str, what: str) -> _Tok:
        t = self.tok()
        if t.kind != kind:
            found = (
                "end of input"
                if t.kind == "EOF"
                else "a newline"
                if t.kind == "NL"
                else repr(t.text)
            )
            raise self.error(f"expecting {what}, found {found}", t.pos)
        self.i += 1
        return t

    # -- statements ---------------------------------------------------------------------------
    def parse_statements(self) -> None:
        while True:
            t = self.tok()
            if t.kind == "NL":
                self.i += 1
            elif t.kind == "EOF":
                return
            elif t.kind == "DIRECTIVE":
                self.parse_directive()
            elif t.kind in ("NAME", "!") or (t.kind == "OP" and t.text == "?"):
                self.parse_definition()
            else:
                raise self.error(
                    f"expecting a rule, a terminal or a %directive, found {t.text!r}",
                    t.pos,
                )

    def body_tokens(self) -> list[_Tok]:
        """Tokens up to the end of the statement; a newline followed by ``|`` continues it."""
        out: list[_Tok] = []
        while True:
            t = self.tok()
            if t.kind == "EOF":
                return out
            if t.kind == "NL":
                if self.tok(1).kind == "|":
                    self.i += 1
                    continue
                self.i += 1
                return out
            if t.kind == "DIRECTIVE" and t.text not in ("%json", "%regex"):
                raise self.error(f"{t.text} must start a line", t.pos)
            out.append(t)
            self.i += 1

    def parse_definition(self) -> None:
        while self.tok().kind == "!" or (self.tok().kind == "OP" and self.tok().text == "?"):
            self.i += 1
        name_tok = self.expect("NAME", "a rule or terminal name")
        name = name_tok.text
        terminal = _is_terminal_name(name)
        if not terminal and not name.lstrip("_")[:1].islower():
            raise self.error(f"invalid name {name!r}", name_tok.pos)
        if self.tok().kind == "{":
            raise UnsupportedFeatureError(
                "templates",
                self.where(self.tok().pos),
                f"{name!r} has template parameters",
            )
        if self.tok().kind == ".":  # priority: accepted, ignored
            self.i += 1
            if self.tok().kind == "OP" and self.tok().text == "+":
                self.i += 1
            self.expect("NUMBER", "a priority number after '.'")
        lazy = False
        if self.tok().kind == "[":
            lazy = self.parse_attributes()
        self.expect(":", "':' after the name")
        body = self.body_tokens()
        self.define(_Def(name, name_tok.pos, terminal or lazy, body, lazy))

    def define(self, d: _Def) -> None:
        if d.name in self.st.defs or d.name in self.st.imports:
            first = (
                self.st.defs[d.name].pos if d.name in self.st.defs else self.st.imports[d.name][1]
            )
            raise self.error(f"{d.name!r} is defined twice (first at {self.where(first)})", d.pos)
        self.st.defs[d.name] = d

    def parse_attributes(self) -> bool:
        """llguidance's ``name[lazy, capture, ...]``; returns whether ``lazy`` was given."""
        self.expect("[", "'['")
        lazy = False
        while self.tok().kind != "]":
            key = self.expect("NAME", "an attribute name")
            value: _Tok | None = None
            if self.tok().kind == "=":
                self.i += 1
                if self.tok().kind in ("STRING", "NUMBER", "REGEX", "NAME"):
                    value = self.tok()
                    self.i += 1
                else:
                    raise self.error("expecting an attribute value", self.tok().pos)
            if key.text not in ("lazy", "capture", "capture_name"):
                raise UnsupportedFeatureError(
                    f"lexeme option {key.text!r}",
                    self.where(key.pos),
                    "only lazy and capture are supported",
                )
            if key.text == "lazy":
                if value is not None:  # llguidance: a syntax error too
                    raise self.error("'lazy' takes no value (write name[lazy])", value.pos)
                lazy = True
            elif value is not None and value.kind != "STRING":
                raise self.error(f'{key.text!r} takes a string ("name")', value.pos)
            if self.tok().kind == ",":
                self.i += 1
            elif self.tok().kind != "]":
                raise self.error("expecting ',' or ']'", self.tok().pos)
        self.i += 1
        return lazy

    def parse_directive(self) -> None:
        t = self.expect("DIRECTIVE", "a directive")
        if t.text == "%ignore":
            body = self.body_tokens()
            if not body:
                raise self.error("%ignore needs a terminal or pattern", t.pos)
            self.st.ignores.append(body)
        elif t.text == "%import":
            self.parse_import(t)
        elif t.text == "%llguidance":
            self.check_llguidance(t)
            self.body_tokens_empty(t)
        elif t.text == "%declare":
            raise UnsupportedFeatureError(
                "%declare",
                self.where(t.pos),
                "declared terminals are produced by a post-lexer (e.g. indentation); "
                "a grammar IR cannot express them",
            )
        elif t.text == "%override":
            raise UnsupportedFeatureError("%override", self.where(t.pos), "grammar composition")
        else:
            raise self.error(f"{t.text} may only appear inside a rule", t.pos)

    def body_tokens_empty(self, t: _Tok) -> None:
        rest = self.body_tokens()
        if rest:
            raise self.error(f"unexpected {rest[0].text!r} after {t.text}", rest[0].pos)

    def check_llguidance(self, t: _Tok) -> None:
        opts = t.payload
        if not isinstance(opts, dict):
            raise self.error("%llguidance needs a JSON object", t.pos)
        for key, value in opts.items():
            harmless = (key == "no_forcing" and isinstance(value, bool)) or (
                key == "allow_invalid_utf8" and value is False
            )
            if not harmless:
                raise UnsupportedFeatureError(
                    f"%llguidance option {key!r}", self.where(t.pos), f"value {value!r}"
                )

    def parse_import(self, t: _Tok) -> None:
        if self.tok().kind == ".":
            raise UnsupportedFeatureError(
                "relative %import",
                self.where(self.tok().pos),
                "only %import common.NAME is built in",
            )
        path = [self.expect("NAME", "a module name")]
        while self.tok().kind == ".":
            self.i += 1
            path.append(self.expect("NAME", "a name after '.'"))
        module = path[0].text
        if module != "common":
            raise UnsupportedFeatureError(
                f"%import from {'.'.join(p.text for p in path[:-1]) or module!r}",
                self.where(path[0].pos),
                "only %import common.NAME is built in",
            )
        names: list[tuple[_Tok, str]] = []
        if len(path) == 2:
            alias = path[1].text
            if self.tok().kind == "->":
                self.i += 1
                alias = self.expect("NAME", "an alias name").text
            names.append((path[1], alias))
        elif len(path) == 1 and self.tok().kind == "(":
            self.i += 1
            while True:
                nt = self.expect("NAME", "a name to import")
                names.append((nt, nt.text))
                if self.tok().kind == ",":
                    self.i += 1
                    continue
                self.expect(")", "')'")
                break
        else:
            raise self.error("expecting %import common.NAME or %import common (A, B)", t.pos)
        self.body_tokens_empty(t)
        for tok, alias in names:
            if tok.text not in COMMON_TERMINALS:
                raise self.error(
                    f"common has no terminal {tok.text!r} (it has {', '.join(COMMON_TERMINALS)})",
                    tok.pos,
                )
            if alias in self.st.defs or alias in self.st.imports:
                raise self.error(f"{alias!r} is defined twice", tok.pos)
            self.st.imports[alias] = (tok.text, tok.pos)

    # -- expressions ----------------------------------------------------------------------------
    def compile_body(
        self, owner: str, toks: list[_Tok], *, terminal: bool, sep: Node | None
    ) -> Node:
        """The IR of one expansion list; names become :class:`RuleRef` (inlined later in
        terminals)."""
        counter = [0]

        def hoist(node: Node) -> Node:
            counter[0] += 1
            name = f"{owner}::{counter[0]}"
            self.synth.append(Rule(name, node))
            return RuleRef(name)

        b = ExprBuilder(self.src, sep=sep, hoist=None if terminal else hoist)
        k = 0
        n = len(toks)
        while k < n:
            t = toks[k]
            nxt = toks[k + 1] if k + 1 < n else None
            kind = t.kind
            if kind in ("(", "["):
                b.open(kind, t.pos)
            elif kind in (")", "]"):
                b.close(t.pos, optional=kind == "]")
            elif kind == "|":
                b.bar()
            elif kind == "->":
                if nxt is None or nxt.kind != "NAME":
                    raise self.error("expecting an alias name after '->'", t.pos)
                k += 1
            elif kind == "STRING":
                if (
                    nxt is not None
                    and nxt.kind == ".."
                    and k + 2 < n
                    and toks[k + 2].kind == "STRING"
                ):
                    node, text = (
                        self.range_node(t, toks[k + 2]),
                        t.text + ".." + toks[k + 2].text,
                    )
                    k += 2
                else:
                    node, text = self.string_node(t.value, t.flags), t.text
                b.atom(self.lexeme(node, text, terminal))
            elif kind == "REGEX":
                b.atom(self.lexeme(self.regex_node(t), t.text, terminal))
            elif kind == "NAME":
                if (
                    nxt is not None
                    and nxt.kind == "{"
                    and not (k + 2 < n and toks[k + 2].kind in ("NUMBER", ","))
                ):
                    raise UnsupportedFeatureError(
                        "templates", self.where(t.pos), f"use of {t.text!r}"
                    )
                if terminal and not _is_terminal_name(t.text) and not self.is_lazy_rule(t.text):
                    raise self.error(f"terminal {owner!r} cannot refer to rule {t.text!r}", t.pos)
                self.refs.setdefault(t.text, t.pos)
                b.atom(RuleRef(t.text))
            elif kind == "OP":
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[t.text]
                b.postfix(lo, hi, t.pos, f"'{t.text}'")
            elif kind == "~":
                if not b.has_item() or nxt is None or nxt.kind != "NUMBER":
                    raise UnsupportedFeatureError(
                        "'~' (not) operator",
                        self.where(t.pos),
                        "llguidance regex extension",
                    )
                lo = hi = self.count(nxt)
                k += 1
                if k + 2 < n and toks[k + 1].kind == ".." and toks[k + 2].kind == "NUMBER":
                    hi = self.count(toks[k + 2])
                    k += 2
                b.postfix(lo, hi, t.pos, "'~'")
            elif kind == "{":
                k = self.braces(b, toks, k)
            elif kind == "SPECIAL":
                raise UnsupportedFeatureError(
                    "special token", self.where(t.pos), f"{t.text} needs a tokenizer"
                )
            elif kind == "GREF":
                raise UnsupportedFeatureError("grammar reference", self.where(t.pos), t.text)
            elif kind == "DIRECTIVE":
                raise UnsupportedFeatureError(t.text, self.where(t.pos), "inline JSON schema/regex")
            else:
                raise self.error(f"unexpected {t.text!r}", t.pos)
            k += 1
        return b.finish()

    def count(self, t: _Tok) -> int:
        if t.number < 0:
            raise self.error("a repetition count must be >= 0", t.pos)
        return t.number

    def braces(self, b: ExprBuilder, toks: list[_Tok], k: int) -> int:
        """llguidance's ``x{n}``, ``x{n,}``, ``x{,m}``, ``x{n,m}``; returns the index of ``}``."""
        start = toks[k]
        j = k + 1

        def at(kind: str) -> bool:
            return j < len(toks) and toks[j].kind == kind

        lo = 0
        if at("NUMBER"):
            lo = self.count(toks[j])
            j += 1
        hi: int | None = lo
        if at(","):
            j += 1
            hi = None
            if at("NUMBER"):
                hi = self.count(toks[j])
                j += 1
        elif j == k + 1:
            raise self.error("expecting a repetition count", start.pos)
        if not at("}"):
            raise self.error("expecting '}'", toks[j].pos if j < len(toks) else start.pos)
        if hi == 0:
            raise self.error("a repetition maximum must be above 0", start.pos)
        b.postfix(lo, hi, start.pos, "'{...}'")
        return j

    def is_lazy_rule(self, name: str) -> bool:
        d = self.st.defs.get(name)
        return d is not None and d.terminal

    def lexeme(self, node: Node, text: str, terminal: bool) -> Node:
        """In a terminal the node itself; in a rule a reference to an anonymous terminal."""
        if terminal or node == EMPTY:
            return node
        if text not in self.anon:
            self.anon[text] = node
            self.anon_order.append(text)
        return RuleRef(text)

    def string_node(self, value: str, flags: str) -> Node:
        if "i" not in flags:
            return literal(value)
        parts: list[Node] = []
        for c in value:
            variants = {
                v for v in (c, c.lower(), c.upper(), c.casefold(), c.swapcase()) if len(v) == 1
            }
            parts.append(literal(c) if len(variants) == 1 else CharSet.chars("".join(variants)))
        return concat(parts)

    def range_node(self, a: _Tok, b: _Tok) -> Node:
        va, vb = a.value, b.value
        if a.flags or b.flags:
            raise self.error("a range cannot take flags", a.pos)
        if len(va) != 1 or len(vb) != 1:
            raise self.error("range ends must be single characters", a.pos)
        if ord(va) > ord(vb):
            raise self.error(f"reversed range {a.text}..{b.text}", a.pos)
        return scalar_charset([(ord(va), ord(vb))])

    def regex_node(self, t: _Tok) -> Node:
        from .regex import parse_regex  # the regex front-end; imported late (optional at import)

        pattern, flags = t.value, t.flags
        prefix = f"(?{flags})" if flags else ""
        try:
            return parse_regex(prefix + pattern)
        except UnsupportedFeatureError as e:
            raise UnsupportedFeatureError(
                e.feature, f"{self.where(t.pos)}, in regex {t.text}"
            ) from e
        except GrammarSyntaxError as e:
            offset = max(0, min(len(pattern), e.position - len(prefix)))
            raise self.error(f"{e.message} (regex {t.text})", t.pos + 1 + offset) from e

    # -- assembly -------------------------------------------------------------------------------
    def build(self, start: str) -> Grammar:
        self.parse_statements()
        st = self.st
        ign_names: list[str] = []
        for k, toks in enumerate(st.ignores):
            if len(toks) == 1 and toks[0].kind == "NAME":
                name = toks[0].text
                if not _is_terminal_name(name) and not self.is_lazy_rule(name):
                    raise self.error(f"%ignore needs terminals, {name!r} is a rule", toks[0].pos)
                self.refs.setdefault(name, toks[0].pos)
                ign_names.append(name)
                continue
            node = self.compile_body(IGNORE_RULE, toks, terminal=True, sep=None)
            text = toks[0].text if len(toks) == 1 else f"{IGNORE_RULE}:{k + 1}"
            ref = self.lexeme(node, text, terminal=False)
            if isinstance(ref, RuleRef):
                ign_names.append(ref.name)
        sep: Node | None = RuleRef(IGNORE_RULE) if ign_names else None

        bodies: dict[str, Node] = {}
        for d in st.defs.values():
            bodies[d.name] = self.compile_body(
                d.name, d.body, terminal=d.terminal, sep=None if d.terminal else sep
            )
        for name, pos in self.refs.items():
            if name not in st.defs and name not in st.imports:
                kind = "terminal" if _is_terminal_name(name) else "rule"
                raise self.error(f"undefined {kind} {name!r}", pos)
        terminal_bodies = self.inline_terminals(bodies)

        rules: list[Rule] = []
        for d in st.defs.values():
            body = terminal_bodies[d.name] if d.terminal else bodies[d.name]
            if d.name == start and sep is not None and not d.terminal:
                body = concat([sep, body, sep])
            rules.append(Rule(d.name, body, terminal=d.terminal, lazy=d.lazy))
        for alias, (common, _) in st.imports.items():
            node, lazy = COMMON_TERMINALS[common]
            rules.append(Rule(alias, node, terminal=True, lazy=lazy))
        for text in self.anon_order:
            rules.append(Rule(text, self.resolve(self.anon[text], terminal_bodies), terminal=True))
        if sep is not None:
            rules.append(
                Rule(
                    IGNORE_RULE,
                    repeat(alt(RuleRef(n) for n in dict.fromkeys(ign_names)), 0, None),
                )
            )
        rules.extend(self.synth)
        if start not in st.defs and start not in st.imports:
            raise self.error(f"the grammar has no {start!r} rule (the start rule)", 0)
        if start in terminal_bodies and sep is not None:
            raise UnsupportedFeatureError(
                "%ignore with a terminal start symbol",
                f"rule {start!r}",
                "start from a rule",
            )
        return apply_lazy_lexemes(Grammar(tuple(rules), start))

    def inline_terminals(self, bodies: dict[str, Node]) -> dict[str, Node]:
        """Regular bodies of all terminals (defined and imported), with the terminals they name
        inlined; a cycle is an error."""
        done: dict[str, Node] = {
            alias: COMMON_TERMINALS[common][0] for alias, (common, _) in self.st.imports.items()
        }
        terms = [d for d in self.st.defs.values() if d.terminal]
        deps = {
            d.name: sorted({x.name for x in iter_nodes(bodies[d.name]) if isinstance(x, RuleRef)})
            for d in terms
        }
        state: dict[str, int] = {}  # 1: in progress, 2: done
        for d in terms:
            stack: list[tuple[str, int]] = [(d.name, 0)]
            while stack:
                name, idx = stack.pop()
                if idx == 0:
                    if state.get(name) == 2:
                        continue
                    state[name] = 1
                children = deps.get(name, [])
                if idx < len(children):
                    stack.append((name, idx + 1))
                    child = children[idx]
                    if child in done or child not in deps:
                        continue
                    if state.get(child) == 1:
                        raise self.error(
                            f"terminal {child!r} refers to itself (terminals must be regular)",
                            self.st.defs[child].pos,
                        )
                    stack.append((child, 0))
                    continue
                done[name] = self.resolve(bodies[name], done)
                state[name] = 2
        return done

    @staticmethod
    def resolve(node: Node, done: dict[str, Node]) -> Node:
        """``node`` with each ``RuleRef`` replaced by ``done[name]`` (iterative post-order)."""
        if not any(isinstance(x, RuleRef) for x in iter_nodes(node)):
            return node
        out: list[Node] = []
        stack: list[tuple[Node, bool]] = [(node, False)]
        while stack:
            cur, expanded = stack.pop()
            if isinstance(cur, RuleRef):
                out.append(done[cur.name])
            elif isinstance(cur, (Concat, Alt, Repeat)):
                kids: tuple[Node, ...] = (cur.item,) if isinstance(cur, Repeat) else cur.items
                if not expanded:
                    stack.append((cur, True))
                    stack.extend((kid, False) for kid in reversed(kids))
                    continue
                args = out[len(out) - len(kids) :]
                del out[len(out) - len(kids) :]
                if isinstance(cur, Concat):
                    out.append(concat(args))
                elif isinstance(cur, Alt):
                    out.append(alt(args))
                else:
                    out.append(repeat(args[0], cur.min, cur.max))
            else:
                out.append(cur)
        return out[0]


def parse_lark(text: str, *, start: str = "start") -> Grammar:
    """Parse a Lark grammar (llguidance's dialect) into the grammar IR.

    Args:
        text: the grammar source.
        start: the start rule (``start`` unless given).

    Returns:
        A :class:`~formcast.ir.nodes.Grammar`: the grammar's rules and terminals in source
        order, then imported ``common`` terminals, anonymous terminals (named by their source
        text, e.g. ``'"("'``, ``'/[0-9]+/'``), the ``%ignore`` rule (:data:`IGNORE_RULE`) and rules
        synthesized for very deeply nested groups (``"<rule>::<n>"``).

    Raises:
        GrammarSyntaxError: malformed source, undefined or twice-defined names, a recursive
            terminal, a terminal naming a rule, a missing start rule (with line and column).
        UnsupportedFeatureError: a Lark or llguidance feature the IR cannot express (named).
        LimitExceededError: a regex over the compile limits.
    """
    parser = _LarkParser(text)
    try:
        return parser.build(start)
    except RecursionError:
        raise GrammarSyntaxError(
            "grammar nested too deeply to process", source=text, position=0
        ) from None
