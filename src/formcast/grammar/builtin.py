"""Built-in grammars, written directly as IR.

:func:`json_grammar` is any JSON text (RFC 8259): objects, arrays, strings, numbers, ``true``,
``false``, ``null``, with whitespace between tokens.

Rules (``ws`` is the whitespace between tokens, see the options)::

    json    ::= ws value ws                           # the start rule
    value   ::= object | array | STRING | NUMBER | "true" | "false" | "null"
    object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
    member  ::= STRING ws ":" ws value
    array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
    STRING  ::= '"' ( [^"\\\\\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* '"'
    NUMBER  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [+-]? [0-9]+ )?

``STRING`` and ``NUMBER`` are terminal rules (lexemes).  A string accepts every Unicode scalar
value except ``"``, ``\\`` and the control characters below U+0020 (U+007F is allowed, as RFC 8259
says); ``\\uXXXX`` accepts any four hex digits, lone surrogate escapes included (RFC 8259's
grammar allows them).

Lifetime: pure functions; each call builds a new, immutable :class:`Grammar`.
"""

from __future__ import annotations

from ..errors import ConfigurationError
from ._frontend import scalar_charset
from .ir import (
    CharSet,
    Grammar,
    Node,
    Rule,
    RuleRef,
    alt,
    concat,
    literal,
    repeat,
)

__all__ = ["JSON_WS_CHARS", "json_grammar"]

#: The four whitespace characters RFC 8259 allows between tokens.
JSON_WS_CHARS = " \t\n\r"

_DIGIT = CharSet(((0x30, 0x39),))
_HEX = CharSet.chars("0123456789abcdefABCDEF")


def _string_body() -> Node:
    # any scalar value but '"', '\\' and the controls below U+0020 (surrogates are cut out)
    plain = scalar_charset([(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)], negate=True)
    escape = concat(
        [
            literal("\\"),
            alt([CharSet.chars('"\\/bfnrt'), concat([literal("u"), repeat(_HEX, 4, 4)])]),
        ]
    )
    return concat([literal('"'), repeat(alt([plain, escape]), 0, None), literal('"')])


def _number_body() -> Node:
    integer = alt([literal("0"), concat([CharSet(((0x31, 0x39),)), repeat(_DIGIT, 0, None)])])
    fraction = concat([literal("."), repeat(_DIGIT, 1, None)])
    exponent = concat(
        [
            CharSet.chars("eE"),
            repeat(CharSet.chars("+-"), 0, 1),
            repeat(_DIGIT, 1, None),
        ]
    )
    return concat(
        [
            repeat(literal("-"), 0, 1),
            integer,
            repeat(fraction, 0, 1),
            repeat(exponent, 0, 1),
        ]
    )


def json_grammar(whitespace: str = "flexible", max_ws: int | None = None) -> Grammar:
    """The grammar of one JSON value (RFC 8259), start rule ``json``.

    Args:
        whitespace: ``"flexible"`` — any run of ``[ \\t\\n\\r]`` between tokens and around the
            value (RFC 8259's ``ws``); ``"compact"`` — no whitespace at all.
        max_ws: with ``"flexible"``, the most whitespace characters allowed in any one gap
            (``None``: unbounded, which is what accepting every valid JSON text needs).  A bound
            keeps generation from spending its budget on whitespace.

    The default (flexible, unbounded) accepts exactly the JSON texts of RFC 8259.

    Raises:
        ConfigurationError: an unknown ``whitespace`` mode, a negative ``max_ws``, or
            ``max_ws`` with ``"compact"``.
    """
    if whitespace not in ("flexible", "compact"):
        raise ConfigurationError(
            f"json_grammar(whitespace={whitespace!r}): use 'flexible' or 'compact'"
        )
    if max_ws is not None:
        if isinstance(max_ws, bool) or not isinstance(max_ws, int) or max_ws < 0:
            raise ConfigurationError(f"json_grammar(max_ws={max_ws!r}) must be an int >= 0 or None")
        if whitespace == "compact":
            raise ConfigurationError("json_grammar: max_ws only applies to whitespace='flexible'")
    if whitespace == "compact":
        ws_body: Node = literal("")
    else:
        ws_body = repeat(CharSet.chars(JSON_WS_CHARS), 0, max_ws)
    ws = RuleRef("ws")
    value = RuleRef("value")
    string = RuleRef("STRING")
    member = RuleRef("member")
    rules = (
        Rule("json", concat([ws, value, ws])),
        Rule(
            "value",
            alt(
                [
                    RuleRef("object"),
                    RuleRef("array"),
                    string,
                    RuleRef("NUMBER"),
                    literal("true"),
                    literal("false"),
                    literal("null"),
                ]
            ),
        ),
        Rule(
            "object",
            concat(
                [
                    literal("{"),
                    ws,
                    repeat(
                        concat(
                            [
                                member,
                                repeat(concat([ws, literal(","), ws, member]), 0, None),
                                ws,
                            ]
                        ),
                        0,
                        1,
                    ),
                    literal("}"),
                ]
            ),
        ),
        Rule("member", concat([string, ws, literal(":"), ws, value])),
        Rule(
            "array",
            concat(
                [
                    literal("["),
                    ws,
                    repeat(
                        concat(
                            [
                                value,
                                repeat(concat([ws, literal(","), ws, value]), 0, None),
                                ws,
                            ]
                        ),
                        0,
                        1,
                    ),
                    literal("]"),
                ]
            ),
        ),
        Rule("STRING", _string_body(), terminal=True),
        Rule("NUMBER", _number_body(), terminal=True),
        Rule("ws", ws_body),
    )
    return Grammar(rules, "json")
