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
from fractions import Fraction
from typing import Any, Protocol

from ...errors import LimitExceededError
from ...ir.marks import MARKED_RULE_PREFIX, UniqueItemsMark
from ...ir.nodes import NOTHING, Node, RuleRef, alt
from .algebra import int_bounds
from .nodes import SNum
from .numbers import integer_range, multiple_of_dfa

__all__ = [
    "RESIDUE_AUTOMATON_STATES",
    "ResidueSpec",
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
    """The arithmetic of one marked integer: modulus ``m`` and the integers ``S`` it spells, as
    magnitude intervals per sign (``pos``: ``x >= 0``; ``neg``: ``x = -y``, ``y >= 1``).
    Immutable after construction; every method is O(digits of the bounds and of ``m``)."""

    __slots__ = ("m", "neg", "pos", "t_m")

    def __init__(self, m: int, intervals: Iterable[Interval]) -> None:
        if m < 1:
            raise ValueError("the modulus must be positive")
        self.m = m
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

    def complete(self, digits: str) -> bool:
        """Whether the number with these digits (either sign) is a multiple of ``m``."""
        return int(digits) % self.m == 0

    def viable(self, neg: bool, digits: str) -> bool:
        """Whether some integer of ``S`` that is a multiple of ``m`` is spelled ``-``
        (``neg``) then ``digits`` then possibly more digits.  ``digits`` is a prefix the range
        automaton allows (canonical: no leading zero but ``0`` itself)."""
        ivs = self.neg if neg else self.pos
        m = self.m
        if not digits:
            return any(_has_multiple(a, b, m) for a, b in ivs)
        if digits[0] == "0":
            return len(digits) == 1 and not neg and any(a <= 0 for a, _ in ivs)
        p = int(digits)
        top = _top(ivs)
        p10 = 1
        while True:
            lo_w = p * p10
            if top is not None and lo_w > top:
                return False
            hi_w = lo_w + p10 - 1
            for a, b in ivs:
                lo = max(a, lo_w)
                hi = hi_w if b is None else min(b, hi_w)
                if lo <= hi and (-lo) % m <= hi - lo:
                    return True
            p10 *= 10

    def safe(self, neg: bool, digits: str, length: int) -> bool:
        """A sufficient condition for :meth:`viable` after *every* ``length`` more digits the
        range allows: some window of ``length + t`` more digits with ``10^t >= m`` (every
        residue) lies inside one interval of ``S``.  False: decide token by token."""
        if digits == "0":
            return True  # nothing may follow a leading 0
        if digits[:1] == "0":
            return False
        ivs = self.neg if neg else self.pos
        top = _top(ivs)
        extra = length + self.t_m
        while True:
            if digits:
                p10 = 10**extra
                lo_w = int(digits) * p10
                hi_w = lo_w + p10 - 1
            else:  # the whole number is still to come: every number of ``extra`` digits
                lo_w, hi_w = 10 ** (extra - 1), 10**extra - 1
            if top is not None and lo_w > top:
                return False
            for a, b in ivs:
                if a <= lo_w and (b is None or hi_w <= b):
                    return True
            extra += 1


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


def residue_number(em: _Emits, s: SNum, max_digits: int | None) -> Node | None:
    """The marked rule of the integer schema ``s`` (its ranges spelled by
    :func:`integer_range` with ``max_digits``) whose ``multipleOf`` is checked at run time;
    None when ``s`` is not such an integer, the emitter cannot carry marks, the exact automaton
    is small (at most :data:`RESIDUE_AUTOMATON_STATES`), or a digit count would make a counted
    rule.  NOTHING when no such integer exists.  Cost: O(ranges + digits) plus the rule's IR,
    and the small automaton's attempt."""
    if em.marks is None or not s.integer or not s.multiples or s.non_multiples:
        return None
    m = residue_modulus(s.multiples)
    try:
        multiple_of_dfa(Fraction(m), True, RESIDUE_AUTOMATON_STATES)
        return None  # small: the automaton is exact and costs nothing at run time
    except LimitExceededError:
        pass
    ranges = integer_ranges(s)
    if max_digits is not None and max_digits > _MAX_DIGITS:
        return None
    intervals = integer_intervals(ranges, max_digits)
    for a, b in intervals:
        for v in (a, b):
            if v is not None and len(str(abs(v))) > _MAX_DIGITS:
                return None
    if not ResidueSpec(m, intervals).nonempty():
        return NOTHING
    key = (tuple(intervals), m)
    memo = _MEMO.setdefault(em, {})
    got = memo.get(key)
    if got is not None:
        return got
    name = MARKED_RULE_PREFIX + em._name("num_mult")
    em.add_rule(name, alt(integer_range(a, b, max_digits) for a, b in ranges))
    em.marks.append(
        UniqueItemsMark(
            name,
            "#",  # (number schemas keep no pointer: the message names multipleOf)
            canonical=True,
            min_len=m,
            trans=_encode(intervals),
            kind="residue",
        )
    )
    got = memo[key] = RuleRef(name)
    return got
