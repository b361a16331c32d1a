"""``LazyExpandedLexer.ensure`` goes on along chains past its ahead levels (session 20, wide34).

Unrolled bounded repetitions (the built-in JSON grammar's whitespace, llama.cpp's json.gbnf
``"\\n" [ \\t]{0,20}``) make chains of lexer states, each met from the one before only; a walk
of the whitespace tokens goes down such a chain, and stopped on a sentinel once per
``_AHEAD_LEVELS + 1`` rows (a stop, an ``ensure`` and a resumed walk each).  Past its
``_AHEAD_LEVELS`` levels, ``ensure`` now builds the unbuilt successors of the rows built at the
last level while there are 1 to ``_CHAIN_ROWS`` of them (within the ``_AHEAD_ROWS`` budget),
when asked for a state where an earlier call's chain went on unbuilt (a walk went past the rows
built ahead); the other calls note those states.

Checked here: (1) the real ``ensure`` builds exactly what a plain reference builds (the levels
on all 256 columns with ``np.unique``, the chain written out level by level), same rows,
split flags, built flags, unions and numbering, on random call sequences over test grammars,
the built-in JSON grammar, json.gbnf and c.gbnf, and chains were taken; (2) every row built,
chain or not, is the call expansion's; (3) masks of random walks are the same with chains
switched off (``_CHAIN_ROWS = 0``) and with the ahead levels off too.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from test_lexer_builds_ahead import _check_rows

import formcast.automata.lexer as lexer_module
from formcast import CompiledGrammar, GrammarCompiler
from formcast.automata.lexer import LazyExpandedLexer, LexerStateCapError
from formcast.automata.rules import GrammarAutomaton
from formcast.index.cfg_program import CfgProgram
from formcast.vocab.vocabulary import Vocabulary
from serialize_helpers import random_walks, replay_masks

_GRAMMARS = Path(__file__).resolve().parents[3] / "shared/data/llama.cpp-grammars/grammars"
_VOCAB = Vocabulary([bytes([b]) for b in range(256)] + [b""], stop_token_ids=[256])


@pytest.fixture(autouse=True)
def _ahead_rows_on() -> Iterator[None]:
    """The ahead (and chain) levels tested here, with the budget they had by default before
    exit37 (``_AHEAD_ROWS`` is 0 by default since: tests/automata/test_lexer_ahead_default.py)."""
    with mock.patch.object(lexer_module, "_AHEAD_ROWS", 48):
        yield


_TEST_GBNF = (
    'root ::= "[" ws item ("," ws item)* "]"\nitem ::= [0-9]{1,12} | "x" ws | root\n'
    'ws ::= | " " | "\\n" [ \\t]{0,20}\n',
    'root ::= ("a" sp)+ | "(" sp root ")"\nsp ::= " "{0,9} ("b" | "")\n',
)


def _source(which: int) -> tuple[str, str]:
    """(kind, text): the test grammars, then builtin JSON, json.gbnf, c.gbnf."""
    if which < len(_TEST_GBNF):
        return "gbnf", _TEST_GBNF[which]
    if which == len(_TEST_GBNF):
        return "json", ""
    path = _GRAMMARS / ("json.gbnf" if which == len(_TEST_GBNF) + 1 else "c.gbnf")
    if not path.exists():
        pytest.skip(f"llama.cpp's {path.name} is not in shared/data")
    return "gbnf", path.read_text("utf-8")


def _compile(compiler: GrammarCompiler, which: int) -> CompiledGrammar:
    kind, text = _source(which)
    if kind == "json":
        return compiler.compile_builtin_json_grammar()
    return compiler.compile_grammar(text)


def _automaton(which: int) -> GrammarAutomaton:
    program = _compile(GrammarCompiler(_VOCAB, cache_size=0), which).program
    assert isinstance(program, CfgProgram)
    return program.auto


def _reference_build(lex: LazyExpandedLexer, todo: list[int]) -> None:
    """Rows of ``todo`` by the numpy ``_union_rows`` (every batch size)."""
    h = lex._build_helpers()
    n_global = int(lex.offsets[-1])
    batch = [list(h.closure(s)) if s < n_global else list(lex.sets[s - n_global]) for s in todo]
    block, split_block = lex._union_rows(h, batch)
    idx = np.asarray(todo, dtype=np.int64)
    lex.table[idx] = block[:, h.cls_of_byte]
    lex.split[idx] = split_block[:, h.cls_of_byte]
    lex.built[idx] = True


def _reference_ensure(
    lex: LazyExpandedLexer, states: list[int], ends: set[int]
) -> tuple[bool, int]:
    """``ensure`` written plainly: (its result, rows built by chain levels); ``ends``: the
    unbuilt states where a chain went on after an earlier call (the calls asking for one
    go down the chain, the others note where theirs goes on)."""
    todo = sorted({s for s in states if not lex.built[s]})
    if not todo:
        return False, 0
    down = any(s in ends for s in todo)
    _reference_build(lex, todo)
    seen = set(todo)
    frontier, last = todo, todo
    budget = lexer_module._AHEAD_ROWS
    chained = 0
    level = 0
    while True:
        chain = level >= lexer_module._AHEAD_LEVELS
        if chain and not 0 < len(last) <= lexer_module._CHAIN_ROWS:
            break
        margin = lex.size + 256 > lex.max_states - lexer_module._AHEAD_MARGIN
        if not chain and (budget <= 0 or margin):
            break
        # a level reads the successors of every state met at the level before; a chain
        # level those of the rows built at the level before only (all 256 columns here)
        src = last if chain else frontier
        met = [s for s in np.unique(lex.table[np.asarray(src, dtype=np.int64)]).tolist()]
        met = [s for s in met if s not in seen]
        if not met and not chain:
            break
        seen.update(met)
        build = [s for s in met if not lex.built[s]]
        if chain:
            if not 0 < len(build) <= lexer_module._CHAIN_ROWS:
                break
            if not down or len(build) > budget or margin:
                ends.update(build)
                break
        else:
            build = build[:budget]
        frontier, last = met, build
        if build:
            try:
                _reference_build(lex, build)
            except LexerStateCapError:
                break
            budget -= len(build)
            chained += len(build) if chain else 0
        level += 1
    return True, chained


def _same(a: LazyExpandedLexer, b: LazyExpandedLexer) -> None:
    assert a.size == b.size
    n = a.size
    assert np.array_equal(a.built[:n], b.built[:n])
    assert np.array_equal(a.table[:n], b.table[:n])
    assert np.array_equal(a.split[:n], b.split[:n])
    assert a.ids == b.ids
    assert a.sets == b.sets


@pytest.mark.parametrize("chain_rows", [None, 1, 3])
@pytest.mark.parametrize("lazy_from", [0, 1 << 30])
@pytest.mark.parametrize("which", range(len(_TEST_GBNF) + 3))
def test_ensure_builds_what_the_chain_reference_builds(
    which: int, lazy_from: int, chain_rows: int | None
) -> None:
    auto = _automaton(which)
    if chain_rows is None:
        chain_rows = lexer_module._CHAIN_ROWS
    chained = 0
    with (
        mock.patch.object(lexer_module, "_LAZY_ROWS_FROM", lazy_from),
        mock.patch.object(lexer_module, "_CHAIN_ROWS", chain_rows),
    ):
        for seed in range(3):
            real = LazyExpandedLexer(auto)
            ref = LazyExpandedLexer(auto)
            ends: set[int] = set()
            n_global = int(real.offsets[-1])
            rng = random.Random(which * 31 + seed)
            for _ in range(40):
                pool = list(range(1, n_global)) + list(range(n_global, real.size))
                # mostly the newest states (the ends of chains built so far)
                if rng.random() < 0.5 and real.size > n_global:
                    pool = list(range(max(1, real.size - 8), real.size))
                states = rng.sample(pool, min(len(pool), rng.choice((1, 1, 1, 2, 5))))
                open_ends = sorted(s for s in ends if not ref.built[s])
                if open_ends and rng.random() < 0.4:  # a walk stopped where a chain goes on
                    states = [rng.choice(open_ends)]
                got = real.ensure(np.asarray(states, dtype=np.int64))
                want, n = _reference_ensure(ref, states, ends)
                assert got == want
                _same(real, ref)
                chained += n
            assert _check_rows(auto, real) > 1
    if which == len(_TEST_GBNF) + 1 and chain_rows:  # (json.gbnf: its ws chains)
        assert chained > 0


def test_chains_were_taken() -> None:
    """The grammars with unrolled repetitions do make ensure build chain levels (else the
    test above checks nothing new)."""
    auto = _automaton(len(_TEST_GBNF) + 1 if (_GRAMMARS / "json.gbnf").exists() else 0)
    lex = LazyExpandedLexer(auto)
    most = 0
    for s in range(1, int(lex.offsets[-1])):
        if lex.built[s]:
            continue
        probe = LazyExpandedLexer(auto)
        probe.ensure([s])
        h = probe._helpers
        assert h is not None
        for end in sorted(h.chain_ends):  # a walk that went on past the rows built ahead
            if not probe.built[end]:
                before = int(probe.built.sum())
                probe.ensure([end])
                most = max(most, int(probe.built.sum()) - before)
    # past the first level and the _AHEAD_LEVELS levels, with one row a level
    assert most > lexer_module._AHEAD_LEVELS + 2


@pytest.mark.parametrize("which", [len(_TEST_GBNF), len(_TEST_GBNF) + 1])
def test_masks_do_not_depend_on_chains(which: int) -> None:
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")

    def compile_it() -> CompiledGrammar:
        return _compile(GrammarCompiler(vocab, cache_size=0), which)

    chained = compile_it()
    walks = random_walks(chained, walks=4, steps=40, seed=5)
    want = replay_masks(chained, walks)
    with mock.patch.object(lexer_module, "_CHAIN_ROWS", 0):
        assert np.array_equal(replay_masks(compile_it(), walks), want)
        with mock.patch.object(lexer_module, "_AHEAD_LEVELS", 0):
            assert np.array_equal(replay_masks(compile_it(), walks), want)
