"""The builders that skip the frozen dataclasses' ``__init__`` (``make_rule``, the interned
``Concat``/``Alt`` of ``concat``/``alt``) make values equal, in every field, to the
dataclass constructors' (emit32)."""

from __future__ import annotations

import dataclasses

import pytest

from formcast.ir.nodes import (
    EMPTY,
    Alt,
    Concat,
    Literal,
    Rule,
    RuleRef,
    alt,
    concat,
    literal,
    make_rule,
    repeat,
)


@pytest.mark.parametrize("terminal", [False, True])
@pytest.mark.parametrize("lazy", [False, True])
def test_make_rule_equals_the_dataclass(terminal: bool, lazy: bool) -> None:
    body = concat([literal("a"), RuleRef("x")])
    fast = make_rule("r", body, terminal, lazy)
    slow = Rule("r", body, terminal=terminal, lazy=lazy)
    assert fast == slow
    assert hash(fast) == hash(slow)
    assert repr(fast) == repr(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.name = "s"  # type: ignore[misc]


def test_interned_composites_equal_direct_ones() -> None:
    inner = alt([literal("ab"), RuleRef("y"), EMPTY])
    built = [
        concat([literal("x"), inner, repeat(RuleRef("z"), 2, 5)]),
        alt([literal("pq"), concat([RuleRef("y"), literal("w")]), inner]),
    ]
    for node in built:
        assert isinstance(node, (Concat, Alt))
        direct = type(node)(node.items)
        assert node == direct
        assert hash(node) == hash(direct)
        for f in ("size", "refs", "copies", "depth", "_hash"):
            assert getattr(node, f) == getattr(direct, f), f
    assert concat([Literal("x"), inner]) is concat([Literal("x"), inner])
