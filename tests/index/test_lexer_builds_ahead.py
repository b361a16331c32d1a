"""``LazyExpandedLexer.ensure`` builds rows ahead of the walks, and every row it builds is the
determinized call expansion's.

A walk of the vocabulary that ends on a sentinel (a lexer row not built yet) is walked again,
so ``ensure`` also builds the unbuilt successors of the rows asked for, a few levels deep
(``_AHEAD_LEVELS``, at most ``_AHEAD_ROWS`` rows).  Here, on real grammars (the C grammar of
llama.cpp, whose keyword and identifier unions are made late, and JSON): every built row, ahead
or not, must be the row the member sets give (each byte moves every member along its rule DFA,
calls added as epsilon moves, split where a member accepts and the byte may follow), the
successors of an ensured state must be built two levels on, and the masks of random walks must
be the same with building ahead switched off (tests/index/test_lazy_index_matches_eager.py
compares the lazy index with the eager one).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

import formcast.automata.lexer as lexer_module
from formcast import CompiledGrammar, GrammarCompiler
from formcast.automata.dfa import DEAD
from formcast.automata.lexer import LazyExpandedLexer
from formcast.automata.rules import GrammarAutomaton
from formcast.index.cfg_program import CfgProgram
from formcast.vocab.vocabulary import Vocabulary
from serialize_helpers import random_walks, replay_masks

C_GBNF = Path(__file__).resolve().parents[3] / "shared/data/llama.cpp-grammars/grammars/c.gbnf"
_VOCAB = Vocabulary([bytes([b]) for b in range(256)] + [b""], stop_token_ids=[256])


@pytest.fixture(autouse=True)
def _ahead_rows_on() -> Iterator[None]:
    """The ahead (and chain) levels tested here, with the budget they had by default before
    exit37 (``_AHEAD_ROWS`` is 0 by default since: tests/automata/test_lexer_ahead_default.py)."""
    with mock.patch.object(lexer_module, "_AHEAD_ROWS", 48):
        yield


def _members(lexer: LazyExpandedLexer, s: int) -> frozenset[int]:
    h = lexer._build_helpers()
    n_global = int(lexer.offsets[-1])
    return frozenset(h.closure(s)) if s < n_global else frozenset(lexer.sets[s - n_global])


def _check_rows(auto: GrammarAutomaton, lexer: LazyExpandedLexer) -> int:
    """Every built row against the member sets; returns how many rows were checked."""
    h = lexer._build_helpers()
    analysis = auto.analysis
    offsets = lexer.offsets
    rule_of = np.searchsorted(offsets, np.arange(int(offsets[-1])), side="right") - 1
    checked = 0
    for s in np.flatnonzero(lexer.built[: lexer.size]).tolist():
        if s == DEAD:
            continue
        members = _members(lexer, s)
        for b in range(256):
            nxt: set[int] = set()
            split = False
            for g in members:
                r = int(rule_of[g])
                q = g - int(offsets[r])
                dfa = auto.dfas[r]
                t = int(dfa.table[q, b])
                if t != DEAD:
                    nxt |= h.closure(int(offsets[r]) + t)
                returns = analysis.follow[r] | analysis.restart[r]
                split |= bool(dfa.accepting[q]) and bool(returns[b])
                count = auto.count_of(r)
                if count is not None and count[0] == 0 and q == dfa.start:
                    split |= bool(analysis.follow[r][b])
            got = int(lexer.table[s, b])
            assert (got == DEAD) == (not nxt), (s, b)
            if nxt:
                assert _members(lexer, got) == frozenset(nxt), (s, b)
            assert bool(lexer.split[s, b]) == split, (s, b)
        checked += 1
    return checked


def _programs() -> list[CfgProgram]:
    compiler = GrammarCompiler(_VOCAB, cache_size=0)
    out = [compiler.compile_builtin_json_grammar().program]
    if C_GBNF.exists():
        out.append(compiler.compile_grammar(C_GBNF.read_text("utf-8")).program)
    assert all(isinstance(p, CfgProgram) for p in out)
    return out  # type: ignore[return-value]


@pytest.mark.parametrize("which", [0, 1])
def test_rows_built_ahead_are_the_call_expansion(which: int) -> None:
    programs = _programs()
    if which >= len(programs):
        pytest.skip("llama.cpp's c.gbnf is not in shared/data")
    auto = programs[which].auto
    lexer = LazyExpandedLexer(auto)
    unbuilt = np.flatnonzero(~lexer.built[: lexer.size])
    assert unbuilt.size
    asked = int(unbuilt[0])
    assert lexer.ensure([asked])
    # the successors of the state asked for are built, and theirs (within the row budget)
    first = np.unique(lexer.table[asked])
    assert lexer.built[first].all()
    second = np.unique(lexer.table[first])
    if second.size <= lexer_module._AHEAD_ROWS // 2:
        assert lexer.built[second].all()
    assert _check_rows(auto, lexer) > 1


@pytest.mark.parametrize("grammar", ["json", "c"])
def test_masks_do_not_depend_on_building_ahead(grammar: str) -> None:
    from formcast.vocab.loaders import load_vocabulary

    if grammar == "c" and not C_GBNF.exists():
        pytest.skip("llama.cpp's c.gbnf is not in shared/data")
    vocab = load_vocabulary("llama3")

    def compile_it() -> CompiledGrammar:
        compiler = GrammarCompiler(vocab, cache_size=0)
        if grammar == "json":
            return compiler.compile_builtin_json_grammar()
        return compiler.compile_grammar(C_GBNF.read_text("utf-8"))

    ahead = compile_it()
    walks = random_walks(ahead, walks=4, steps=30, seed=3)
    with mock.patch.object(lexer_module, "_AHEAD_LEVELS", 0):
        plain = compile_it()
        want = replay_masks(plain, walks)
    assert np.array_equal(replay_masks(ahead, walks), want)
