"""digest39 (session 25, #31 grammar warm p99): cheaper region digests, same digests.

* ``_distinct_successors`` (a class row's distinct successors, first-occurrence order, in
  numpy) is ``list(dict.fromkeys(row))`` of each row, on both of its paths;
* ``_reachable_classes`` with ``past`` (classes known to reach past the bound) gives what it
  gives without it, and stops at the first level that meets one;
* ``_LazyExitSplitClassifier._region_digest``, which keeps the classes whose digest was None
  per region and stops a later class walk that meets one, gives every class of every region
  the digest (or None) of a fresh quotient digest, whatever the order the classes are asked.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cp
from formcast import GrammarCompiler, Vocabulary
from formcast._native import compiled_modules
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


@pytest.mark.parametrize("numpy_path", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_distinct_successors_are_the_rows_distinct_values(seed: int, numpy_path: bool) -> None:
    rng = np.random.default_rng(seed)
    low = 0 if numpy_path else 1 << 40
    with mock.patch.object(cp, "_DISTINCT_MIN_CELLS", low):
        for _ in range(200):
            n, w = int(rng.integers(0, 40)), int(rng.integers(0, 50))
            top = int(rng.integers(1, 300))
            rows = rng.integers(0, top, size=(n, w))
            if rng.random() < 0.5:  # runs of one target, as a lexer's class rows have
                rows = np.sort(rows % 7, axis=1)[:, ::-1] * int(rng.integers(1, 40))
            rows = rows.astype(rng.choice([np.int64, np.int32]))
            want = [list(dict.fromkeys(r)) for r in rows.tolist()]
            assert cp._distinct_successors(rows) == want
    # past the scratch bound: in Python, the same lists
    rows = rng.integers(0, 1 << 20, size=(3, 5))
    assert cp._distinct_successors(rows) == [list(dict.fromkeys(r)) for r in rows.tolist()]


def _chain_quotient(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """States = classes 0 (dead) .. n-1, a chain: state i -> i + 1 (then dead)."""
    cut = np.zeros((n, 3), dtype=np.int32)
    cut[1:-1, 0] = np.arange(2, n)
    part = np.arange(n, dtype=np.int64)
    return part, cut, part.copy()


@pytest.mark.parametrize("seed", range(20))
def test_reachable_classes_with_past_classes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    cols = int(rng.integers(1, 10))
    density = float(rng.choice([0.05, 0.3, 1.0]))
    cut = rng.integers(0, n, size=(n, cols)).astype(np.int32)
    cut[rng.random((n, cols)) > density] = 0
    if seed % 3 == 0:
        cut[1:-1, 0] = np.arange(2, n)
    cut[0] = 0
    n_cls = int(rng.integers(1, n + 1))
    _, part = np.unique(rng.integers(0, n_cls, size=n), return_inverse=True)
    part = part.reshape(-1).astype(np.int64)
    rep = np.zeros(int(part.max()) + 1, dtype=np.int64)
    rep[part[::-1]] = np.arange(part.size - 1, -1, -1)
    want = {q: cp._reachable_classes(part, cut, rep, q) for q in range(1, n)}
    past_all = [int(part[q]) for q, got in want.items() if got is None]
    keep = rng.random(len(past_all)) < 0.5
    past = {c: [] for c, k in zip(past_all, keep.tolist()) if k}
    succ: dict[int, list[int]] = {}
    for q in rng.permutation(np.arange(1, n)).tolist():
        got = cp._reachable_classes(part, cut, rep, q, succ, past)
        if want[q] is None:
            assert got is None
        else:
            assert got is not None
            assert got.tolist() == want[q].tolist()


def test_reachable_classes_stop_at_a_past_class() -> None:
    part, cut, rep = _chain_quotient(200)
    levels = []
    real = cp.class_level

    def counted(*args: Any) -> list[int]:
        levels.append(1)
        return real(*args)

    # (where cfg_program is compiled its call of class_level is bound at build time: the
    # levels are not counted there, the outcomes still are)
    spied = not compiled_modules().get("formcast.index.cfg_program", False)
    with mock.patch.object(cp, "class_level", counted):
        assert cp._reachable_classes(part, cut, rep, 10, {}) is None
        assert len(levels) > 20 or not spied  # (a chain: a level per class)
        levels.clear()
        assert cp._reachable_classes(part, cut, rep, 10, {}, {12}) is None
        assert len(levels) == 2 or not spied  # 11, then 12: past
        levels.clear()
        got = cp._reachable_classes(part, cut, rep, 150, {}, {12})  # 12 not met
        assert got is not None
        assert got.size == 50


GRAMMARS: list[Any] = [
    "builtin_json",
    # a JSON grammar in GBNF (grammar_bench's json_gbnf shape: values in arrays, objects)
    'root ::= value\nvalue ::= object | array | string | number | ("true" | "false" | "null")\n'
    'object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws\n'
    'array ::= "[" ws ( value ("," ws value)* )? "]" ws\n'
    'string ::= "\\"" ( [^"\\\\] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\\"" ws\n'
    'number ::= ("-"? ([0-9] | [1-9] [0-9]*)) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n'
    "ws ::= [ \\t\\n]*\n",
]


@pytest.mark.parametrize("order_seed", [0, 1])
@pytest.mark.parametrize("source", range(len(GRAMMARS)))
def test_region_digests_in_any_order(vocab: Vocabulary, source: int, order_seed: int) -> None:
    context_for(vocab).cache(cp.SHARED_WALKS).clear()
    compiler = GrammarCompiler(vocab, cache_size=0)
    src = GRAMMARS[source]
    with mock.patch.object(cp, "LAZY_INDEX", True):
        if src == "builtin_json":
            grammar = compiler.compile_builtin_json_grammar()
        else:
            grammar = compiler.compile_grammar(src)
        replay_masks(grammar, random_walks(grammar, walks=4, steps=40, seed=source))
    clf: Any = grammar.program._positions
    assert isinstance(clf, cp._LazyExitSplitClassifier)
    col_of_byte = clf._cut_columns()[1]
    rng = np.random.default_rng(order_seed)
    asked = [(rid, q) for rid, r in enumerate(clf._regions) for q in range(1, r[1].size)]
    nones = 0
    for i in rng.permutation(len(asked)).tolist():
        rid, q = asked[i]
        _, _, _, dpart, sub, cut_split, rep = clf._regions[rid]
        want = cp._quotient_digest(
            clf._vocab, clf.exit_byte, dpart, sub, cut_split, q, col_of_byte, rep, {}
        )
        got = clf._region_digest((rid, q))
        assert got == want, (rid, q)
        nones += got is None
    if src == "builtin_json":  # a JSON value's region: 140 classes, some past the bound
        assert nones
        assert clf._past is not None
        assert any(len(clf._past.get(rid, ())) > 1 for rid in range(len(clf._regions)))
