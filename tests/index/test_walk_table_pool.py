"""The lazy walk tables' reused memory and their C row writer keep masks exact (issue #31).

``cfg_program._LazyWalkTables`` takes its maps from a process-wide pool (``_ROW_POOL``) that
hands back maps of dead tables *without clearing them*, and in the compiled build writes its
rows with ``_trie_walk.write_rows`` instead of numpy.  Here (1) every map the pool holds is
filled with garbage before each lazy build, whose masks on seeded random walks must equal
the eager build's bit for bit; (2) the C writer and the numpy writer produce the same tables
on random rows (skipped in the pure package).
"""

from __future__ import annotations

import gc
from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
import formcast.vocab.trie as trie_mod
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import LARK, random_walks, replay_masks

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "n": {"type": "array", "items": {"type": "integer"}},
        "e": {"enum": ["ab", "abc", "x y"]},
    },
    "required": ["name"],
}


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _dirty_pool() -> int:
    """Fill every map the pool holds with a garbage pattern; how many it holds."""
    gc.collect()  # dead tables give their maps back
    pool = cfg_program._ROW_POOL
    for mm, _ in pool._free:
        arr = np.frombuffer(mm, dtype=np.int32)
        arr[:] = 0x1234567
    return len(pool._free)


def _compile(vocab: Vocabulary, lazy: bool, case: str) -> CompiledGrammar:
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    with mock.patch.object(cfg_program, "LAZY_INDEX", lazy):
        gc_ = GrammarCompiler(vocab, cache_size=0)
        if case == "lark":
            return gc_.compile_grammar(LARK, syntax="lark")
        if case == "builtin_json":
            return gc_.compile_builtin_json_grammar()
        return gc_.compile_json_schema(SCHEMA)


@pytest.mark.parametrize("case", ["json_schema", "lark", "builtin_json"])
def test_reused_dirty_maps_give_the_eager_masks(vocab: Vocabulary, case: str) -> None:
    eager = _compile(vocab, False, case)
    walks = random_walks(eager, walks=4, steps=30, seed=23)
    expected = replay_masks(eager, walks)
    for _ in range(3):  # the later builds run on maps of the earlier ones
        _dirty_pool()
        lazy = _compile(vocab, True, case)
        got = replay_masks(lazy, walks)
        bad = np.flatnonzero((got != expected).any(axis=1))
        assert bad.size == 0, f"masks differ at steps {bad.tolist()[:10]} of {len(got)}"
        del lazy
    assert _dirty_pool() > 0  # the pool did hand maps back


def test_pool_is_bounded() -> None:
    pool = cfg_program._ROW_POOL
    tables = [cfg_program._LazyWalkTables(2000, 34) for _ in range(2 * cfg_program._POOL_MAPS)]
    for t in tables:
        t._assign(np.arange(1, 900, dtype=np.int64), sentinels=True)
    del tables, t
    gc.collect()
    assert len(pool._free) <= cfg_program._POOL_MAPS
    assert sum(k for _, k in pool._free) <= cfg_program._POOL_BYTES


def _random_writes(seed: int, kernel: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n_states = 400
    tables = cfg_program._LazyWalkTables(n_states, 34 if seed % 2 else None)
    todo = rng.permutation(np.arange(1, n_states))
    real = trie_mod.write_walk_rows
    with mock.patch.object(
        cfg_program, "write_walk_rows", real if kernel else (lambda *a, **k: False)
    ):
        for chunk in np.array_split(todo, 17):
            rows = rng.integers(0, n_states, size=(chunk.size, 256)).astype(np.int32)
            rows[rng.random(rows.shape) < 0.4] = 0
            split = rng.random(rows.shape) < 0.2
            tables.write(chunk.astype(np.int64), rows, split)
    lex, cut = tables.walk_tables()
    return lex.copy(), cut.copy()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_c_row_writer_matches_numpy(seed: int) -> None:
    kernel: Any = trie_mod._KERNEL
    if kernel is None or not hasattr(kernel, "write_rows"):
        pytest.skip("the pure-Python package: no C row writer")
    lex_c, cut_c = _random_writes(seed, True)
    lex_n, cut_n = _random_writes(seed, False)
    assert np.array_equal(lex_c, lex_n)
    assert np.array_equal(cut_c, cut_n)


def test_c_row_writer_rejects_bad_rows() -> None:
    kernel: Any = trie_mod._KERNEL
    if kernel is None or not hasattr(kernel, "write_rows"):
        pytest.skip("the pure-Python package: no C row writer")
    ids = np.full(8, -1, dtype=np.int32)
    ids[0] = 0
    lex = np.zeros((12, 256), dtype=np.int32)
    targets = np.full((1, 256), 5, dtype=np.int32)  # state 5 has no id
    split = np.zeros((1, 256), dtype=bool)
    with pytest.raises(ValueError, match="without an id"):
        kernel.write_rows(ids, targets, split, np.array([1]), lex, lex, -1, 1)
    with pytest.raises(ValueError, match="row out of range"):
        kernel.write_rows(ids, targets * 0, split, np.array([7]), lex, lex, -1, 1)


def _numpy_ahead(
    table: np.ndarray, skip: np.ndarray, frontier: np.ndarray, ahead: int, budget: int
) -> np.ndarray:
    """The pure build's look-ahead levels (cfg_program._LazyExitSplitClassifier._ensure)."""
    slot = np.empty(skip.size, dtype=np.int64)
    parts = []
    for _ in range(ahead):
        if budget <= 0:
            break
        met = table[frontier].reshape(-1)
        met = met[~skip[met]]
        if not met.size:
            break
        order = np.arange(met.size)
        slot[met] = order
        succ = met[slot[met] == order][:budget]
        skip[succ] = True
        parts.append(succ)
        frontier = succ
        budget -= int(succ.size)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_c_look_ahead_matches_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    table = rng.integers(0, n, size=(n, 256)).astype(np.int32)
    table[rng.random(table.shape) < 0.9] = 0  # sparse rows
    skip = rng.random(n) < 0.2
    skip[0] = True
    frontier = np.unique(rng.integers(1, n, size=3)).astype(np.int64)
    skip[frontier] = True
    ahead, budget = int(rng.integers(1, 40)), int(rng.integers(1, 200))
    skip_c = skip.copy()
    got = trie_mod.ahead_states(table, skip_c, frontier, ahead, budget, np.empty(n, dtype=np.int64))
    if got is None:
        pytest.skip("the pure-Python package: no C look-ahead")
    want = _numpy_ahead(table, skip.copy(), frontier, ahead, budget)
    assert got.tolist() == want.tolist()
