"""The run-time exactly-one ``oneOf`` check as plain data: written by the emitter into the
marked rule's :class:`~formcast.ir.marks.UniqueItemsMark` (``check``, JSON text) and rebuilt
from it by the matcher's program, in whatever process loads the grammar.

:func:`encode_check` writes the normalized branch nodes of an object's ``oneOf`` groups (every
node they reach, ``$ref`` targets and nested groups included) as one table of nodes; a
reference is an index into it, so a recursive schema is a cyclic table.  The text is a pure
function of the nodes (a frozenset is written sorted, props in their order): one schema
compiled twice writes the same text.  :class:`OneOfCheck` decodes it and runs the exact
instance check of :meth:`~.checks.InstanceChecks.accepts` on the table (an ``allOf`` of
pattern properties is checked as every matched schema accepting the value, which is what
their intersection accepts), so a check answers the same in the compiling process and in
any other.

Format (version 1): ``{"v": 1, "depth": limit, "nodes": [node...], "groups": [[branch...]...],
"top": [group...]}``; a node is a list whose first item names its kind (see
:func:`_node_json`); an ``arr`` node of an array told apart at run time has an eighth item,
its groups (absent otherwise, so texts written before arrays had groups read the same).

Lifetime: :func:`encode_check` is pure (cost: linear in the reachable nodes; it builds
definitions still deferred, as the check would on first use); a :class:`OneOfCheck` is
immutable after construction and thread-safe (cost: one instance check per branch).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ...errors import FormcastError, LimitExceededError, SerializationError, UnsupportedFeatureError
from . import formats as json_formats
from .nodes import (
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
from .regexlang import node_matches, pattern_node

__all__ = ["CHECK_VERSION", "OneOfCheck", "encode_check"]

#: bumped when the text's layout changes (a mark of another version is refused on load)
CHECK_VERSION = 1


def _json_value(v: Any) -> Any:
    """``v`` (a constant of the schema) as plain JSON: a Decimal becomes the int or float
    with the same value (refused when no float has it)."""
    if isinstance(v, Decimal):
        if v == v.to_integral_value():
            return int(v)
        f = float(v)
        if to_decimal(f) != v:
            raise UnsupportedFeatureError("oneOf", "", f"the constant {v} has no JSON float")
        return f
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    return v


def _dec(x: Any) -> Decimal | None:
    return None if x is None else Decimal(str(x))


def _frac(f: Fraction) -> str:
    return f"{f.numerator}/{f.denominator}"


def encode_check(groups: tuple[Any, ...], resolve: Callable[[str], S], depth_limit: int) -> str:
    """The JSON text of the check "every group of ``groups`` (each a
    :class:`~.oneof.OneOfGroup`: the ``branches`` of one ``oneOf``) has exactly one branch
    accepting the value"; ``resolve`` gives a reference's
    node (raises while one is still being built: the caller refuses).  A nested group (an
    object node's ``one_of``) is written once, by identity.  Deterministic."""
    nodes: list[Any] = []
    index: dict[int, int] = {}
    group_index: dict[int, int] = {}
    group_rows: list[Any] = []
    keep: list[Any] = []  # (the encoded objects stay alive: their ids stay unique)
    work: list[tuple[S, int]] = []

    def ref(s: S) -> int:
        got = index.get(id(s))
        if got is None:
            got = index[id(s)] = len(nodes)
            nodes.append(None)
            keep.append(s)
            work.append((s, got))
        return got

    def group(g: Any) -> int:
        got = group_index.get(id(g))
        if got is None:
            got = group_index[id(g)] = len(group_rows)
            group_rows.append(None)
            keep.append(g)
            group_rows[got] = [ref(b) for b in g.branches]
        return got

    def rule(r: Any) -> list[Any]:
        return [[[p, ref(x)] for p, x in r.patterns], ref(r.additional), sorted(r.exempt)]

    def node_json(s: S) -> list[Any]:
        if isinstance(s, SAny):
            return ["any"]
        if isinstance(s, SNothing):
            return ["nothing"]
        if isinstance(s, SNull):
            return ["null"]
        if isinstance(s, SBool):
            return ["bool"]
        if isinstance(s, SRef):
            return ["ref", ref(resolve(s.key))]
        if isinstance(s, SUnion):
            return ["union", [ref(x) for x in s.items]]
        if isinstance(s, SConst):
            return ["const", [_json_value(v) for v in s.values]]
        if isinstance(s, SNum):
            return [
                "num",
                s.integer,
                s.non_integer,
                None if s.lo is None else str(s.lo),
                s.lo_excl,
                None if s.hi is None else str(s.hi),
                s.hi_excl,
                [_frac(m) for m in s.multiples],
                [_frac(m) for m in s.non_multiples],
                [str(x) for x in s.excluded],
            ]
        if isinstance(s, SStr):
            return [
                "str",
                s.min_len,
                s.max_len,
                list(s.patterns),
                list(s.neg_patterns),
                list(s.formats),
                list(s.neg_formats),
                sorted(s.excluded),
            ]
        if isinstance(s, SArr):
            return [
                "arr",
                [ref(x) for x in s.prefix],
                ref(s.items),
                s.min_items,
                s.max_items,
                [[ref(c), lo, hi] for c, lo, hi in s.contains],
                s.unique,
                *([[group(t.group) for t in s.one_of]] if s.one_of else []),
            ]
        if isinstance(s, SObj):
            return [
                "obj",
                [[k, ref(x)] for k, x in s.props.items()],
                sorted(s.required),
                [rule(r) for r in s.rules],
                [ref(x) for x in s.names],
                s.min_props,
                s.max_props,
                [[sorted(w.excluded), rule(w.rule)] for w in s.witnesses],
                [group(t.group) for t in s.one_of],
            ]
        raise AssertionError(type(s).__name__)  # pragma: no cover

    top = [group(g) for g in groups]
    while work:
        s, i = work.pop()
        nodes[i] = node_json(s)
    doc = {"v": CHECK_VERSION, "depth": depth_limit, "nodes": nodes, "groups": group_rows}
    doc["top"] = top
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _bad(why: str) -> SerializationError:
    return SerializationError(f"a run-time oneOf check that cannot be read: {why}")


class OneOfCheck:
    """A decoded check (see the module docstring): ``check(text)`` is True when the JSON
    object spelled by ``text`` has, for every top group, exactly one branch accepting it.
    Immutable after construction, thread-safe; cost of a call: one instance check per
    branch of each group, linear in the value times the nodes' depth.

    Raises:
        SerializationError: ``payload`` is not a check of this version.
    """

    __slots__ = ("_depth", "_groups", "_nodes", "_top")

    def __init__(self, payload: str) -> None:
        try:
            doc = json.loads(payload)
        except (ValueError, RecursionError) as e:
            raise _bad(str(e)) from None
        if not isinstance(doc, dict) or doc.get("v") != CHECK_VERSION:
            raise _bad(f"not version {CHECK_VERSION}")
        try:
            raw_nodes = doc["nodes"]
            self._depth = int(doc["depth"])
            self._groups = tuple(tuple(self._index(i, raw_nodes) for i in g) for g in doc["groups"])
            self._top = tuple(self._gindex(i) for i in doc["top"])
            self._nodes = tuple(self._decode(n, raw_nodes) for n in raw_nodes)
        except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as e:
            raise _bad(f"{type(e).__name__}: {e}") from None

    @staticmethod
    def _index(i: Any, raw: list[Any]) -> int:
        if type(i) is not int or not 0 <= i < len(raw):
            raise ValueError(f"node index {i!r}")
        return i

    def _gindex(self, i: Any) -> int:
        if type(i) is not int or not 0 <= i < len(self._groups):
            raise ValueError(f"group index {i!r}")
        return i

    def _rule(self, r: Any, raw: list[Any]) -> tuple[Any, ...]:
        pats, additional, exempt = r
        return (
            tuple((str(p), self._index(x, raw)) for p, x in pats),
            self._index(additional, raw),
            frozenset(str(k) for k in exempt),
        )

    def _decode(self, n: Any, raw: list[Any]) -> tuple[Any, ...]:
        kind = n[0]
        ix = self._index
        if kind in ("any", "nothing", "null", "bool"):
            return (kind,)
        if kind == "ref":
            return (kind, ix(n[1], raw))
        if kind == "union":
            return (kind, tuple(ix(x, raw) for x in n[1]))
        if kind == "const":
            return (kind, tuple(n[1]))
        if kind == "num":
            return (
                kind,
                bool(n[1]),
                bool(n[2]),
                _dec(n[3]),
                bool(n[4]),
                _dec(n[5]),
                bool(n[6]),
                tuple(Fraction(str(m)) for m in n[7]),
                tuple(Fraction(str(m)) for m in n[8]),
                tuple(Decimal(str(x)) for x in n[9]),
            )
        if kind == "str":
            return (
                kind,
                int(n[1]),
                None if n[2] is None else int(n[2]),
                tuple(map(str, n[3])),
                tuple(map(str, n[4])),
                tuple(map(str, n[5])),
                tuple(map(str, n[6])),
                frozenset(map(str, n[7])),
            )
        if kind == "arr":
            return (
                kind,
                tuple(ix(x, raw) for x in n[1]),
                ix(n[2], raw),
                int(n[3]),
                None if n[4] is None else int(n[4]),
                tuple((ix(c, raw), int(lo), None if hi is None else int(hi)) for c, lo, hi in n[5]),
                bool(n[6]),
                tuple(self._gindex(g) for g in n[7]) if len(n) > 7 else (),
            )
        if kind == "obj":
            return (
                kind,
                {str(k): ix(x, raw) for k, x in n[1]},
                frozenset(map(str, n[2])),
                tuple(self._rule(r, raw) for r in n[3]),
                tuple(ix(x, raw) for x in n[4]),
                int(n[5]),
                None if n[6] is None else int(n[6]),
                tuple((frozenset(map(str, ex)), self._rule(r, raw)) for ex, r in n[7]),
                tuple(self._gindex(g) for g in n[8]),
            )
        raise ValueError(f"node kind {kind!r}")

    # -- the check ----------------------------------------------------------------------------
    def __call__(self, text: bytes) -> bool:
        """Whether the object spelled by ``text`` satisfies every top group (an undecodable
        or too deep text is refused, never accepted)."""
        try:
            value = json.loads(text)
            return all(self.exactly_one(g, value) for g in self._top)
        except (ValueError, RecursionError, FormcastError):
            return False

    def exactly_one(self, group: int, value: Any, depth: int = 0) -> bool:
        hits = 0
        for b in self._groups[group]:
            if self.accepts(b, value, depth + 1):
                hits += 1
                if hits > 1:
                    return False
        return hits == 1

    def _rule_accepts(self, rule: tuple[Any, ...], key: str, v: Any, depth: int) -> bool:
        pats, additional, exempt = rule
        if key in exempt:
            return True
        matched = [x for p, x in pats if node_matches(pattern_node(p), key)]
        if not matched:
            return self.accepts(additional, v, depth + 1)
        return all(self.accepts(x, v, depth + 1) for x in matched)

    def accepts(self, i: int, v: Any, depth: int = 0) -> bool:
        """Exact: is the JSON value ``v`` in the language of node ``i``?"""
        if depth > self._depth:
            raise LimitExceededError("max_ref_depth", self._depth, "checking a value")
        n = self._nodes[i]
        kind = n[0]
        if kind == "any":
            return True
        if kind == "nothing":
            return False
        if kind == "ref":
            return self.accepts(n[1], v, depth + 1)
        if kind == "union":
            return any(self.accepts(x, v, depth + 1) for x in n[1])
        if kind == "const":
            return any(json_equal(v, w) for w in n[1])
        if kind == "null":
            return v is None
        if kind == "bool":
            return isinstance(v, bool)
        if kind == "num":
            return _num_accepts(n, v)
        if kind == "str":
            return _str_accepts(n, v)
        if kind == "arr":
            return self._arr_accepts(n, v, depth)
        return self._obj_accepts(n, v, depth)

    def _arr_accepts(self, n: tuple[Any, ...], v: Any, depth: int) -> bool:
        _, prefix, items, lo, hi, contains, unique, groups = n
        if not isinstance(v, list):
            return False
        k = len(v)
        if k < lo or (hi is not None and k > hi):
            return False
        if not all(self.exactly_one(g, v, depth) for g in groups):
            return False
        for i, x in enumerate(v):
            if not self.accepts(prefix[i] if i < len(prefix) else items, x, depth + 1):
                return False
        for c, clo, chi in contains:
            m = sum(1 for x in v if self.accepts(c, x, depth + 1))
            if m < clo or (chi is not None and m > chi):
                return False
        if unique:
            for i in range(k):
                for j in range(i + 1, k):
                    if json_equal(v[i], v[j]):
                        return False
        return True

    def _obj_accepts(self, n: tuple[Any, ...], v: Any, depth: int) -> bool:
        _, props, required, rules, names, lo, hi, witnesses, groups = n
        if not isinstance(v, dict):
            return False
        k = len(v)
        if k < lo or (hi is not None and k > hi):
            return False
        if not required <= v.keys():
            return False
        if not all(self.exactly_one(g, v, depth) for g in groups):
            return False
        for excluded, rule in witnesses:
            if not any(
                key not in excluded and not self._rule_accepts(rule, key, x, depth)
                for key, x in v.items()
            ):
                return False
        for key, x in v.items():
            if key in props:
                if not self.accepts(props[key], x, depth + 1):
                    return False
                continue
            for nm in names:
                if not self.accepts(nm, key, depth + 1):
                    return False
            for rule in rules:
                if not self._rule_accepts(rule, key, x, depth):
                    return False
        return True


def _str_accepts(n: tuple[Any, ...], v: Any) -> bool:
    _, lo, hi, patterns, neg_patterns, formats, neg_formats, excluded = n
    if not isinstance(v, str):
        return False
    k = len(v)
    if k < lo or (hi is not None and k > hi):
        return False
    if v in excluded:
        return False
    for p in patterns:
        if not node_matches(pattern_node(p), v):
            return False
    for p in neg_patterns:
        if node_matches(pattern_node(p), v):
            return False
    for f in formats:
        fn = json_formats.format_node(f)
        if fn is None or not node_matches(fn, v):
            return False
    for f in neg_formats:
        fn = json_formats.format_node(f)
        if fn is None or node_matches(fn, v):
            return False
    return True


def _num_accepts(n: tuple[Any, ...], v: Any) -> bool:
    _, integer, non_integer, lo, lo_excl, hi, hi_excl, multiples, non_multiples, excluded = n
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, float) and not (v == v and abs(v) != float("inf")):
        return False
    d = to_decimal(v)
    is_int = d == d.to_integral_value()
    if integer and not is_int:
        return False
    if non_integer and is_int:
        return False
    if lo is not None and (d < lo or (lo_excl and d == lo)):
        return False
    if hi is not None and (d > hi or (hi_excl and d == hi)):
        return False
    f = Fraction(d)
    for m in multiples:
        if (f / m).denominator != 1:
            return False
    for m in non_multiples:
        if (f / m).denominator == 1:
            return False
    return all(d != x for x in excluded)
