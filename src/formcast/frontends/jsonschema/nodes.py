"""The normalized schema form between raw JSON Schema and the grammar IR.

A raw schema is normalized into a tree of these nodes: a union (``SUnion``) of per-type nodes
(``SNull``, ``SBool``, ``SNum``, ``SStr``, ``SArr``, ``SObj``), constant sets (``SConst``),
references to named definitions (``SRef``), ``SAny`` and ``SNothing``.  Every keyword has been
folded into the fields of one of them, which makes intersection (``allOf``), negation (``not``)
and emptiness checks (``oneOf`` disjointness, unsatisfiable schemas) local operations.

Nodes are never mutated after construction (fields are replaced with
:func:`dataclasses.replace`).  Identity, not structure, is used for hashing.

Also here: JSON value helpers (equality in the JSON Schema sense, where ``1 == 1.0`` but
``1 != true``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

__all__ = [
    "ANY",
    "NOTHING_S",
    "KeyRule",
    "S",
    "SAny",
    "SArr",
    "SBool",
    "SConst",
    "SNothing",
    "SNull",
    "SNum",
    "SObj",
    "SRef",
    "SStr",
    "SUnion",
    "Witness",
    "dedupe_values",
    "json_equal",
    "json_type",
    "to_decimal",
    "value_key",
]


class S:
    """Base class of normalized schema nodes."""

    __slots__ = ()


@dataclass(eq=False)
class SAny(S):
    """Every JSON value."""


@dataclass(eq=False)
class SNothing(S):
    """No JSON value."""


ANY = SAny()
NOTHING_S = SNothing()


@dataclass(eq=False)
class SNull(S):
    """``null``."""


@dataclass(eq=False)
class SBool(S):
    """``true`` or ``false``."""


@dataclass(eq=False)
class SNum(S):
    """Numbers.

    Attributes:
        integer: only integers (``type: integer``).
        non_integer: only numbers with a non-zero fraction (from ``not: {type: integer}``).
        lo, lo_excl, hi, hi_excl: bounds (None: unbounded).
        multiples: ``multipleOf`` values (all must hold).
        non_multiples: values the number must *not* be a multiple of (from ``not``).
        excluded: values the number must differ from (from ``not: {const: ...}``).
    """

    integer: bool = False
    non_integer: bool = False
    lo: Decimal | None = None
    lo_excl: bool = False
    hi: Decimal | None = None
    hi_excl: bool = False
    multiples: tuple[Fraction, ...] = ()
    non_multiples: tuple[Fraction, ...] = ()
    excluded: tuple[Decimal, ...] = ()

    def unconstrained(self) -> bool:
        return (
            not self.integer
            and not self.non_integer
            and self.lo is None
            and self.hi is None
            and not self.multiples
            and not self.non_multiples
            and not self.excluded
        )


@dataclass(eq=False)
class SStr(S):
    """Strings.

    Attributes:
        min_len, max_len: length bounds in code points.
        patterns: ECMA patterns that must match (search semantics).
        neg_patterns: patterns that must not match.
        formats: formats that must hold (already checked to be known).
        neg_formats: formats that must not hold.
        excluded: values the string must differ from.
    """

    min_len: int = 0
    max_len: int | None = None
    patterns: tuple[str, ...] = ()
    neg_patterns: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()
    neg_formats: tuple[str, ...] = ()
    excluded: frozenset[str] = frozenset()

    def content_free(self) -> bool:
        """True when only the length is constrained."""
        return not (
            self.patterns or self.neg_patterns or self.formats or self.neg_formats or self.excluded
        )


@dataclass(eq=False)
class SArr(S):
    """Arrays.

    Attributes:
        prefix: schemas of the first items.
        items: schema of every item after the prefix.
        min_items, max_items: length bounds.
        contains: ``(schema, min count, max count or None)`` triples; all must hold.
        unique: ``uniqueItems: true``.
        eval_prefix, eval_all: which items count as evaluated (``unevaluatedItems``).
        where: JSON pointer of the schema (for error messages).
        one_of: ``oneOf`` groups whose exactly-one is checked on the whole array at run time
            (:class:`~.oneof.OneOfTag`, as for objects; empty almost always).
    """

    prefix: tuple[S, ...] = ()
    items: S = ANY
    min_items: int = 0
    max_items: int | None = None
    contains: tuple[tuple[S, int, int | None], ...] = ()
    unique: bool = False
    eval_prefix: int = 0
    eval_all: bool = False
    where: str = ""
    one_of: tuple[Any, ...] = ()

    def at(self, i: int) -> S:
        return self.prefix[i] if i < len(self.prefix) else self.items


@dataclass(eq=False)
class KeyRule:
    """How one schema object constrains the values of keys it does not declare.

    For a key ``k`` that is not in the object node's ``props``: when ``k`` is in ``exempt``
    there is no constraint; otherwise the schemas of the ``patterns`` whose regex matches ``k``
    all apply, or ``additional`` applies when none matches.
    """

    patterns: tuple[tuple[str, S], ...] = ()
    additional: S = ANY
    exempt: frozenset[str] = frozenset()


@dataclass(eq=False)
class Witness:
    """ "Some member breaks ``rule``": the negation of an ``additionalProperties`` /
    ``patternProperties`` constraint.

    Holds when the object has a member ``(k, v)`` with ``k`` not in ``excluded`` (the keys the
    negated schema declared) whose value fails what ``rule`` requires of ``k``.
    """

    excluded: frozenset[str]
    rule: KeyRule


@dataclass(eq=False)
class SObj(S):
    """Objects.

    Attributes:
        props: declared keys in generation order → the full schema of their value (every rule
            of every merged schema already folded in).  A key whose schema is empty may not
            appear.
        required: keys that must appear (always a subset of ``props``).
        rules: constraints on undeclared keys (one per merged schema object).
        names: ``propertyNames`` schemas (every key must match all).
        min_props, max_props: member count bounds.
        eval_keys, eval_patterns, eval_all: which keys count as evaluated
            (``unevaluatedProperties``).
        where: JSON pointer of the schema (for error messages).
        declared: the keys listed in ``properties`` (they come first when merging, so that a
            ``required`` next to a ``$ref`` does not reorder the referenced properties).
        witnesses: members that must exist (from negated ``additionalProperties``).
        one_of: ``oneOf`` groups whose exactly-one is checked on the whole object at run time
            (:class:`~.oneof.OneOfGroup`: the value must match exactly one of its branches).
    """

    props: dict[str, S] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    rules: tuple[KeyRule, ...] = ()
    names: tuple[S, ...] = ()
    min_props: int = 0
    max_props: int | None = None
    eval_keys: frozenset[str] = frozenset()
    eval_patterns: tuple[str, ...] = ()
    eval_all: bool = False
    where: str = ""
    declared: tuple[str, ...] = ()
    witnesses: tuple[Witness, ...] = ()
    one_of: tuple[Any, ...] = ()


@dataclass(eq=False)
class SConst(S):
    """A finite set of JSON values (``enum``/``const``), deduplicated by JSON equality."""

    values: tuple[Any, ...]


@dataclass(eq=False)
class SUnion(S):
    """Any of the items (``anyOf``, type unions, distributed combinations)."""

    items: tuple[S, ...]


@dataclass(eq=False)
class SRef(S):
    """A named definition (a ``$ref`` target); emitted as a grammar rule."""

    key: str


# -- JSON values ----------------------------------------------------------------------------------
def json_type(v: Any) -> str:
    """The JSON Schema type name of a Python JSON value (``integer`` for integral numbers)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if math.isfinite(v) and v == int(v) else "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise TypeError(f"not a JSON value: {type(v).__name__}")


