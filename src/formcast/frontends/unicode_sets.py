"""Unicode character classes (``\\d``, ``\\w``, ``\\s``, ``\\p{..}``) as code point ranges.

Python's ``re`` gives ``\\d``/``\\w``/``\\s`` their Unicode meaning for ``str`` patterns; the ECMA
dialect (JSON Schema ``pattern``) uses ASCII ``\\d``/``\\w`` and its own whitespace set.

Lifetime: process-wide; each table is computed once on first use (one pass over the code points,
~0.3 s) and cached.
"""

from __future__ import annotations

import unicodedata
from functools import cache
from typing import Any

from ..errors import UnsupportedFeatureError
from ..ir.nodes import MAX_CODEPOINT, merge_ranges

__all__ = ["case_closure", "category_ranges", "class_ranges"]

Ranges = tuple[tuple[int, int], ...]

_ECMA_SPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def _runs(pred: object) -> Ranges:
    out: list[tuple[int, int]] = []
    start = -1
    test = pred  # a callable on str
    for cp in range(MAX_CODEPOINT + 1):
        ok = False if 0xD800 <= cp <= 0xDFFF else bool(test(chr(cp)))  # type: ignore[operator]
        if ok and start < 0:
            start = cp
        elif not ok and start >= 0:
            out.append((start, cp - 1))
            start = -1
    if start >= 0:
        out.append((start, MAX_CODEPOINT))
    return tuple(out)


@cache
def _python_class(letter: str) -> Ranges:
    """Python ``re``'s Unicode class: from the generated table when the Unicode version matches."""
    from . import _unicode_tables as tables

    if unicodedata.unidata_version == tables.UNIDATA_VERSION:
        found: Ranges = {"d": tables.CLASS_D, "w": tables.CLASS_W, "s": tables.CLASS_S}[letter]
        return found
    return _compute_python_class(letter)


def _compute_python_class(letter: str) -> Ranges:
    if letter == "d":
        return _runs(str.isdecimal)
    if letter == "w":
        return _runs(lambda c: c.isalnum() or c == "_")
    if letter == "s":
        return _runs(str.isspace)
    raise KeyError(letter)


