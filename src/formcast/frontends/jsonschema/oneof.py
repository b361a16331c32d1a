"""Overlapping ``oneOf`` over objects, checked at run time (exactly one branch matches).

Where the schema algebra cannot build ``Bi ∧ ¬Bj`` for objects (a negation it cannot express,
or more alternatives than ``max_union``), :meth:`~.algebra.Algebra.one_of` falls back to this
module for the *object* part of the ``oneOf`` (the other JSON types stay algebraic):

* the grammar accepts the objects of any branch (each alternative ``pre ∧ Bi ∧ post``, an
  :class:`~.nodes.SObj`) and each alternative carries a :class:`OneOfGroup` (``SObj.one_of``);
* the emitter (:func:`oneof_object`) wraps such an object in a *marked* rule
  (:class:`~formcast.ir.marks.UniqueItemsMark` with ``kind="oneof"``) whose frame stays on the
  parser's stacks while inside the object, and registers the group's check under the rule name;
* the matcher (:class:`~formcast.index.programs.oneof.OneOfProgram`) decodes the object's text
  at its closing ``}`` (``json.loads``: a repeated key keeps its last value, as validators do)
  and lets the ``}`` through only if exactly one raw branch accepts it (the exact instance
  check, :meth:`~.checks.InstanceChecks.accepts`).

**Soundness and no dead end.**  Accepted objects are in some branch's grammar (so match that
branch and the sibling keywords) and pass the exact exactly-one check: sound.  The mask must
also never allow a prefix from which no exactly-one completion exists.  :func:`escape_members`
proves it per alternative: an alternative of branch ``i`` is kept only when it takes any number
of undeclared members (no ``maxProperties``, no negated-``additionalProperties`` witness) and
there are members ``k: v`` it accepts as undeclared ones such that every other branch rejects
every object holding one of them.  From any prefix of that alternative, finishing the current
member and the required ones and then appending those members as the last ones (they win over
an earlier member of the same key) gives an object of branch ``i`` that no other branch accepts.
Branches the alternative is provably disjoint from need no escape; a few (at most
:data:`_MAX_HARD`) that no member rejects are excluded in the grammar instead (``∧ ¬Bj`` built
by the algebra), and an alternative whose overlaps are all excluded so is exact and unchecked.
An alternative of branch ``i`` is dropped, exactly, when another branch accepts every object
(every object of it matches two branches).  Anything else is refused, naming ``oneOf``; a
proof that meets a reference still being normalized is repeated on the emitted object.

Lifetime: groups live in the normalized nodes of one compile.  The check travels with the
grammar: the emitter writes it into the mark (``UniqueItemsMark.check``, JSON text of the
branch nodes, :mod:`.oneof_check`) and the program rebuilds it from there
(:func:`check_of_mark`), so a grammar serialized and loaded in any process runs the same
check.  No module state: the marked rule is named by the emitter's own counter, so one
schema compiled twice gives the same IR.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from ...errors import UnsupportedFeatureError
from ...ir.marks import MARKED_RULE_PREFIX, UniqueItemsMark
from ...ir.nodes import EMPTY, Node, RuleRef, concat
from .nodes import (
    NOTHING_S,
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
)
from .oneof_check import OneOfCheck, encode_check
from .refs import Pending

__all__ = [
    "OneOfGroup",
    "OneOfTag",
    "check_of_mark",
    "escape_items",
    "escape_members",
    "merge_tags",
    "oneof_object",
    "runtime_alternatives",
    "runtime_array_alternatives",
    "whole_arrays",
    "whole_objects",
]

#: the values tried as an escape member's value (simple: every grammar spells them exactly)
_VALUES: tuple[Any, ...] = (None, True, False, 0, -1, "", [], {})
#: fresh names tried as escape keys besides the names the branches declare
_FRESH = ("_", "x", "oneOf")


@dataclass(eq=False)
class OneOfGroup:
    """One ``oneOf`` checked at run time: ``check(value)`` is True when exactly one of
    ``branches`` accepts the JSON value.  Immutable after construction; the check reads the
    normalizer's finished definitions (cost: one instance check per branch)."""

    pointer: str
    branches: tuple[S, ...]
    accepts: Callable[[S, Any], bool]
    names: tuple[str, ...] = ()  # the escape proof's candidate keys
    #: ``[any object, v]``: the objects ``v`` rejects (a negated member value, ``_negate_member``)
    complement: bool = False

    def exactly_one(self, value: Any) -> bool:
        hits = 0
        for b in self.branches:
            if self.accepts(b, value):
                hits += 1
                if hits > 1:
                    return False
        return hits == 1


