"""The fast paths of the JSON-schema clean-up's inlining (issue #31): :func:`substitute`'s
specialised walk against the generic :func:`rebuild` it replaces, and the identity-memoized
depth of :func:`inline_single_use` against :func:`ir_depth`, on random DAG-shaped IR (shared
subtrees, nested references, repeats)."""

from __future__ import annotations

import random

from formcast.ir.nodes import (
    Node,
    RuleRef,
    alt,
    concat,
    literal,
    node_refs,
    rebuild,
    repeat,
    substitute,
)
from formcast.ir.passes import _ir_depth_shared, ir_depth


def _random_ir(rng: random.Random, pool: list[Node], size: int) -> Node:
    for _ in range(size):
        pick = rng.random()
        if pick < 0.25:
            pool.append(RuleRef(rng.choice("abcde")))
        elif pick < 0.4:
            pool.append(literal(rng.choice(["x", "y", "zz", ""])))
        elif pick < 0.65:
            pool.append(concat(rng.sample(pool, min(len(pool), rng.randint(1, 3)))))
        elif pick < 0.9:
            pool.append(alt(rng.sample(pool, min(len(pool), rng.randint(1, 3)))))
        else:
            lo = rng.randint(0, 2)
            pool.append(repeat(rng.choice(pool), lo, rng.choice([None, lo + 1, lo + 3])))
    return pool[-1]


def _reference_substitute(node: Node, bodies: dict[str, Node]) -> Node:
    names = bodies.keys()
    if names.isdisjoint(node_refs(node)):
        return node

    def leaf(n: Node) -> Node | None:
        return bodies.get(n.name) if isinstance(n, RuleRef) else None

    return rebuild(node, leaf, lambda n: not names.isdisjoint(node_refs(n)))


def test_substitute_matches_the_generic_rebuild() -> None:
    rng = random.Random(31)
    for _ in range(300):
        pool: list[Node] = [literal("s")]
        node = _random_ir(rng, pool, rng.randint(1, 40))
        bodies = {
            name: _random_ir(rng, list(pool), rng.randint(1, 6))
            for name in rng.sample("abcdef", rng.randint(1, 4))
        }
        assert substitute(node, bodies) == _reference_substitute(node, bodies)


def test_shared_depth_memo_matches_ir_depth() -> None:
    rng = random.Random(5)
    memo: dict[int, tuple[Node, int]] = {}
    for _ in range(300):
        pool: list[Node] = [literal("s")]
        node = _random_ir(rng, pool, rng.randint(1, 60))
        assert _ir_depth_shared(node, memo) == ir_depth(node)
        for other in rng.sample(pool, min(5, len(pool))):  # subtrees met again, memo warm
            assert _ir_depth_shared(other, memo) == ir_depth(other)
