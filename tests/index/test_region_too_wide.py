"""Regions past the states' bound are noted, and searches that meet them stop (tops35, #31).

``_LazyExitSplitClassifier._new_region`` gives up on a wide start whose region (the states
it reaches in the cut lexer) has more than ``_LOCAL_DIGEST_STATES`` states; the start is
noted (``_too_wide``) and a later search that meets a noted start gives up at once (its
region would hold the noted one's).  Its row budget counts every lexer row its ``ensure``
calls build (those built ahead of the asked ones too).  Checked here with a tiny states'
bound (many regions fail) and no row budget: every ``_new_region`` answer is None exactly
where a plain breadth-first search of the cut lexer (rows built as needed) finds more
states than the bound, and the masks of seeded random walks are the eager build's; with a
tiny row budget, no search builds more than that budget plus one ``ensure`` call's rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast._native import compiled_modules
from formcast.automata.dfa import DEAD
from formcast.automata.pda import ParserState
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks

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

#: the classifier's methods can be spied on (a patched method of a mypyc native class is never
#: called by compiled code: where formcast.index.cfg_program is compiled, the masks are still
#: checked, the spies' answers are not)
SPIED = not compiled_modules().get("formcast.index.cfg_program", False)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _compile(vocab: Vocabulary, how: str) -> CompiledGrammar:
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    compiler = GrammarCompiler(vocab, cache_size=0)
    if how == "schema":
        return compiler.compile_json_schema(SCHEMA)
    return compiler.compile_builtin_json_grammar()


def _region_size(clf: Any, start: int) -> int:
    """States (DEAD and ``start`` included) ``start`` reaches in the cut lexer: a plain
    breadth-first search on 256 columns, rows built as met."""
    lexer = clf.lexer
    seen = {DEAD, start}
    frontier = [start]
    while frontier:
        lexer.ensure([q for q in frontier if not lexer.built[q]])
        nxt = []
        for q in frontier:
            row = lexer.table[q].copy()
            if clf.exit_byte is not None:
                row[clf.exit_byte] = DEAD
            for t in set(row.tolist()) - seen:
                seen.add(t)
                nxt.append(t)
        frontier = nxt
    return len(seen)


@pytest.mark.parametrize("how", ["schema", "builtin"])
@pytest.mark.parametrize("bound", [6, 24, 60])
def test_too_wide_regions_are_the_plain_searchs(vocab: Vocabulary, how: str, bound: int) -> None:
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):
        eager = _compile(vocab, how)
        walks = random_walks(eager, walks=4, steps=30, seed=7)
        expected = replay_masks(eager, walks)
    answers: list[tuple[bool, bool]] = []  # (None, reference says past the bound)
    real = cfg_program._LazyExitSplitClassifier._new_region

    def spy(self: Any, start: int) -> Any:
        got = real(self, start)
        answers.append((got is None, _region_size(self, start) > bound))
        return got

    with (
        mock.patch.object(cfg_program, "LAZY_INDEX", True),
        mock.patch.object(cfg_program, "_LOCAL_DIGEST_STATES", bound),
        mock.patch.object(cfg_program, "_REGION_ROW_BUDGET", 1 << 30),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_new_region", spy),
    ):
        lazy = _compile(vocab, how)
        got = replay_masks(lazy, walks)
    bad = np.flatnonzero((got != expected).any(axis=1))
    assert bad.size == 0, f"masks differ at steps {bad.tolist()[:10]} of {len(got)}"
    if not SPIED:
        return
    assert answers
    assert all(none == past for none, past in answers), answers
    if bound == 6:
        assert any(none for none, _ in answers)


class _CountingLexer:
    """The classifier's lexer seen through a proxy whose ``ensure`` records ``(rows asked
    for, rows built)`` per call (the compiled lexer's methods cannot be patched)."""

    def __init__(self, lexer: Any, calls: list[tuple[int, int]]) -> None:
        object.__setattr__(self, "_lexer", lexer)
        object.__setattr__(self, "_calls", calls)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lexer, name)

    def ensure(self, states: Any) -> bool:
        lexer = self._lexer
        asked = len([q for q in states if not lexer.built[q]])
        before = int(np.count_nonzero(lexer.built))
        got: bool = lexer.ensure(states)
        self._calls.append((asked, int(np.count_nonzero(lexer.built)) - before))
        return got


#: a MaskBench schema (a large lazy lexer) whose wide starts' searches build rows
MASKBENCH = (
    Path(__file__).resolve().parents[3]
    / "shared/data/JSONSchemaBench/maskbench/data/Github_hard---o55827.json"
)


@pytest.mark.parametrize("budget", [8, 256])
def test_row_budget_counts_the_rows_built_ahead(vocab: Vocabulary, budget: int) -> None:
    """A search calls ``ensure`` only while the rows every call before built, plus those it
    asks for, are within the budget (rows built ahead of the asked ones count)."""
    if not MASKBENCH.exists():
        pytest.skip(f"shared data missing: {MASKBENCH}")
    if not SPIED:
        pytest.skip("spies on _new_region (cfg_program compiled with mypyc)")
    doc = json.loads(MASKBENCH.read_text("utf-8"))
    schema = doc.get("schema", doc)
    texts = [json.dumps(t["data"], separators=(",", ":")).encode() for t in doc.get("tests", [])]
    searches: list[list[tuple[int, int]]] = []
    real = cfg_program._LazyExitSplitClassifier._new_region

    def spy(self: Any, start: int) -> Any:
        calls: list[tuple[int, int]] = []
        searches.append(calls)
        lexer = self.lexer
        self.lexer = _CountingLexer(lexer, calls)
        try:
            return real(self, start)
        finally:
            self.lexer = lexer

    with (
        mock.patch.object(cfg_program, "LAZY_INDEX", True),
        mock.patch.object(cfg_program, "_REGION_ROW_BUDGET", budget),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_new_region", spy),
    ):
        context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
        lazy = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        program: Any = lazy.program
        for text in texts[:2]:  # a mask at every byte of the documents (as far as they go)
            state = program.initial_state()
            for b in text:
                program.token_mask(state)
                state = program.advance_bytes(state, bytes([b]))
                if not isinstance(state, ParserState):  # (dead, or a limit)
                    break
    assert any(calls for calls in searches), "no search built a row"
    for calls in searches:
        spent = 0
        for asked, built in calls:
            assert spent + asked <= budget, calls
            spent += built
