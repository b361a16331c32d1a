"""The region search of a wide start (``_LazyExitSplitClassifier._new_region``) and its
digest (``_region_digest``), made cheaper for a grammar's first mask (region36, issue #31:
c1_arith's step 0 spent ~0.8 ms of ~2 ms there), give exactly what session 21's code gave:

* ``_split_labels`` is ``_row_classes(np.packbits(split, axis=1)) + 1`` with the dead state
  0, on both of its paths (Python bytes up to ``_SMALL_LABEL_ROWS`` rows, numpy past it);
* ``_reachable_classes`` filling every class's successors at a region's first digest (up to
  ``_FILL_CLASSES`` classes) numbers the classes as the level-by-level gathers do;
* on grammars and schemas whose masks make regions (the search on lists of rows, on one
  gather of a small lexer, or with ``np.unique`` per level), every region (its states in the same
  order, classes with the same numbers, rows, split flags, members) and every digest of its
  states is the one of the previous code, kept here as the oracle (a level-by-level search
  with ``np.unique``, labels by ``_row_classes`` of the packed flags, the int64 renumbering),
  a region start's digest past ``_SHARED_WALK_STATES`` classes (None by counting) included.
"""

from __future__ import annotations

import hashlib
from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cp
from formcast import GrammarCompiler, Vocabulary
from formcast.automata.dfa import DEAD
from formcast.automata.equivalence import equivalence_classes
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks

SOURCES: list[Any] = [
    # c1_arith (grammar_bench): step 0 makes two regions
    "root ::= expr\nexpr ::= term (ws [+\\-] ws term)*\nterm ::= factor (ws [*/] ws factor)*\n"
    'factor ::= number | ident | call | "(" ws expr ws ")" | "-" factor\n'
    'call ::= ident "(" ws (expr (ws "," ws expr)*)? ws ")"\n'
    'number ::= [0-9]+ ("." [0-9]+)?\nident ::= [a-z_] [a-z0-9_]*\nws ::= [ ]*\n',
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 8},
            "b": {"type": "array", "items": {"type": "number"}},
            "c": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    },
    "builtin_json",
]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _old_region(
    clf: Any, start: int
) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray, np.ndarray]:
    """Session 21's ``_new_region`` on a lexer whose rows it meets are built (no budget, no
    bound): ``(states, part, stable, sub, cut_split)``."""
    lexer = clf.lexer
    cols, col_of_byte = clf._cut_columns()
    xc = -1 if clf.exit_byte is None else int(col_of_byte[clf.exit_byte])
    index = {DEAD: 0, start: 1}
    states = [DEAD, start]
    frontier = [start]
    while frontier:
        assert lexer.built[frontier].all()
        rows = lexer.table[np.asarray(frontier, dtype=np.int64)][:, cols]
        if xc >= 0:
            rows[:, xc] = DEAD
        nxt = []
        for q in np.unique(rows).tolist():
            if q not in index:
                index[q] = len(states)
                states.append(q)
                nxt.append(q)
        frontier = nxt
    idx = np.asarray(states, dtype=np.int64)
    cut = lexer.table[idx][:, cols]
    cut_split = lexer.split[idx][:, cols]
    if xc >= 0:
        cut[:, xc] = DEAD
        cut_split[:, xc] = False
    local = np.zeros(max(int(idx.max()) + 1, 1), dtype=np.int32)
    local[idx] = np.arange(idx.size, dtype=np.int32)
    sub = local[cut]
    cut_split[DEAD] = False
    labels = cp._row_classes(np.packbits(cut_split, axis=1)) + 1
    labels[DEAD] = 0
    depth = max(clf._vocab.trie.max_len, cp._STABLE_ROUNDS)
    part, stable = equivalence_classes(sub, labels, depth)
    return idx, part, stable, sub, cut_split


