"""Checks of JSON values: the raw schema is JSON (:func:`check_json`), strings have a UTF-8
form (:func:`check_utf8_value`), and the exact instance check of a normalized node
(:meth:`InstanceChecks.accepts`, used to filter ``enum``/``const`` values when they are
intersected with other keywords).

Lifetime: :func:`check_json` and :func:`check_utf8_value` are pure and iterative (any depth is
safe), linear in the value; :class:`InstanceChecks` is a layer of the one
:class:`~.normalize.Normalizer` of a compile, and a check costs the size of the value times the
node's depth.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from ...errors import ConfigurationError, LimitExceededError, UnsupportedFeatureError
from . import formats as json_formats
from .nodes import (
    KeyRule,
    S,
    SAny,
    SArr,
    SBool,
    SConst,
    SNothing,
    SNull,
    SNum,
    SObj,
    SRef,
    SStr,
    SUnion,
    json_equal,
    to_decimal,
)
from .refs import Ctx, Definitions, Pending, escape_pointer, printable
from .regexlang import node_matches, pattern_node

__all__ = ["InstanceChecks", "check_json", "check_utf8_value", "lone_surrogate"]


def _pointer(path: tuple[str | int, ...]) -> str:
    return "#" + "".join("/" + escape_pointer(str(s)) for s in path)


def check_json(schema: Any) -> None:
    """Raise :class:`ConfigurationError` naming the JSON pointer of the first part of
    ``schema`` that is not JSON: a key that is not a string, a value of another Python type
    (set, tuple, bytes, Decimal...), NaN or an infinity (``json.loads`` reads ``NaN`` and
    ``Infinity``, but they have no JSON spelling, so no output could be one).  Iterative: any
    depth is safe."""
    # the path to a value is a linked list ``(parent's link, key)`` (None: the root), spelt
    # out only for an error: no path tuple copied per value
    stack: list[tuple[Any, Any]] = [(schema, None)]
    while stack:
        v, link = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise ConfigurationError(
                        f"invalid schema at {_pointer(_unlink(link))}: the key {k!r} is a "
                        f"{type(k).__name__}, not a string (JSON object keys are strings)"
                    )
                if type(x) is not str:  # (a string is JSON: not pushed)
                    stack.append((x, (link, k)))
        elif isinstance(v, list):
            stack.extend((x, (link, i)) for i, x in enumerate(v) if type(x) is not str)
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ConfigurationError(
                    f"invalid schema at {_pointer(_unlink(link))}: {v!r} is not a JSON number "
                    "(NaN and the infinities have no JSON spelling)"
                )
        elif not isinstance(v, (str, int)) and v is not None:  # (bool is an int)
            raise ConfigurationError(
                f"invalid schema at {_pointer(_unlink(link))}: a {type(v).__name__} is not a "
                "JSON value"
            )


def _unlink(link: Any) -> tuple[str | int, ...]:
    """The path of a :func:`check_json` link, root first."""
    out: list[str | int] = []
    while link is not None:
        link, key = link
        out.append(key)
    return tuple(reversed(out))


#: a surrogate code point (in a Python string, always a lone one: it has no UTF-8 form)
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def check_utf8_value(v: Any, where: str, feature: str) -> None:
    """Fail closed on a string (or key) of ``v`` with a lone surrogate: it has no UTF-8 form,
    so it could only be written as a ``\\uXXXX`` escape, which formcast never generates."""
    stack = [v]
    while stack:
        x = stack.pop()
        texts: list[str] = []
        if isinstance(x, str):
            texts = [x]
        elif isinstance(x, dict):
            texts = list(x)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
        if any(lone_surrogate(s) for s in texts):
            raise UnsupportedFeatureError(
                feature,
                printable(where),
                "a string with a lone surrogate has no UTF-8 form (JSON text can only spell it "
                "as a \\u escape, which formcast does not generate)",
            )


class InstanceChecks(Definitions):
    """Exact instance checks of normalized nodes (a layer of :class:`~.normalize.Normalizer`)."""

    def rule_effect(self, rule: KeyRule, key: str) -> S:
        """What ``rule`` requires of the value of an undeclared ``key``
        (:class:`~.algebra.Algebra`)."""
        raise NotImplementedError  # pragma: no cover

    # -- value check --------------------------------------------------------------------------
    def accepts(self, s: S, v: Any, ctx: Ctx | None, depth: int = 0) -> bool:
        """Exact: is the JSON value ``v`` in the language of ``s``?"""
        if depth > self.options.max_ref_depth + 200:
            raise LimitExceededError(
                "max_ref_depth", self.options.max_ref_depth, "checking a value"
            )
        if isinstance(s, SAny):
            return True
        if isinstance(s, SNothing):
            return False
        if isinstance(s, SRef):
            try:
                target = self.resolve(s.key)
            except Pending:
                raise UnsupportedFeatureError(
                    "enum/const", ctx.pointer if ctx else "", "checked against a recursive $ref"
                ) from None
            return self.accepts(target, v, ctx, depth + 1)
        if isinstance(s, SUnion):
            return any(self.accepts(i, v, ctx, depth + 1) for i in s.items)
        if isinstance(s, SConst):
            return any(json_equal(v, w) for w in s.values)
        if isinstance(s, SNull):
            return v is None
        if isinstance(s, SBool):
            return isinstance(v, bool)
        if isinstance(s, SNum):
            return _num_accepts(s, v)
        if isinstance(s, SStr):
            return self._str_accepts(s, v)
        if isinstance(s, SArr):
            return self._arr_accepts(s, v, ctx, depth)
        if isinstance(s, SObj):
            return self._obj_accepts(s, v, ctx, depth)
        raise AssertionError(type(s).__name__)  # pragma: no cover

    def _str_accepts(self, s: SStr, v: Any) -> bool:
        if not isinstance(v, str):
            return False
        n = len(v)
        if n < s.min_len or (s.max_len is not None and n > s.max_len):
            return False
        if v in s.excluded:
            return False
        for p in s.patterns:
            if not node_matches(pattern_node(p), v):
                return False
        for p in s.neg_patterns:
            if node_matches(pattern_node(p), v):
                return False
        for f in s.formats:
            fn = json_formats.format_node(f)
            if fn is None or not node_matches(fn, v):
                return False
        for f in s.neg_formats:
            fn = json_formats.format_node(f)
            if fn is None or node_matches(fn, v):
                return False
        return True

    def _arr_accepts(self, s: SArr, v: Any, ctx: Ctx | None, depth: int) -> bool:
        if not isinstance(v, list):
            return False
        n = len(v)
        if n < s.min_items or (s.max_items is not None and n > s.max_items):
            return False
        if not all(g.exactly_one(v) for g in s.one_of):  # (run-time oneOf, oneof.py)
            return False
        if not all(self.accepts(s.at(i), x, ctx, depth + 1) for i, x in enumerate(v)):
            return False
        for c, lo, hi in s.contains:
            k = sum(1 for x in v if self.accepts(c, x, ctx, depth + 1))
            if k < lo or (hi is not None and k > hi):
                return False
        if s.unique:
            for i in range(n):
                for j in range(i + 1, n):
                    if json_equal(v[i], v[j]):
                        return False
        return True

    def _obj_accepts(self, s: SObj, v: Any, ctx: Ctx | None, depth: int) -> bool:
        if not isinstance(v, dict):
            return False
        n = len(v)
        if n < s.min_props or (s.max_props is not None and n > s.max_props):
            return False
        if not s.required <= v.keys():
            return False
        if not all(g.exactly_one(v) for g in s.one_of):  # (run-time oneOf, oneof.py)
            return False
        for w in s.witnesses:
            if not any(
                k not in w.excluded
                and not self.accepts(self.rule_effect(w.rule, k), x, ctx, depth + 1)
                for k, x in v.items()
            ):
                return False
        for k, x in v.items():
            if k in s.props:
                if not self.accepts(s.props[k], x, ctx, depth + 1):
                    return False
                continue
            for nm in s.names:
                if not self.accepts(nm, k, ctx, depth + 1):
                    return False
            for rule in s.rules:
                if not self.accepts(self.rule_effect(rule, k), x, ctx, depth + 1):
                    return False
        return True


def _num_accepts(s: SNum, v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, float) and not math.isfinite(v):
        return False
    d = to_decimal(v)
    is_int = d == d.to_integral_value()
    if s.integer and not is_int:
        return False
    if s.non_integer and is_int:
        return False
    if s.lo is not None and (d < s.lo or (s.lo_excl and d == s.lo)):
        return False
    if s.hi is not None and (d > s.hi or (s.hi_excl and d == s.hi)):
        return False
    f = Fraction(d)
    for m in s.multiples:
        if (f / m).denominator != 1:
            return False
    for m in s.non_multiples:
        if (f / m).denominator == 1:
            return False
    return all(d != x for x in s.excluded)
