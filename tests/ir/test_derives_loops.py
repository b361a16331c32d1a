"""front35: ``_derives_lazy`` with its ``all``/``any`` written out as loops gives the answers
of a plain recursive definition, and memoizes the same nodes (it stops where they stopped)."""

from __future__ import annotations

import random

from formcast.ir.nodes import (
    EMPTY,
    NOTHING,
    Alt,
    CharSet,
    Concat,
    Literal,
    Node,
    Repeat,
    RuleRef,
    alt,
    concat,
    literal,
    repeat,
)
from formcast.ir.passes import node_nullable, node_productive

_NAMES = [f"r{i}" for i in range(5)]


def _oracle(n: Node, rules: set[str], empty_only: bool) -> bool:
    if n is EMPTY or type(n).__name__ == "Empty":
        return True
    if isinstance(n, Literal):
        return not n.text if empty_only else True
    if isinstance(n, CharSet):
        return not empty_only
    if type(n).__name__ == "Nothing":
        return False
    if isinstance(n, RuleRef):
        return n.name in rules
    if isinstance(n, Concat):
        return all(_oracle(k, rules, empty_only) for k in n.items)
    if isinstance(n, Alt):
        return any(_oracle(k, rules, empty_only) for k in n.items)
    assert isinstance(n, Repeat)
    return n.min == 0 or _oracle(n.item, rules, empty_only)


def _visited(n: Node, rules: set[str], empty_only: bool, out: list[int]) -> bool:
    """The oracle, recording the composite nodes whose answer it computed (in order)."""
    if isinstance(n, Concat):
        got = all(_visited(k, rules, empty_only, out) for k in n.items)
    elif isinstance(n, Alt):
        got = any(_visited(k, rules, empty_only, out) for k in n.items)
    elif isinstance(n, Repeat):
        got = n.min == 0 or _visited(n.item, rules, empty_only, out)
    else:
        return _oracle(n, rules, empty_only)
    out.append(id(n))
    return got


def _random_node(rng: random.Random, pool: list[Node], depth: int) -> Node:
    roll = rng.random()
    if depth <= 0 or roll < 0.3:
        return rng.choice(
            [RuleRef(rng.choice(_NAMES)), literal(rng.choice(["a", "bc"])), EMPTY, NOTHING]
        )
    if pool and roll < 0.4:
        return rng.choice(pool)
    kids = [_random_node(rng, pool, depth - 1) for _ in range(rng.randint(1, 4))]
    made = concat(kids) if roll < 0.65 else alt(kids) if roll < 0.85 else repeat(kids[0], 1, 2)
    pool.append(made)
    return made


def test_answers_and_memo_match_the_recursive_definition() -> None:
    rng = random.Random(35)
    for _ in range(1500):
        node = _random_node(rng, [], rng.randint(0, 6))
        rules = set(rng.sample(_NAMES, rng.randint(0, len(_NAMES))))
        assert node_productive(node, rules) == _oracle(node, rules, False)
        memo: dict[int, tuple[Node, bool]] = {}
        want_ids: list[int] = []
        want = _visited(node, rules, True, want_ids)
        assert node_nullable(node, rules, memo) == want
        assert list(memo) == list(dict.fromkeys(want_ids))