@dataclass(frozen=True, eq=False)
class OneOfTag:
    """What ``SObj.one_of`` holds: the object is an alternative of branch ``index`` of
    ``group``.  Immutable."""

    group: OneOfGroup
    index: int
    excluded: frozenset[int] = frozenset()  # branches the object excludes in its grammar

    @property
    def pointer(self) -> str:
        return self.group.pointer

    def exactly_one(self, value: Any) -> bool:
        return self.group.exactly_one(value)


class _Algebra(Protocol):
    def _key_effect(self, obj: SObj, key: str, ctx: Any) -> S: ...

    def accepts(self, s: S, v: Any, ctx: Any, depth: int = 0) -> bool: ...

    def resolve(self, key: str) -> S: ...

    def _negate_within(self, s: S, kind: str, ctx: Any, given: S, depth: int = 0) -> S: ...

    def _pruned(self, a: S, b: S, ctx: Any) -> S: ...

    def _alts(self, s: S) -> tuple[S, ...]: ...

    def union(self, items: Any) -> S: ...

    def disjoint(self, a: S, b: S, ctx: Any) -> bool: ...


def _accepts_of(alg: _Algebra) -> Callable[[S, Any], bool]:
    """A group's instance check, ``alg.accepts(s, v, None)``, holding ``alg`` weakly: the
    algebra (the normalizer, with every definition) holds its tagged nodes and so the groups;
    a strong reference back would make the whole front-end state one reference cycle, left
    for the cyclic collector after the compile (docs/notes/ttfm37.md).  A group is checked only
    while its schema is normalized and emitted (the matcher's check is data:
    :mod:`.oneof_check`), when ``alg`` is alive; ReferenceError after that."""
    ref = weakref.ref(alg)

    def accepts(s: S, v: Any) -> bool:
        a = ref()
        if a is None:
            raise ReferenceError("a oneOf group checked after its schema's normalizer is gone")
        return a.accepts(s, v, None)

    return accepts


def _tops(alg: _Algebra, s: S, depth: int = 0) -> list[S] | None:
    """``s`` as a list of non-reference, non-union nodes (None: a reference still pending)."""
    if depth > 40:
        return None
    if isinstance(s, SRef):
        try:
            return _tops(alg, alg.resolve(s.key), depth + 1)
        except Exception:  # (Pending: a recursive reference being normalized)
            _PENDING.seen = True
            return None
    if isinstance(s, SUnion):
        out: list[S] = []
        for x in s.items:
            got = _tops(alg, x, depth + 1)
            if got is None:
                return None
            out.extend(got)
        return out
    return [s]


def _whole_object(s: SObj) -> bool:
    return (
        not s.props
        and not s.required
        and not s.witnesses
        and not s.names
        and not s.one_of
        and s.min_props == 0
        and s.max_props is None
        and all(
            isinstance(r.additional, SAny) and all(isinstance(x, SAny) for _, x in r.patterns)
            for r in s.rules
        )
    )


def whole_objects(alg: _Algebra, branch: S) -> bool:
    """Whether ``branch`` certainly accepts every object (False: maybe not)."""
    tops = _tops(alg, branch)
    if tops is None:
        return False
    return any(isinstance(t, SAny) or (isinstance(t, SObj) and _whole_object(t)) for t in tops)


def _rejects_member(alg: _Algebra, branch: S, key: str, value: Any) -> bool:
    """Whether ``branch`` certainly rejects every object that has member ``key: value``.
    Memoized per compile (on the algebra) unless a pending reference was met."""
    memo: dict[tuple[int, str, str], tuple[S, bool]] = alg.__dict__.setdefault("_oneof_rejects", {})
    mkey = (id(branch), key, json.dumps(value))
    hit = memo.get(mkey)
    if hit is not None:
        return hit[1]
    before = _PENDING.seen
    _PENDING.seen = False
    got = _rejects_member_uncached(alg, branch, key, value)
    if not _PENDING.seen:
        memo[mkey] = (branch, got)  # (the branch kept alive: its id stays unique)
    _PENDING.seen = _PENDING.seen or before
    return got


