"""Grown regions past R's classes x new states (region39, issue #31): ``_grown_region`` finds
the candidate pairs (new state, class of the region with its split flags and its moves into
classes) with numpy (``cfg_program._grow_candidates``), bounds them (``_GROW_CELLS``) rather
than new states x classes, and ``equivalence.grown_classes_of`` takes the greatest relation
by removals (each pair dropped once) rather than by passes.  Checked:

* ``_grow_candidates`` against a brute-force comparison on random class rows and new states
  (twins of classes: hits; moves into new states not compared; the dead class never);
* ``grown_classes_of`` against the previous passes-until-stable relation (kept here as the
  oracle) and against a refinement, on the random cases of test_grown_regions, and on long
  cycles of new states each alike to one of a cycle of classes (json.gbnf's ``[ \\t]{0,20}``
  grown a second time: a pair is dropped only after the drops around the cycle reach it);
* llama.cpp's json.gbnf (whose new starts meet its value region of ~270 classes with 22 new
  states, past the former new states x classes bound): regions grown there, every region
  closed and its partition the Moore oracle's, keys and digests as growing off, masks equal.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
import test_grown_regions as tgr
from test_region_classes import _moore, _same_partition

import formcast.index.cfg_program as cp
from formcast import Vocabulary
from formcast.automata.equivalence import grown_classes_of
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks

JSON_GBNF = r"""root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
"""


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _passes(
    n_cls: int, class_rows: list[list[int]], cand: list[list[int]], codes: list[list[int]]
) -> list[list[int]]:
    """The previous greatest relation (session 23): passes over every pair until none drops."""
    cand = [list(c) for c in cand]
    new_cols = [[(j, t - n_cls) for j, t in enumerate(code) if t >= n_cls] for code in codes]
    changed = True
    while changed:
        changed = False
        for i in range(len(codes)):
            keep = [c for c in cand[i] if all(class_rows[c][j] in cand[m] for j, m in new_cols[i])]
            if len(keep) != len(cand[i]):
                cand[i] = keep
                changed = True
    return cand


def _brute(
    class_of: np.ndarray, class_split: np.ndarray, codes: np.ndarray, split: np.ndarray
) -> list[tuple[int, int]]:
    n_cls = class_of.shape[0]
    out = []
    for i in range(codes.shape[0]):
        for c in range(1, n_cls):
            old = codes[i] < n_cls
            if (class_split[c] == split[i]).all() and (class_of[c][old] == codes[i][old]).all():
                out.append((i, c))
    return out


def test_grow_candidates_are_the_brute_force_pairs() -> None:
    rng = np.random.default_rng(39)
    hits = 0
    for _ in range(300):
        class_rows, class_flags, codes, flags, n_cls = tgr._random_case(rng)
        if rng.random() < 0.5:  # wide rows, class numbers up to the bound's size
            w = int(rng.integers(30, 257))
            n_cls = int(rng.integers(2, 1100))
            class_rows = rng.integers(0, 3, size=(n_cls, w)) * int(rng.integers(1, n_cls))
            class_flags = rng.random((n_cls, w)) < 0.02
            k = int(rng.integers(1, 33))
            pick = rng.integers(1, n_cls, size=k)
            codes = class_rows[pick].copy()
            flags = class_flags[pick].copy()
            codes[rng.random((k, w)) < 0.05] = n_cls + int(rng.integers(0, k))
            codes[rng.random((k, w)) < 0.01] = int(rng.integers(0, n_cls))
        got = cp._grow_candidates(
            np.asarray(class_rows), np.asarray(class_flags), np.asarray(codes, np.int64), flags
        )
        pairs = list(zip(got[0].tolist(), got[1].tolist(), strict=True))
        assert pairs == _brute(np.asarray(class_rows), np.asarray(class_flags), codes, flags)
        hits += len(pairs)
    assert hits > 300


def test_grown_classes_of_as_the_passes_and_a_refinement() -> None:
    rng = np.random.default_rng(23)
    for _ in range(400):
        class_rows, class_flags, codes, flags, n_cls = tgr._random_case(rng)
        got = cp._grow_candidates(class_rows, class_flags, codes.astype(np.int64), flags)
        cand: list[list[int]] = [[] for _ in range(codes.shape[0])]
        for i, c in zip(got[0].tolist(), got[1].tolist(), strict=True):
            cand[i].append(c)
        rows, code_list = class_rows.tolist(), codes.tolist()
        want = _passes(n_cls, rows, cand, code_list)
        out = grown_classes_of(n_cls, rows, cand, code_list, [r.tobytes() for r in flags])
        assert out is not None
        new_part, _ = out
        matched = [c if c < n_cls else -1 for c in new_part]
        assert matched == [c[0] if c else -1 for c in want]
        oracle, stable = tgr._oracle(class_rows, class_flags, codes, flags)
        assert stable
        assert _same_partition(np.asarray(list(range(n_cls)) + new_part), oracle)


@pytest.mark.parametrize("n", [2, 5, 21])
def test_grown_classes_of_on_a_cycle_of_classes(n: int) -> None:
    """Classes 1..n in a cycle (byte 0: the next, byte 1: dead) of equal flags but for class
    1's; new states 0..n-1 in a cycle the same way, new state 0 with class ``s``'s flags:
    each new state is alike to exactly one class (a rotation), every other pair dropped
    once the drops travel around the cycle (the passes took n rounds)."""
    n_cls = n + 1
    class_rows = [[0, 0]] + [[1 + (c % n), 0] for c in range(1, n + 1)]
    fl = [b"\x00\x00", b"\x01\x00"] + [b"\x00\x00"] * (n - 1)
    codes = [[n_cls + (i + 1) % n, 0] for i in range(n)]
    for s in range(1, n + 1):
        flags = [fl[1 + (s - 1 + i) % n] for i in range(n)]
        cand = [[c for c in range(1, n_cls) if fl[c] == flags[i]] for i in range(n)]
        got = grown_classes_of(n_cls, class_rows, cand, codes, flags)
        assert got == ([1 + (s - 1 + i) % n for i in range(n)], [])
        assert [c[0] for c in _passes(n_cls, class_rows, cand, codes)] == got[0]


def test_json_gbnf_grows_its_value_region(vocab: Vocabulary) -> None:
    """json.gbnf: later starts grow the value region with 22 new states (past the former
    new states x classes bound, 4,096): masks and lexer numbering as growing off, every
    region closed, its partition the Moore oracle's and stable, a load keeping them; keys:
    states of one plain key share a grown key (a grown key may join plain keys of two
    regions: the same future, past the digests' bound)."""
    seen: list[tuple[int, int, int]] = []
    real = cp._grow_candidates

    def spy(class_of: Any, class_split: Any, codes: Any, split: Any) -> Any:
        got = real(class_of, class_split, codes, split)
        seen.append((codes.shape[0], class_of.shape[0], got[0].size))
        return got

    with (
        mock.patch.object(cp, "_grow_candidates", spy),
        mock.patch.object(tgr, "random_walks", _long_walks),
    ):
        grown, g_masks = tgr._run(vocab, JSON_GBNF, True, cp._SHARED_WALK_STATES)
    assert any(k * n_cls > 4_096 and pairs <= cp._GROW_CELLS for k, n_cls, pairs in seen), seen
    with mock.patch.object(tgr, "random_walks", _long_walks):
        plain, p_masks = tgr._run(vocab, JSON_GBNF, False, cp._SHARED_WALK_STATES)
    for a, b in zip(g_masks, p_masks, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    g: Any = grown.program._positions
    p: Any = plain.program._positions
    assert g.lexer.size == p.lexer.size
    assert len(g._regions) < len(p._regions)
    depth = max(vocab.trie.max_len, cp._STABLE_ROUNDS)
    _, col_of_byte = g._cut_columns()
    for _, states, part, dpart, sub, cut_split, rep in g._regions:
        table = g.lexer.table[states].astype(np.int64)
        split = g.lexer.split[states].copy()
        if g.exit_byte is not None:
            table[:, g.exit_byte] = 0
            split[:, g.exit_byte] = False
        split[0] = False
        local = {int(q): i for i, q in enumerate(states.tolist())}
        assert set(np.unique(table).tolist()) <= local.keys()  # closed
        sub256 = np.vectorize(local.__getitem__, otypes=[np.int64])(table)
        assert (sub[:, col_of_byte] == sub256).all()
        assert (cut_split[:, col_of_byte] == split).all()
        want, stable = _moore(sub256, split, depth)
        assert _same_partition(part, want)
        assert stable and dpart is part
        assert (part[rep] == np.arange(rep.size)).all()
    back: dict[bytes, bytes] = {}
    for q in range(1, g.lexer.size):
        ga, pa = g._region_at(q), p._region_at(q)
        if ga is not None and pa is not None:
            assert back.setdefault(p._region_key(pa), g._region_key(ga)) == g._region_key(ga)
    loaded: Any = type(grown).deserialize(grown.serialize(), vocab).program._positions
    for x, y in zip(loaded._regions, g._regions, strict=True):
        assert all(np.array_equal(u, v) for u, v in zip(x[1:], y[1:], strict=True))


def _long_walks(grammar: Any, walks: int, steps: int, seed: int) -> Any:
    """grammar_bench's json_gbnf document (greedy: the longest allowed token that the text
    goes on with, each step) and random walks (json.gbnf's later starts)."""
    from formcast import GrammarMatcher

    text = DOC.encode()
    vocab = grammar.vocab
    m = GrammarMatcher(grammar)
    path: list[int] = []
    while text:
        best = max(
            (t for t in m.allowed_token_ids().tolist() if text.startswith(vocab.token_bytes(t))),
            key=lambda t: len(vocab.token_bytes(t)),
        )
        path.append(best)
        assert m.accept_token(best)
        text = text[len(vocab.token_bytes(best)) :]
    return [path, *random_walks(grammar, walks=walks, steps=steps, seed=seed)]


DOC = (
    '{"id": "evt_9f8a7b", "type": "sensor.reading", "ok": true, "error": null, "values": [1, '
    '-2.5, 3.14159, 6.02e+23, 0, -0.0001], "nested": {"matrix": [[1, 2], [3, 4], []], '
    '"labels": {"en": "temperature", "ja": "\u6e29\u5ea6"}, "escaped": "line1\\nline2"}, '
    '"history": [{"t": 1700000000, "v": 21.5}, {"t": 1700000060, "v": null}]}'
)
