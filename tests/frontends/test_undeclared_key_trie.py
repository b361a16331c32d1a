"""emit33: the undeclared-key trie (``keys.not_in_set``) built with a per-build memo of
character literals, ``concat2`` and ``new_alt`` is the node of the generic builders' version,
the oracle below (the build as it was before emit33).  front34: the plain branches are built
without ``_diverge``'s process-wide cache (``_plain_rest``/``_plain_node``), so the fuel is no
longer the oracle's: it is at most the oracle's plus the two up-front memo hits, and does not
depend on what the process built before."""

from __future__ import annotations

import random
from typing import Any

from formcast.frontends.jsonschema import keys
from formcast.frontends.jsonschema.strings import encode_text
from formcast.ir.nodes import EMPTY, Alt, Node, concat, literal
from formcast.limits import MEMO_HIT_UNITS, WorkBudget, charge, compile_scope


def _oracle(words: tuple[str, ...], fast: bool = False) -> Node:
    """The recursive build; ``fast``: with the production's branches past a node (plain ones
    built directly, after the two up-front look-ups), so its fuel must be the production's."""
    ends_with = (keys._any_star(), keys._special_tail()) if fast else None
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
            fast_div = _diverge_fast(kids, *ends_with) if ends_with else None
            div = diverged[kids] = fast_div if fast_div is not None else keys._diverge(kids)
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
        assert got[2] == want[2], words
        assert got[1] <= want[1] + 2 * MEMO_HIT_UNITS, words
        same = _run(lambda ws: _oracle(ws, fast=True), words)
        assert got == same, words  # node, fuel (exactly: the build is the recursive one's) and repr


def _fresh_fuel(words: tuple[str, ...]) -> int:
    budget = WorkBudget(1 << 60)
    with compile_scope(budget):
        keys._not_in_sorted.__wrapped__(words)  # type: ignore[attr-defined]
    return budget.used


def test_the_fuel_does_not_depend_on_the_process_caches() -> None:
    words = ("alpha", "beta", "gamma", "gammb", "q\u00e9")
    first = _fresh_fuel(words)
    keys._diverge.__wrapped__(("a", "b"))  # type: ignore[attr-defined]
    for kids in [("a",), ("b", "g"), ("e",), ("a", "b", "g", "q")]:
        keys._diverge(kids)
    assert _fresh_fuel(words) == first


def _diverge_fast(kids: tuple[str, ...], any_star: Node, special: Node) -> tuple[Node, ...] | None:
    plain = keys._plain_rest(kids)
    if plain is None:
        return None
    if not plain:
        return (special,)
    return (concat([keys._plain_node(plain), any_star]), special)


def test_plain_branches_are_diverge_s() -> None:
    """``_plain_rest``/``_plain_node`` give ``_diverge``'s branches wherever they apply (every
    child plain printable ASCII), and decline (None) exactly where they do not."""
    rng = random.Random(3434)
    plain = [chr(c) for c in range(0x20, 0x7F) if c not in (0x22, 0x5C)]
    pool = [*plain, '"', "\\", "\n", "\x7f", "\x1f", "é", "\u2028", "\U0001f600"]
    sets: list[tuple[str, ...]] = [(), tuple(plain), tuple(plain[1:]), tuple(plain[:-1])]
    sets += [tuple(c for c in plain if c != x) for x in (" ", "!", "#", "[", "]", "~", "m")]
    sets += [(c,) for c in pool]
    for _ in range(400):
        src = plain if rng.random() < 0.7 else pool
        sets.append(tuple(sorted(set(rng.sample(src, rng.randint(1, 12))))))
    oracle = keys._diverge.__wrapped__  # type: ignore[attr-defined]
    for kids in sets:
        want = oracle(kids)
        got = _diverge_fast(kids, keys._any_star(), keys._special_tail())
        applies = bool(kids) and all(0x20 <= ord(k) <= 0x7E and k not in '"\\' for k in kids)
        assert (got is not None) == applies, kids
        if got is not None:
            assert got == want, kids
            assert repr(got) == repr(want), kids
