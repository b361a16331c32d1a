"""The lazy classifier's walk tables stay exact while everything under them grows (issue #31).

``_LazyExitSplitClassifier`` walks tables on dense ids of the lexer states its walks touched
(``cfg_program._LazyWalkTables``): rows are appended, never moved, as walks reach new states,
and the ``LazyExpandedLexer`` under them replaces its arrays (twice the capacity) whenever a
union state does not fit.  Here both start as small as they can: the lexer's arrays trimmed to
its rule states plus one (every new union state grows them), the walk tables with room for one
id, and rows written one byte ahead of where a walk stopped (so walks stop on sentinels and
run again many times).  Seeded random walks drawn on the eager build must meet the eager
build's masks bit for bit, in one process and across a serialized round trip taken mid-walk
(the walk tables are omitted from the file and rebuilt from the ready states).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast._native import compiled_modules
from formcast.automata.lexer import LazyExpandedLexer
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import LARK, random_walks, replay_masks

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
CFG_DIR = SHARED / "workloads" / "cfg"

#: a schema whose lexer makes many union states (objects with optional keys, nested arrays,
#: strings with bounded lengths): each one grows the trimmed lexer
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,6}$"}},
        "size": {"type": "integer", "minimum": -40, "maximum": 900},
        "ratio": {"type": "number"},
        "kind": {"enum": ["alpha", "alpine", "beta", "bet"]},
        "child": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "note": {"type": ["string", "null"]}},
            "required": ["id"],
        },
    },
    "required": ["name", "kind"],
}

#: ``cfg_program.LazyExpandedLexer`` can be patched (where formcast.index.cfg_program is compiled
#: with mypyc its code makes the class it imported: a patched module name is never called)
LEXER_PATCHABLE = not compiled_modules().get("formcast.index.cfg_program", False)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


@contextmanager
def _tiny_tables(grown: list[LazyExpandedLexer]) -> Iterator[None]:
    """Lazy builds whose lexer and walk tables start as small as they can (see the module
    docstring); every lexer made is appended to ``grown``."""
    real = LazyExpandedLexer

    def trimmed(auto: Any, max_states: int = 30_000) -> LazyExpandedLexer:
        lexer = real(auto, max_states)
        keep = lexer.size + 1
        lexer.table = lexer.table[:keep].copy()
        lexer.split = lexer.split[:keep].copy()
        lexer.built = lexer.built[:keep].copy()
        grown.append(lexer)
        return lexer

    with (
        mock.patch.object(cfg_program, "LazyExpandedLexer", trimmed),
        mock.patch.object(cfg_program, "_LAZY_IDS", 1),
        mock.patch.object(cfg_program, "_LAZY_AHEAD", 1),
        mock.patch.object(cfg_program, "LAZY_INDEX", True),
    ):
        yield


def _compile(vocab: Vocabulary, method: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    return getattr(GrammarCompiler(vocab, cache_size=0), method)(*args, **kw)


CASES: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    "json_schema": ("compile_json_schema", (SCHEMA,), {}),
    "lark": ("compile_grammar", (LARK,), {"syntax": "lark"}),
    "builtin_json": ("compile_builtin_json_grammar", (), {}),
}


def _case(name: str) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    if name in CASES:
        return CASES[name]
    path = CFG_DIR / name
    if not path.exists():
        pytest.skip(f"shared data missing: {path}")
    kw = {"syntax": "lark"} if name.endswith(".lark") else {}
    return "compile_grammar", (path.read_text("utf-8"),), kw


@pytest.mark.parametrize("name", [*CASES, "c1_arith.gbnf", "c2_arith_stmt.lark"])
def test_growing_tables_give_the_eager_masks(vocab: Vocabulary, name: str) -> None:
    method, args, kw = _case(name)
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):
        eager: CompiledGrammar = _compile(vocab, method, args, kw)
        walks = random_walks(eager, walks=4, steps=30, seed=11)
        expected = replay_masks(eager, walks)
    grown: list[LazyExpandedLexer] = []
    with _tiny_tables(grown):
        lazy: CompiledGrammar = _compile(vocab, method, args, kw)
        got = replay_masks(lazy, walks)
    assert got.shape == expected.shape
    bad = np.flatnonzero((got != expected).any(axis=1))
    assert bad.size == 0, f"masks differ at steps {bad.tolist()[:10]} of {len(got)}"
    program: Any = lazy.program
    positions = program._positions
    assert isinstance(positions, cfg_program._LazyExitSplitClassifier)
    tables = positions._derived
    assert tables is not None
    assert tables.count > 1  # the walk tables grew from one id
    assert tables.lex.shape[0] >= 3 * tables.count
    if name == "json_schema" and LEXER_PATCHABLE:  # union states: the trimmed lexer grew
        lexer = grown[-1]
        assert lexer.capacity > int(lexer.offsets[-1]) + 1


def test_round_trip_mid_walk_keeps_the_eager_masks(vocab: Vocabulary) -> None:
    """Half the walks on the lazy grammar, then serialized and loaded: the loaded grammar's
    walk tables are rebuilt from the ready states, and the rest of the walks (and the first
    half again, now from cached classifications and rebuilt tables) match the eager build."""
    method, args, kw = CASES["json_schema"]
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):
        eager: CompiledGrammar = _compile(vocab, method, args, kw)
        walks = random_walks(eager, walks=6, steps=30, seed=5)
        expected = replay_masks(eager, walks)
    with _tiny_tables([]):
        lazy: CompiledGrammar = _compile(vocab, method, args, kw)
        first = replay_masks(lazy, walks[:3])
        lazy_program: Any = lazy.program
        before = lazy_program._positions
        assert isinstance(before, cfg_program._LazyExitSplitClassifier)
        assert before._ready_list
        loaded = CompiledGrammar.deserialize(lazy.serialize(), vocab)
        rest = replay_masks(loaded, walks[3:])
        again = replay_masks(loaded, walks)
        loaded_program: Any = loaded.program
        positions = loaded_program._positions
        assert isinstance(positions, cfg_program._LazyExitSplitClassifier)
        assert positions._derived is not None
        assert positions._derived is not before._derived
    got = np.concatenate((first, rest))
    assert np.array_equal(got, expected)
    assert np.array_equal(again, expected)