def _old_digest(clf: Any, dpart: np.ndarray, sub: np.ndarray, split: np.ndarray, q: int) -> Any:
    """Session 21's ``_quotient_digest`` (classes met level by level, int64 renumbering)."""
    rep = np.zeros(int(dpart.max()) + 1, dtype=np.int64)
    rep[dpart[::-1]] = np.arange(dpart.size - 1, -1, -1)
    dead, first = int(dpart[DEAD]), int(dpart[q])
    seen = {dead, first}
    order = [first]
    frontier = [first]
    while frontier:
        flat = dpart[sub[rep[frontier]]].reshape(-1).tolist()
        level = []
        for t in flat:
            if t not in seen:
                seen.add(t)
                level.append(t)
        frontier = level
        order.extend(level)
        if len(order) > cp._SHARED_WALK_STATES:
            return None
    states = np.asarray(order, dtype=np.int64)
    renumber = np.full(rep.size, -1, dtype=np.int64)
    renumber[states] = np.arange(states.size)
    col_of_byte = clf._cut_columns()[1]
    h = hashlib.blake2b(digest_size=16)
    h.update(clf._vocab.fingerprint.encode())
    h.update(b"" if clf.exit_byte is None else bytes([clf.exit_byte]))
    rows = renumber[dpart[sub[rep[states]]]].astype(np.int8)[:, col_of_byte]
    h.update(np.ascontiguousarray(rows).tobytes())
    h.update(np.packbits(split[rep[states]][:, col_of_byte]).tobytes())
    return h.digest()


def _walked(compiler: GrammarCompiler, source: int) -> Any:
    """``SOURCES[source]`` compiled (under the caller's patches) and its masks replayed on 4
    random walks of 30 steps (seeded by ``source``): the regions those walks made."""
    src = SOURCES[source]
    if src == "builtin_json":
        grammar = compiler.compile_builtin_json_grammar()
    elif isinstance(src, str):
        grammar = compiler.compile_grammar(src)
    else:
        grammar = compiler.compile_json_schema(src)
    replay_masks(grammar, random_walks(grammar, walks=4, steps=30, seed=source))
    return grammar


@pytest.mark.parametrize("grow", [False, True])
@pytest.mark.parametrize("cells", [0, 8, 1 << 30])
@pytest.mark.parametrize("source", range(len(SOURCES)))
def test_regions_and_digests_are_the_previous_codes(
    vocab: Vocabulary, source: int, cells: int, grow: bool
) -> None:
    """``cells``: ``_REGION_SNAPSHOT_CELLS`` (0: every level gathered, its distinct states
    by ``np.unique``; 8: gathered as lists; large: one gather of the lexer per ``ensure``).
    ``grow``: ``_GROW_REGIONS`` (region37: a region grown by a later start holds its own
    search's states first, as before, then the new ones: test_grown_regions.py)."""
    context_for(vocab).cache(cp.SHARED_WALKS).clear()
    compiler = GrammarCompiler(vocab, cache_size=0)
    with (
        mock.patch.object(cp, "LAZY_INDEX", True),
        mock.patch.object(cp, "_REGION_SNAPSHOT_CELLS", cells),
        mock.patch.object(cp, "_GROW_REGIONS", grow),
    ):
        grammar = _walked(compiler, source)
    clf: Any = grammar.program._positions
    assert isinstance(clf, cp._LazyExitSplitClassifier)
    assert clf._regions, "no region made"
    digests = counted = 0
    for rid, (start, idx, part, dpart, sub, cut_split, rep) in enumerate(clf._regions):
        counted += rep.size - 1 > cp._SHARED_WALK_STATES  # (the start's digest: counted)
        o_idx, o_part, o_stable, o_sub, o_split = _old_region(clf, start)
        n = o_idx.size if grow else idx.size  # (grown: the search's states first)
        assert idx[:n].tolist() == o_idx.tolist()
        assert part[:n].tolist() == o_part.tolist()
        assert (dpart is part) == o_stable
        assert sub.dtype == o_sub.dtype
        assert (sub[:n] == o_sub).all()
        assert (cut_split[:n] == o_split).all()
        assert (dpart[rep] == np.arange(rep.size)).all()
        for q in range(1, idx.size):
            got = clf._region_digest((rid, q))
            assert got == _old_digest(clf, dpart, sub, cut_split, q)
            digests += got is not None
    assert digests
    if SOURCES[source] == "builtin_json":  # a JSON value's region: 140 classes
        assert counted


