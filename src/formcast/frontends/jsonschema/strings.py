"""From a language of *decoded* strings to the language of their JSON string literals.

JSON Schema constrains the decoded string (``pattern``, ``enum``, ``minLength``...), while the
grammar describes the JSON text.  Two encodings are used:

* **Canonical** (:func:`encode_node`, :func:`encode_text`), for every string whose content is
  constrained by a pattern, a format, an enum/const, a property name or an exclusion: each
  character is written exactly as ``json.dumps(s, ensure_ascii=False)`` writes it — ``\\"``,
  ``\\\\``, ``\\b \\f \\n \\r \\t`` for those controls, ``\\u00XX`` (lower-case hex) for the other
  controls below U+0020, every other scalar value as itself.  The encoding is one fixed string
  per character and prefix-free, so it maps a regular language to a regular language exactly
  (a homomorphism) and keeps keys comparable (``"a"`` and ``"\\u0061"`` cannot both appear).
* **Any escapes** (:func:`any_unit`), for strings constrained by length only (or not at all):
  one code point may be written literally or with any JSON escape (``\\/``, ``\\u00e9``, a
  surrogate pair ``\\ud83d\\ude00`` counted as one code point).  Lone surrogate escapes are not
  generated: they are not Unicode scalar values.

Lifetime: pure functions.
"""

from __future__ import annotations

import re

from ...ir.nodes import (
    NOTHING,
    Alt,
    CharSet,
    Concat,
    Literal,
    Node,
    Repeat,
    alt,
    concat,
    literal,
    merge_ranges,
    repeat,
)
from ...limits import metered_cache

__all__ = [
    "any_string_body",
    "any_unit",
    "encode_char",
    "encode_node",
    "encode_ranges",
    "encode_text",
    "quoted",
]

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Code points that are written as an escape in the canonical encoding.
SPECIAL = (*tuple(range(32)), 34, 92)


def encode_char(ch: str) -> str:
    """The canonical JSON spelling of one character (as ``json.dumps(ensure_ascii=False)``)."""
    got = _SHORT.get(ch)
    if got is not None:
        return got
    if ord(ch) < 0x20:
        return f"\\u{ord(ch):04x}"
    return ch


#: a character that :func:`encode_char` spells otherwise than itself
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def encode_text(text: str) -> str:
    """The canonical JSON spelling of a string's content (without the quotes)."""
    if _NEEDS_ESCAPE.search(text) is None:  # the usual key or value: spelt as itself
        return text
    return "".join(encode_char(c) for c in text)


def quoted(text: str) -> Node:
    """The literal ``"..."`` for ``text`` in canonical encoding."""
    return literal('"' + encode_text(text) + '"')


_SHORT_LETTER = {'"': '"', "\\": "\\", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}


def _escapes_node(specials: list[int]) -> Node:
    """The canonical escapes of the special code points ``specials``, as one compact node."""
    short = [_SHORT_LETTER[chr(c)] for c in specials if chr(c) in _SHORT_LETTER]
    by_nibble: dict[int, list[str]] = {}
    for c in specials:
        if chr(c) not in _SHORT_LETTER:
            by_nibble.setdefault(c >> 4, []).append(f"{c & 0xF:x}")
    branches: list[Node] = []
    if short:
        branches.append(CharSet.chars("".join(short)))
    if by_nibble:
        branches.append(
            concat(
                [
                    literal("u00"),
                    alt(
                        concat([literal(str(hi)), CharSet.chars("".join(lows))])
                        for hi, lows in sorted(by_nibble.items())
                    ),
                ]
            )
        )
    return concat([literal("\\"), alt(branches)])


@metered_cache(4096)
def _encode_ranges(ranges: tuple[tuple[int, int], ...]) -> Node:
    from ...automata.charfa import scalar_ranges

    ranges = scalar_ranges(ranges)
    plain: list[tuple[int, int]] = []
    specials: list[int] = []
    for lo, hi in ranges:
        cur = lo
        for sp in SPECIAL:
            if sp < cur or sp > hi:
                continue
            if sp > cur:
                plain.append((cur, sp - 1))
            specials.append(sp)
            cur = sp + 1
        if cur <= hi:
            plain.append((cur, hi))
    parts: list[Node] = []
    if plain:
        parts.append(CharSet.of(plain))
    if specials:
        parts.append(_escapes_node(specials))
    return alt(parts)