def _rejects_member_uncached(alg: _Algebra, branch: S, key: str, value: Any) -> bool:
    tops = _tops(alg, branch)
    if tops is None:
        return False
    for t in tops:
        if isinstance(t, (SNothing, SNull, SBool, SNum, SStr, SArr)):
            continue
        if isinstance(t, SConst):
            if any(
                isinstance(d, dict) and key in d and alg.accepts(SConst((d[key],)), value, None)
                for d in t.values
            ):
                return False
            continue
        if isinstance(t, SObj):
            try:
                if alg.accepts(alg._key_effect(t, key, None), value, None):
                    return False
            except Exception:
                return False
            continue
        return False  # SAny (or a node this proof does not know)
    return True


def _declared(alg: _Algebra, s: S) -> list[str]:
    out: list[str] = []
    for t in _tops(alg, s) or []:
        if isinstance(t, SObj):
            out.extend(t.props)
    return out


def escape_members(
    alg: _Algebra, alt: SObj, others: list[S], names: list[str]
) -> list[tuple[str, Any]] | None:
    """Members ``k: v`` that ``alt`` takes as undeclared ones (any number of times, after any
    member) such that each of ``others`` rejects every object holding one of them (see the
    module docstring); None when this proof finds none.  ``names``: candidate keys.  Cost:
    candidates x values x branches instance checks."""
    got = _escape_cover(alg, alt, others, names)
    return got[0] if got is not None and not got[1] else None


def _escape_cover(
    alg: _Algebra, alt: SObj, others: list[S], names: list[str]
) -> tuple[list[tuple[str, Any]], list[int]] | None:
    """Greedy escape members for ``alt`` against ``others`` (see :func:`escape_members`):
    ``(members, indices of others no member rejects)``; None when ``alt`` cannot take any
    number of undeclared members."""
    if alt.max_props is not None or alt.witnesses:
        return None
    remaining = list(range(len(others)))
    chosen: list[tuple[str, Any]] = []
    for key in dict.fromkeys([*names, *_FRESH]):
        if not remaining:
            break
        if key in alt.props:
            continue
        try:
            effect = alg._key_effect(alt, key, None)
        except Exception:
            continue
        if isinstance(effect, SNothing):
            continue
        best: tuple[list[int], Any] | None = None
        for v in _VALUES:
            try:
                if not alg.accepts(effect, v, None):
                    continue
            except Exception:
                continue
            killed = [j for j in remaining if _rejects_member(alg, others[j], key, v)]
            if killed and (best is None or len(killed) > len(best[0])):
                best = (killed, v)
        if best is not None:
            chosen.append((key, best[1]))
            remaining = [j for j in remaining if j not in best[0]]
    return chosen, remaining


#: branches one alternative may exclude in its grammar (the rest by escape members)
_MAX_HARD = 3


