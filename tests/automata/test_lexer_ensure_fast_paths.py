"""``LazyExpandedLexer.ensure``'s fast paths (exit36, #31): its levels read each built row's
successors once per lexer, two-member rows are built by numpy calls on the two rows, and its
large tables are private maps.

The ahead levels and the chain levels of ``ensure`` take the distinct states a row leads to
from a memo (``_LexerHelpers.succ``) filled as rows are read: a built row never changes, so
its list stays right (an unbuilt row, zeros or a sentinel, would change when built: the
levels never read one, a level that leaves a state unbuilt being the budget's last).  Here the
real ``ensure`` runs beside the reference one of test_lexer_ensure_matches_reference
(successors read from the table every time) with ahead budgets of 1 to 3 rows (levels leave
states unbuilt; later calls build them and go through them): both lexers must build the same
rows with the same numbering after every call, and every memo entry must be a built row's
successors on all 256 columns.  A memo read on too few columns, or under the wrong state,
breaks both (mutations checked).

Two-member rows (a state and one callee's start): the unions where both live on must be
numbered in class order, as the reference's numpy ``_union_rows`` numbers them; a grammar
whose rows make two unions each (a recursive rule whose call site and start both go on by
``a`` and by ``b``) is built one state with calls at a time by both and compared.

``_fresh``: a table of at least ``_FRESH_MAP_BYTES`` is a *private* anonymous map on Linux
(``mmap.mmap(-1, n)`` alone is shared: shmem pages, whose first writes cost ~1.4x); checked in
``/proc/self/maps``.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from test_expanded_lexer_lazy_rows import _automaton
from test_expanded_lexer_matches_simulation import _GBNF, _SCHEMAS, _VOCAB
from test_lexer_ensure_matches_reference import _reference_ensure, _same

import formcast.automata.lexer as lexer_module
from formcast import GrammarCompiler
from formcast.automata.lexer import LazyExpandedLexer
from formcast.index.cfg_program import CfgProgram


@pytest.fixture(autouse=True)
def _ahead_rows_on() -> Iterator[None]:
    """The ahead (and chain) levels tested here, with the budget they had by default before
    exit37 (``_AHEAD_ROWS`` is 0 by default since: tests/automata/test_lexer_ahead_default.py)."""
    with mock.patch.object(lexer_module, "_AHEAD_ROWS", 48):
        yield


def _memo_is_exact(lex: LazyExpandedLexer) -> int:
    h = lex._helpers
    assert h is not None
    for q, succ in h.succ.items():
        assert lex.built[q], q  # (an unbuilt row's successors change when it is built)
        assert sorted(succ) == np.unique(lex.table[q]).tolist(), q
    return len(h.succ)


@pytest.mark.parametrize("ahead_rows", [1, 3])
@pytest.mark.parametrize("lazy_from", [0, 1 << 30])
@pytest.mark.parametrize("which", range(len(_GBNF) + len(_SCHEMAS) + 2))
def test_memo_levels_build_what_the_reference_builds(
    which: int, lazy_from: int, ahead_rows: int
) -> None:
    auto = _automaton(which)
    with (
        mock.patch.object(lexer_module, "_LAZY_ROWS_FROM", lazy_from),
        mock.patch.object(lexer_module, "_AHEAD_ROWS", ahead_rows),
        mock.patch.object(lexer_module, "_CHAIN_ROWS", 0),  # (the reference has no chain)
    ):
        real = LazyExpandedLexer(auto)
        ref = LazyExpandedLexer(auto)
        n_global = int(real.offsets[-1])
        rng = random.Random(which * 11 + ahead_rows + (lazy_from > 0))
        memo = 0
        for _ in range(80):
            pool = list(range(1, n_global)) + list(range(n_global, real.size))
            states = rng.sample(pool, min(len(pool), rng.choice((1, 1, 1, 2, 3))))
            got = real.ensure(np.asarray(states, dtype=np.int64))
            want = _reference_ensure(ref, states)
            assert got == want
            _same(real, ref)
            memo = _memo_is_exact(real)
    assert memo > 0  # (the levels went through rows, some built before the call)


def test_chain_levels_read_the_memo_right() -> None:
    """The chain levels (past the ahead levels) read successors from the same memo: a lexer
    walked with chains on builds what one with the memo cleared before every call builds."""
    auto = _automaton(len(_GBNF) + len(_SCHEMAS))  # (the built-in JSON grammar)
    with mock.patch.object(lexer_module, "_LAZY_ROWS_FROM", 0):
        real = LazyExpandedLexer(auto)
        ref = LazyExpandedLexer(auto)
        n_global = int(real.offsets[-1])
        rng = random.Random(5)
        for _ in range(80):
            pool = list(range(1, n_global)) + list(range(n_global, real.size))
            states = rng.sample(pool, 1)
            h = ref._helpers
            assert h is not None
            h.succ.clear()
            assert real.ensure(states) == ref.ensure(states)
            _same(real, ref)
            _memo_is_exact(real)


_TWO_UNIONS = r"""
root ::= r
r ::= "a" r "x" | "b" r "w" | "a" "a" "y" | "a" "b" "z" | "c"
"""


@pytest.mark.parametrize("lazy_from", [0, 1 << 30])
def test_two_member_rows_number_their_unions_in_class_order(lazy_from: int) -> None:
    program = GrammarCompiler(_VOCAB, cache_size=0).compile_grammar(_TWO_UNIONS).program
    assert isinstance(program, CfgProgram)
    auto = program.auto
    with mock.patch.object(lexer_module, "_LAZY_ROWS_FROM", lazy_from):
        real = LazyExpandedLexer(auto)
        ref = LazyExpandedLexer(auto)
        h = real._build_helpers()
        most = 0
        for s in range(1, int(real.offsets[-1])):
            if len(h.closure(s)) != 2 or real.built[s]:
                continue
            before = real.size
            assert real.ensure([s]) == _reference_ensure(ref, [s])
            _same(real, ref)
            most = max(most, real.size - before)
    assert most >= 2  # (some two-member row made two unions or more)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_large_tables_are_private_maps() -> None:
    rows = lexer_module._FRESH_MAP_BYTES // (256 * 4) + 8
    table = lexer_module._fresh(rows, np.int32)
    assert table.shape == (rows, 256)
    assert table.flags.writeable
    assert not table[::97].any()
    table[rows - 1] = 7  # (writable to the end)
    addr = table.__array_interface__["data"][0]
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if lo <= addr < hi:
            assert perms.endswith("p"), line  # private ("s": shared anonymous, shmem)
            break
    else:
        pytest.fail("the table's map is not in /proc/self/maps")
    small = lexer_module._fresh(4, np.bool_)  # (below the size: plain zeros)
    assert small.shape == (4, 256)
    assert not small.any()
