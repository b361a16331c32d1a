"""Set algebra on normalized nodes: union, intersection, negation, emptiness, disjointness.

* Intersection (:meth:`Algebra.conj`) distributes over unions, filters constant sets with the
  exact value check (:meth:`~.checks.InstanceChecks.accepts`) and merges same-type nodes field
  by field (:func:`_merge_num`, :func:`_merge_str`, ``_merge_arr``, ``_merge_obj``); a ``$ref``
  still being normalized (recursion) is merged lazily, as a definition of its own.
* Negation (:meth:`Algebra.negate`: ``not``, ``if`` without the matching branch, exact
  ``oneOf``) is built per type from the node's atomic constraints; anything it cannot negate
  exactly fails closed.
* Emptiness (:meth:`Algebra.is_empty`) is exact for numbers and strings (string automata,
  :mod:`.strings_dfa`) and conservative ("maybe not empty") elsewhere.

Every operation charges the compile's fuel (:func:`~formcast.limits.charge`).

Lifetime: a layer of the one :class:`~.normalize.Normalizer` of a compile; the module-level
functions are pure.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction
from typing import Any

from ...errors import (
    CompileBudgetError,
    GrammarError,
    LimitExceededError,
    UnsupportedFeatureError,
)
from ...ir.nodes import Nothing
from ...limits import charge
from . import formats as json_formats
from .checks import InstanceChecks
from .nodes import (
    ANY,
    NOTHING_S,
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
    Witness,
    json_equal,
    to_decimal,
)
from .oneof import (
    merge_tags,
    runtime_alternatives,
    runtime_array_alternatives,
    whole_objects,
)
from .options import JsonSchemaOptions
from .refs import Ctx, Pending
from .regexlang import node_matches, pattern_node, restrict_length
from .strings_dfa import string_dfa

__all__ = [
    "Algebra",
    "IntegerValue",
    "all_kinds",
    "int_bounds",
    "mark_all_evaluated",
    "num_empty",
    "others",
    "strip_eval",
    "tighten",
    "whole_kind",
]


class _ProofTooLong(Exception):
    """A disjointness proof took too much work (the branches are then treated as overlapping)."""


#: conj() calls one ``oneOf`` disjointness proof may make: past it the proof answers "maybe
#: overlapping" (exact, only less precise).  A cap on one proof, not a compile budget: every
#: step is also charged to the compile's fuel (:func:`~formcast.limits.charge`).
_DISJOINT_STEPS = 2_000


def _value_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def whole_kind(kind: str) -> S:
    return {
        "null": SNull(),
        "boolean": SBool(),
        "number": SNum(),
        "string": SStr(),
        "array": SArr(),
        "object": SObj(),
    }[kind]


def _kind(s: S) -> str | None:
    if isinstance(s, SNull):
        return "null"
    if isinstance(s, SBool):
        return "boolean"
    if isinstance(s, SNum):
        return "number"
    if isinstance(s, SStr):
        return "string"
    if isinstance(s, SArr):
        return "array"
    if isinstance(s, SObj):
        return "object"
    return None


def others(kind: str) -> list[S]:
    return [
        whole_kind(k)
        for k in ("null", "boolean", "number", "string", "array", "object")
        if k != kind
    ]


class Algebra(InstanceChecks):
    """Union, intersection, negation and emptiness of normalized nodes (a layer of
    :class:`~.normalize.Normalizer`)."""

    def __init__(self, options: JsonSchemaOptions) -> None:
        super().__init__(options)
        self._ref_depth = 0
        self._proof_steps: int | None = None  # conj() calls left for a disjointness proof
        #: conj() results by the identity of its operands (kept alive here, so ids stay
        #: unique): an allOf chain or a $ref merged into many objects repeats the same merges
        self._conj_memo: dict[tuple[int, int], tuple[S, S, S]] = {}
        #: set while a ``oneOf`` is retried with run-time checks: the object part of a negated
        #: member value becomes one run-time checked object (:meth:`_negate_member`)
        self._runtime_values = False

    def _rule_patterns(self, rule: KeyRule, key: str) -> S:
        """The conjunction of the pattern schemas of ``rule`` whose pattern matches ``key``."""
        out: S = ANY
        for p, sub in rule.patterns:
            if node_matches(pattern_node(p), key):
                out = sub if isinstance(out, SAny) else self.conj(out, sub, None)
        return out

    def rule_effect(self, rule: KeyRule, key: str) -> S:
        """What ``rule`` requires of the value of an undeclared ``key``."""
        if key in rule.exempt:
            return ANY
        matched = [sub for p, sub in rule.patterns if node_matches(pattern_node(p), key)]
        if not matched:
            return rule.additional
        return self.conj_all(matched, None)

    def _names_gate(self, names: tuple[S, ...], key: str, ctx: Ctx | None) -> S:
        for n in names:
            if not self.accepts(n, key, ctx):
                return NOTHING_S
        return ANY

    def _key_effect(self, obj: SObj, key: str, ctx: Ctx | None) -> S:
        """The schema an object node imposes on the value of ``key`` (declared or not)."""
        if key in obj.props:
            return obj.props[key]
        out = self._names_gate(obj.names, key, ctx)
        for rule in obj.rules:
            if isinstance(out, SNothing):
                break
            out = self.conj(out, self.rule_effect(rule, key), ctx)
        return out

    def _negate_or_fail(self, s: S, ctx: Ctx, keyword: str) -> S:
        try:
            return self.negate(s, ctx)
        except Pending:
            self.unsupported(keyword, ctx.pointer, "negation of a recursive $ref")
            return ANY
        except UnsupportedFeatureError as e:
            if self.options.lenient:
                self.ignored.append(f"{keyword} at {ctx.pointer} ({e})")
                return ANY
            raise

    # -- oneOf --------------------------------------------------------------------------------
    def one_of(
        self,
        branches: list[S],
        ctx: Ctx,
        context: Callable[[], tuple[S, S]] | None = None,
    ) -> S:
        """``oneOf`` of ``branches``: exactly one matches.

        ``context`` gives ``(pre, post)``, what the same schema object's other keywords require
        (before and after ``oneOf`` in the object; called only when branches may overlap; the
        caller still intersects the result with them): two
        branches that only overlap outside them need no exclusion, and the exclusions are built
        inside them.  Branches that overlap are split by JSON type (the types partition the
        values, so ``oneOf`` is the union over each type of the ``oneOf`` of the branches
        restricted to it) and branch ``i`` becomes ``Bi ∧ ¬Bj`` for every ``Bj`` it overlaps,
        with ``¬Bj`` built within that type and impossible alternatives pruned as they appear.
        Exact; fails closed naming ``oneOf`` where a negation cannot be built (or grows past
        ``max_union``), unless ``oneof_as_anyof``."""
        n = len(branches)
        overlapping = any(
            not self.disjoint(branches[i], branches[j], ctx)
            for i in range(n)
            for j in range(i + 1, n)
        )
        if not overlapping:
            return self.union(branches)
        pre: S = ANY
        post: S = ANY
        try:
            pre, post = context() if context is not None else (ANY, ANY)
            return self._one_of_by_kind(branches, ctx, pre, post)
        except CompileBudgetError:
            raise
        except (UnsupportedFeatureError, Pending, LimitExceededError) as e:
            if self.options.oneof_as_anyof:
                self.ignored.append(f"oneOf at {ctx.pointer} compiled as anyOf")
                return self.union(branches)
            # (the message, not the exception: a local holding an exception whose traceback
            # holds this frame is a reference cycle, the failed attempt's frames with it,
            # freed only by the cyclic collector; docs/notes/ttfm37.md)
            err = str(e)
            saved = self._runtime_values
            self._runtime_values = True
            try:  # objects told apart at run time (oneof.py), the rest exact
                return self._one_of_by_kind(branches, ctx, pre, post, runtime=True)
            except CompileBudgetError:
                raise
            except (UnsupportedFeatureError, Pending, LimitExceededError) as e2:
                if isinstance(e2, UnsupportedFeatureError) and e2.feature == "oneOf":
                    err = str(e2)
            finally:
                self._runtime_values = saved
            hint = (
                "its branches may overlap and their exact exclusion cannot be built "
                f"({err}); set JsonSchemaOptions(oneof_as_anyof=True) to accept any branch"
            )
            self.unsupported("oneOf", ctx.pointer, hint)
            return self.union(branches)

    def _one_of_by_kind(
        self, branches: list[S], ctx: Ctx, pre: S, post: S, *, runtime: bool = False
    ) -> S:
        """The exact ``oneOf`` (see :meth:`one_of`), one JSON type at a time.  ``runtime``:
        objects whose exclusion cannot be built are told apart at run time
        (:func:`.oneof.runtime_alternatives`)."""
        out: list[S] = []
        kinds = [self._kinds(b) for b in branches]
        for kind in all_kinds():
            whole = whole_kind(kind)
            within = self.conj(self.conj(pre, whole, ctx), post, ctx)
            if self.is_empty(within):
                continue
            restricted: list[S] = []
            per_branch: list[list[S]] = []
            for b, ks in zip(branches, kinds, strict=True):
                if ks is not None and kind not in ks:
                    per_branch.append([])
                    continue
                r = self._pruned(self.conj(self.conj(pre, b, ctx), post, ctx), whole, ctx)
                if not self.is_empty(r):
                    restricted.append(r)
                per_branch.append([] if self.is_empty(r) else list(self._alts(r)))
            if runtime and kind in ("object", "array"):
                size = len(out)
                try:
                    self._one_of_restricted(restricted, kind, ctx, out)
                    continue
                except CompileBudgetError:
                    raise
                except (UnsupportedFeatureError, Pending, LimitExceededError):
                    del out[size:]
                if kind == "object":
                    out.extend(runtime_alternatives(self, branches, per_branch, ctx))
                else:
                    out.extend(runtime_array_alternatives(self, branches, per_branch, ctx))
                continue
            self._one_of_restricted(restricted, kind, ctx, out)
        return self.union(out)

    def _alts(self, s: S) -> tuple[S, ...]:
        top = self._top(s, 0)
        if top is None:
            return (s,)
        return top.items if isinstance(top, SUnion) else (top,)

    def _one_of_restricted(self, restricted: list[S], kind: str, ctx: Ctx, out: list[S]) -> None:
        """Appends to ``out`` the exact ``oneOf`` of ``restricted`` (the branches within
        ``kind``)."""
        m = len(restricted)
        for i in range(m):
            acc = restricted[i]
            ovs = [
                j
                for j in range(m)
                if j != i and not self.disjoint(restricted[i], restricted[j], ctx)
            ]
            tagged = self._negate_tagged([restricted[j] for j in ovs], ctx, acc)
            if tagged is not None:
                out.append(self._pruned(acc, tagged, ctx))
                continue
            for j in ovs:
                neg = self._negate_within(restricted[j], kind, ctx, restricted[i])
                acc = self._pruned(acc, neg, ctx)
                if isinstance(acc, SNothing):
                    break
            out.append(acc)

    def _negate_tagged(self, others: list[S], ctx: Ctx, given: S) -> S | None:
        """``¬(B1 ∨ ... ∨ Bn)`` as a sum, when the ``Bj`` are objects that each require a member
        ``k`` with constant values, pairwise disjoint (a discriminator): an object whose ``k``
        has ``Bj``'s values matches no other ``Bl``, so the complement is "``k`` absent or
        another value" or, for some ``j``, "``k`` has ``Bj``'s values and ``¬Bj``" — n terms
        where the product of the n negations has exponentially many.  None when there is no
        such member (or fewer than two branches)."""
        if len(others) < 2:
            return None
        objs: list[SObj] = []
        for o in others:
            t = self._top(o, 0)
            if not isinstance(t, SObj):
                return None
            objs.append(t)
        common = set.intersection(*(set(o.required) for o in objs))
        for k in sorted(common):
            consts = [self._top(o.props.get(k, ANY), 0) for o in objs]
            if not all(isinstance(c, SConst) for c in consts):
                continue
            values = [v for c in consts if isinstance(c, SConst) for v in c.values]
            if any(json_equal(a, b) for i, a in enumerate(values) for b in values[i + 1 :]):
                continue  # two branches share a value: not a discriminator
            parts: list[S] = [
                SObj(props={k: NOTHING_S}),
                SObj(
                    props={k: self._negate_const(SConst(tuple(values)), ctx.pointer)},
                    required=frozenset([k]),
                ),
            ]
            for o, c in zip(objs, consts, strict=True):
                assert isinstance(c, SConst)
                tag = SObj(props={k: c}, required=frozenset([k]))
                parts.append(self._pruned(tag, self._negate_within(o, "object", ctx, given), ctx))
            return self.union(parts)
        return None

    def _negate_within(self, s: S, kind: str, ctx: Ctx, given: S, depth: int = 0) -> S:
        """The values of type ``kind`` that ``s`` does not match (no annotations), up to what
        ``given`` excludes: an alternative whose intersection with ``given`` is certainly empty
        may be left out (the caller intersects the result with ``given``)."""
        whole = whole_kind(kind)
        top = self._top(s, 0)
        if top is not None and not isinstance(top, SRef):
            s = top
        items = s.items if isinstance(s, SUnion) else (s,)
        g = self._top(given, 0)
        gitems = (g.items if isinstance(g, SUnion) else (g,)) if g is not None else ()
        same_objs = [x for x in gitems if isinstance(x, SObj)]
        if not gitems or len(same_objs) != len(gitems):
            same_objs = []
        # every given array is uniqueItems: "some item repeated" is no alternative there
        unique_given = bool(gitems) and all(isinstance(x, SArr) and x.unique for x in gitems)
        acc: S = whole
        for item in items:
            if _kind(item) not in (None, kind) and not isinstance(item, SConst):
                continue  # another type: excludes nothing of this one
            if isinstance(item, SObj) and same_objs:
                neg = self._negate_obj_given(item, same_objs, ctx)
            elif isinstance(item, SArr) and len(gitems) == 1 and isinstance(gitems[0], SArr):
                neg = self._negate_arr_given(item, gitems[0], ctx, depth)
            elif isinstance(item, SArr) and item.unique and unique_given:
                neg = strip_eval(self.negate(replace(item, unique=False), ctx))
            else:
                neg = strip_eval(self.negate(item, ctx))
            acc = self._pruned(acc, neg, ctx)
            if isinstance(acc, SNothing):
                break
        return acc

    def _minus(self, a: S, b: S, ctx: Ctx, depth: int = 0) -> S:
        """``a ∧ ¬b``, built inside ``a`` (see :meth:`_negate_within`), one type at a time."""
        if depth > 8:
            return self._pruned(a, strip_eval(self.negate(b, ctx)), ctx)
        ka, kb = self._kinds(a), self._kinds(b)
        out: list[S] = []
        for kind in all_kinds():
            if ka is not None and kind not in ka:
                continue
            at = self._pruned(a, whole_kind(kind), ctx)
            if self.is_empty(at):
                continue
            if kb is not None and kind not in kb:
                out.append(at)
                continue
            out.append(self._pruned(at, self._negate_within(b, kind, ctx, at, depth + 1), ctx))
        return self.union(out)

    def _negate_arr_given(self, s: SArr, g: SArr, ctx: Ctx, depth: int) -> S:
        """The arrays that ``s`` does not match, inside the arrays of ``g``: the alternative
        "some item does not match ``s``'s items" is built inside ``g``'s items (so an item
        schema both share, or a ``uniqueItems`` that ``g`` holds too, needs no negation)."""
        if s.prefix or g.prefix or s.contains or s.one_of:
            return strip_eval(self.negate(replace(s, unique=s.unique and not g.unique), ctx))
        out: list[S] = []
        if s.min_items > 0:
            out.append(SArr(max_items=s.min_items - 1))
        if s.max_items is not None:
            out.append(SArr(min_items=s.max_items + 1))
        if not isinstance(s.items, SAny) and s.items is not g.items:
            bad = self._minus(g.items, s.items, ctx, depth)
            if not self.is_empty(bad):
                out.append(SArr(contains=((strip_eval(bad), 1, None),)))
        if s.unique and not g.unique:
            raise UnsupportedFeatureError(
                "not", ctx.pointer, "negation of uniqueItems is not compiled"
            )
        return self.union(out)

    def _negate_obj_given(self, s: SObj, given: list[SObj], ctx: Ctx) -> S:
        """The objects that ``s`` does not match, less the alternatives "member ``k`` present
        and not matching ``s``'s schema for it" where every object of ``given`` already holds
        ``k`` to that very schema (their intersection with ``given`` is empty: this is what
        keeps a recursive member shared by two ``oneOf`` branches from being negated)."""

        def shared(k: str, v: S) -> bool:
            for g in given:
                w = self._key_effect(g, k, ctx)
                same_ref = isinstance(w, SRef) and isinstance(v, SRef) and w.key == v.key
                if w is not v and not same_ref and not self._same_node(w, v, [200]):
                    return False
            return True

        kept = {k: v for k, v in s.props.items() if not shared(k, v)}
        atoms = self._negate_obj(
            replace(s, props={k: (v if k in kept else ANY) for k, v in s.props.items()}),
            ctx,
            ctx.pointer,
        )
        return self.union(atoms)

    def _same_node(self, a: Any, b: Any, budget: list[int]) -> bool:
        """True only when ``a`` and ``b`` are certainly the same schema: structurally equal
        nodes (references resolved; ``where`` and the property order aside), compared on at
        most ``budget[0]`` values (False when it runs out).  Two normalizations of one
        schema location (a ``$ref`` to a property next to the property itself) are equal."""
        budget[0] -= 1
        if budget[0] < 0:
            return False
        if a is b:
            return True
        if isinstance(a, SRef) and isinstance(b, SRef) and a.key == b.key:
            return True
        if isinstance(a, SRef) or isinstance(b, SRef):
            ta = self._top(a, 0) if isinstance(a, SRef) else a
            tb = self._top(b, 0) if isinstance(b, SRef) else b
            if ta is None or tb is None or isinstance(ta, SRef) or isinstance(tb, SRef):
                return False
            return self._same_node(ta, tb, budget)
        if type(a) is not type(b):
            return False
        if isinstance(a, (tuple, list)):
            return len(a) == len(b) and all(
                self._same_node(x, y, budget) for x, y in zip(a, b, strict=True)
            )
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(self._same_node(a[k], b[k], budget) for k in a)
        if dataclasses.is_dataclass(a):
            return all(
                self._same_node(getattr(a, f.name), getattr(b, f.name), budget)
                for f in dataclasses.fields(a)
                if f.name not in ("where", "declared")
            )
        if isinstance(a, (str, int, float, bool, frozenset, Fraction, Decimal)) or a is None:
            return bool(a == b)
        return False

    def _pruned(self, a: S, b: S, ctx: Ctx | None) -> S:
        """``a ∧ b`` distributed over both unions, dropping the alternatives proved empty as
        they appear (so that a product of unions does not grow past ``max_union`` with
        impossible combinations)."""
        keep: list[S] = []
        for x in a.items if isinstance(a, SUnion) else (a,):
            for y in b.items if isinstance(b, SUnion) else (b,):
                z = self.conj(x, y, ctx)
                for part in z.items if isinstance(z, SUnion) else (z,):
                    if not self.is_empty(part):
                        keep.append(part)
        return self.union(keep)

    def disjoint(self, a: S, b: S, ctx: Ctx | None) -> bool:
        """True only when no value matches both (False: maybe overlapping)."""
        quick = self._quick_disjoint(a, b, 0)
        if quick is not None:
            return quick
        saved = self._proof_steps
        self._proof_steps = _DISJOINT_STEPS
        try:
            return self.is_empty(self.conj(a, b, ctx))
        except CompileBudgetError:
            raise
        except (UnsupportedFeatureError, Pending, LimitExceededError, _ProofTooLong):
            return False
        finally:
            self._proof_steps = saved

    def _top(self, s: S, depth: int) -> S | None:
        if isinstance(s, SRef):
            if depth > 20:
                return None
            try:
                return self._top(self.resolve(s.key), depth + 1)
            except Pending:
                return None
        return s

    def _kinds(self, s: S, depth: int = 0) -> set[str] | None:
        """The JSON types ``s`` may have (None: unknown)."""
        s2 = self._top(s, depth)
        if s2 is None:
            return None
        if isinstance(s2, SAny):
            return set(all_kinds())
        if isinstance(s2, SNothing):
            return set()
        if isinstance(s2, SUnion):
            out: set[str] = set()
            for i in s2.items:
                got = self._kinds(i, depth + 1)
                if got is None:
                    return None
                out |= got
            return out
        if isinstance(s2, SConst):
            return {_value_kind(v) for v in s2.values}
        kind = _kind(s2)
        return {kind} if kind else None

    def _quick_disjoint(self, a: S, b: S, depth: int) -> bool | None:
        """Cheap proofs: different types, or an object discriminator (a required key whose
        constant values differ).  None when undecided."""
        ka, kb = self._kinds(a), self._kinds(b)
        if ka is not None and kb is not None and not (ka & kb):
            return True
        ta, tb = self._top(a, depth), self._top(b, depth)
        if (
            (isinstance(ta, SUnion) or isinstance(tb, SUnion))
            and ta is not None
            and tb is not None
            and depth < 4
        ):
            # every alternative of one disjoint from every alternative of the other
            xs = ta.items if isinstance(ta, SUnion) else (ta,)
            ys = tb.items if isinstance(tb, SUnion) else (tb,)
            if len(xs) * len(ys) > 256:
                return None
            charge(len(xs) * len(ys))
            for x in xs:
                for y in ys:
                    if self._quick_disjoint(x, y, depth + 1) is not True:
                        return None
            return True
        if isinstance(ta, SObj) and isinstance(tb, SObj):
            for k in ta.props.keys() & tb.props.keys():
                if k not in ta.required and k not in tb.required:
                    continue
                va, vb = self._top(ta.props[k], depth), self._top(tb.props[k], depth)
                if (
                    isinstance(va, SConst)
                    and isinstance(vb, SConst)
                    and not any(json_equal(x, y) for x in va.values for y in vb.values)
                ):
                    return True
        return None

    # -- union / intersection -----------------------------------------------------------------
    def union(self, items: Iterable[S]) -> S:
        charge(6)  # the compile's fuel (and deadline)
        flat: list[S] = []
        for it in items:
            parts = it.items if isinstance(it, SUnion) else (it,)
            for p in parts:
                if isinstance(p, SNothing):
                    continue
                if isinstance(p, SConst) and not p.values:
                    continue
                flat.append(p)
        charge(3 * len(flat))
        if not flat:
            return NOTHING_S
        if len(flat) == 1:
            return flat[0]
        if len(flat) > self.options.max_union:
            raise LimitExceededError(
                "max_union", self.options.max_union, "alternatives after distributing combinators"
            )
        return SUnion(tuple(flat))

    def conj_all(self, parts: list[S], ctx: Ctx | None) -> S:
        out: S = ANY
        for p in parts:
            out = self.conj(out, p, ctx)
            if isinstance(out, SNothing):
                break
        return out

    def conj(self, a: S, b: S, ctx: Ctx | None) -> S:
        charge(18)  # the compile's fuel (and deadline; measured: ~10 us a call with its merges)
        if self._proof_steps is not None:
            self._proof_steps -= 1
            if self._proof_steps < 0:
                raise _ProofTooLong
        if isinstance(a, SNothing) or isinstance(b, SNothing):
            return NOTHING_S
        if isinstance(a, SAny) or a is b:  # a ∧ a = a: nodes are immutable
            return b
        if isinstance(b, SAny):
            return a
        memo_key = (id(a), id(b))
        hit = self._conj_memo.get(memo_key)
        if hit is not None:
            return hit[2]
        out = self._conj(a, b, ctx)
        self._conj_memo[memo_key] = (a, b, out)
        return out

    def _conj(self, a: S, b: S, ctx: Ctx | None) -> S:
        """:meth:`conj` of two nodes, neither ``ANY`` nor ``NOTHING`` (not memoized)."""
        if isinstance(a, SRef) or isinstance(b, SRef):
            if isinstance(a, SRef) and isinstance(b, SRef) and a.key == b.key:
                return a
            if isinstance(a, SRef):
                return self._conj_ref(a, b, ctx, ref_first=True)
            assert isinstance(b, SRef)
            return self._conj_ref(b, a, ctx, ref_first=False)
        if isinstance(a, SUnion):
            return self.union(self.conj(i, b, ctx) for i in a.items)
        if isinstance(b, SUnion):
            return self.union(self.conj(a, i, ctx) for i in b.items)
        if isinstance(a, SConst):
            return SConst(tuple(_typed_value(v, b) for v in a.values if self.accepts(b, v, ctx)))
        if isinstance(b, SConst):
            return SConst(tuple(_typed_value(v, a) for v in b.values if self.accepts(a, v, ctx)))
        if type(a) is not type(b):
            return NOTHING_S
        if isinstance(a, (SNull, SBool)):
            return a
        if isinstance(a, SNum) and isinstance(b, SNum):
            return _merge_num(a, b)
        if isinstance(a, SStr) and isinstance(b, SStr):
            return _merge_str(a, b)
        if isinstance(a, SArr) and isinstance(b, SArr):
            return self._merge_arr(a, b, ctx)
        if isinstance(a, SObj) and isinstance(b, SObj):
            return self._merge_obj(a, b, ctx)
        raise AssertionError(f"conj of {type(a).__name__}")  # pragma: no cover

    def _conj_ref(self, ref: SRef, other: S, ctx: Ctx | None, *, ref_first: bool) -> S:
        """``ref ∧ other`` (or ``other ∧ ref``: the order decides the property order)."""
        self._ref_depth += 1
        try:
            if self._ref_depth > self.options.max_ref_depth:
                raise LimitExceededError(
                    "max_ref_depth", self.options.max_ref_depth, "merging $ref chains"
                )
            try:
                target = self.resolve(ref.key)
            except Pending:
                key = f"{ref.key}&{id(other)}" if ref_first else f"{id(other)}&{ref.key}"
                if key not in self.defs and key not in self._thunks:
                    self._keep.append(other)
                    self.def_names[key] = self.def_names.get(ref.key, ref.key) + " (merged)"
                    if ref_first:
                        self._thunks[key] = lambda: self.conj(self.resolve(ref.key), other, ctx)
                    else:
                        self._thunks[key] = lambda: self.conj(other, self.resolve(ref.key), ctx)
                return SRef(key)
            return self.conj(target, other, ctx) if ref_first else self.conj(other, target, ctx)
        finally:
            self._ref_depth -= 1

    def _merge_arr(self, a: SArr, b: SArr, ctx: Ctx | None) -> S:
        n = max(len(a.prefix), len(b.prefix))
        prefix = tuple(self.conj(a.at(i), b.at(i), ctx) for i in range(n))
        lo = max(a.min_items, b.min_items)
        his = [h for h in (a.max_items, b.max_items) if h is not None]
        merged = SArr(
            prefix=prefix,
            items=self.conj(a.items, b.items, ctx),
            min_items=lo,
            max_items=min(his) if his else None,
            contains=a.contains + b.contains,
            unique=a.unique or b.unique,
            eval_prefix=max(a.eval_prefix, b.eval_prefix),
            eval_all=a.eval_all or b.eval_all,
            where=a.where or b.where,
        )
        if a.one_of or b.one_of:  # (run-time oneOf over arrays, oneof.py)
            return merge_tags(self, merged, a.one_of, b.one_of)
        return merged

    def _merge_obj(self, a: SObj, b: SObj, ctx: Ctx | None) -> S:
        declared = a.declared + tuple(k for k in b.declared if k not in a.declared)
        order = dict.fromkeys([*declared, *a.props, *b.props])
        props: dict[str, S] = {}
        required = a.required | b.required
        for k in order:
            props[k] = self.conj(self._key_effect(a, k, ctx), self._key_effect(b, k, ctx), ctx)
            if k in required and _trivially_empty(props[k]):
                # a required member no value can take: no object (dropped from the unions
                # now, so that a product of if/then unions does not grow with such terms)
                return NOTHING_S
        his = [h for h in (a.max_props, b.max_props) if h is not None]
        merged = SObj(
            props=props,
            required=required,
            rules=a.rules + b.rules,
            names=a.names + b.names,
            min_props=max(a.min_props, b.min_props),
            max_props=min(his) if his else None,
            eval_keys=a.eval_keys | b.eval_keys,
            eval_patterns=a.eval_patterns
            + tuple(p for p in b.eval_patterns if p not in a.eval_patterns),
            eval_all=a.eval_all or b.eval_all,
            where=a.where or b.where,
            declared=declared,
            witnesses=a.witnesses + b.witnesses,
        )
        if a.one_of or b.one_of:  # (run-time oneOf, oneof.py)
            return merge_tags(self, merged, a.one_of, b.one_of)
        return merged

    # -- emptiness ----------------------------------------------------------------------------
    def is_empty(self, s: S, seen: frozenset[str] = frozenset()) -> bool:
        """True only when ``s`` certainly has no instance (False means "maybe not empty")."""
        if isinstance(s, SNothing):
            return True
        if isinstance(s, SConst):
            return not s.values
        if isinstance(s, SUnion):
            return all(self.is_empty(i, seen) for i in s.items)
        if isinstance(s, SRef):
            if s.key in seen:
                return False
            try:
                target = self.resolve(s.key)
            except Pending:
                return False
            return self.is_empty(target, seen | {s.key})
        if isinstance(s, SNum):
            return num_empty(s)
        if isinstance(s, SStr):
            if s.max_len is not None and s.min_len > s.max_len:
                return True
            if s.content_free():
                return False
            parts = len(s.patterns) + len(s.formats) + len(s.neg_patterns) + len(s.neg_formats)
            if parts == 1 and not s.neg_patterns and not s.neg_formats and not s.excluded:
                # one positive regular constraint: emptiness only through the length bounds
                node = (
                    pattern_node(s.patterns[0])
                    if s.patterns
                    else json_formats.format_node(s.formats[0])
                )
                if node is None:
                    return False
                got = restrict_length(node, s.min_len, s.max_len)
                if got is not None:
                    return isinstance(got, Nothing)
            try:
                return string_dfa(s, self.options).is_empty()
            except CompileBudgetError:
                raise
            except GrammarError:
                return False
        if isinstance(s, SArr):
            lo, hi = s.min_items, s.max_items
            if hi is not None and lo > hi:
                return True
            # (items past the prefix share one schema: never a loop over a huge minItems)
            if any(self.is_empty(s.at(i), seen) for i in range(min(lo, len(s.prefix) + 1))):
                return True
            return any(m > 0 and self.is_empty(c, seen) for c, m, _ in s.contains)
        if isinstance(s, SObj):
            if s.max_props is not None and (
                s.min_props > s.max_props or len(s.required) > s.max_props
            ):
                return True
            # sorted: a set's order varies with the process's hash seed, and so would the fuel
            return any(self.is_empty(s.props[k], seen) for k in sorted(s.required))
        return False

    # -- negation -----------------------------------------------------------------------------
    def negate(self, s: S, ctx: Ctx | None) -> S:
        """The complement of ``s`` among all JSON values (no annotations survive)."""
        where = ctx.pointer if ctx else ""
        if isinstance(s, SAny):
            return NOTHING_S
        if isinstance(s, SNothing):
            return ANY
        if isinstance(s, SRef):
            # a definition of its own, built lazily: a recursive schema negates recursively
            key = f"not({s.key})"
            if key not in self.defs and key not in self._thunks:
                self.def_names[key] = "not " + self.def_names.get(s.key, s.key)
                target = s.key
                self._thunks[key] = lambda: self.negate(self.resolve(target), ctx)
                try:
                    self.resolve(key)  # eagerly when possible: errors surface here
                except Pending:
                    pass  # the target is being built: negated when first needed
                except Exception:
                    self._thunks.pop(key, None)
                    raise
            return SRef(key)
        if isinstance(s, SUnion):
            acc: S = ANY
            for i in s.items:  # impossible combinations pruned as they appear
                acc = self._pruned(acc, self.negate(i, ctx), ctx)
                if isinstance(acc, SNothing):
                    break
            return acc
        if isinstance(s, SConst):
            return self._negate_const(s, where)
        kind = _kind(s)
        assert kind is not None
        atoms: list[S] = list(others(kind))
        if isinstance(s, SNum):
            atoms.extend(_negate_num(s))
        elif isinstance(s, SStr):
            atoms.extend(_negate_str(s))
        elif isinstance(s, SArr):
            atoms.extend(self._negate_arr(s, ctx, where))
        elif isinstance(s, SObj):
            atoms.extend(self._negate_obj(s, ctx, where))
        return self.union(atoms)

    def _negate_member(self, v: S, ctx: Ctx | None) -> S:
        """``¬v`` for a member's value: :meth:`negate`, except while a ``oneOf`` is retried
        with run-time checks (``_runtime_values``), where the objects of ``¬v`` are one object
        checked at run time (``oneOf [any object, v]``, :func:`.oneof.runtime_alternatives`)
        when its escape members exist, and the other types exact: one alternative where the
        exact negation of an object schema has many."""
        if not self._runtime_values or ctx is None:
            return self.negate(v, ctx)
        kinds = self._kinds(v)
        if kinds is not None and "object" not in kinds:
            return self.negate(v, ctx)
        if whole_objects(self, v):
            return self.negate(v, ctx)
        try:
            objs = runtime_alternatives(
                self, [SObj(), v], [[SObj()], []], ctx, exclude=False, complement=True
            )
        except UnsupportedFeatureError:
            return self.negate(v, ctx)
        out: list[S] = list(objs)
        for kind in all_kinds():
            if kind != "object" and (kinds is None or kind in kinds):
                whole = whole_kind(kind)  # (v's object references left out of the negation)
                out.append(self._minus(whole, self._pruned(v, whole, ctx), ctx))
            elif kind != "object":
                out.append(whole_kind(kind))
        return self.union(out)

    def _negate_const(self, s: SConst, where: str) -> S:
        nulls = any(v is None for v in s.values)
        bools = {v for v in s.values if isinstance(v, bool)}
        nums = tuple(
            to_decimal(v)
            for v in s.values
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        )
        strs = frozenset(v for v in s.values if isinstance(v, str))
        structured = [v for v in s.values if isinstance(v, (list, dict))]
        out: list[S] = []
        if structured:
            arrays: S = SArr()
            objects: S = SObj()
            for v in structured:
                if isinstance(v, list):
                    arrays = self.conj(arrays, self._not_array_value(v, where), None)
                else:
                    objects = self.conj(objects, self._not_object_value(v, where), None)
            out.extend([arrays, objects])
        else:
            out.extend([SArr(), SObj()])
        if not nulls:
            out.append(SNull())
        if not bools:
            out.append(SBool())
        elif len(bools) == 1:
            out.append(SConst((not next(iter(bools)),)))
        out.append(SNum(excluded=nums) if nums else SNum())
        out.append(SStr(excluded=strs) if strs else SStr())
        return self.union(out)

    def _not_value(self, v: Any, where: str) -> S:
        return self._negate_const(SConst((v,)), where)

    def _not_array_value(self, v: list[Any], where: str) -> S:
        """Arrays different from ``v``: another length, or some item different."""
        n = len(v)
        out: list[S] = [SArr(min_items=n + 1)]
        if n:
            out.append(SArr(max_items=n - 1))
        for i, x in enumerate(v):
            out.append(SArr(prefix=(ANY,) * i + (self._not_value(x, where),), min_items=i + 1))
        return self.union(out)

    def _not_object_value(self, v: dict[str, Any], where: str) -> S:
        """Objects different from ``v``: a key missing, a value different, or a key more.

        "A key more" is a member whose key is not one of ``v``'s (a witness that any value
        satisfies), not ``minProperties: len(v) + 1``: members may repeat a key, and an object
        that repeats one of ``v``'s keys can still equal ``v`` once a validator keeps the last
        value (``{"a":2,"a":1}`` is ``{"a":1}``)."""
        out: list[S] = [SObj(witnesses=(Witness(frozenset(v), KeyRule((), NOTHING_S)),))]
        for k, x in v.items():
            out.append(SObj(props={k: NOTHING_S}))
            out.append(SObj(props={k: self._not_value(x, where)}, required=frozenset([k])))
        return self.union(out)

    def _negate_arr(self, s: SArr, ctx: Ctx | None, where: str) -> list[S]:
        if s.one_of:
            raise UnsupportedFeatureError(
                "oneOf", s.one_of[0].pointer, "negation of a oneOf checked at run time"
            )
        out: list[S] = []
        if s.min_items > 0:
            out.append(SArr(max_items=s.min_items - 1))
        if s.max_items is not None:
            out.append(SArr(min_items=s.max_items + 1))
        for i, p in enumerate(s.prefix):
            if not isinstance(p, SAny):
                neg = self.negate(p, ctx)
                out.append(SArr(prefix=(ANY,) * i + (neg,), min_items=i + 1))
        if not isinstance(s.items, SAny):
            if s.prefix:
                raise UnsupportedFeatureError(
                    "not", where, "negation of items after prefixItems is not compiled"
                )
            out.append(SArr(contains=((self.negate(s.items, ctx), 1, None),)))
        for c, lo, hi in s.contains:
            if lo > 0:
                out.append(SArr(contains=((c, 0, lo - 1),)))
            if hi is not None:
                out.append(SArr(contains=((c, hi + 1, None),)))
        if s.unique:
            raise UnsupportedFeatureError("not", where, "negation of uniqueItems is not compiled")
        return out

    def _negate_obj(self, s: SObj, ctx: Ctx | None, where: str) -> list[S]:
        if s.one_of:
            raise UnsupportedFeatureError(
                "oneOf", s.one_of[0].pointer, "negation of a oneOf checked at run time"
            )
        out: list[S] = []
        for k, v in s.props.items():
            order = (k,) if k in s.declared else ()
            if not isinstance(v, SAny):
                neg = self._negate_member(v, ctx)
                out.append(SObj(props={k: neg}, required=frozenset([k]), declared=order))
        for k in sorted(s.required):  # not the set's order: it varies with the hash seed
            out.append(SObj(props={k: NOTHING_S}, declared=(k,) if k in s.declared else ()))
        for w in s.witnesses:
            # no member outside the witness's keys breaks its rule: the rule itself, with
            # those keys exempt (an atom with no props: the rule reaches every key)
            out.append(
                SObj(
                    rules=(KeyRule(w.rule.patterns, w.rule.additional, w.rule.exempt | w.excluded),)
                )
            )
        for rule in s.rules:
            trivial = isinstance(rule.additional, SAny) and all(
                isinstance(sub, SAny) for _, sub in rule.patterns
            )
            if not trivial:
                # some member outside the declared keys breaks the rule
                out.append(SObj(witnesses=(Witness(frozenset(s.props), rule),)))
        if any(not isinstance(n, SAny) for n in s.names):
            raise UnsupportedFeatureError("not", where, "negation of propertyNames is not compiled")
        if s.min_props > 0:
            out.append(SObj(max_props=s.min_props - 1))
        if s.max_props is not None:
            out.append(SObj(min_props=s.max_props + 1))
        return out


# -- helpers on nodes -----------------------------------------------------------------------------
class IntegerValue(int):
    """An ``enum``/``const`` number that ``type: integer`` also constrains: written without
    the ``N.0`` spelling (draft 4 does not count ``1.0`` as an integer; in later drafts it is
    one, so leaving it out only narrows the output)."""


def _trivially_empty(s: S) -> bool:
    """True when ``s`` has no instance by its shape alone (``false``, an empty ``enum``): O(1)."""
    return isinstance(s, SNothing) or (isinstance(s, SConst) and not s.values)


def _typed_value(v: Any, other: S) -> Any:
    integral = isinstance(v, (int, float)) and not isinstance(v, bool)
    if integral and isinstance(other, SNum) and other.integer:
        return IntegerValue(int(to_decimal(v)))
    return v


def all_kinds() -> tuple[str, ...]:
    return ("null", "boolean", "number", "string", "array", "object")


def strip_eval(s: S) -> S:
    """``s`` with no key/item counted as evaluated (conservative for ``unevaluated*``)."""
    if isinstance(s, SObj) and (s.eval_keys or s.eval_patterns or s.eval_all):
        return replace(s, eval_keys=frozenset(), eval_patterns=(), eval_all=False)
    if isinstance(s, SArr) and (s.eval_prefix or s.eval_all):
        return replace(s, eval_prefix=0, eval_all=False)
    if isinstance(s, SUnion):
        return SUnion(tuple(strip_eval(i) for i in s.items))
    return s


def mark_all_evaluated(s: S, kind: str) -> S:
    if isinstance(s, SAny):
        whole = SObj(eval_all=True) if kind == "object" else SArr(eval_all=True)
        return SUnion((*(k for k in map(whole_kind, all_kinds()) if _kind(k) != kind), whole))
    if kind == "object" and isinstance(s, SObj):
        return replace(s, eval_all=True)
    if kind == "array" and isinstance(s, SArr):
        return replace(s, eval_all=True)
    if isinstance(s, SUnion):
        return SUnion(tuple(mark_all_evaluated(i, kind) for i in s.items))
    return s


def tighten(node: SNum, v: Decimal, excl: bool, *, low: bool) -> SNum:
    if low:
        if node.lo is None or v > node.lo or (v == node.lo and excl):
            return replace(node, lo=v, lo_excl=excl)
        return node
    if node.hi is None or v < node.hi or (v == node.hi and excl):
        return replace(node, hi=v, hi_excl=excl)
    return node


def _lcm(a: Fraction, b: Fraction) -> Fraction:
    """The least positive rational whose multiples are the common multiples of ``a`` and ``b``."""
    return Fraction(math.lcm(a.numerator, b.numerator), math.gcd(a.denominator, b.denominator))


def _merge_num(a: SNum, b: SNum) -> S:
    multiples = a.multiples + b.multiples
    if len(multiples) > 1:
        m = multiples[0]
        for x in multiples[1:]:
            m = _lcm(m, x)
        multiples = (m,)
    out = replace(
        a,
        integer=a.integer or b.integer,
        non_integer=a.non_integer or b.non_integer,
        multiples=multiples,
        non_multiples=a.non_multiples
        + tuple(m for m in b.non_multiples if m not in a.non_multiples),
        excluded=a.excluded + tuple(x for x in b.excluded if x not in a.excluded),
    )
    if b.lo is not None:
        out = tighten(out, b.lo, b.lo_excl, low=True)
    if b.hi is not None:
        out = tighten(out, b.hi, b.hi_excl, low=False)
    if out.integer and out.non_integer:
        return NOTHING_S
    if num_empty(out):
        return NOTHING_S
    return out


def _merge_str(a: SStr, b: SStr) -> S:
    his = [h for h in (a.max_len, b.max_len) if h is not None]
    out = SStr(
        min_len=max(a.min_len, b.min_len),
        max_len=min(his) if his else None,
        patterns=a.patterns + tuple(p for p in b.patterns if p not in a.patterns),
        neg_patterns=a.neg_patterns + tuple(p for p in b.neg_patterns if p not in a.neg_patterns),
        formats=a.formats + tuple(f for f in b.formats if f not in a.formats),
        neg_formats=a.neg_formats + tuple(f for f in b.neg_formats if f not in a.neg_formats),
        excluded=a.excluded | b.excluded,
    )
    if out.max_len is not None and out.min_len > out.max_len:
        return NOTHING_S
    if set(out.patterns) & set(out.neg_patterns) or set(out.formats) & set(out.neg_formats):
        return NOTHING_S
    return out


def int_bounds(s: SNum) -> tuple[int | None, int | None]:
    """The integer range ``[lo, hi]`` allowed by the bounds of ``s`` (None: unbounded)."""
    lo: int | None = None
    hi: int | None = None
    if s.lo is not None:
        c = int(s.lo.to_integral_value(rounding=ROUND_CEILING))
        lo = c + 1 if (s.lo_excl and c == s.lo) else c
    if s.hi is not None:
        f = int(s.hi.to_integral_value(rounding=ROUND_FLOOR))
        hi = f - 1 if (s.hi_excl and f == s.hi) else f
    return lo, hi


def num_empty(s: SNum) -> bool:
    if s.integer and s.non_integer:
        return True
    if (
        s.lo is not None
        and s.hi is not None
        and (s.lo > s.hi or (s.lo == s.hi and (s.lo_excl or s.hi_excl)))
    ):
        return True
    if s.integer:
        lo, hi = int_bounds(s)
        if lo is not None and hi is not None and lo > hi:
            return True
    if len(s.multiples) == 1 and s.lo is not None and s.hi is not None:
        m = s.multiples[0]
        k_lo = math.ceil(Fraction(s.lo) / m)
        k_hi = math.floor(Fraction(s.hi) / m)
        if s.lo_excl and k_lo * m == Fraction(s.lo):
            k_lo += 1
        if s.hi_excl and k_hi * m == Fraction(s.hi):
            k_hi -= 1
        if k_lo > k_hi:
            return True
    return False


def _negate_num(s: SNum) -> list[S]:
    out: list[S] = []
    if s.integer:
        out.append(SNum(non_integer=True))
    if s.non_integer:
        out.append(SNum(integer=True))
    if s.lo is not None:
        out.append(SNum(hi=s.lo, hi_excl=not s.lo_excl))
    if s.hi is not None:
        out.append(SNum(lo=s.hi, lo_excl=not s.hi_excl))
    for m in s.multiples:
        out.append(SNum(non_multiples=(m,)))
    for m in s.non_multiples:
        out.append(SNum(multiples=(m,)))
    if s.excluded:
        out.append(SConst(tuple(_decimal_to_json(x) for x in s.excluded)))
    return out


def _decimal_to_json(d: Decimal) -> int | float:
    if d == d.to_integral_value():
        return int(d)
    return float(d)


def _negate_str(s: SStr) -> list[S]:
    out: list[S] = []
    if s.min_len > 0:
        out.append(SStr(max_len=s.min_len - 1))
    if s.max_len is not None:
        out.append(SStr(min_len=s.max_len + 1))
    out.extend(SStr(neg_patterns=(p,)) for p in s.patterns)
    out.extend(SStr(patterns=(p,)) for p in s.neg_patterns)
    out.extend(SStr(neg_formats=(f,)) for f in s.formats)
    out.extend(SStr(formats=(f,)) for f in s.neg_formats)
    if s.excluded:
        out.append(SConst(tuple(sorted(s.excluded))))
    return out


def describe(s: S) -> str:  # pragma: no cover - debugging aid
    """A short text form of a node, for error messages and debugging."""
    if isinstance(s, SUnion):
        return "(" + " | ".join(describe(i) for i in s.items) + ")"
    if isinstance(s, SConst):
        return "const" + json.dumps(list(s.values), ensure_ascii=False, default=str)
    return type(s).__name__