def runtime_alternatives(
    alg: _Algebra,
    branches: list[S],
    restricted: list[list[S]],
    ctx: Any,
    *,
    exclude: bool = True,
    complement: bool = False,
) -> list[S]:
    """The object part of an overlapping ``oneOf``, checked at run time: ``restricted[i]``
    are branch ``i``'s object alternatives (``pre ∧ Bi ∧ post``, each an :class:`SObj`).
    Returns them tagged (:class:`OneOfTag`).  An alternative with escape members against some
    other branches but not all excludes the rest in its grammar (``∧ ¬Bj`` built by the
    algebra, at most :data:`_MAX_HARD` of them; ``exclude``), then needs escape members
    against the others only.  Raises UnsupportedFeatureError naming ``oneOf`` where this
    fails (see the module docstring).  Cost: the escape proof per alternative."""
    pointer = ctx.pointer
    names: list[str] = []
    for b in branches:
        names.extend(_declared(alg, b))
    group = OneOfGroup(
        pointer,
        tuple(branches),
        _accepts_of(alg),
        tuple(dict.fromkeys(names)),
        complement,
    )
    whole = [whole_objects(alg, b) for b in branches]
    out: list[S] = []
    for i, alts in enumerate(restricted):
        if any(whole[j] for j in range(len(branches)) if j != i):
            continue  # every object of branch i matches that branch too
        for a in alts:
            if not isinstance(a, SObj) or a.one_of:
                raise UnsupportedFeatureError(
                    "oneOf", pointer, f"branch {i} is not a plain object schema here"
                )
            # the branches that may overlap this alternative (a disjoint one never matches)
            idx = [
                j
                for j in range(len(branches))
                if j != i and not (exclude and alg.disjoint(a, branches[j], ctx))
            ]
            _PENDING.seen = False
            cover = _escape_cover(alg, a, [branches[j] for j in idx], list(group.names))
            hard = frozenset(idx[r] for r in cover[1]) if cover is not None else frozenset()
            if _PENDING.seen:
                hard = frozenset()  # (a reference still being normalized: proven on emission)
            if cover is None or (hard and (not exclude or len(hard) > _MAX_HARD)):
                _refuse(i, pointer)
            out.extend(
                _exclude_and_tag(
                    alg,
                    a,
                    "object",
                    hard,
                    idx,
                    (branches, group, i),
                    ctx,
                    partial(_refuse, i, pointer),
                )
            )
    return out


def _exclude_and_tag(
    alg: _Algebra,
    a: SObj | SArr,
    kind: str,
    hard: frozenset[int],
    idx: list[int],
    where: tuple[list[S], OneOfGroup, int],
    ctx: Any,
    refuse: Callable[[], None],
) -> list[S]:
    """Alternative ``a`` (of JSON type ``kind``) of branch ``i`` of ``group`` (``where``)
    with the ``hard`` branches excluded in the grammar (``∧ ¬Bj`` built by the algebra) and
    the rest of ``idx`` (the branches it may overlap) left to the run-time check: each part
    tagged (:class:`OneOfTag`) and proven, or untagged where every overlap was excluded
    (exact).  ``refuse`` raises (a part that is not a plain node of ``a``'s kind)."""
    branches, group, i = where
    parts: tuple[S, ...] = (a,)
    if hard:
        acc: S = a
        for j in sorted(hard):
            acc = alg._pruned(acc, alg._negate_within(branches[j], kind, ctx, a), ctx)
        parts = () if isinstance(acc, SNothing) else alg._alts(acc)
    checked = frozenset(idx) - hard
    out: list[S] = []
    for part in parts:
        if not checked:
            out.append(part)  # every overlap excluded in the grammar: exact
            continue
        if not isinstance(part, type(a)) or part.one_of:
            refuse()
        assert isinstance(part, (SObj, SArr))
        rest = frozenset(range(len(branches))) - checked - {i}
        tagged = replace(part, one_of=(OneOfTag(group, i, rest),))
        _prove(alg, tagged)
        out.append(tagged)
    return out


#: the values tried as an escape item (simple: every grammar spells them exactly)
_ITEMS: tuple[Any, ...] = (None, True, False, 0, -1, "", "_", [], {}, [None], [""], {"_": None})


def whole_array(s: SArr) -> bool:
    """Whether ``s`` accepts every array (the emitter writes it as ``any_array``)."""
    return (
        not s.prefix
        and isinstance(s.items, SAny)
        and s.min_items == 0
        and s.max_items is None
        and not s.contains
        and not s.unique
        and not s.one_of
    )


def whole_arrays(alg: _Algebra, branch: S) -> bool:
    """Whether ``branch`` certainly accepts every array (False: maybe not)."""
    tops = _tops(alg, branch)
    if tops is None:
        return False
    return any(isinstance(t, SAny) or (isinstance(t, SArr) and whole_array(t)) for t in tops)


