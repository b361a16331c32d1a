"""Lower Unicode code point ranges to UTF-8 byte-range sequences.

``utf8_sequences(lo, hi)`` yields lists of ``(byte_lo, byte_hi)`` pairs such that the byte strings
matched by the concatenation of those ranges are exactly the UTF-8 encodings of ``lo..hi``
(surrogates excluded).  The split follows the classic construction (as in RE2 / regex-syntax):
split at encoded-length boundaries, then at continuation-byte boundaries until each piece is a
product of byte ranges.

Complexity: at most a few dozen sequences per range; O(1) per sequence.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["utf8_sequences"]

_LEN_BOUNDS = (0x7F, 0x7FF, 0xFFFF)


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8")


def utf8_sequences(lo: int, hi: int) -> Iterator[list[tuple[int, int]]]:
    """Yield byte-range sequences covering the UTF-8 encodings of code points ``lo..hi``."""
    stack: list[tuple[int, int]] = [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        if lo > hi:
            continue
        if lo <= 0xDFFF and hi >= 0xD800:  # remove surrogates
            stack.append((0xE000, hi))
            stack.append((lo, 0xD7FF))
            continue
        split = False
        for bound in _LEN_BOUNDS:
            if lo <= bound < hi:
                stack.append((bound + 1, hi))
                stack.append((lo, bound))
                split = True
                break
        if split:
            continue
        if hi <= 0x7F:
            yield [(lo, hi)]
            continue
        for i in (1, 2, 3):
            m = (1 << (6 * i)) - 1
            if lo & ~m != hi & ~m:
                if lo & m != 0:
                    stack.append(((lo | m) + 1, hi))
                    stack.append((lo, lo | m))
                    split = True
                    break
                if hi & m != m:
                    stack.append((hi & ~m, hi))
                    stack.append((lo, (hi & ~m) - 1))
                    split = True
                    break
        if split:
            continue
        a, b = _encode(lo), _encode(hi)
        yield list(zip(a, b, strict=True))
