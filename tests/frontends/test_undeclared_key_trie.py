"""emit33: the undeclared-key trie (``keys.not_in_set``) built with a per-build memo of
character literals, ``concat2`` and ``new_alt`` is the node (and the fuel) of the generic
builders' version, the oracle below (the build as it was before emit33)."""

from __future__ import annotations

import random
from typing import Any

from formcast.frontends.jsonschema import keys
from formcast.frontends.jsonschema.strings import encode_text
from formcast.ir.nodes import EMPTY, Alt, Node, concat, literal
from formcast.limits import MEMO_HIT_UNITS, WorkBudget, charge, compile_scope


def _oracle(words: tuple[str, ...]) -> Node:
    root: list[Any] = [{}, False]
    for w in words:
        t = root
        for ch in w:
            kids = t[0]
            nxt = kids.get(ch)
            if nxt is None:
                nxt = kids[ch] = [{}, False]
            t = nxt
        t[1] = True
    diverged: dict[tuple[str, ...], tuple[Node, ...]] = {}

    def build(t: list[Any]) -> Node:
        children: dict[str, Any] = t[0]
        ends = t[1]
        charge(2 + len(children) + ends)
        kids = tuple(children)
        branches: list[Node] = [] if ends else [EMPTY]
        for k in kids:
            branches.append(concat([literal(encode_text(k)), build(children[k])]))
        div = diverged.get(kids)
        if div is None:
            div = diverged[kids] = keys._diverge(kids)
        else:
            charge(MEMO_HIT_UNITS)
        branches.extend(div)
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    return build(root)


def _run(fn: Any, words: tuple[str, ...]) -> tuple[Node, int, str]:
    budget = WorkBudget(1 << 60)
    with compile_scope(budget):
        keys._diverge("warm")  # (the same memo state for both builds)
        start = budget.used
        node = fn(words)
    return node, budget.used - start, repr(node)


def test_the_trie_is_the_generic_builders_trie() -> None:
    rng = random.Random(3311)
    alphabet = 'abcxyz_"\\é\n-'
    sets = [(), ("",), ("a",), ("a", "ab", "abc"), ("name", "type", "id", "description")]
    for _ in range(150):
        n = rng.randint(1, 12)
        words = {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(n)}
        sets.append(tuple(sorted(words)))
    build = keys._not_in_sorted.__wrapped__  # type: ignore[attr-defined]
    for words in sets:
        got = _run(build, words)
        want = _run(_oracle, words)
        assert got[0] == want[0], words
        assert got[1:] == want[1:], words