def _rejects_item(alg: _Algebra, branch: S, value: Any) -> bool:
    """Whether ``branch`` certainly rejects every array holding the item ``value`` (at any
    position): every item schema of each of its array alternatives rejects it."""
    tops = _tops(alg, branch)
    if tops is None:
        return False
    for t in tops:
        if isinstance(t, (SNothing, SNull, SBool, SNum, SStr, SObj)):
            continue
        try:
            if isinstance(t, SConst):
                if any(
                    isinstance(d, list) and any(alg.accepts(SConst((x,)), value, None) for x in d)
                    for d in t.values
                ):
                    return False
                continue
            if isinstance(t, SArr):
                if any(alg.accepts(t.at(k), value, None) for k in range(len(t.prefix) + 1)):
                    return False
                continue
        except Exception:
            return False
        return False  # SAny (or a node this proof does not know)
    return True


def _bounded_arrays(alg: _Algebra, branch: S) -> bool:
    """Whether every array ``branch`` accepts is certainly shorter than some bound."""
    tops = _tops(alg, branch)
    if tops is None:
        return False
    for t in tops:
        if isinstance(t, (SNothing, SNull, SBool, SNum, SStr, SObj, SConst)):
            continue
        if isinstance(t, SArr) and t.max_items is not None:
            continue
        return False
    return True


def escape_items(alg: _Algebra, alt: SArr, others: list[S]) -> list[Any] | None:
    """Items that set ``alt`` apart from each of ``others`` (None: this proof finds none):
    values ``v`` that ``alt`` takes at any position it may append to (past ``minItems``),
    any number of times (no ``maxItems``; no ``contains`` bound ``v`` would count towards),
    such that each other branch rejects every array holding one of them, or -- where ``alt``
    has no ``uniqueItems`` -- accepts only arrays shorter than some bound (appending ``v``
    again and again outgrows it).

    Why that is enough (no dead end): from any prefix of ``alt``'s grammar, finish a complete
    array ``Q`` of ``alt`` (the grammar has no dead end of its own), then append the escape
    items (with ``uniqueItems``, only those not in ``Q`` already: ``Q`` holding one is rejected
    by the branches it sets apart), then one of them again until the bounded branches are
    outgrown: still in ``alt``, and no other branch accepts it.  Cost: values x (branches +
    positions) instance checks."""
    got = _item_cover(alg, alt, others)
    return got[0] if got is not None and not got[1] else None


def _item_cover(alg: _Algebra, alt: SArr, others: list[S]) -> tuple[list[Any], list[int]] | None:
    """Greedy escape items for ``alt`` against ``others`` (see :func:`escape_items`):
    ``(items, indices of others none sets apart)``; None when ``alt`` has a ``maxItems``."""
    if alt.max_items is not None:
        return None
    remaining = list(range(len(others)))
    chosen: list[Any] = []
    first = min(alt.min_items, len(alt.prefix))
    for v in _ITEMS:
        if not remaining:
            break
        try:
            if not all(alg.accepts(alt.at(k), v, None) for k in range(first, len(alt.prefix) + 1)):
                continue
            if any(hi is not None and alg.accepts(c, v, None) for c, _lo, hi in alt.contains):
                continue
        except Exception:
            continue
        killed = [
            j
            for j in remaining
            if _rejects_item(alg, others[j], v)
            or (not alt.unique and _bounded_arrays(alg, others[j]))
        ]
        if killed:
            chosen.append(v)
            remaining = [j for j in remaining if j not in killed]
    return chosen, remaining