def class_ranges(letter: str, dialect: str) -> Ranges:
    """Ranges of the class escape ``\\<letter>`` (``d``, ``w``, ``s``; upper case negates)."""
    base = letter.lower()
    if dialect == "ascii":  # Python's (?a): ASCII \d \w and \s = [ \t\n\r\f\v]
        if base == "s":
            r: Ranges = merge_ranges((ord(c), ord(c)) for c in " \t\n\r\f\v")
        elif base == "d":
            r = ((0x30, 0x39),)
        else:
            r = merge_ranges([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
    elif dialect == "ecma":
        if base == "d":
            r = ((0x30, 0x39),)
        elif base == "w":
            r = merge_ranges([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
        else:
            r = merge_ranges((ord(c), ord(c)) for c in _ECMA_SPACE)
    else:
        r = _python_class(base)
    if letter.isupper():
        return _negate(r)
    return r


def _negate(ranges: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return tuple(out)


_CATEGORY_ALIASES = {
    "Letter": "L",
    "Lowercase_Letter": "Ll",
    "Uppercase_Letter": "Lu",
    "Titlecase_Letter": "Lt",
    "Modifier_Letter": "Lm",
    "Other_Letter": "Lo",
    "Mark": "M",
    "Number": "N",
    "Decimal_Number": "Nd",
    "Letter_Number": "Nl",
    "Other_Number": "No",
    "Punctuation": "P",
    "Symbol": "S",
    "Separator": "Z",
    "Space_Separator": "Zs",
    "Other": "C",
    "Control": "Cc",
}


@cache
def _all_categories() -> dict[str, Ranges]:
    buckets: dict[str, list[tuple[int, int]]] = {}
    prev_cat = ""
    start = 0
    for cp in range(MAX_CODEPOINT + 2):
        if cp > MAX_CODEPOINT:
            cat = ""
        elif 0xD800 <= cp <= 0xDFFF:
            cat = "Cs"
        else:
            cat = unicodedata.category(chr(cp))
        if cat != prev_cat:
            if prev_cat:
                buckets.setdefault(prev_cat, []).append((start, cp - 1))
            prev_cat = cat
            start = cp
    out: dict[str, Ranges] = {k: merge_ranges(v) for k, v in buckets.items()}
    for major in "LMNPSZC":
        out[major] = merge_ranges(r for k, v in out.items() if k[0] == major for r in v)
    return out


def category_ranges(name: str, where: str = "") -> Ranges:
    """Ranges of a Unicode general category (``L``, ``Lu``, ``Letter``, ``Nd``...)."""
    key = _CATEGORY_ALIASES.get(name, name)
    if key.startswith("gc=") or key.startswith("General_Category="):
        key = _CATEGORY_ALIASES.get(key.split("=", 1)[1], key.split("=", 1)[1])
    cats = _all_categories()
    if key in ("Any",):
        return ((0, 0xD7FF), (0xE000, MAX_CODEPOINT))
    if key not in cats:
        raise UnsupportedFeatureError(
            f"\\p{{{name}}}", where, "only Unicode general categories are supported"
        )
    return tuple(r for r in cats[key] if not (r[0] >= 0xD800 and r[1] <= 0xDFFF))


@cache
def _case_pairs() -> tuple[tuple[int, int], ...]:
    """All pairs of code points that ``re`` matches case-insensitively, both directions.

    ``re`` compares simple lowercase mappings (``_sre.unicode_tolower``) plus a table of extra
    equivalences (``re._casefix``); both are used when available, else ``str.lower``/``upper``.
    """
    pairs: set[tuple[int, int]] = set()
    try:
        import _sre

        tolower = _sre.unicode_tolower
    except (ImportError, AttributeError):  # pragma: no cover - non-CPython
        tolower = None
    by_lower: dict[int, list[int]] = {}
    for cp in range(MAX_CODEPOINT + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if tolower is not None:
            lo = tolower(cp)
            by_lower.setdefault(lo, []).append(cp)
            continue
        c = chr(cp)  # pragma: no cover - fallback
        for v in (c.lower(), c.upper(), c.casefold()):
            if len(v) == 1 and v != c:
                pairs.add((cp, ord(v)))
                pairs.add((ord(v), cp))
    for group in by_lower.values():
        for a in group:
            for b in group:
                if a != b:
                    pairs.add((a, b))
    try:
        import importlib

        casefix: Any = importlib.import_module("re._casefix")
        for lo, extras in casefix._EXTRA_CASES.items():
            for group_member in by_lower.get(lo, [lo]):
                for e in extras:
                    for other in by_lower.get(e, [e]):
                        pairs.add((group_member, other))
                        pairs.add((other, group_member))
    except (ImportError, AttributeError):  # pragma: no cover - other Python versions
        pass
    return tuple(sorted(pairs))


def case_closure(ranges: Ranges) -> Ranges:
    """Close a set of code points under simple case mapping (for case-insensitive matching).

    Iterates to a fixpoint, so chains like U+017F (long s) → S → s are covered.  The pair table
    (about 3k entries) is computed once per process.
    """
    import bisect

    current = merge_ranges(ranges)
    pairs = _case_pairs()
    while True:
        los = [lo for lo, _ in current]

        def inside(cp: int, cur: Ranges = current, starts: list[int] = los) -> bool:
            i = bisect.bisect_right(starts, cp) - 1
            return i >= 0 and cur[i][0] <= cp <= cur[i][1]

        extra = [(v, v) for cp, v in pairs if inside(cp) and not inside(v)]
        if not extra:
            return current
        current = merge_ranges(list(current) + extra)
