"""front35: the undeclared-key trie read off the sorted words (runs, and a loop per one-word
tail) is the recursive trie build's node, repr and fuel, on key sets like real schemas' (long
shared prefixes, one-word tails, escapes, non-ASCII), and a very long key no longer recurses
once per character."""

from __future__ import annotations

import random
import sys
from typing import Any

from formcast.frontends.jsonschema import keys
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.jsonschema.strings import encode_text
from formcast.ir.nodes import EMPTY, Node, concat2, literal, new_alt
from formcast.limits import MEMO_HIT_UNITS, WorkBudget, charge, compile_scope


def _recursive(words: tuple[str, ...]) -> Node:
    """The build as it was (front34): a dict trie, one frame per trie node."""
    root: list[Any] = [{}, False]
    for w in words:
        t = root
        for ch in w:
            t = t[0].setdefault(ch, [{}, False])
        t[1] = True
    diverged: dict[tuple[str, ...], tuple[Node, ...]] = {}
    any_star = keys._any_star()
    special = keys._special_tail()

    def build(t: list[Any]) -> Node:
        children: dict[str, Any] = t[0]
        ends = t[1]
        charge(2 + len(children) + ends)
        kids = tuple(children)
        branches: list[Node] = [] if ends else [EMPTY]
        for k in kids:
            branches.append(concat2(literal(encode_text(k)), build(children[k])))
        div = diverged.get(kids)
        if div is None:
            plain = keys._plain_rest(kids)
            if plain is None:
                div = keys._diverge(kids)
            elif plain:
                div = (concat2(keys._plain_node(plain), any_star), special)
            else:
                div = (special,)
            diverged[kids] = div
        else:
            charge(MEMO_HIT_UNITS)
        branches.extend(div)
        return branches[0] if len(branches) == 1 else new_alt(tuple(branches))

    return build(root)


def _run(fn: Any, words: tuple[str, ...]) -> tuple[Node, int, str]:
    budget = WorkBudget(1 << 60)
    with compile_scope(budget):
        keys._any_star()
        keys._special_tail()
        keys._diverge("warm")
        start = budget.used
        node = fn(words)
    return node, budget.used - start, repr(node)


def _sets() -> list[tuple[str, ...]]:
    rng = random.Random(35)
    stems = ["name", "type", "id", "description", "created_at", "createdBy", "x-", "é", 'q"', "\\"]
    out: list[tuple[str, ...]] = [(), ("",), ("", "a"), ("ab", "abc", "abd"), ("a" * 40,)]
    for _ in range(300):
        ws: set[str] = set()
        for _ in range(rng.randint(1, 14)):
            w = "".join(rng.choice(stems) for _ in range(rng.randint(0, 3)))
            if rng.random() < 0.3:
                w += "".join(rng.choice("abcz09_-.") for _ in range(rng.randint(0, 12)))
            ws.add(w)
        out.append(tuple(sorted(ws)))
    return out


def test_runs_build_is_the_recursive_build() -> None:
    build = keys._not_in_sorted.__wrapped__  # type: ignore[attr-defined]
    for words in _sets():
        got = _run(build, words)
        want = _run(_recursive, words)
        assert got[0] == want[0], words
        assert got[1] == want[1], words  # fuel, exactly
        assert got[2] == want[2], words


def test_a_very_long_key_needs_no_deep_recursion() -> None:
    n = sys.getrecursionlimit() + 500
    schema = {"type": "object", "properties": {"k" * n: {"type": "integer"}}}
    grammar, _ = schema_to_grammar(schema, marks=[])
    assert grammar.rules
