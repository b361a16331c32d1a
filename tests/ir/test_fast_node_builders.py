"""emit33's cheaper IR construction gives the same values as the dataclass constructors:
the leaves' written-out ``__hash__``/``__eq__`` (Literal, RuleRef, CharSet, Empty, Nothing)
agree with the dataclasses' field-tuple equality, the fast builders (``rule_ref``, the
``Literal``s of ``literal``/``concat``/``alt``, ``repeat``'s ``Repeat``, ``new_alt``) equal
the class constructors in every field, ``concat2`` is ``concat`` of two (node and fuel), and
the interning table's references are ``KeyedRef``s with their key and callback."""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any
from weakref import KeyedRef

import pytest

from formcast.ir import nodes
from formcast.ir.nodes import (
    EMPTY,
    NOTHING,
    Alt,
    ByteSet,
    CharSet,
    Concat,
    Empty,
    Literal,
    Node,
    Nothing,
    Repeat,
    RuleRef,
    alt,
    concat,
    concat2,
    literal,
    new_alt,
    repeat,
    rule_ref,
)
from formcast.limits import HashedKey, WorkBudget, compile_scope

_LEAVES: list[Node] = [
    Literal("a"),
    Literal("ab"),
    Literal(""),
    RuleRef("a"),
    RuleRef("ab"),
    CharSet(((97, 97),)),
    CharSet(((97, 98), (100, 120))),
    ByteSet(((97, 97),)),
    Empty(),
    Nothing(),
]


def _fields(n: Node) -> tuple[Any, ...]:
    return (type(n), *(getattr(n, f.name) for f in dataclasses.fields(n)))  # type: ignore[arg-type]


@pytest.mark.parametrize(("a", "b"), list(itertools.product(_LEAVES, _LEAVES)))
def test_leaf_equality_and_hash_are_the_field_tuples(a: Node, b: Node) -> None:
    # the dataclasses' own definition: same class and equal field tuples
    same = _fields(a) == _fields(b)
    copy_b = type(b)(*[getattr(b, f.name) for f in dataclasses.fields(b)])  # type: ignore[arg-type]
    assert (a == copy_b) is same
    assert (a != copy_b) is (not same)
    if same:
        assert hash(a) == hash(copy_b)
    assert (a == "a") is False


def test_fast_leaves_equal_the_constructors() -> None:
    for text in ("x", "xyz", "é"):
        fast = literal(text)
        assert type(fast) is Literal
        assert fast == Literal(text)
        assert repr(fast) == repr(Literal(text))
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.text = "y"  # type: ignore[attr-defined]
        ref = rule_ref(text)
        assert type(ref) is RuleRef
        assert ref == RuleRef(text)
        assert hash(ref) == hash(RuleRef(text))
        with pytest.raises(dataclasses.FrozenInstanceError):
            ref.name = "y"  # type: ignore[misc]
    joined = concat([literal("ab"), literal("cd")])
    assert type(joined) is Literal
    assert joined == Literal("abcd")
    single = alt([literal("q"), CharSet(((113, 113),))])
    assert type(single) is Literal
    assert single == Literal("q")


def _composite_fields(n: Node) -> dict[str, Any]:
    names = ("items",) if isinstance(n, (Concat, Alt)) else ("item", "min", "max")
    return {f: getattr(n, f) for f in (*names, "_hash", "size", "refs", "copies", "depth")}


def test_fast_repeat_and_new_alt_equal_the_constructors() -> None:
    inner = concat([literal("k"), RuleRef("v"), repeat(CharSet(((48, 57),)), 1, 3)])
    for lo, hi in ((0, None), (2, 5), (0, 1), (3, 3)):
        r = repeat(inner, lo, hi)
        assert type(r) is Repeat
        direct = Repeat(inner, lo, hi)
        assert r == direct
        assert hash(r) == hash(direct)
        assert _composite_fields(r) == _composite_fields(direct)
    items = (EMPTY, inner, Concat((literal("z"), RuleRef("w"))))
    fast = new_alt(items)
    direct_alt = Alt(items)
    assert type(fast) is Alt
    assert fast == direct_alt
    assert hash(fast) == hash(direct_alt)
    assert _composite_fields(fast) == _composite_fields(direct_alt)
    assert fast is not new_alt(items)  # as the class builds it: not interned


def _pool() -> list[Node]:
    a = alt([literal("x"), RuleRef("r")])
    return [
        *_LEAVES,
        concat([literal("p"), RuleRef("q")]),
        concat([RuleRef("q"), literal("p")]),
        Concat((Literal("a"), EMPTY, Literal("b"))),  # made directly: not normalised
        Concat((NOTHING, RuleRef("n"))),
        a,
        repeat(a, 0, None),
    ]


def _fuel(build: Any) -> tuple[Node, int]:
    budget = WorkBudget(1 << 60)
    with compile_scope(budget):
        node = build()
    return node, budget.used


@pytest.mark.parametrize(("a", "b"), list(itertools.product(_pool(), _pool())))
def test_concat2_is_concat_of_two(a: Node, b: Node) -> None:
    want, want_fuel = _fuel(lambda: concat([a, b]))
    got, got_fuel = _fuel(lambda: concat2(a, b))
    assert got == want
    assert type(got) is type(want)
    assert got_fuel == want_fuel
    if isinstance(want, (Concat, Alt)):
        assert got is want  # both interned


def test_the_interning_references_are_keyed_refs() -> None:
    node = concat([literal("emit33-keyed"), RuleRef("emit33_keyed")])
    key = (Concat, node.items)  # type: ignore[attr-defined]
    ref = nodes._INTERNED[HashedKey(key)]
    assert type(ref) is KeyedRef
    assert ref.key == HashedKey(key)
    assert ref() is node
    assert ref.__callback__ is nodes._forget


def test_random_trees_hash_and_compare_as_the_constructors_build_them() -> None:
    rng = random.Random(33)
    for _ in range(300):
        parts = [rng.choice(_pool()) for _ in range(rng.randint(0, 4))]
        build = concat if rng.random() < 0.5 else alt
        built = build(parts)
        again = build(list(parts))
        assert built == again
        assert hash(built) == hash(again)
        if isinstance(built, (Concat, Alt)):
            direct = type(built)(built.items)
            assert built == direct
            assert hash(built) == hash(direct)