def _encode_charset(cs: CharSet) -> Node:
    return _encode_ranges(cs.ranges)


def encode_ranges(ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> Node:
    """The canonical spellings of one character from ``ranges`` (merged first)."""
    merged = merge_ranges(ranges)
    if len(merged) == 1 and merged[0][0] == merged[0][1]:
        return literal(encode_char(chr(merged[0][0])))
    return _encode_ranges(merged)


def _has_special(cs: CharSet) -> bool:
    """True when the set has a character that needs escaping (or a surrogate to cut out)."""
    return any(
        lo < 0x20 or lo <= 0x22 <= hi or lo <= 0x5C <= hi or (lo <= 0xDFFF and hi >= 0xD800)
        for lo, hi in cs.ranges
    )


def encode_node(node: Node) -> Node:
    """Map every character of a decoded-string language to its canonical JSON spelling."""
    return _encode_node(node, {})


def _encode_node(n: Node, memo: dict[int, Node]) -> Node:
    """:func:`encode_node` of ``n``, ``memo`` the results of the nodes met so far in the call
    (by ``id``).  A module function, not a closure: a recursive closure is a reference cycle
    (its cell holds it), freed only by the cyclic collector (docs/notes/ttfm37.md)."""
    k = id(n)
    got = memo.get(k)
    if got is not None:
        return got
    if isinstance(n, Literal):
        text = encode_text(n.text)
        out: Node = n if text == n.text else literal(text)
    elif isinstance(n, CharSet):
        out = _encode_charset(n) if _has_special(n) else n
        if isinstance(out, CharSet) and not out.ranges:
            out = NOTHING
    elif isinstance(n, (Concat, Alt)):
        items = [_encode_node(i, memo) for i in n.items]
        if all(a is b for a, b in zip(items, n.items)):
            out = n
        else:
            out = concat(items) if isinstance(n, Concat) else alt(items)
    elif isinstance(n, Repeat):
        item = _encode_node(n.item, memo)
        out = n if item is n.item else repeat(item, n.min, n.max)
    else:
        out = n  # Empty, Nothing, RuleRef (rule bodies are encoded separately)
    memo[k] = out
    return out


_HEX = CharSet.chars("0123456789abcdefABCDEF")
_HEX_NOT_D = CharSet.chars("0123456789abcefABCEF")


@metered_cache(1)
def any_unit() -> Node:
    """One decoded code point written literally or with any JSON escape (see module doc).
    Built once per process (IR nodes are immutable)."""
    plain = CharSet.of([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, 0x10FFFF)])
    short = concat([literal("\\"), CharSet.chars('"\\/bfnrt')])
    # \uXXXX that is not a surrogate: first hex digit not d/D, or d/D then 0-7
    bmp = concat(
        [
            literal("\\u"),
            alt(
                [
                    concat([_HEX_NOT_D, repeat(_HEX, 3, 3)]),
                    concat([CharSet.chars("dD"), CharSet.chars("01234567"), repeat(_HEX, 2, 2)]),
                ]
            ),
        ]
    )
    pair = concat(
        [
            literal("\\u"),
            CharSet.chars("dD"),
            CharSet.chars("89abAB"),
            repeat(_HEX, 2, 2),
            literal("\\u"),
            CharSet.chars("dD"),
            CharSet.chars("cdefCDEF"),
            repeat(_HEX, 2, 2),
        ]
    )
    return alt([plain, short, bmp, pair])


@metered_cache(256)
def any_string_body(lo: int = 0, hi: int | None = None) -> Node:
    """A JSON string literal (quotes included) of ``lo`` to ``hi`` code points, any escapes.
    Memoized (IR nodes are immutable)."""
    return concat([literal('"'), repeat(any_unit(), lo, hi), literal('"')])
