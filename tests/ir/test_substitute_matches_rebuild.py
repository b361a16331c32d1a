"""``substitute``'s own loop against :func:`rebuild` with the leaf/descent it replaced (the
oracle): same result (equal, and the same object wherever the oracle keeps a subtree), same
fuel charged, on random IR DAGs (shared subtrees, nested repeats, literals that join across a
substitution, characters that merge in alternatives, ``Nothing``/``Empty`` bodies) and on the
JSON Schema front-end's rule tables."""

from __future__ import annotations

import random

from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.ir.nodes import (
    EMPTY,
    NOTHING,
    Node,
    RuleRef,
    alt,
    concat,
    iter_nodes,
    literal,
    node_refs,
    rebuild,
    repeat,
    substitute,
)
from formcast.limits import metered

_NAMES = [f"r{i}" for i in range(6)]


def _oracle(node: Node, bodies: dict[str, Node]) -> Node:
    names = bodies.keys()
    if names.isdisjoint(node_refs(node)):
        return node

    def leaf(n: Node) -> Node | None:
        return bodies.get(n.name) if isinstance(n, RuleRef) else None

    return rebuild(node, leaf, lambda n: not names.isdisjoint(node_refs(n)))


def _random_node(rng: random.Random, pool: list[Node], depth: int) -> Node:
    roll = rng.random()
    if depth <= 0 or roll < 0.25:
        leaves: list[Node] = [
            RuleRef(rng.choice(_NAMES)),
            literal(rng.choice("abc")),
            literal("xy"),
            EMPTY,
        ]
        return rng.choice(leaves)
    if pool and roll < 0.4:
        return rng.choice(pool)  # a shared subtree (a DAG)
    kids = [_random_node(rng, pool, depth - 1) for _ in range(rng.randint(1, 4))]
    if roll < 0.65:
        made = concat(kids)
    elif roll < 0.85:
        made = alt(kids)
    else:
        made = repeat(kids[0], rng.randint(0, 2), rng.choice([None, 1, 3]))
    pool.append(made)
    return made


def _bodies(rng: random.Random) -> dict[str, Node]:
    choices: list[Node] = [
        literal("a"),
        literal("zz"),
        NOTHING,
        EMPTY,
        alt([literal("b"), literal("c")]),
        concat([literal("q"), RuleRef("r5")]),
        RuleRef("r0"),
    ]
    return {n: rng.choice(choices) for n in rng.sample(_NAMES, rng.randint(1, 4))}


def _same(got: Node, want: Node) -> None:
    assert got == want
    # wherever the oracle kept a node, the loop keeps the same object
    for g, w in zip(iter_nodes(got), iter_nodes(want), strict=True):
        assert g == w
        assert (g is w) or type(g) is type(w)


def _check(node: Node, bodies: dict[str, Node]) -> None:
    got, fuel = metered(lambda: substitute(node, bodies))
    want, want_fuel = metered(lambda: _oracle(node, bodies))
    _same(got, want)
    assert (got is node) == (want is node)
    assert fuel == want_fuel


def test_random_dags_match_rebuild() -> None:
    rng = random.Random(33)
    for _ in range(600):
        pool: list[Node] = []
        node = _random_node(rng, pool, rng.randint(1, 7))
        _check(node, _bodies(rng))


def test_large_dag_fuel_matches() -> None:
    rng = random.Random(7)
    for _ in range(5):
        pool: list[Node] = []
        parts = [_random_node(rng, pool, 6) for _ in range(400)]
        node = concat([alt(parts[i : i + 3]) for i in range(0, len(parts), 3)])
        _check(node, _bodies(rng))


def test_schema_rule_tables_match() -> None:
    schemas: list[dict[str, object]] = [
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
        {"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "number"}}},
        {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "array", "maxItems": 2}]},
        {"type": "object", "additionalProperties": {"type": "boolean"}, "minProperties": 1},
    ]
    for schema in schemas:
        grammar, _ = schema_to_grammar(schema)
        rules = grammar.rule_map()
        names = list(rules)
        for i in range(len(names)):
            bodies = {n: rules[n].body for n in names[i:]}
            for name in names:
                _check(rules[name].body, bodies)


def test_count_refs_matches_iter_refs() -> None:
    from collections import Counter

    from formcast.ir.nodes import iter_refs
    from formcast.ir.passes import _count_refs

    rng = random.Random(5)
    for _ in range(600):
        pool: list[Node] = []
        node = _random_node(rng, pool, rng.randint(1, 7))
        uses = dict.fromkeys(_NAMES, 0)
        _count_refs(node, uses)
        want = Counter(iter_refs(node))
        assert uses == {n: want.get(n, 0) for n in _NAMES}
