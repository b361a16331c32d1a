"""A resumed walk writes the rows of its stops itself (tops35, issue #31).

``_LazyExitSplitClassifier._walk_resumed`` (the compiled build's resumable walks) stops on
sentinels whose lexer rows are unbuilt; ``_build_stops`` then builds only the lexer rows,
and the resumed walk writes the walk rows on arriving at each stop, where the walk tables
have room for every id the rows may give (256 a row); else the rows are written in Python
(the tables grown), so no walk stops twice on a row for want of room.  Checked here: with
the walk tables' room for ids at none, a few, and plenty (``_LAZY_IDS``), seeded random
walks drawn on the eager build meet its masks bit for bit; with plenty of room stops' rows
are written by the walks, with little room the Python path runs and the walks still end.
The pure package has no resumable walks: the tests that need them are skipped.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast._native import compiled_modules
from formcast.index.context import context_for
from formcast.vocab import trie
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import LARK, random_walks, replay_masks

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,6}$"}},
        "size": {"type": "integer", "minimum": -40, "maximum": 900},
        "kind": {"enum": ["alpha", "alpine", "beta", "bet"]},
        "child": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "note": {"type": ["string", "null"]}},
            "required": ["id"],
        },
    },
    "required": ["name", "kind"],
}

CASES: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    "json_schema": ("compile_json_schema", (SCHEMA,), {}),
    "lark": ("compile_grammar", (LARK,), {"syntax": "lark"}),
    "builtin_json": ("compile_builtin_json_grammar", (), {}),
}

#: the classifier's methods can be spied on (a patched method of a mypyc native class is never
#: called by compiled code: where formcast.index.cfg_program is compiled, the masks are still
#: checked, the spies' counts are not)
SPIED = not compiled_modules().get("formcast.index.cfg_program", False)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _compile(vocab: Vocabulary, name: str) -> CompiledGrammar:
    method, args, kw = CASES[name]
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    grammar: CompiledGrammar = getattr(GrammarCompiler(vocab, cache_size=0), method)(*args, **kw)
    return grammar


def _resumable() -> bool:
    kernel = trie._KERNEL
    return kernel is not None and hasattr(kernel, "classify_from")


@pytest.mark.parametrize("ids", [1, 40, 300, None])
@pytest.mark.parametrize("name", list(CASES))
def test_stops_rows_written_by_the_walks_give_the_eager_masks(
    vocab: Vocabulary, name: str, ids: int | None
) -> None:
    if not _resumable():
        pytest.skip("no resumable walks (the pure package)")
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):
        eager = _compile(vocab, name)
        walks = random_walks(eager, walks=4, steps=30, seed=5)
        expected = replay_masks(eager, walks)
    calls: list[tuple[int, int, int]] = []  # (stops, ids given before, room) per call
    python_writes: list[int] = []
    real_stops = cfg_program._LazyExitSplitClassifier._build_stops
    real_write = cfg_program._LazyExitSplitClassifier._write_rows

    def build_stops(self: Any, tables: Any, states: np.ndarray) -> None:
        calls.append((int(states.size), int(tables.count), int(tables.states.size)))
        real_stops(self, tables, states)

    def write_rows(self: Any, tables: Any, states: np.ndarray) -> None:
        python_writes.append(int(states.size))
        real_write(self, tables, states)

    with (
        mock.patch.object(cfg_program, "LAZY_INDEX", True),
        mock.patch.object(cfg_program, "_LAZY_IDS", ids),
        # few rows built ahead of the walks: most stops are met
        mock.patch.object(cfg_program, "_LAZY_AHEAD", 1),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_build_stops", build_stops),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_write_rows", write_rows),
    ):
        lazy = _compile(vocab, name)
        got = replay_masks(lazy, walks)
    assert got.shape == expected.shape
    bad = np.flatnonzero((got != expected).any(axis=1))
    assert bad.size == 0, f"masks differ at steps {bad.tolist()[:10]} of {len(got)}"
    if name != "json_schema" or not SPIED:  # (small lexers: their walks may never stop)
        return
    assert calls, "no walk stopped"
    roomy = [c for c in calls if c[1] + 257 * c[0] <= c[2]]
    if ids is None:  # room (the lexer's capacity): the walks wrote stops' rows
        assert roomy
        assert len(python_writes) < len(calls)
    if ids == 1:  # no room at all: every stop's rows written in Python, the tables grown
        assert len(roomy) < len(calls)
        assert python_writes


@pytest.mark.parametrize("ids", [600, 1200])
def test_a_stop_without_room_is_written_in_python(vocab: Vocabulary, ids: int) -> None:
    """The fallback: stops whose ids would not fit go through ``_ensure`` (rows written,
    tables grown), and ``_ensure`` is not called for stops that fit."""
    if not _resumable():
        pytest.skip("no resumable walks (the pure package)")
    if not SPIED:
        pytest.skip("spies on the classifier's methods (cfg_program compiled with mypyc)")
    ensured: list[tuple[int, int, int]] = []
    real_ensure = cfg_program._LazyExitSplitClassifier._ensure

    def ensure(self: Any, states: np.ndarray, ahead: int = 0) -> None:
        t = self._tables()
        ensured.append((int(np.asarray(states).size), int(t.count), int(t.states.size)))
        real_ensure(self, states, ahead)

    seen: list[bool] = []
    real_stops = cfg_program._LazyExitSplitClassifier._build_stops

    def build_stops(self: Any, tables: Any, states: np.ndarray) -> None:
        seen.append(tables.count + 257 * int(states.size) <= tables.states.size)
        before = len(ensured)
        real_stops(self, tables, states)
        assert (len(ensured) == before) == seen[-1]

    with (
        mock.patch.object(cfg_program, "LAZY_INDEX", True),
        mock.patch.object(cfg_program, "_LAZY_IDS", ids),
        mock.patch.object(cfg_program, "_LAZY_AHEAD", 1),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_ensure", ensure),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_build_stops", build_stops),
    ):
        lazy = _compile(vocab, "json_schema")
        replay_masks(lazy, random_walks(lazy, walks=4, steps=30, seed=5))
    assert True in seen, seen
    assert False in seen, seen