def runtime_array_alternatives(
    alg: _Algebra, branches: list[S], restricted: list[list[S]], ctx: Any
) -> list[S]:
    """The array part of an overlapping ``oneOf``, checked at run time (as
    :func:`runtime_alternatives` for objects): ``restricted[i]`` are branch ``i``'s array
    alternatives (``pre ∧ Bi ∧ post``, each an :class:`SArr`).  An alternative that overlaps
    no other branch is kept as is (exact); one of a branch whose arrays another branch
    accepts all is dropped (exact); the others are tagged (:class:`OneOfTag`) and need escape
    items (:func:`escape_items`) against every branch they may overlap, but for at most
    :data:`_MAX_HARD` branches that no item sets apart, excluded in the grammar instead
    (``∧ ¬Bj`` built by the algebra; an alternative whose overlaps are all excluded so is
    exact and unchecked).  Raises UnsupportedFeatureError naming ``oneOf`` where that fails.
    Cost: the proof per alternative."""
    pointer = ctx.pointer
    group = OneOfGroup(pointer, tuple(branches), _accepts_of(alg))
    whole = [whole_arrays(alg, b) for b in branches]
    out: list[S] = []
    for i, alts in enumerate(restricted):
        if any(whole[j] for j in range(len(branches)) if j != i):
            continue  # every array of branch i matches that branch too
        for a in alts:
            if not isinstance(a, SArr) or a.one_of:
                _refuse_array(i, pointer, "is not a plain array schema here")
            assert isinstance(a, SArr)
            idx = [
                j for j in range(len(branches)) if j != i and not alg.disjoint(a, branches[j], ctx)
            ]
            if not idx:
                out.append(a)
                continue
            _PENDING.seen = False
            cover = _item_cover(alg, a, [branches[j] for j in idx])
            hard = frozenset(idx[r] for r in cover[1]) if cover is not None else frozenset(idx)
            if _PENDING.seen and cover is not None:
                hard = frozenset()  # (a reference still being normalized: proven on emission)
            if len(hard) > _MAX_HARD:
                _refuse_array(i, pointer)
            out.extend(
                _exclude_and_tag(
                    alg,
                    a,
                    "array",
                    hard,
                    idx,
                    (branches, group, i),
                    ctx,
                    partial(_refuse_array, i, pointer),
                )
            )
    return out


def _refuse_array(i: int, pointer: str, why: str = "") -> None:
    raise UnsupportedFeatureError(
        "oneOf",
        pointer,
        f"branch {i} {why}"
        if why
        else f"branch {i} may overlap another on arrays, and no item it may append sets it "
        "apart from every other branch (the run-time exactly-one check needs one, so that "
        "generation never reaches a dead end: a maxItems, or no item the others reject)",
    )


def _refuse(i: int, pointer: str) -> None:
    raise UnsupportedFeatureError(
        "oneOf",
        pointer,
        f"branch {i} may overlap another on objects, and no member it may add sets it apart "
        "from every other branch (the run-time exactly-one check needs one, so that "
        "generation never reaches a dead end)",
    )


def _prove(alg: _Algebra, obj: SObj | SArr, *, final: bool = False) -> None:
    """Raise UnsupportedFeatureError (``oneOf``) unless ``obj`` (one tag) has escape members
    (an object) or escape items (an array) against the other branches of its group.  While
    normalizing (``final`` False) a proof that met a reference still being normalized passes
    for now: the emitter proves every node again (``final``) on the node it emits, once every
    definition is known."""
    others = [tag_b for _, tag_b in _live_others(alg, obj)]
    (tag,) = obj.one_of
    _PENDING.seen = False
    if isinstance(obj, SArr):
        if escape_items(alg, obj, others) is not None:
            return
    elif escape_members(alg, obj, others, list(tag.group.names)) is not None:
        return
    if not final and _PENDING.seen:
        return
    if isinstance(obj, SArr):
        _refuse_array(tag.index, tag.pointer)
    _refuse(tag.index, tag.pointer)


def _live_others(alg: _Algebra, obj: SObj | SArr) -> list[tuple[int, S]]:
    """The branches other than ``obj``'s own (one tag) that it may still meet: not excluded
    in its grammar, and not disjoint from it (a node narrowed since it was tagged -- merged
    with a closed object, or closed by ``unevaluatedProperties`` -- may no longer take the
    member another branch requires)."""
    (tag,) = obj.one_of
    bare = replace(obj, one_of=())
    return [
        (j, b)
        for j, b in enumerate(tag.group.branches)
        if j != tag.index and j not in tag.excluded and not alg.disjoint(bare, b, None)
    ]


def merge_tags(alg: _Algebra, merged: SObj | SArr, a: tuple[Any, ...], b: tuple[Any, ...]) -> S:
    """``merged`` (the intersection of two objects, or of two arrays) with the tags of both
    (``a``, ``b``): nothing when they are two branches of one group (every such value matches
    both); refused (``oneOf``) for two groups on one value, or when the merged node loses the
    escape members (items) of its branch (see the module docstring)."""
    tags: tuple[OneOfTag, ...] = ()
    seen: set[tuple[Any, ...]] = set()
    for t in a + b:
        key = (id(t.group), t.index, t.excluded)
        if key not in seen:
            seen.add(key)
            tags += (t,)
    if not tags:
        return merged
    groups = {id(t.group) for t in tags}
    if len(groups) < len(tags):
        return NOTHING_S
    if len(tags) > 1:
        raise UnsupportedFeatureError(
            "oneOf", tags[0].pointer, "two oneOfs told apart at run time on one value"
        )
    out = replace(merged, one_of=tags)
    if not _live_others(alg, out):
        return merged  # (no other branch left to meet: exact, unchecked)
    _prove(alg, out)
    return out


