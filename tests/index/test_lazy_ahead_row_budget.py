"""The lazy classifier's look-ahead writes are bounded per call, and masks do not move (#31).

``_LazyExitSplitClassifier._ensure`` writes the walk rows of the states a walk stopped on and
of the built states up to ``_LAZY_AHEAD`` bytes further, at most ``_LAZY_AHEAD_ROWS`` rows per
call (one call wrote ~1,400 rows, ~10 ms, before the bound).  A walk that meets a row left
unwritten stops on it and is run again, so the bound moves only time.  Here the bound is as
small as it can be (one row per call: every look-ahead is cut at once) and as large as it was
before (none): seeded random walks drawn on the eager build meet its masks bit for bit, and
no call writes more rows than the bound (plus the states it was asked for).
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import LARK, random_walks, replay_masks

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,6}$"}},
        "size": {"type": "integer", "minimum": -40, "maximum": 900},
        "kind": {"enum": ["alpha", "alpine", "beta", "bet"]},
    },
    "required": ["name", "kind"],
}

CASES: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    "json_schema": ("compile_json_schema", (SCHEMA,), {}),
    "lark": ("compile_grammar", (LARK,), {"syntax": "lark"}),
    "builtin_json": ("compile_builtin_json_grammar", (), {}),
}


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _compile(vocab: Vocabulary, name: str) -> CompiledGrammar:
    method, args, kw = CASES[name]
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    grammar: CompiledGrammar = getattr(GrammarCompiler(vocab, cache_size=0), method)(*args, **kw)
    return grammar


@pytest.mark.parametrize("budget", [1, 1 << 30])
@pytest.mark.parametrize("name", list(CASES))
def test_row_budget_keeps_the_eager_masks(vocab: Vocabulary, name: str, budget: int) -> None:
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):
        eager = _compile(vocab, name)
        walks = random_walks(eager, walks=4, steps=30, seed=3)
        expected = replay_masks(eager, walks)
    written: list[tuple[int, int]] = []  # (states asked for, rows written) per call
    real_write = cfg_program._LazyExitSplitClassifier._write_rows
    real_ensure = cfg_program._LazyExitSplitClassifier._ensure
    asked: list[int] = []

    def ensure(self: Any, states: np.ndarray, ahead: int = 0) -> None:
        asked.append(int(np.unique(np.asarray(states)).size))
        real_ensure(self, states, ahead)

    def write(self: Any, tables: Any, states: np.ndarray) -> None:
        written.append((asked[-1], int(states.size)))
        real_write(self, tables, states)

    with (
        mock.patch.object(cfg_program, "LAZY_INDEX", True),
        mock.patch.object(cfg_program, "_LAZY_AHEAD_ROWS", budget),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_ensure", ensure),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_write_rows", write),
    ):
        lazy = _compile(vocab, name)
        got = replay_masks(lazy, walks)
    bad = np.flatnonzero((got != expected).any(axis=1))
    assert bad.size == 0, f"masks differ at steps {bad.tolist()[:10]} of {len(got)}"
    assert written or cfg_program.walks_write_rows()  # (compiled: rows written in the walks)
    assert all(rows <= max(n, budget) for n, rows in written)
    if budget == 1:  # nothing was written ahead: only the states asked for
        assert all(rows <= n for n, rows in written)
