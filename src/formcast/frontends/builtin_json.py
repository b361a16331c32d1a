"""Built-in grammars, written directly as IR.

:func:`json_grammar` is any JSON text (RFC 8259): objects, arrays, strings, numbers, ``true``,
``false``, ``null``, with whitespace between tokens.

Rules (``ws`` is the whitespace between tokens, see the options)::

    json    ::= ws value ws                           # the start rule
    value   ::= "{" ( member ( "," member )* | ws ) "}"
              | "[" ( json ( "," json )* | ws ) "]"
              | STRING | NUMBER | "true" | "false" | "null"
    member  ::= ws STRING ws ":" json                 # (a node, not a rule)
    STRING  ::= '"' ( [^"\\\\\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* '"'
    NUMBER  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [+-]? [0-9]+ )?  # bounds below

A nested value is a call to ``json``, the value with the whitespace around it: RFC 8259's
``"[" ws (value (ws "," ws value)* ws)? "]"`` with each gap still one ``ws``, written so that
``json`` is the one recursive rule (one rule automaton; ``value`` is there for embedders, which
start from a value without the whitespace around it).  ``STRING`` and ``NUMBER`` are terminal
rules (lexemes).  :func:`json_grammar` can bound the
whitespace of one gap and the digits of a number's integer part, fraction and exponent;
:func:`builtin_json_grammar` (what ``GrammarCompiler.compile_builtin_json_grammar`` and
``generate(grammar="json")`` use) applies ``JsonSchemaOptions``' default bounds, so that a model
cannot spend its budget on whitespace or on ``1.000…``.  A string accepts every Unicode scalar
value except ``"``, ``\\`` and the control characters below U+0020 (U+007F is allowed, as RFC 8259
says); ``\\uXXXX`` accepts any four hex digits, lone surrogate escapes included (RFC 8259's
grammar allows them).

Lifetime: pure functions; each call builds a new, immutable :class:`Grammar`.
"""

from __future__ import annotations

from ..errors import ConfigurationError
from ..ir.nodes import CharSet, Grammar, Node, Rule, RuleRef, alt, concat, literal, repeat
from ._common import scalar_charset
from .jsonschema.numbers import any_number
from .jsonschema.options import JsonSchemaOptions

__all__ = ["BUILTIN_JSON_BOUNDS", "JSON_WS_CHARS", "builtin_json_grammar", "json_grammar"]

#: The four whitespace characters RFC 8259 allows between tokens.
JSON_WS_CHARS = " \t\n\r"

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


def _items(item: Node, ws: Node) -> Node:
    """``item ("," item)*`` or, for an empty container, whitespace alone."""
    return alt([concat([item, repeat(concat([literal(","), item]), 0, None)]), ws])


#: The bounds of :func:`builtin_json_grammar`.  Whitespace: at most 20 characters per gap, so
#: pretty-printed JSON keeps its layout (a newline and indentation to depth 9 at two spaces,
#: depth 4 at four; llama.cpp's ``json.gbnf`` allows a newline and 20) — the JSON Schema
#: default of 4 (``JsonSchemaOptions.max_whitespace``) has ``indent`` for layout, the built-in
#: grammar has none.  Numbers: ``JsonSchemaOptions``' digit defaults (integer part, fraction,
#: exponent).
BUILTIN_JSON_BOUNDS: dict[str, int | None] = {
    "max_ws": 20,
    "max_integer_digits": JsonSchemaOptions.max_integer_digits,
    "max_fraction_digits": JsonSchemaOptions.max_fraction_digits,
    "max_exponent_digits": JsonSchemaOptions.max_exponent_digits,
}


def _check_bound(name: str, value: int | None, lowest: int) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or value < lowest
    ):
        raise ConfigurationError(
            f"json_grammar({name}={value!r}) must be an int >= {lowest} or None"
        )


def json_grammar(
    whitespace: str = "flexible",
    max_ws: int | None = None,
    *,
    max_integer_digits: int | None = None,
    max_fraction_digits: int | None = None,
    max_exponent_digits: int | None = None,
) -> Grammar:
    """The grammar of one JSON value (RFC 8259), start rule ``json``.

    Args:
        whitespace: ``"flexible"`` — any run of ``[ \\t\\n\\r]`` between tokens and around the
            value (RFC 8259's ``ws``); ``"compact"`` — no whitespace at all.
        max_ws: with ``"flexible"``, the most whitespace characters allowed in any one gap
            (``None``: unbounded, which is what accepting every valid JSON text needs).  A bound
            keeps generation from spending its budget on whitespace.
        max_integer_digits, max_fraction_digits, max_exponent_digits: the most digits of a
            number's integer part (>= 1), fraction and exponent (>= 0; 0: none written);
            ``None``: unbounded.

    The default (flexible, all unbounded) accepts exactly the JSON texts of RFC 8259; see
    :func:`builtin_json_grammar` for the bounded one generation uses.

    Raises:
        ConfigurationError: an unknown ``whitespace`` mode, a negative ``max_ws``, or
            ``max_ws`` with ``"compact"``; a digit bound that is not None or an int in range.
    """
    _check_bound("max_integer_digits", max_integer_digits, 1)
    _check_bound("max_fraction_digits", max_fraction_digits, 0)
    _check_bound("max_exponent_digits", max_exponent_digits, 0)
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
    string = RuleRef("STRING")
    # A value inside an array or an object is a call to ``json`` (the value with the
    # whitespace around it), so ``json`` is the grammar's one recursive rule and the automaton
    # compiler builds one rule automaton.  (Written with ``object``, ``member`` and ``array``
    # rules, it kept four rules and expanded the value automaton into each.)  The same
    # language: ``"[" (json ("," json)* | ws) "]"`` is ``"[" ws (value (ws "," ws value)* ws)?
    # "]"``, each gap still one ``ws``.
    element = RuleRef("json")
    member = concat([ws, string, ws, literal(":"), element])
    rules = (
        Rule("json", concat([ws, RuleRef("value"), ws])),
        Rule(
            "value",
            alt(
                [
                    concat([literal("{"), _items(member, ws), literal("}")]),
                    concat([literal("["), _items(element, ws), literal("]")]),
                    string,
                    RuleRef("NUMBER"),
                    literal("true"),
                    literal("false"),
                    literal("null"),
                ]
            ),
        ),
        Rule("STRING", _string_body(), terminal=True),
        Rule(
            "NUMBER",
            any_number(max_integer_digits, max_fraction_digits, max_exponent_digits),
            terminal=True,
        ),
        Rule("ws", ws_body),
    )
    return Grammar(rules, "json")


def builtin_json_grammar() -> Grammar:
    """:func:`json_grammar` with flexible whitespace and :data:`BUILTIN_JSON_BOUNDS`: at most 20
    whitespace characters per gap, numbers of at most 20 integer, 20 fraction and 3 exponent
    digits (``JsonSchemaOptions``' digit defaults).  At a bound the mask allows no more
    whitespace or digits there: the value must go on or end."""
    b = BUILTIN_JSON_BOUNDS
    return json_grammar(
        "flexible",
        b["max_ws"],
        max_integer_digits=b["max_integer_digits"],
        max_fraction_digits=b["max_fraction_digits"],
        max_exponent_digits=b["max_exponent_digits"],
    )