class _Pending(threading.local):
    seen = False


#: set when a proof met a reference still being normalized (this thread)
_PENDING = _Pending()


# -- emission, and the run-time check rebuilt from the mark -----------------------------------
END_RULE = MARKED_RULE_PREFIX + "oneof_end"
#: the stem of a marked array's rule name: the program tracks ``[``/``]`` levels for these
ARRAY_RULE = MARKED_RULE_PREFIX + "oneof_arr"


class _Emits(Protocol):
    marks: list[UniqueItemsMark] | None
    rules: Any

    def _name(self, stem: str) -> str: ...

    def add_rule(self, name: str, body: Node, *, terminal: bool = False) -> None: ...

    def emit(self, s: S, depth: int) -> Node: ...


def _encode(alg: _Algebra, s: SObj | SArr) -> str:
    """The check of ``s``'s groups as the mark's JSON text (:func:`.oneof_check.encode_check`);
    refused (``oneOf``) when a reference it reaches is still being normalized."""
    options = getattr(alg, "options", None)
    limit = int(getattr(options, "max_ref_depth", 64)) + 200

    def resolve(key: str) -> S:
        try:
            return alg.resolve(key)
        except Pending:  # (a definition that merges with itself)
            raise UnsupportedFeatureError(
                "oneOf", s.one_of[0].pointer, f"its check reaches {key}, still being built"
            ) from None

    return encode_check(tuple(t.group for t in s.one_of), resolve, limit)


def oneof_object(
    em: _Emits, s: SObj | SArr, depth: int, unsupported: Callable[..., None], alg: _Algebra
) -> Node:
    """The marked rule of an object with run-time ``oneOf`` groups: the object without them,
    then the empty marked rule :data:`END_RULE` (so the marked frame stays on the stacks until
    the object is closed).  The mark carries the check (``check``: see :func:`check_of_mark`).
    Without marks (a grammar printed or used without the matcher) the check cannot run:
    ``unsupported`` is called (refusal, or the object unchecked when lenient).  Raises
    UnsupportedFeatureError (``oneOf``) when the object has no escape members (the proof,
    final: see the module docstring).  Cost: the proof, plus writing the nodes the branches
    reach."""
    base = replace(s, one_of=())
    if not _live_others(alg, s):
        return em.emit(base, depth)  # (narrowed past every other branch: exact, unchecked)
    _prove(alg, s, final=True)
    inner = em.emit(base, depth)
    if em.marks is None:
        unsupported(
            "oneOf",
            s.one_of[0].pointer,
            "its overlapping object branches are told apart at run time, which a grammar "
            "alone cannot carry: compile the schema with a GrammarCompiler",
        )
        return inner
    check = _encode(alg, s)
    if END_RULE not in em.rules:
        em.add_rule(END_RULE, EMPTY)
    name = em._name(ARRAY_RULE if isinstance(s, SArr) else MARKED_RULE_PREFIX + "oneof")
    em.add_rule(name, concat([inner, RuleRef(END_RULE)]))
    em.marks.append(
        UniqueItemsMark(name, s.one_of[0].pointer, canonical=False, kind="oneof", check=check)
    )
    return RuleRef(name)


def check_of_mark(mark: UniqueItemsMark) -> Callable[[bytes], bool]:
    """The check of a ``kind="oneof"`` mark, rebuilt from its ``check`` text:
    ``check(text)`` is True when the object spelled by ``text`` satisfies every group.  The
    answer is a :class:`~.oneof_check.OneOfCheck` (immutable, thread-safe).  Cost: decoding
    the text (linear).

    Raises:
        SerializationError: the mark holds no check of this version (a corrupt file)."""
    return OneOfCheck(mark.check)
