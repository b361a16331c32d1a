"""Exact languages of JSON numbers for ``minimum``/``maximum``/``exclusive*`` and ``multipleOf``.

Spellings produced (departures from "any JSON number" are documented in ``docs/json_schema.md``):

* an unconstrained ``number`` is any RFC 8259 number, exponents included (within the digit
  bounds below);
* an ``integer`` is ``-?(0|[1-9][0-9]*)`` (no fraction, no exponent, no ``-0``);
* a *constrained* ``number`` (a bound, ``multipleOf``, an exclusion) is written without an
  exponent: ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``; trailing zeros in the fraction are allowed.

Digit bounds (``JsonSchemaOptions.max_integer_digits`` / ``max_fraction_digits`` /
``max_exponent_digits``; ``None``: unbounded) cap the integer part, the fraction and the
exponent of every spelling, so that a model cannot pad a number (``1.000…``) until it runs out
of tokens.  :func:`digit_limits` raises them for a constrained number as far as the schema's own
numbers need: every bound, excluded value and ``multipleOf`` keeps a spelling, and so does a
value between any two of them.

:func:`integer_range` is the classic digit-range construction (for any size of integer, in time
linear in the number of digits); :func:`decimal_range` extends it to decimal bounds digit by
digit, comparing the fraction as a zero-padded digit string.  :func:`multiple_of_dfa` is a DFA
that tracks the value of the digits modulo ``M``; it is intersected with the range automaton
when both are present.

Lifetime: pure functions; work linear in the number of digits of the bounds, and in ``M`` for
``multipleOf``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal
from fractions import Fraction

from ...automata.charfa import CharDFA, Edge, minimize
from ...errors import LimitExceededError
from ...ir.nodes import EMPTY, NOTHING, CharSet, Literal, Node, alt, concat, literal, repeat
from ...limits import metered_cache

__all__ = [
    "ANY_INTEGER",
    "ANY_NUMBER",
    "any_integer",
    "any_number",
    "decimal_range",
    "digit_limits",
    "integer_range",
    "multiple_modulus",
    "multiple_of_dfa",
    "non_integer_node",
    "split_decimal",
]

DIGIT = CharSet(((0x30, 0x39),))
DIGIT19 = CharSet(((0x31, 0x39),))


def _digit_set(lo: int, hi: int) -> Node:
    if lo == hi:
        return Literal(str(lo))
    return CharSet(((0x30 + lo, 0x30 + hi),))


def _digits(lo: int, hi: int | None) -> Node:
    """``[0-9]{lo,hi}`` (``hi=None``: unbounded; ``hi < lo``: nothing)."""
    if hi is not None and hi < lo:
        return NOTHING
    return repeat(DIGIT, lo, hi)


def _unsigned_int(max_digits: int | None) -> Node:
    """``0|[1-9][0-9]*`` with at most ``max_digits`` digits."""
    if max_digits is not None and max_digits < 1:
        return NOTHING
    rest = None if max_digits is None else max_digits - 1
    return alt([literal("0"), concat([DIGIT19, _digits(0, rest)])])


def any_integer(max_digits: int | None = None) -> Node:
    """``-?(0|[1-9][0-9]*)`` with at most ``max_digits`` digits (None: unbounded)."""
    return concat([repeat(literal("-"), 0, 1), _unsigned_int(max_digits)])


@metered_cache(64)
def any_number(
    max_integer_digits: int | None = None,
    max_fraction_digits: int | None = None,
    max_exponent_digits: int | None = None,
) -> Node:
    """RFC 8259 numbers whose integer part, fraction and exponent have at most that many digits
    (None: unbounded; ``0`` fraction or exponent digits: no fraction or no exponent).
    Memoized (:func:`~formcast.limits.metered_cache`: every compile with the default options
    asks for the same one; a hit charges what a fresh build would)."""
    parts: list[Node] = [repeat(literal("-"), 0, 1), _unsigned_int(max_integer_digits)]
    if max_fraction_digits is None or max_fraction_digits > 0:
        parts.append(repeat(concat([literal("."), _digits(1, max_fraction_digits)]), 0, 1))
    if max_exponent_digits is None or max_exponent_digits > 0:
        exponent = concat(
            [
                CharSet.chars("eE"),
                repeat(CharSet.chars("+-"), 0, 1),
                _digits(1, max_exponent_digits),
            ]
        )
        parts.append(repeat(exponent, 0, 1))
    return concat(parts)


#: ``-?(0|[1-9][0-9]*)`` (unbounded)
ANY_INTEGER = any_integer()
_UNSIGNED_INT = _unsigned_int(None)
#: any RFC 8259 number (unbounded)
ANY_NUMBER = any_number()


def digit_limits(
    values: Iterable[Decimal | None],
    multiples: Iterable[Fraction],
    max_integer_digits: int | None,
    max_fraction_digits: int | None,
) -> tuple[int | None, int | None]:
    """The digit bounds of a constrained number: the configured ones, raised where the schema's
    own numbers need more.

    ``values`` are the bounds and excluded values, ``multiples`` the ``multipleOf`` values (kept
    or negated).  The integer bound becomes at least one more than the integer digits of any of
    them (the first multiple of ``m`` at or above a bound ``b`` is below ``b + m``), the fraction
    bound at least one more than their fraction digits (a value strictly between two bounds
    with ``k`` fraction digits, their mean, has ``k + 1``; a non-multiple of ``m`` needs one
    digit more than ``m``).  So a range that holds a value keeps one, and every number the
    schema names keeps its spelling.  None stays None (unbounded).
    """
    need_int = need_frac = 0
    for v in values:
        if v is None:
            continue
        i, f = split_decimal(abs(v))
        need_int = max(need_int, len(str(i)))
        need_frac = max(need_frac, len(f))
    for m in multiples:
        q, r = divmod(m.numerator, m.denominator)
        need_int = max(need_int, len(str(q)))
        if r:
            need_frac = max(need_frac, _modulus(m, False)[1])
    lim_int = None if max_integer_digits is None else max(max_integer_digits, need_int + 1)
    lim_frac = None if max_fraction_digits is None else max(max_fraction_digits, need_frac + 1)
    return lim_int, lim_frac


# -- integers -------------------------------------------------------------------------------------
def _same_length(x: str, y: str) -> Node:
    """Digit strings of ``len(x)`` digits between ``x`` and ``y`` (same length, ``x <= y``)."""
    if not x:
        return EMPTY
    n = len(x) - 1
    x0, y0 = int(x[0]), int(y[0])
    if x0 == y0:
        return concat([Literal(x[0]), _same_length(x[1:], y[1:])])
    low_full = all(c == "0" for c in x[1:])
    high_full = all(c == "9" for c in y[1:])
    parts: list[Node] = []
    start = x0
    if not low_full:
        parts.append(concat([Literal(x[0]), _same_length(x[1:], "9" * n)]))
        start = x0 + 1
    end = y0 if high_full else y0 - 1
    if start <= end:
        parts.append(concat([_digit_set(start, end), repeat(DIGIT, n, n)]))
    if not high_full:
        parts.append(concat([Literal(y[0]), _same_length("0" * n, y[1:])]))
    return alt(parts)


def _nonneg_int_range(a: int, b: int | None, max_digits: int | None = None) -> Node:
    """Canonical decimal strings of the integers in ``[a, b]`` (``a >= 0``; ``b=None``: ∞).

    ``max_digits`` caps the open end (``b=None``) only: ``a`` itself is always spelled.
    """
    if b is not None and b < a:
        return NOTHING
    la = len(str(a))
    parts: list[Node] = []
    top_len = len(str(b)) if b is not None else la
    for length in range(la, top_len + 1):
        lo = a if length == la else 10 ** (length - 1)
        hi = b if (b is not None and length == top_len) else 10**length - 1
        parts.append(_same_length(str(lo), str(hi)))
    if b is None:
        longer = _digits(la, None if max_digits is None else max_digits - 1)
        parts.append(concat([DIGIT19, longer]))
    return alt(parts)


def integer_range(lo: int | None, hi: int | None, max_digits: int | None = None) -> Node:
    """Canonical spellings (no ``-0``, no leading zeros) of the integers in ``[lo, hi]``.

    ``max_digits`` caps the digits on an unbounded side (``None``: no cap); a bound's own length
    always stays spellable (see :func:`digit_limits` for the cap a schema needs).
    """
    if lo is not None and hi is not None and lo > hi:
        return NOTHING
    parts: list[Node] = []
    if lo is None or lo < 0:  # negative part: -y with y in [max(1, -hi), -lo]
        y_lo = 1 if hi is None or hi >= 0 else -hi
        y_hi = None if lo is None else -lo
        if y_hi is None or y_lo <= y_hi:
            parts.append(concat([literal("-"), _nonneg_int_range(y_lo, y_hi, max_digits)]))
    if hi is None or hi >= 0:
        parts.append(_nonneg_int_range(max(lo, 0) if lo is not None else 0, hi, max_digits))
    return alt(parts)


# -- decimals -------------------------------------------------------------------------------------
def split_decimal(d: Decimal) -> tuple[int, str]:
    """A non-negative decimal as (integer part, fraction digits without trailing zeros)."""
    if d < 0:
        raise ValueError("split_decimal needs a non-negative value")
    _sign, digits, exp = d.normalize().as_tuple()
    assert isinstance(exp, int)
    text = "".join(str(x) for x in digits)
    if exp >= 0:
        return int(text + "0" * exp), ""
    k = -exp
    text = text.rjust(k + 1, "0")
    return int(text[:-k]), text[-k:].rstrip("0")


def _nonzero_digits(room: int | None) -> Node:
    """Digit strings of 1 to ``room`` digits that are not all zeros (``0.f > 0``)."""
    if room is None:
        return concat([repeat(DIGIT, 0, None), DIGIT19, repeat(DIGIT, 0, None)])
    # 0{p} [1-9] [0-9]{0, room-1-p}: the first non-zero digit at position p
    return alt(concat([literal("0" * p), DIGIT19, _digits(0, room - 1 - p)]) for p in range(room))


def _frac(a: str | None, sa: bool, b: str | None, sb: bool, room: int | None = None) -> Node:
    """Digit strings ``f`` (at least one digit, at most ``room``) with ``0.a <= 0.f <= 0.b``.

    ``a``/``b`` have no trailing zeros; None means no bound on that side; ``sa``/``sb`` make the
    comparison strict; ``room=None``: any number of digits.
    """
    if room is not None and room < 1:
        return NOTHING
    if a == "" and not sa:
        a = None
    if a is None and b is None:
        return _digits(1, room)
    if b == "":
        if sb or a is not None:
            return NOTHING
        return repeat(literal("0"), 1, room)
    if a == "" and b is None:  # 0.f > 0
        return _nonzero_digits(room)
    lo_d = int(a[0]) if a else 0
    hi_d = int(b[0]) if b is not None else 9
    rest_room = None if room is None else room - 1
    parts: list[Node] = []
    middle: list[int] = []
    for d in range(lo_d, hi_d + 1):
        on_lo = a is not None and d == lo_d
        on_hi = b is not None and d == hi_d
        if not on_lo and not on_hi:
            middle.append(d)
            continue
        na = (a[1:] if a else "") if on_lo else None
        nsa = sa if on_lo else False
        nb = b[1:] if (on_hi and b is not None) else None
        nsb = sb if on_hi else False
        empty_ok = (na is None or (na == "" and not nsa)) and (nb is None or not nsb or nb != "")
        rest = alt([EMPTY if empty_ok else NOTHING, _frac(na, nsa, nb, nsb, rest_room)])
        parts.append(concat([Literal(str(d)), rest]))
    if middle:
        parts.append(concat([_digit_set(middle[0], middle[-1]), _digits(0, rest_room)]))
    return alt(parts)


def _frac_part(a: str | None, sa: bool, b: str | None, sb: bool, room: int | None) -> Node:
    """The optional ``.digits`` part (at most ``room`` digits) for a fraction between ``0.a``
    and ``0.b``."""
    zero_ok = (a is None or (a == "" and not sa)) and (b is None or not sb or b != "")
    return alt([EMPTY if zero_ok else NOTHING, concat([literal("."), _frac(a, sa, b, sb, room)])])


def _nonneg_decimal(
    lo: Decimal,
    lo_x: bool,
    hi: Decimal | None,
    hi_x: bool,
    max_int: int | None = None,
    max_frac: int | None = None,
) -> Node:
    """Decimal spellings of ``x`` with ``0 <= lo <(=) x <(=) hi`` (digit caps as in
    :func:`decimal_range`)."""
    if hi is not None and (hi < lo or (hi == lo and (lo_x or hi_x))):
        return NOTHING
    i_lo, f_lo = split_decimal(lo)
    if hi is not None:
        i_hi, f_hi = split_decimal(hi)
        if i_lo == i_hi:
            return concat([Literal(str(i_lo)), _frac_part(f_lo, lo_x, f_hi, hi_x, max_frac)])
    parts = [concat([Literal(str(i_lo)), _frac_part(f_lo, lo_x, None, False, max_frac)])]
    mid_hi = None if hi is None else i_hi - 1
    if mid_hi is None or i_lo + 1 <= mid_hi:
        parts.append(
            concat(
                [
                    _nonneg_int_range(i_lo + 1, mid_hi, max_int),
                    _frac_part(None, False, None, False, max_frac),
                ]
            )
        )
    if hi is not None:
        parts.append(concat([Literal(str(i_hi)), _frac_part(None, False, f_hi, hi_x, max_frac)]))
    return alt(parts)


def decimal_range(
    lo: Decimal | None,
    lo_excl: bool,
    hi: Decimal | None,
    hi_excl: bool,
    *,
    max_int: int | None = None,
    max_frac: int | None = None,
) -> Node:
    """Exponent-free spellings of the numbers ``x`` with ``lo <(=) x <(=) hi`` (None: no bound).

    Negative zero (``-0``, ``-0.0``) is not produced.  ``max_frac`` caps the fraction digits of
    every spelling, ``max_int`` the integer digits on an unbounded side (None: no cap); use
    :func:`digit_limits` for caps that keep every value the bounds name.
    """
    parts: list[Node] = []
    # x >= 0
    if hi is None or hi > 0 or (hi == 0 and not hi_excl):
        if lo is None or lo < 0:
            parts.append(_nonneg_decimal(Decimal(0), False, hi, hi_excl, max_int, max_frac))
        else:
            parts.append(_nonneg_decimal(lo, lo_excl, hi, hi_excl, max_int, max_frac))
    # x < 0: x = -y with y > 0
    if lo is None or lo < 0:
        if hi is None or hi >= 0:
            y_lo, y_lo_x = Decimal(0), True
        else:
            y_lo, y_lo_x = -hi, hi_excl
        y_hi, y_hi_x = (None, False) if lo is None else (-lo, lo_excl)
        neg = _nonneg_decimal(y_lo, y_lo_x, y_hi, y_hi_x, max_int, max_frac)
        parts.append(concat([literal("-"), neg]))
    return alt(parts)


def non_integer_node() -> Node:
    """Exponent-free numbers with a non-zero fraction digit (the complement of integers)."""
    return concat(
        [
            repeat(literal("-"), 0, 1),
            _UNSIGNED_INT,
            literal("."),
            repeat(DIGIT, 0, None),
            DIGIT19,
            repeat(DIGIT, 0, None),
        ]
    )


# -- multipleOf -----------------------------------------------------------------------------------
def _modulus(m: Fraction, integer_only: bool) -> tuple[int, int]:
    """``(M, j)``: x is a multiple of m iff its digits up to the j-th decimal are ≡ 0 (mod M)."""
    a, b = m.numerator, m.denominator
    if integer_only:
        return a, 0
    u = v = 0
    while b % 2 == 0:
        b //= 2
        u += 1
    while b % 5 == 0:
        b //= 5
        v += 1
    if b != 1:  # pragma: no cover - schema numbers are finite decimals
        raise LimitExceededError("multipleOf", 0, f"multipleOf {m} has no finite decimal form")
    j = max(u, v)
    return a * 10**j // m.denominator, j


def multiple_modulus(m: Fraction, integer_only: bool) -> tuple[int, int]:
    """``(M, j)``: an exponent-free number is a multiple of ``m`` iff its digits up to the
    ``j``-th decimal (and none after) are a multiple of ``M`` (integers: ``j = 0``).  O(1)."""
    return _modulus(m, integer_only)


def _residue_classes(big_m: int) -> Callable[[int], tuple[int, ...]]:
    """A key of the residues ``v`` (mod ``big_m``) that is equal exactly when ``v`` and ``v'``
    have the same futures: for every digit string ``s`` of length ``t``, ``big_m`` divides
    ``v·10^t + s`` iff it divides ``v'·10^t + s``.

    Write ``big_m = 2^a·5^b·q`` with ``q`` prime to 10, ``k = max(a, b)``.  For ``t >= k`` the
    condition reads ``s ≡ -v·10^t (mod big_m)`` where ``v·10^t`` is 0 modulo ``2^a·5^b``: it
    depends on ``v mod q`` only.  For ``t < k`` the digit strings that complete ``v`` are the
    ``s < 10^t`` congruent to ``R_t = -v·10^t mod big_m``: determined by ``R_t`` when
    ``R_t < 10^t`` and empty otherwise.  So the key is ``(v mod q, R_0 or -1, ..., R_{k-1} or
    -1)``: multiples of ``10^k`` need ``k + 1`` classes where the residues need ``10^k``."""
    q, a, b = big_m, 0, 0
    while q % 2 == 0:
        q //= 2
        a += 1
    while q % 5 == 0:
        q //= 5
        b += 1
    k = max(a, b)

    def key(v: int) -> tuple[int, ...]:
        out = [v % q]
        for t in range(k):
            r = (-v * 10**t) % big_m
            out.append(r if r < 10**t else -1)
        return tuple(out)

    return key


def multiple_of_dfa(m: Fraction, integer_only: bool, max_states: int = 20_000) -> CharDFA:
    """DFA of the exponent-free number spellings that are multiples of ``m`` (> 0).

    With ``integer_only`` the spellings are integers; otherwise a fraction may follow and
    fraction digits beyond the ``j``-th must be zeros.  The states track the value read so far
    up to :func:`_residue_classes` (not the residue itself): ``multipleOf: 10000`` needs 5
    classes, not 10,000 residues; a modulus with a large power of 2 (``1024``) or a large part
    prime to 10 still needs one class per residue (that is the minimal automaton).
    """
    big_m, j = _modulus(m, integer_only)
    key = _residue_classes(big_m)
    classes: dict[tuple[int, ...], int] = {}  # class key -> class id
    reps: list[int] = []  # class id -> a residue of the class

    def cls(v: int) -> int:
        v %= big_m
        kv = key(v)
        got = classes.get(kv)
        if got is None:
            if len(classes) * (j + 3) > max_states:
                raise LimitExceededError(
                    "max_automaton_states",
                    max_states,
                    f"multipleOf {m} needs more than {len(classes)} residue classes modulo "
                    f"{big_m} (times the digit positions)",
                )
            got = classes[kv] = len(reps)
            reps.append(v)
        return got

    ids: dict[tuple[str, int, int], int] = {}
    trans: list[list[Edge]] = []
    accept: list[bool] = []
    work: list[tuple[str, int, int]] = []

    def sid(kind: str, k: int, r: int) -> int:
        c = cls(r)  # r: a residue; the state is keyed by its class
        key3 = (kind, k, c)
        got = ids.get(key3)
        if got is None:
            got = ids[key3] = len(accept)
            trans.append([])
            accept.append(False)
            work.append(key3)
        return got

    def pow10(e: int) -> int:
        return pow(10, e, big_m) if big_m > 1 else 0

    sid("start", 0, 0)
    while work:
        kind, k, c = work.pop()
        s = ids[(kind, k, c)]
        r = reps[c]
        row: list[tuple[int, int]] = []  # (code point, target)
        if kind in ("start", "neg"):
            if kind == "start":
                row.append((ord("-"), sid("neg", 0, 0)))
            row.append((ord("0"), sid("int", 0, 0)))
            for d in range(1, 10):
                row.append((0x30 + d, sid("int", 1, d % big_m)))
        elif kind == "int":
            accept[s] = (r * pow10(j)) % big_m == 0
            if k == 1:  # after a non-zero leading digit more digits may follow
                for d in range(10):
                    row.append((0x30 + d, sid("int", 1, (10 * r + d) % big_m)))
            if not integer_only:
                row.append((ord("."), sid("dot", 0, r)))
        elif kind == "dot":
            for d in range(10):
                if j >= 1:
                    row.append((0x30 + d, sid("frac", 1, (10 * r + d) % big_m)))
                elif d == 0:
                    row.append((0x30, sid("tail", 0, r)))
        elif kind == "frac":
            accept[s] = (r * pow10(j - k)) % big_m == 0
            for d in range(10):
                if k < j:
                    row.append((0x30 + d, sid("frac", k + 1, (10 * r + d) % big_m)))
                elif d == 0:
                    row.append((0x30, sid("tail", 0, r)))
        else:  # tail: only zeros
            accept[s] = r % big_m == 0
            row.append((0x30, s))
        row.sort()
        edges: list[Edge] = []
        for cp, t in row:
            if edges and edges[-1][2] == t and edges[-1][1] == cp - 1:
                edges[-1] = (edges[-1][0], cp, t)
            else:
                edges.append((cp, cp, t))
        trans[s] = edges
        if len(accept) > max_states:
            raise LimitExceededError("max_automaton_states", max_states, f"multipleOf {m}")
    return minimize(CharDFA(trans, accept))
