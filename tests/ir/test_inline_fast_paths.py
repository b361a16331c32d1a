"""The nesting depth composite IR nodes cache at construction (issue #31: the JSON-schema
clean-up's inlining asks :func:`ir_depth` of every candidate, which walked the whole tree)
against a walk of the tree, on random DAG-shaped IR (shared subtrees, references, repeats,
nodes built by the classes directly)."""

from __future__ import annotations

import random

from formcast.ir.nodes import Alt, Concat, Node, Repeat, RuleRef, alt, concat, literal, repeat
from formcast.ir.passes import ir_depth


def _walked_depth(node: Node) -> int:
    best = 0
    stack = [(node, 1)]
    while stack:
        n, d = stack.pop()
        best = max(best, d)
        if isinstance(n, (Concat, Alt)):
            stack.extend((i, d + 1) for i in n.items)
        elif isinstance(n, Repeat):
            stack.append((n.item, d + 1))
    return best


def _random_ir(rng: random.Random, size: int) -> list[Node]:
    pool: list[Node] = [literal("s")]
    for _ in range(size):
        pick = rng.random()
        kids = rng.sample(pool, min(len(pool), rng.randint(0, 3)))
        if pick < 0.2:
            pool.append(RuleRef(rng.choice("abc")))
        elif pick < 0.3:
            pool.append(literal(rng.choice(["x", "y", "zz", ""])))
        elif pick < 0.5:
            pool.append(concat(kids))
        elif pick < 0.7:
            pool.append(alt(kids))
        elif pick < 0.8:
            pool.append(Concat(tuple(kids)) if rng.random() < 0.5 else Alt(tuple(kids)))
        else:
            lo = rng.randint(0, 2)
            pool.append(repeat(rng.choice(pool), lo, rng.choice([None, lo + 1, lo + 3])))
    return pool


def test_cached_depth_matches_a_walk_of_the_tree() -> None:
    rng = random.Random(31)
    for _ in range(300):
        for node in _random_ir(rng, rng.randint(1, 60)):
            assert ir_depth(node) == _walked_depth(node)
    assert ir_depth(Concat(())) == 1
    assert ir_depth(literal("x")) == 1
