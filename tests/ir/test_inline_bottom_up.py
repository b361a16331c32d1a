"""``inline_single_use`` builds each body once, bottom-up: a differential test against the
round-by-round substitution it replaced (kept here as the oracle).

Random rule tables (chains and trees of single-use rules, shared rules, cycles, literals that
join across a substitution, alternatives whose characters merge, ``Nothing``/``Empty``
bodies) with small depth limits, so that the depth checks the upper bound cannot settle (and
the exact builds they trigger) are exercised; and the JSON Schema front-end's grammars for a
spread of schemas.  The grammar, the rule table's order and the reference lists must match.
"""

from __future__ import annotations

import random

import pytest

from formcast.frontends.jsonschema import emit as emit_mod
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.ir.marks import is_marked_rule
from formcast.ir.nodes import (
    EMPTY,
    NOTHING,
    Node,
    Rule,
    RuleRef,
    alt,
    concat,
    literal,
    node_depth,
    repeat,
    substitute,
)
from formcast.ir.passes import drop_unreachable, inline_single_use, rule_refs


def _passwise(
    by_name: dict[str, Rule],
    refs: dict[str, list[str]],
    start: str,
    *,
    max_depth: int,
    max_passes: int,
) -> None:
    """The round-by-round ``inline_single_use`` (session 17): every round substitutes into
    each user's body at once."""
    counts: dict[str, int] = {}
    holder: dict[str, str] = {}
    for n, rs in refs.items():
        for m in rs:
            counts[m] = counts.get(m, 0) + 1
            holder[m] = n
    depth: dict[str, int] = {}

    def depth_of(name: str) -> int:
        got = depth.get(name)
        if got is None:
            got = depth[name] = node_depth(by_name[name].body)
        return got

    for _ in range(max_passes):
        plan: dict[str, list[str]] = {}
        for n, c in counts.items():
            if c != 1 or n == start or n not in by_name or by_name[n].terminal:
                continue
            if is_marked_rule(n):
                continue
            user = holder[n]
            if user == n or user not in by_name or n in refs[n] or n in plan:
                continue
            plan.setdefault(user, []).append(n)
        progress = False
        inlined = {c for cs in plan.values() for c in cs}
        for user, children in plan.items():
            if user not in by_name or user in inlined:
                continue
            room = max_depth - depth_of(user)
            chosen = [ch for ch in children if depth_of(ch) <= room]
            if not chosen:
                continue
            ur = by_name[user]
            body = substitute(ur.body, {ch: by_name[ch].body for ch in chosen})
            by_name[user] = Rule(ur.name, body, ur.terminal, ur.lazy)
            depth.pop(user, None)
            gone = set(chosen)
            refs[user] = [x for x in refs[user] if x not in gone]
            for child in chosen:
                refs[user].extend(refs[child])
                for m in refs[child]:
                    holder[m] = user
                del by_name[child]
                del refs[child]
                counts.pop(child, None)
            progress = True
        if not progress:
            break


def _random_table(rng: random.Random, size: int) -> dict[str, Rule]:
    names = [f"r{i}" for i in range(size)]

    def leaf() -> Node:
        k = rng.random()
        if k < 0.05:
            return NOTHING
        if k < 0.1:
            return EMPTY
        if k < 0.5:
            return literal(rng.choice("abc") * rng.randint(1, 2))
        # mostly later rules (trees and chains), sometimes any rule (sharing, cycles)
        i = names.index(current[0])
        pool = names[i + 1 :] if rng.random() < 0.85 and i + 1 < size else names
        return RuleRef(rng.choice(pool))

    def node(d: int) -> Node:
        if d <= 0 or rng.random() < 0.3:
            return leaf()
        k = rng.random()
        kids = [node(d - 1) for _ in range(rng.randint(1, 3))]
        if k < 0.45:
            return concat(kids)
        if k < 0.9:
            return alt(kids)
        return repeat(kids[0], rng.randint(0, 1), rng.choice([1, 2, None]))

    current = [""]
    table: dict[str, Rule] = {}
    for n in names:
        current[0] = n
        table[n] = Rule(n, node(rng.randint(0, 4)), terminal=rng.random() < 0.05)
    return table


@pytest.mark.parametrize("seed", range(60))
def test_bottom_up_inlining_matches_the_rounds_on_random_tables(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(20):
        table = _random_table(rng, rng.randint(2, 25))
        max_depth = rng.choice([2, 3, 4, 6, 8, 40])
        max_passes = rng.choice([1, 2, 3, 8])
        a, b = dict(table), dict(table)
        ra, rb = rule_refs(a), rule_refs(b)
        _passwise(a, ra, "r0", max_depth=max_depth, max_passes=max_passes)
        inline_single_use(b, rb, "r0", max_depth=max_depth, max_passes=max_passes)
        assert list(a) == list(b)
        assert a == b
        assert ra == rb
        assert drop_unreachable(a, ra, "r0") == drop_unreachable(b, rb, "r0")


def test_a_long_chain_is_cut_by_the_passes_and_by_depth() -> None:
    # r0 -> r1 -> ... -> r20, each used once, each nesting one level deeper
    table = {
        f"r{i}": Rule(f"r{i}", alt([literal("x"), concat([literal("y"), RuleRef(f"r{i + 1}")])]))
        for i in range(20)
    }
    table["r20"] = Rule("r20", literal("z"))
    for max_depth, max_passes in ((40, 8), (12, 8), (40, 30), (7, 30)):
        a, b = dict(table), dict(table)
        ra, rb = rule_refs(a), rule_refs(b)
        _passwise(a, ra, "r0", max_depth=max_depth, max_passes=max_passes)
        inline_single_use(b, rb, "r0", max_depth=max_depth, max_passes=max_passes)
        assert a == b
        assert list(a) == list(b)
        assert ra == rb
        assert len(b) < len(table)


_SCHEMAS = [
    {
        "type": "object",
        "properties": {f"k{i}": {"type": "integer"} for i in range(12)},
        "required": [f"k{i}" for i in range(12)],
    },
    {
        "type": "object",
        "properties": {f"k{i}": {"type": "string"} for i in range(9)},
        "required": ["k0", "k3", "k8"],
        "additionalProperties": {"type": "number"},
    },
    {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "properties": {
                    "b": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"c": {"enum": ["x", "y"]}, "d": {"type": "boolean"}},
                            "required": ["c", "d"],
                        },
                    }
                },
            },
            "e": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
        },
        "required": ["a"],
        "minProperties": 1,
        "maxProperties": 2,
    },
    {
        "type": "array",
        "items": {"$ref": "#/$defs/n"},
        "$defs": {
            "n": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}},
                },
                "required": ["v"],
            }
        },
    },
]


@pytest.mark.parametrize("schema", _SCHEMAS)
def test_json_schema_grammars_match_the_rounds(
    schema: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, _ = schema_to_grammar(schema, marks=[])  # type: ignore[arg-type]
    monkeypatch.setattr(emit_mod, "inline_single_use", _passwise)
    theirs, _ = schema_to_grammar(schema, marks=[])  # type: ignore[arg-type]
    assert str(mine) == str(theirs)