@pytest.mark.parametrize("small", [0, 1 << 20])
def test_split_labels_are_the_packed_rows_classes(small: int) -> None:
    rng = np.random.default_rng(small)
    with mock.patch.object(cp, "_SMALL_LABEL_ROWS", small):
        for _ in range(60):
            n = int(rng.integers(1, 400))
            w = int(rng.integers(1, 40))
            split = rng.random((n, w)) < float(rng.choice([0.05, 0.5]))
            if rng.random() < 0.5:  # many equal rows
                split = split[rng.integers(0, max(n // 8, 1), size=n)]
            want = cp._row_classes(np.packbits(split, axis=1)) + 1
            want[DEAD] = 0
            got = cp._split_labels(split)
            assert got.dtype == np.int64
            assert got.tolist() == want.tolist()


@pytest.mark.parametrize("fill", [0, 1 << 20])
def test_reachable_classes_fill_all_or_by_levels(fill: int) -> None:
    rng = np.random.default_rng(fill + 3)
    for _ in range(40):
        n = int(rng.integers(2, 300))
        cols = int(rng.integers(1, 12))
        cut = rng.integers(0, n, size=(n, cols)).astype(np.int32)
        cut[rng.random((n, cols)) > float(rng.choice([0.05, 0.3, 1.0]))] = 0
        cut[0] = 0
        _, part = np.unique(
            rng.integers(0, int(rng.integers(1, n + 1)), size=n), return_inverse=True
        )
        part = part.reshape(-1).astype(np.int64)
        rep = np.zeros(int(part.max()) + 1, dtype=np.int64)
        rep[part[::-1]] = np.arange(part.size - 1, -1, -1)
        starts = rng.integers(1, n, size=6).tolist()
        with mock.patch.object(cp, "_FILL_CLASSES", 0):
            want = [cp._reachable_classes(part, cut, rep, s) for s in starts]
        succ: dict[int, list[int]] = {}
        with mock.patch.object(cp, "_FILL_CLASSES", fill):
            got = [cp._reachable_classes(part, cut, rep, s, succ) for s in starts]
        width = cut.shape[1]
        for row in succ.values():  # distinct once walked (a filled row: whole until then)
            assert len(set(row)) == len(row) or len(row) == width
        walked = {c for b in got if b is not None for c in b.tolist()}
        assert all(len(set(succ[c])) == len(succ[c]) for c in walked if c in succ)
        for a, b in zip(want, got, strict=True):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert a.tolist() == b.tolist()


@pytest.mark.parametrize("runs", [0, 1 << 30])
@pytest.mark.parametrize("source", range(len(SOURCES)))
def test_levels_without_runs_of_equal_targets(vocab: Vocabulary, source: int, runs: int) -> None:
    """interior37: a level gathered as an array (``_REGION_SNAPSHOT_CELLS`` 0) drops the runs
    of equal targets of its rows before its states are read (past ``_REGION_RUN_CELLS``
    cells; 0: every level, and then ``np.unique`` on what is left, as past the snapshot
    bound): every region as session 21's search (states order, classes, rows, flags)."""
    context_for(vocab).cache(cp.SHARED_WALKS).clear()
    compiler = GrammarCompiler(vocab, cache_size=0)
    with (
        mock.patch.object(cp, "LAZY_INDEX", True),
        mock.patch.object(cp, "_REGION_SNAPSHOT_CELLS", 0),
        mock.patch.object(cp, "_REGION_RUN_CELLS", runs),
        mock.patch.object(cp, "_GROW_REGIONS", False),
    ):
        grammar = _walked(compiler, source)
    clf: Any = grammar.program._positions
    assert clf._regions, "no region made"
    for start, idx, part, dpart, sub, cut_split, _ in clf._regions:
        o_idx, o_part, o_stable, o_sub, o_split = _old_region(clf, start)
        assert idx.tolist() == o_idx.tolist()
        assert part.tolist() == o_part.tolist()
        assert (dpart is part) == o_stable
        assert (sub == o_sub).all()
        assert (cut_split == o_split).all()


@pytest.mark.parametrize("runs", [0, 3, 1 << 30])
@pytest.mark.parametrize("snapshot", [0, 40, 1 << 30])
def test_level_targets_are_the_rows_values(runs: int, snapshot: int) -> None:
    """``_level_targets``: every value of the block (each run's first and last cells, rows
    of one value, a first cell alone), whatever the bounds."""
    rng = np.random.default_rng(37)
    with (
        mock.patch.object(cp, "_REGION_RUN_CELLS", runs),
        mock.patch.object(cp, "_REGION_SNAPSHOT_CELLS", snapshot),
    ):
        for _ in range(300):
            n, w = int(rng.integers(1, 12)), int(rng.integers(1, 20))
            block = rng.integers(0, int(rng.integers(1, 9)), size=(n, w)).astype(np.int32)
            if rng.random() < 0.5:  # long runs, as a string's body's rows
                block = np.sort(block, axis=1)
            got = cp._level_targets(block)
            assert set(got) == set(block.ravel().tolist())
            assert len(got) <= block.size