def to_decimal(v: Any) -> Decimal:
    """A JSON number as an exact Decimal (floats via their shortest repr: 0.1 → 0.1)."""
    if isinstance(v, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(v, int):
        return Decimal(v)
    if isinstance(v, float):
        return Decimal(repr(v))
    if isinstance(v, Decimal):
        return v
    raise TypeError(f"not a number: {v!r}")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, Decimal)) and not isinstance(v, bool)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values as JSON Schema defines it (``1 == 1.0``, ``1 != true``)."""
    if _is_num(a) and _is_num(b):
        return bool(to_decimal(a) == to_decimal(b))
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return False


def value_key(v: Any) -> str:
    """A canonical text for ``v``: equal keys iff the values are JSON-equal."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if _is_num(v):
        d = to_decimal(v).normalize()
        return "n" + (str(d) if d != 0 else "0")
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(value_key(x) for x in v) + "]"
    if isinstance(v, dict):
        items = sorted((json.dumps(k, ensure_ascii=False), value_key(x)) for k, x in v.items())
        return "{" + ",".join(f"{k}:{x}" for k, x in items) + "}"
    raise TypeError(f"not a JSON value: {type(v).__name__}")


def dedupe_values(values: list[Any] | tuple[Any, ...]) -> tuple[Any, ...]:
    """Values with JSON-equal duplicates removed (first occurrence kept)."""
    out: list[Any] = []
    seen: set[str] = set()
    for v in values:
        k = value_key(v)
        if k not in seen:
            seen.add(k)
            out.append(v)
    return tuple(out)
