"""Regions grown by a copy and searches that go on after a failed grow (grow40, issue #31).

``cfg_program._copied_region``: a wide start whose new states copy an earlier stable region's
start (the same split flags, moves into the very same lexer states or into new states whose
images share a class) joins that region in its images' classes, and shares its walk
(grammar_bench's json_gbnf: a newline's ``[ \\t]{0,20}`` after four rule positions).  Where no
region grows, ``_search_region`` goes on from the states met in regions (no second search).

Checked on json.gbnf-like grammars (bounded whitespace repetitions) along a pretty-printed
document and seeded random walks:

* every region is closed and its partition the region's own Moore refinement (the oracle of
  test_region_classes), on any build;
* with the module interpreted: the masks equal those with the copy switched off and those of
  plain searches (no grow), bit for bit, and the copy applies (and is refused) on json.gbnf;
* a load keeps the grown regions and their masks.
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import numpy as np
import pytest
from test_region_classes import _moore, _same_partition

import formcast.index.cfg_program as cp
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast._native import compiled_modules
from formcast.automata.dfa import DEAD
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks

JSON_GBNF = r"""root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,BOUND}
"""
DOC = {"a": [1, {"b": "x", "c": [True, None]}], "d": {"e": -2.5, "f": ["g", {}]}, "h": "i"}
INTERPRETED = not compiled_modules()["formcast.index.cfg_program"]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _tokens(vocab: Vocabulary, data: bytes) -> list[int]:
    """``data`` as greedy longest-match text tokens."""
    table = {vocab.tokens[i]: i for i in range(len(vocab.tokens)) if vocab.is_text_token(i)}
    longest = max(len(t) for t in table)
    ids, i = [], 0
    while i < len(data):
        n = next(n for n in range(min(longest, len(data) - i), 0, -1) if data[i : i + n] in table)
        ids.append(table[data[i : i + n]])
        i += n
    return ids


def _run(vocab: Vocabulary, bound: int) -> tuple[CompiledGrammar, np.ndarray]:
    context_for(vocab).cache(cp.SHARED_WALKS).clear()
    grammar = GrammarCompiler(vocab, cache_size=0).compile_grammar(
        JSON_GBNF.replace("BOUND", str(bound))
    )
    doc = json.dumps(DOC, indent=1 if bound < 20 else 2).encode()
    walks = [_tokens(vocab, doc), *random_walks(grammar, walks=3, steps=20, seed=bound)]
    return grammar, replay_masks(grammar, walks)


def _check_regions(positions: Any, depth: int) -> None:
    lexer, xb = positions.lexer, positions.exit_byte
    _, col_of_byte = positions._cut_columns()
    for start, states, part, dpart, sub, cut_split, rep in positions._regions:
        assert states[0] == DEAD
        assert states[1] == start
        table = lexer.table[states].astype(np.int64)
        split = lexer.split[states].copy()
        if xb is not None:
            table[:, xb] = DEAD
            split[:, xb] = False
        split[0] = False
        local = {int(q): i for i, q in enumerate(states.tolist())}
        assert set(np.unique(table).tolist()) <= local.keys()  # closed
        sub256 = np.vectorize(local.__getitem__, otypes=[np.int64])(table)
        assert (sub[:, col_of_byte] == sub256).all()
        assert (cut_split[:, col_of_byte] == split).all()
        want, stable = _moore(sub256, split, depth)
        assert _same_partition(part, want)
        assert (dpart is part) == stable
        assert (dpart[rep] == np.arange(rep.size)).all()


@pytest.mark.parametrize("bound", [20, 6])
def test_regions_are_the_oracle_and_survive_a_load(vocab: Vocabulary, bound: int) -> None:
    grammar, masks = _run(vocab, bound)
    positions: Any = grammar.program._positions
    assert isinstance(positions, cp._LazyExitSplitClassifier)
    assert positions._regions
    _check_regions(positions, max(vocab.trie.max_len, cp._STABLE_ROUNDS))
    loaded = type(grammar).deserialize(grammar.serialize(), vocab)
    lp: Any = loaded.program._positions
    assert len(lp._regions) == len(positions._regions)
    for a, b in zip(lp._regions, positions._regions, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a[1:], b[1:], strict=True))
    doc = json.dumps(DOC, indent=1 if bound < 20 else 2).encode()
    walk = _tokens(vocab, doc)
    assert np.array_equal(replay_masks(loaded, [walk]), masks[: len(walk) + 1])


@pytest.mark.skipif(not INTERPRETED, reason="switches module attributes (interpreted only)")
@pytest.mark.parametrize("bound", [20, 6, 4])
def test_masks_with_and_without_the_copy(vocab: Vocabulary, bound: int) -> None:
    calls: list[bool] = []
    real = cp._copied_region

    def spy(*args: Any) -> Any:
        got = real(*args)
        calls.append(got is not None)
        return got

    with mock.patch.object(cp, "_copied_region", spy):
        grammar, masks = _run(vocab, bound)
    copied: Any = grammar.program._positions
    _check_regions(copied, max(vocab.trie.max_len, cp._STABLE_ROUNDS))
    with mock.patch.object(cp, "_copied_region", return_value=None):
        _, unc = _run(vocab, bound)
    with mock.patch.object(cp, "_GROW_REGIONS", False):
        _, plain = _run(vocab, bound)
    assert np.array_equal(masks, unc)
    assert np.array_equal(masks, plain)
    if bound == 20:  # json_gbnf's case: copies made, and copies refused
        assert True in calls, calls
        assert False in calls, calls


@pytest.mark.skipif(not INTERPRETED, reason="switches module attributes (interpreted only)")
def test_a_failed_grow_searches_on_as_a_plain_search(vocab: Vocabulary) -> None:
    """With the copy off, json_gbnf's failed grows go on from the states met in regions: the
    regions hold the states (as sets) and classes (as partitions) of plain searches."""
    with mock.patch.object(cp, "_copied_region", return_value=None):
        grammar, _ = _run(vocab, 20)
    with mock.patch.object(cp, "_GROW_REGIONS", False):
        plain, _ = _run(vocab, 20)
    g: Any = grammar.program._positions
    p: Any = plain.program._positions
    assert g.lexer.size == p.lexer.size  # (the same rows built: no walk is skipped here)
    by_start = {int(r[0]): r for r in p._regions}
    met = 0
    for start, states, part, *_ in g._regions:
        other = by_start.get(int(start))
        if other is None or other[1].size != states.size:
            continue  # (a grown region: test_grown_regions)
        assert set(states.tolist()) == set(other[1].tolist())
        order = {q: i for i, q in enumerate(other[1].tolist())}
        perm = np.asarray([order[q] for q in states.tolist()])
        assert _same_partition(part, other[2][perm])
        met += 1
    assert met


@pytest.mark.skipif(not INTERPRETED, reason="switches module attributes (interpreted only)")
def test_a_copy_needs_equal_flags_and_classes(vocab: Vocabulary) -> None:
    """``_copied_region`` on json_gbnf's chain regions made without it: a later chain region's
    new states are a copy of an earlier one (found), but not once the earlier region's split
    flags differ past its start, nor once its start moves into two classes on the columns
    that lead the copy's start into one new state (refused: a wrong copy would share a walk)."""
    with mock.patch.object(cp, "_copied_region", return_value=None):
        grammar, _ = _run(vocab, 20)
    cl: Any = grammar.program._positions
    regions = list(cl._regions)
    firsts: dict[int, int] = {}
    for i, r in enumerate(regions):
        for q in r[1].tolist():
            firsts.setdefault(q, i)
    chains = [i for i, r in enumerate(regions) if any(firsts[q] != i for q in r[1].tolist()[1:])]
    assert len(chains) >= 2, chains

    def attempt(a: int, b: int, ra: Any) -> Any:
        states = [int(q) for q in regions[b][1].tolist() if firsts[q] == b]
        assert states[0] == int(regions[b][0])
        cl._regions = [*regions[:a], ra, *regions[a + 1 : b]]
        cl._region_of = None
        cl._region_at(0)  # (rebuilds the map)
        return cp._copied_region(cl, [DEAD, *states], set())

    pairs = [(a, b) for b in chains for a in chains if a < b]
    found = [(a, b) for a, b in pairs if attempt(a, b, regions[a]) == (a, regions[a][1].size)]
    assert found, "no chain region is a copy of an earlier one"
    a, b = found[0]
    start, idx, part, dpart, sub, cut_split, rep = regions[a]
    flipped = cut_split.copy()
    flipped[2:, 0] = ~flipped[2:, 0]
    got = attempt(a, b, (start, idx, part, dpart, sub, flipped, rep))
    assert got is None or got[0] != a
    # the start's columns into its chain's next state: one of them now into the start itself
    nxt = [j for j in range(sub.shape[1]) if sub[1, j] not in (DEAD, 1)]
    assert nxt
    row = sub[1, nxt].tolist()
    twice = [j for j in nxt if row.count(int(sub[1, j])) > 1]
    assert twice, "no two columns into one state"
    moved = sub.copy()
    moved[1, twice[-1]] = 1
    assert part[1] != part[sub[1, twice[-1]]]
    got = attempt(a, b, (start, idx, part, dpart, moved, cut_split, rep))
    assert got is None or got[0] != a
