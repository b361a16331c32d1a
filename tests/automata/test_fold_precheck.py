"""``nfa._may_fold`` (thompson34): the check that lets the Thompson construction skip
``fold_loops`` on concatenations it cannot change.  It must never say False where a fold would
happen: whenever no star of a concatenation passes it, ``fold_loops`` returns the items
unchanged (the same tuple).  Checked on random concatenations built to fold often (stars over
items equal to, or literals overlapping, the items before them) and on every concatenation of
the IR of JSON schemas and of a GBNF grammar; runs on both builds.
"""

from __future__ import annotations

import random

import pytest

from formcast.automata.nfa import _may_fold
from formcast.frontends.gbnf import parse_gbnf
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.ir.loops import fold_loops
from formcast.ir.nodes import (
    CharSet,
    Concat,
    Empty,
    Literal,
    Node,
    Repeat,
    RuleRef,
    iter_nodes,
)


def _skipped(items: tuple[Node, ...]) -> bool:
    """True when the construction would not call fold_loops on these items."""
    return not any(
        isinstance(item, Repeat)
        and item.min == 0
        and item.max is None
        and _may_fold(items[k - 1], item.item)
        for k, item in enumerate(items)
        if k >= 1
    )


_POOL: list[Node] = [
    Literal(","),
    Literal(", "),
    Literal('"a":'),
    Literal('a":'),
    Literal("[1"),
    Literal("1"),
    CharSet(((48, 57),)),
    CharSet(((97, 122),)),
    RuleRef("x"),
    RuleRef("y"),
    Empty(),
]


def _random_items(rnd: random.Random) -> tuple[Node, ...]:
    items: list[Node] = []
    for _ in range(rnd.randint(1, 6)):
        if items and rnd.random() < 0.5:
            # a star whose body ends like (or overlaps) what comes before it
            tail = items[-rnd.randint(1, len(items)) :]
            body = [*[rnd.choice(_POOL) for _ in range(rnd.randint(0, 2))], *tail]
            if rnd.random() < 0.3:
                body[-1] = rnd.choice(_POOL)
            item: Node = body[0] if len(body) == 1 else Concat(tuple(body))
            items.append(Repeat(item, 0, None))
        else:
            items.append(rnd.choice(_POOL))
    return tuple(items)


@pytest.mark.parametrize("seed", range(400))
def test_skipped_concatenations_do_not_fold(seed: int) -> None:
    items = _random_items(random.Random(seed))
    if _skipped(items):
        assert fold_loops(items) is items


def test_the_check_passes_where_folds_happen() -> None:
    # (the random ones above must fold sometimes, or the test proves nothing)
    folded = sum(
        fold_loops(items) is not items
        for items in (_random_items(random.Random(s)) for s in range(400))
    )
    assert folded > 40
    comma_elem = (Literal("["), RuleRef("e"), Repeat(Concat((Literal(","), RuleRef("e"))), 0, None))
    assert not _skipped(comma_elem)
    assert fold_loops(comma_elem) is not comma_elem
    merged = (Literal("[{"), Repeat(Concat((Literal(","), Literal("{"))), 0, None))
    assert not _skipped(merged)
    assert fold_loops(merged) is not merged


def _concatenations() -> list[tuple[Node, ...]]:
    schemas = [
        {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"a": {"type": "array"}, "b": {"enum": [1, "x"]}}},
    ]
    grammars = [schema_to_grammar(s, marks=[])[0] for s in schemas]
    grammars.append(
        parse_gbnf('root ::= "[" ws item ("," ws item)* "]"\nitem ::= [0-9]+\nws ::= " "*')
    )
    out = []
    for grammar in grammars:
        for rule in grammar.rules:
            out += [n.items for n in iter_nodes(rule.body) if isinstance(n, Concat)]
    return out


def test_real_concatenations() -> None:
    seen = 0
    for items in _concatenations():
        if _skipped(items):
            assert fold_loops(items) is items
        else:
            seen += 1
    assert seen > 0
