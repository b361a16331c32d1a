"""Integers whose ``multipleOf`` is checked at run time: the marked rule and the arithmetic.

The minimal automaton of "multiples of ``M``" has one state per residue class (``1024``: 1024
classes; times the digit positions once intersected with the digit bound), so a large modulus
ran out of compile fuel.  Instead :func:`residue_number` emits such an integer as the *plain*
range automaton (bounds, excluded values, digit bound: what :func:`~.numbers.integer_range`
builds) in a rule of its own, *marked* (:class:`~formcast.ir.marks.UniqueItemsMark` with
``kind="residue"``), and the matcher's program
(:class:`~formcast.index.programs.residue.ResidueProgram`) tracks the digits read and keeps the
mask exact with :class:`ResidueSpec`:

* the integers the rule spells are a union of intervals ``S`` (the digit bound caps an
  unbounded side: ``10^D - 1``), so the completions of a digit prefix ``p`` of length ``t``
  more digits are the window ``[p·10^t, p·10^t + 10^t - 1]`` cut by ``S``, and a window
  ``[lo, hi]`` holds a multiple of ``M`` iff ``(-lo) mod M <= hi - lo``: :meth:`viable` is
  O(digits) big-integer steps, whatever ``M``;
* a window of ``10^t >= M`` values holds every residue, so while enough digits remain inside
  ``S`` every digit token is fine: :meth:`safe` says so for a whole token length at once, and
  only tokens near the digit bound or a bound of the range are simulated.

The mark is plain data: ``min_len`` is the modulus ``M`` (the ``lcm`` of the integer
``multipleOf`` values), ``trans[0]`` the signed intervals of ``S`` as ``(lo, hi, flags)``
triples (``flags`` bit 0: no lower bound, bit 1: no upper bound).

Lifetime: pure functions and immutable values (one :class:`ResidueSpec` per mark, built by the
program); the emitter memoizes one marked rule per (intervals, modulus).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction
from typing import Any, Protocol

from ...errors import LimitExceededError
from ...ir.marks import MARKED_RULE_PREFIX, UniqueItemsMark
from ...ir.nodes import NOTHING, Node, RuleRef, alt
from .algebra import int_bounds
from .nodes import SNum
from .numbers import (
    decimal_range,
    integer_range,
    multiple_modulus,
    multiple_of_dfa,
    split_decimal,
)

__all__ = [
    "RESIDUE_AUTOMATON_STATES",
    "ResidueSpec",
    "decimal_intervals",
    "decimal_ranges",
    "integer_intervals",
    "integer_ranges",
    "residue_mark_intervals",
    "residue_modulus",
    "residue_number",
]

Interval = tuple[int | None, int | None]

#: a modulus whose exact automaton (see :func:`~.numbers.multiple_of_dfa`) needs more states than
#: this is checked at run time; below it the automaton is small and costs nothing at run time
#: (``multipleOf: 7``: 7 classes x 3, ``10**9``: 10 classes x 3; ``13``, ``24``, ``128``: the
#: automaton took 0.15 s, 0.15 s, 0.5 s to compile, the run-time check 2 ms)
RESIDUE_AUTOMATON_STATES = 30
#: digits beyond which a bounded repeat becomes a counted rule (a sub-rule the program does not
#: follow): such a number keeps the automaton
_MAX_DIGITS = 60


class _Emits(Protocol):
    """What :func:`residue_number` uses of the emitter (:class:`.emit.Emitter`)."""

    marks: list[UniqueItemsMark] | None

    def _name(self, stem: str) -> str: ...

    def add_rule(self, name: str, body: Node, *, terminal: bool = False) -> None: ...


_MEMO: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Node]] = weakref.WeakKeyDictionary()


def _cap(a: int, max_digits: int | None) -> int | None:
    """The top of an unbounded side starting at ``a >= 0`` (as :func:`integer_range` spells
    it: ``a``'s own length is always allowed)."""
    if max_digits is None:
        return None
    return int(10 ** max(max_digits, len(str(a)))) - 1


def integer_intervals(
    ranges: Iterable[tuple[int | None, int | None]], max_digits: int | None
) -> list[Interval]:
    """The signed integer intervals spelled by ``alt(integer_range(lo, hi, max_digits) for lo,
    hi in ranges)`` (an unbounded side capped as :func:`integer_range` caps it; None only when
    ``max_digits`` is None).  O(ranges)."""
    out: list[Interval] = []
    for lo, hi in ranges:
        if lo is not None and hi is not None and lo > hi:
            continue
        if lo is None or lo < 0:  # -y, y in [y_lo, y_hi]
            y_lo = 1 if hi is None or hi >= 0 else -hi
            y_hi = _cap(y_lo, max_digits) if lo is None else -lo
            if y_hi is None or y_lo <= y_hi:
                out.append((None if y_hi is None else -y_hi, -y_lo))
        if hi is None or hi >= 0:
            a = max(lo, 0) if lo is not None else 0
            b = _cap(a, max_digits) if hi is None else hi
            if b is None or a <= b:
                out.append((a, b))
    return out


def _encode(intervals: list[Interval]) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    triples = tuple(
        (0 if a is None else a, 0 if b is None else b, (a is None) | (b is None) << 1)
        for a, b in intervals
    )
    return (triples,)


def residue_mark_intervals(mark: UniqueItemsMark) -> list[Interval]:
    """The signed intervals a ``kind="residue"`` mark carries (see the module docstring)."""
    if not mark.trans:
        return []
    return [(None if flags & 1 else a, None if flags & 2 else b) for a, b, flags in mark.trans[0]]


def _has_multiple(lo: int, hi: int | None, m: int) -> bool:
    return hi is None or (lo <= hi and (-lo) % m <= hi - lo)


class ResidueSpec:
    """The arithmetic of one marked number: modulus ``m`` and the numbers ``S`` it spells, as
    magnitude intervals per sign (``pos``: ``x >= 0``; ``neg``: ``x = -y``, ``y >= 1``).

    ``scale`` None: integers, ``S`` the integers themselves.  ``scale = j``: exponent-free
    decimals, a multiple of ``m / 10^j``; ``S`` is then given scaled, as the integers
    ``N = x·10^j`` (a multiple has at most ``j`` fraction digits, so only those ``N`` matter),
    and a spelling ``I.f`` reads as the digit string ``I f`` followed by ``j - len(f)``
    virtual digits.  Immutable after construction; every method is O(digits of the bounds and
    of ``m``)."""

    __slots__ = ("m", "neg", "pos", "scale", "t_m")

    def __init__(self, m: int, intervals: Iterable[Interval], scale: int | None = None) -> None:
        if m < 1:
            raise ValueError("the modulus must be positive")
        self.m = m
        self.scale = scale
        pos: list[tuple[int, int | None]] = []
        neg: list[tuple[int, int | None]] = []
        for lo, hi in intervals:
            if hi is None or hi >= 0:
                a = 0 if lo is None or lo < 0 else lo
                if hi is None or a <= hi:
                    pos.append((a, hi))
            if lo is None or lo < 0:
                top = -1 if hi is None or hi >= 0 else hi  # y in [-top, -lo]
                pos_lo = -top
                pos_hi = None if lo is None else -lo
                if pos_hi is None or pos_lo <= pos_hi:
                    neg.append((pos_lo, pos_hi))
        self.pos = tuple(pos)
        self.neg = tuple(neg)
        t = 0
        while 10**t < m:
            t += 1
        self.t_m = t  # the fewest free digits that reach every residue

    def nonempty(self) -> bool:
        """Whether ``S`` holds a multiple of ``m`` at all."""
        return any(_has_multiple(a, b, self.m) for a, b in (*self.pos, *self.neg))

    def complete(self, text: str) -> bool:
        """Whether the number spelled ``text`` (digits, a ``.`` and digits for a decimal;
        either sign) is a multiple."""
        if self.scale is None:
            return int(text) % self.m == 0
        i, _, f = text.partition(".")
        j = self.scale
        if f[j:].strip("0"):
            return False
        return int(i + f[:j].ljust(j, "0")) % self.m == 0

    def viable(self, neg: bool, text: str) -> bool:
        """Whether some number of ``S`` that is a multiple is spelled ``-`` (``neg``) then
        ``text`` then possibly more.  ``text`` is a prefix the range automaton allows
        (canonical: no leading zero but ``0`` itself)."""
        ivs = self.neg if neg else self.pos
        m = self.m
        if not text:
            return any(_has_multiple(a, b, m) for a, b in ivs)
        j = self.scale
        if j is None:
            if text[0] == "0":
                return len(text) == 1 and not neg and any(a <= 0 for a, _ in ivs)
            return _hit(int(text), 0, ivs, m)
        i, dot, f = text.partition(".")
        if i[0] == "0" and len(i) > 1:
            return False
        if not dot:  # the integer part goes on (not after a leading 0), then any fraction
            return _hit(int(i), j, ivs, m, j if i == "0" else None)
        if len(f) <= j:
            return _hit(int(i + f), j - len(f), ivs, m, j - len(f))
        if f[j:].strip("0"):
            return False
        return _hit(int(i + f[:j]), 0, ivs, m, 0)

    def safe(self, neg: bool, text: str, length: int) -> bool:
        """A sufficient condition for :meth:`viable` after *every* ``length`` more digits the
        range allows: some window of ``length + t`` more digits with ``10^t >= m`` (every
        residue) lies inside one interval of ``S`` (a decimal's integer part counts its
        ``scale`` virtual digits too).  False: decide token by token (always, in a
        fraction)."""
        if text == "0":
            return True  # nothing may follow a leading 0
        if text[:1] == "0" or "." in text:
            return False
        if not text and self.scale is not None and length == 1:
            return False  # (a decimal's ``0`` goes on into a fraction: decide it per token)
        j = self.scale or 0
        ivs = self.neg if neg else self.pos
        top = _top(ivs)
        extra = length + max(self.t_m - j, 0)
        while True:
            p10 = 10 ** (extra + j)
            if text:
                lo_w = int(text) * p10
                hi_w = lo_w + p10 - 1
            else:  # the whole number is still to come: every number of ``extra`` digits
                lo_w, hi_w = 10 ** (extra - 1 + j), p10 - 1
            if top is not None and lo_w > top:
                return False
            for a, b in ivs:
                if a <= lo_w and (b is None or hi_w <= b):
                    return True
            extra += 1


def _hit(
    p: int, t_from: int, ivs: tuple[tuple[int, int | None], ...], m: int, t_to: int | None = None
) -> bool:
    """Whether a window ``[p·10^t, p·10^t + 10^t - 1]`` with ``t_from <= t <= t_to`` (None:
    any larger) holds a multiple of ``m`` inside one of ``ivs``.  O(digits)."""
    top = _top(ivs)
    t = t_from
    p10 = 10**t
    while t_to is None or t <= t_to:
        lo_w = p * p10
        if top is not None and lo_w > top:
            return False
        hi_w = lo_w + p10 - 1
        for a, b in ivs:
            lo = max(a, lo_w)
            hi = hi_w if b is None else min(b, hi_w)
            if lo <= hi and (-lo) % m <= hi - lo:
                return True
        t += 1
        p10 *= 10
    return False


def _top(ivs: tuple[tuple[int, int | None], ...]) -> int | None:
    top = 0
    for _, b in ivs:
        if b is None:
            return None
        top = max(top, b)
    return top


def residue_modulus(multiples: Iterable[Fraction]) -> int:
    """The integer modulus of ``multipleOf`` values on integers: an integer is a multiple of
    ``p/q`` (lowest terms) iff it is a multiple of ``p``, and of all of them iff of the lcm."""
    out = 1
    for m in multiples:
        out = math.lcm(out, m.numerator)
    return out


def integer_ranges(s: SNum) -> list[tuple[int | None, int | None]]:
    """The integer ranges of an integer schema: its bounds split at its excluded values (the
    ranges the emitter spells with :func:`integer_range`).  O(excluded values)."""
    lo, hi = int_bounds(s)
    points = sorted({int(x) for x in s.excluded if x == x.to_integral_value()})
    ranges: list[tuple[int | None, int | None]] = []
    cur = lo
    for p in points:
        if (cur is None or p >= cur) and (hi is None or p <= hi):
            ranges.append((cur, p - 1))
            cur = p + 1
    ranges.append((cur, hi))
    return ranges


def decimal_ranges(s: SNum) -> list[tuple[Decimal | None, bool, Decimal | None, bool]]:
    """The ranges ``(lo, lo exclusive, hi, hi exclusive)`` of a number schema: its bounds
    split at its excluded values (the ranges the emitter spells with
    :func:`~.numbers.decimal_range`).  O(excluded values)."""
    intervals: list[tuple[Decimal | None, bool, Decimal | None, bool]] = [
        (s.lo, s.lo_excl, s.hi, s.hi_excl)
    ]
    for x in sorted(set(s.excluded)):
        nxt: list[tuple[Decimal | None, bool, Decimal | None, bool]] = []
        for a, ax, b, bx in intervals:
            inside = (a is None or x > a or (x == a and not ax)) and (
                b is None or x < b or (x == b and not bx)
            )
            if inside:
                nxt.append((a, ax, x, True))
                nxt.append((x, True, b, bx))
            else:
                nxt.append((a, ax, b, bx))
        intervals = nxt
    return intervals


def _scaled(
    lo: Decimal, lo_x: bool, hi: Decimal | None, hi_x: bool, j: int, max_int: int | None
) -> tuple[int, int | None] | None:
    """The integers ``N = x·10^j`` of the ``x`` with ``0 <= lo <(=) x <(=) hi`` that
    :func:`~.numbers.decimal_range` spells (an unbounded ``hi``: integer parts up to
    ``max_int`` digits, or the length of ``lo``'s integer part plus one)."""
    a = Fraction(lo) * 10**j
    n_lo = math.ceil(a)
    if lo_x and n_lo == a:
        n_lo += 1
    n_hi: int | None
    if hi is None:
        if max_int is None:
            n_hi = None
        else:
            width = max(max_int, len(str(split_decimal(lo)[0] + 1)))
            n_hi = 10 ** (width + j) - 1
    else:
        b = Fraction(hi) * 10**j
        n_hi = math.floor(b)
        if hi_x and n_hi == b:
            n_hi -= 1
    if n_hi is not None and n_hi < n_lo:
        return None
    return n_lo, n_hi


def decimal_intervals(
    ranges: Iterable[tuple[Decimal | None, bool, Decimal | None, bool]],
    j: int,
    max_int: int | None,
) -> list[Interval]:
    """The signed intervals of ``N = x·10^j`` over the numbers ``x`` spelled by
    ``alt(decimal_range(...) for ... in ranges)`` (``max_int`` as there).  O(ranges)."""
    out: list[Interval] = []
    zero = Decimal(0)
    for a, ax, b, bx in ranges:
        if b is None or b > 0 or (b == 0 and not bx):  # x >= 0
            lo, lo_x = (zero, False) if a is None or a < 0 else (a, ax)
            got = _scaled(lo, lo_x, b, bx, j, max_int)
            if got is not None:
                out.append(got)
        if a is None or a < 0:  # x = -y, y > 0
            y_lo, y_lo_x = (zero, True) if b is None or b >= 0 else (-b, bx)
            y_hi, y_hi_x = (None, False) if a is None else (-a, ax)
            got = _scaled(y_lo, y_lo_x, y_hi, y_hi_x, j, max_int)
            if got is not None:
                n_lo, n_hi = got
                out.append((None if n_hi is None else -n_hi, -n_lo))
    return out


def _lcm(multiples: Iterable[Fraction]) -> Fraction:
    """The least common multiple of positive rationals: ``x`` is a multiple of each iff of it."""
    num, den = 1, 0
    for m in multiples:
        num = math.lcm(num, m.numerator)
        den = math.gcd(den, m.denominator)
    return Fraction(num, den or 1)


def residue_number(
    em: _Emits, s: SNum, max_int: int | None, max_frac: int | None = None
) -> Node | None:
    """The marked rule of the number schema ``s`` (its ranges spelled by
    :func:`integer_range` or :func:`~.numbers.decimal_range` with the digit bounds) whose
    ``multipleOf`` is checked at run time; None when ``s`` is not such a number (no
    ``multipleOf``, a negated one, ``not: {type: integer}``), the emitter cannot carry marks,
    the exact automaton is small (at most :data:`RESIDUE_AUTOMATON_STATES`), or a digit count
    would make a counted rule.  NOTHING when no such number exists.  Cost: O(ranges + digits)
    plus the rule's IR, and the small automaton's attempt."""
    if em.marks is None or not s.multiples or s.non_multiples or s.non_integer:
        return None
    m = Fraction(residue_modulus(s.multiples)) if s.integer else _lcm(s.multiples)
    try:
        multiple_of_dfa(m, s.integer, RESIDUE_AUTOMATON_STATES)
        return None  # small: the automaton is exact and costs nothing at run time
    except LimitExceededError:
        pass
    for bound in (max_int, None if s.integer else max_frac):
        if bound is not None and bound > _MAX_DIGITS:
            return None
    body: Node
    scale: int | None
    if s.integer:
        modulus, scale = int(m), None
        ranges = integer_ranges(s)
        intervals = integer_intervals(ranges, max_int)
        body = alt(integer_range(a, b, max_int) for a, b in ranges)
    else:
        modulus, scale = multiple_modulus(m, False)
        dranges = decimal_ranges(s)
        intervals = decimal_intervals(dranges, scale, max_int)
        body = alt(
            decimal_range(a, ax, b, bx, max_int=max_int, max_frac=max_frac)
            for a, ax, b, bx in dranges
        )
    for lo, hi in intervals:
        for v in (lo, hi):
            if v is not None and len(str(abs(v))) > _MAX_DIGITS + (scale or 0):
                return None
    if not ResidueSpec(modulus, intervals, scale).nonempty():
        return NOTHING
    key = (tuple(intervals), modulus, scale, max_frac if scale is not None else None)
    memo = _MEMO.setdefault(em, {})
    got = memo.get(key)
    if got is not None:
        return got
    name = MARKED_RULE_PREFIX + em._name("num_mult")
    em.add_rule(name, body)
    em.marks.append(
        UniqueItemsMark(
            name,
            "#",  # (number schemas keep no pointer: the message names multipleOf)
            canonical=True,
            min_len=modulus,
            max_len=scale,
            trans=_encode(intervals),
            kind="residue",
        )
    )
    got = memo[key] = RuleRef(name)
    return got
