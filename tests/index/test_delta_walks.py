"""Cut walks by delta walks (``_LazyExitSplitClassifier._by_delta``, tops33, issue #31): a new
start state's cut-walk classification made from a reference start's by the strings whose walks
end differently from the two (``formcast.vocab.trie.walk_delta``, the compiled build's
``_trie_walk.delta``: the trie walked only where the two starts' walks are in different rows).

Oracle: every rule position of a grammar classified on a program whose every start takes the
start classified just before as its reference (``_shape`` forced equal, no pair budget: the
deltas cross far more of the trie than the count deltas they serve, with stops on unbuilt
lexer rows), against the same positions on a program with delta walks off (each start walked):
the same words and the same candidates in the same order, for the builtin JSON grammar,
llama.cpp's json.gbnf and c.gbnf, and a JSON schema with string, enum, bounded-integer and
date positions.  With the natural shapes, the builtin JSON grammar's count positions take
deltas.  In the pure-Python package (no kernel) deltas never apply: the test checks that.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
import formcast.vocab.trie as trie_module
from _native_kernel import REAL_SCHEMA
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
GBNF_DIR = SHARED / "llama.cpp-grammars" / "grammars"
#: rule positions classified per grammar (sampled, seeded)
POSITIONS = 160


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _has_kernel() -> bool:
    return trie_module._KERNEL is not None and hasattr(trie_module._KERNEL, "delta")


def _compile(vocab: Vocabulary, what: str) -> CompiledGrammar:
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    with mock.patch.object(cfg_program, "LAZY_INDEX", True):
        gc = GrammarCompiler(vocab, cache_size=0)
        if what == "builtin":
            return gc.compile_builtin_json_grammar()
        if what == "schema":
            return gc.compile_json_schema(REAL_SCHEMA)
        path = GBNF_DIR / what
        if not path.exists():
            pytest.skip(f"shared data missing: {path}")
        return gc.compile_grammar(path.read_text("utf-8"))


def _positions(compiled: CompiledGrammar, seed: int) -> list[tuple[int, int]]:
    auto = compiled.program.auto
    rules = compiled.program._counted.rules
    out = [
        (r, q)
        for r, dfa in enumerate(auto.dfas)
        if r not in rules
        for q in np.flatnonzero((dfa.table != 0).any(axis=1)).tolist()
    ]
    random.Random(seed).shuffle(out)
    return out[:POSITIONS]


@contextmanager
def _counting() -> Iterator[list[int]]:
    """Counts the classifications made by delta walks (a list: [count])."""
    made = [0]
    orig = cfg_program._LazyExitSplitClassifier._by_delta

    def by_delta(self: Any, start: int, shape: bytes) -> Any:
        got = orig(self, start, shape)
        made[0] += got is not None
        return got

    with mock.patch.object(cfg_program._LazyExitSplitClassifier, "_by_delta", by_delta):
        yield made


def _classify_all(
    compiled: CompiledGrammar, positions: list[tuple[int, int]]
) -> list[tuple[np.ndarray, np.ndarray] | str]:
    program = compiled.program
    out: list[tuple[np.ndarray, np.ndarray] | str] = []
    for rule, state in positions:
        try:
            got = program.classify(rule, state)
        except Exception as e:  # (the same must happen both ways)
            out.append(type(e).__name__)
            continue
        out.append((np.array(got.words), np.array(got.candidates)))
    return out


@pytest.mark.parametrize("what", ["builtin", "json.gbnf", "c.gbnf", "schema"])
def test_forced_deltas_are_the_walks(vocab: Vocabulary, what: str) -> None:
    with mock.patch.object(cfg_program, "_DELTA_WALKS", False):
        base = _compile(vocab, what)
        positions = _positions(base, seed=len(what))
        expected = _classify_all(base, positions)
    with (
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_shape", return_value=b""),
        mock.patch.object(cfg_program, "_DELTA_MAX_PAIRS", 1 << 40),
        _counting() as made,
    ):
        compiled = _compile(vocab, what)
        assert isinstance(compiled.program._positions, cfg_program._LazyExitSplitClassifier)
        got = _classify_all(compiled, positions)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        if isinstance(a, str) or isinstance(b, str):
            assert a == b, positions[i]
            continue
        assert np.array_equal(a[0], b[0]), f"words differ at {positions[i]}"
        assert a[1].dtype == b[1].dtype
        assert np.array_equal(a[1], b[1]), f"candidates differ at {positions[i]}"
    if _has_kernel():
        assert made[0] >= 10
    else:
        assert made[0] == 0


def test_count_positions_take_deltas(vocab: Vocabulary) -> None:
    """The builtin JSON grammar's whitespace and digit counts: natural shapes, budget kept."""
    with mock.patch.object(cfg_program, "_DELTA_WALKS", False):
        base = _compile(vocab, "builtin")
        positions = _positions(base, seed=3)
        expected = _classify_all(base, positions)
    with _counting() as made:
        compiled = _compile(vocab, "builtin")
        got = _classify_all(compiled, positions)
    for a, b in zip(got, expected, strict=True):
        assert not isinstance(a, str)
        assert not isinstance(b, str)
        assert np.array_equal(a[0], b[0])
        assert np.array_equal(a[1], b[1])
    assert (made[0] > 0) == _has_kernel()
