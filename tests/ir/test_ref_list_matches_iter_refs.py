"""front35: ``passes._ref_list`` (what ``rule_refs`` and ``drop_unproductive`` use) is
``list(iter_refs(node))``: the same names in the same order, on random IR DAGs and on the
rule tables of emitted JSON-Schema grammars (the order decides the inliner's candidates)."""

from __future__ import annotations

import random

from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.ir.nodes import EMPTY, Node, RuleRef, alt, concat, iter_refs, literal, repeat
from formcast.ir.passes import _ref_list, rule_refs

_NAMES = [f"r{i}" for i in range(6)]


def _random_node(rng: random.Random, pool: list[Node], depth: int) -> Node:
    roll = rng.random()
    if depth <= 0 or roll < 0.25:
        return rng.choice([RuleRef(rng.choice(_NAMES)), literal(rng.choice("abc")), EMPTY])
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


def test_random_dags() -> None:
    rng = random.Random(35)
    seen_refs = 0
    for _ in range(800):
        node = _random_node(rng, [], rng.randint(0, 7))
        want = list(iter_refs(node))
        assert _ref_list(node) == want
        seen_refs += len(want) > 1
    assert seen_refs > 100  # orders of several references were compared


def test_schema_rule_tables() -> None:
    schemas: list[object] = [
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
        {
            "type": "object",
            "properties": {"a": {"type": "object", "properties": {"c": {"type": "array"}}}},
            "required": ["a"],
            "minProperties": 2,
        },
        {"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "number"}}},
        {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "array", "maxItems": 2}]},
        {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "$ref": "#/$defs/t"},
    ]
    for schema in schemas:
        grammar, _ = schema_to_grammar(schema)
        by_name = grammar.rule_map()
        assert rule_refs(by_name) == {n: list(iter_refs(r.body)) for n, r in by_name.items()}
