"""The lazy classifier's walk glue (glue38, issue #31): ``_walk_rows`` makes its
``WalkRows`` with ``tuple.__new__`` (no Python ``__new__``) and ``_walk_resumed`` reads the
walk tables and the start row inline.  The tuple must still be a ``WalkRows`` holding the
very arrays of the lexer and the tables (the kernel writes rows into them in place), the ids
given and the exit byte (-1: none); the inlined start row must be ``_LazyWalkTables.start``'s
(walk39: the row and the inlined rows handed to the bound walker, ``ClassifyWalker.walk``).
The masks themselves are pinned by the lazy == eager tests (tests/index/
test_lazy_index_matches_eager.py, test_lazy_tables_grow_mid_walk.py)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, GrammarMatcher, Vocabulary, allocate_token_bitmask
from formcast.vocab.loaders import load_vocabulary
from formcast.vocab.trie import ClassifyWalker, WalkRows

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
    "required": ["name"],
}


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _classifiers(vocab: Vocabulary) -> list[Any]:
    """The lazy classifier of a fresh grammar, after its first mask classified stack tops
    (read from the program: a spy on the class's methods sees nothing where
    ``formcast.index.cfg_program`` is compiled with mypyc)."""
    grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(SCHEMA)
    matcher = GrammarMatcher(grammar)
    mask = allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(mask, 0)  # (the first classifications)
    clf: Any = grammar.program._positions
    assert isinstance(clf, cfg_program._LazyExitSplitClassifier)
    return [clf] if len(clf) else []


def test_walk_rows_is_a_walk_rows_of_the_live_arrays(vocab: Vocabulary) -> None:
    found = _classifiers(vocab)
    assert found, "no lazy classification ran"
    for clf in found:
        tables = clf._tables()
        rows = clf._walk_rows(tables)
        assert type(rows) is WalkRows
        lexer = clf.lexer
        expect = (
            lexer.table,
            lexer.split,
            lexer.built,
            tables.ids,
            tables.ready,
            tables.states,
            tables.lex,
            tables.cut,
            tables.pending,
        )
        assert len(rows) == 11
        for got, want in zip(rows[:9], expect, strict=True):
            assert got is want
        assert rows.given == tables.count
        assert rows.exit_byte == (-1 if clf.exit_byte is None else clf.exit_byte)
        assert rows == WalkRows(*expect, tables.count, rows.exit_byte)


def test_inlined_start_row_is_the_tables_start(vocab: Vocabulary) -> None:
    found = _classifiers(vocab)
    starts: list[tuple[int, int]] = []
    real = ClassifyWalker.walk
    current: list[Any] = []

    def spy(self: ClassifyWalker, table: Any, start: int, *rest: Any) -> Any:
        rows = rest[-2]
        starts.append((start, rows.given))
        # (the rows handed over: the very tuple :meth:`_walk_rows` makes)
        want = current[-1]._walk_rows(current[-1]._tables())
        assert type(rows) is WalkRows
        assert len(rows) == len(want)
        for a, b in zip(rows[:9], want[:9], strict=True):
            assert a is b
        assert rows[9:] == want[9:]
        assert table is (want.cut if current[-1].exit_byte is not None else want.lex)
        assert rest[0] is want.pending
        return real(self, table, start, *rest)

    for clf in found:
        current.append(clf)
        tables = clf._tables()
        ready = [int(s) for s in tables.states[1 : tables.count] if tables.ready[s]]
        with mock.patch.object(ClassifyWalker, "walk", spy):
            for state in ready[:8]:
                starts.clear()
                got = clf._walk_resumed(clf._vocab.trie, True, state, None, None, None)
                if got is None:
                    pytest.skip("no resumable walks (the pure package)")
                assert starts
                assert starts[0][0] == clf._tables().start(state)
