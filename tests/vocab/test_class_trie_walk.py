"""``TokenTrie.walk_pairs`` against a per-string reference walk, on the class-trie path and off it.

Permissive walks run on a class trie (the strings read as sequences of the table's column
classes, see :mod:`formcast.vocab.trie`); restrictive ones on the byte trie.  Both must give
exactly the reference: every distinct string's bytes run through the table one at a time.
Tables: random DFAs with few byte classes (identifier-like: the class trie merges prefixes),
with many classes (no class trie), and the augmented lexer tables of real grammars.  These are
the numpy walks: in the compiled build the C walks are switched off here (they are compared
with the numpy walks in test_native_trie_walk.py).
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler
from formcast.index.cfg_program import CfgProgram, _ExitSplitClassifier
from formcast.vocab import trie as trie_mod
from formcast.vocab.trie import TokenTrie


@pytest.fixture(autouse=True)
def _numpy_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The numpy walks (class tries included) even in the compiled build."""
    monkeypatch.setattr(trie_mod, "_KERNEL", None)


def _reference(trie: TokenTrie, table: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """(string indices alive from ``start``, their end states), one byte at a time."""
    idx: list[int] = []
    ends: list[int] = []
    for i, s in enumerate(trie.strings):
        q = start
        for b in s:
            q = int(table[q, b])
            if q == 0:
                break
        if q:
            idx.append(i)
            ends.append(q)
    return np.asarray(idx, dtype=np.int64), np.asarray(ends, dtype=np.int32)


def _vocab(rng: np.random.Generator, n: int) -> list[bytes]:
    """Random tokens over a small alphabet (shared prefixes, repeated runs) plus all bytes."""
    alphabet = [*b'abcxyz019 _(),."', 0xC3, 0xA9, 0xFF]
    out = [bytes([b]) for b in range(256)]
    for _ in range(n):
        k = int(rng.integers(1, 12))
        out.append(bytes(int(b) for b in rng.choice(alphabet, size=k)))
    out.append(b" " * 40)
    return out


def _random_table(rng: np.random.Generator, n_states: int, n_classes: int) -> np.ndarray:
    """A DFA table (state 0 dead) whose 256 columns fall in ``n_classes`` classes."""
    cmap = rng.integers(0, n_classes, size=256)
    cls_table = rng.integers(1, n_states, size=(n_states, n_classes)).astype(np.int32)
    cls_table[rng.random((n_states, n_classes)) < 0.15] = 0  # some transitions die
    cls_table[0] = 0
    return np.ascontiguousarray(cls_table[:, cmap])


def _check(trie: TokenTrie, table: np.ndarray, start: int) -> None:
    got_idx, got_ends = trie.walk_pairs(table, start)
    ref_idx, ref_ends = _reference(trie, table, start)
    order = np.argsort(got_idx, kind="stable")
    assert np.array_equal(got_idx[order], ref_idx)
    assert np.array_equal(got_ends[order], ref_ends)
    assert got_ends.dtype == np.int32


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_classes", [1, 3, 10, 24, 80])
def test_walk_pairs_equals_per_string_walk_on_random_dfas(seed: int, n_classes: int) -> None:
    rng = np.random.default_rng(seed * 100 + n_classes)
    tokens = _vocab(rng, 600)
    trie = TokenTrie(tokens, vocab_size=len(tokens))
    table = _random_table(rng, int(rng.integers(2, 9)), n_classes)
    for start in range(1, table.shape[0]):
        _check(trie, table, start)
    # few classes: some walk was permissive and ran on a class trie
    if n_classes <= trie_mod._CLASS_TRIE_MAX_CLASSES:
        assert trie._class_tries


def test_a_class_trie_is_shared_by_tables_with_one_class_map_and_stays_exact() -> None:
    rng = np.random.default_rng(7)
    tokens = _vocab(rng, 400)
    trie = TokenTrie(tokens, vocab_size=len(tokens))
    a = _random_table(np.random.default_rng(1), 5, 4)
    # same columns grouped the same way, other next states
    b = np.where(a != 0, (a % 4) + 1, 0).astype(np.int32)
    for table in (a, b, a):
        for start in range(1, table.shape[0]):
            _check(trie, table, start)
    assert len(trie._class_tries) <= 2


def _grammar_tables(gbnf: str, vocab_tokens: list[bytes]) -> list[np.ndarray]:
    from formcast.vocab.vocabulary import Vocabulary

    vocab = Vocabulary([*vocab_tokens, b""], stop_token_ids=[len(vocab_tokens)])
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):  # the whole (eager) tables
        compiled = GrammarCompiler(vocab, cache_size=0).compile_grammar(gbnf)
    program = compiled.program
    assert isinstance(program, CfgProgram)
    positions = program._positions
    assert isinstance(positions, _ExitSplitClassifier)
    return [positions._lex_aug, positions._cut_aug]


_GRAMMARS = [
    r"""root ::= expr
expr ::= term (ws [-+] ws term)*
term ::= factor (ws [*/] ws factor)*
factor ::= num | ident | ident "(" ws args? ws ")" | "(" ws expr ws ")" | "-" factor
args ::= expr (ws "," ws expr)*
num ::= [0-9]+ ("." [0-9]+)?
ident ::= [a-zA-Z_] [a-zA-Z0-9_]*
ws ::= [ \t\n]*""",
    r"""root ::= "{" ws (pair (ws "," ws pair)*)? ws "}"
pair ::= str ws ":" ws val
val ::= str | [0-9]+ | root | "true" | "null"
str ::= "\"" ([^"\\] | "\\" ["\\nt])* "\""
ws ::= [ \n]*""",
]


@pytest.mark.parametrize("grammar", range(len(_GRAMMARS)))
def test_walk_pairs_equals_per_string_walk_on_real_lexers(grammar: int) -> None:
    rng = np.random.default_rng(grammar)
    tokens = _vocab(rng, 800)
    tokens = list(dict.fromkeys(tokens))
    tables = _grammar_tables(_GRAMMARS[grammar], tokens)
    trie = TokenTrie(tokens, vocab_size=len(tokens))
    for table in tables:
        n = (table.shape[0] - 1) // 3
        for start in range(2 * n + 1, 3 * n):  # the walk starts of the lexer's states
            _check(trie, table, start)
    if grammar == 0:  # the arithmetic lexer has few classes: its walks ran on class tries
        assert trie._class_tries


def _random_item_inputs(
    rng: np.random.Generator, n_states: int, n_classes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(table, accepting, call_split, exit_split) of a random counted item: few column classes
    in the table, and split flags that cut some of them further (so that the window's
    classes are the join of all three)."""
    table = _random_table(rng, n_states, n_classes)
    accepting = rng.random(n_states) < 0.5
    accepting[0] = accepting[1] = False  # state 1 starts an iteration
    if rng.random() < 0.75:  # else iterations may overlap: only subset windows exist
        # an accepting state never goes on with a byte that begins the next iteration
        table[np.ix_(accepting, table[1] != 0)] = 0
    call_split = np.zeros((n_states, 256), dtype=bool)
    call_split[1:, rng.choice(256, size=2, replace=False)] = rng.random((n_states - 1, 2)) < 0.7
    exit_split = np.zeros(256, dtype=bool)
    exit_split[rng.choice(256, size=3, replace=False)] = True
    return table, accepting, call_split, exit_split


@pytest.mark.parametrize("seed", range(8))
def test_counted_windows_told_their_classes_walk_exactly_without_hashing_the_table(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window's augmented table, told the item's column classes
    (``note_column_classes(aug, window_column_classes(...))``, as the counted classifier does),
    walks exactly like the per-string reference, and its permissive walks never hash the
    table itself (``column_classes`` on it would raise here)."""
    from formcast.automata.counted import subset_window, window_column_classes, window_table
    from formcast.columns import column_classes
    from formcast.index.cfg_program import _augmented_table

    rng = np.random.default_rng(seed)
    tokens = list(dict.fromkeys(_vocab(rng, 500)))
    trie = TokenTrie(tokens, vocab_size=len(tokens))
    table, accepting, call_split, exit_split = _random_item_inputs(rng, 4, int(rng.integers(2, 6)))
    item_start = 1
    classes = window_column_classes(table, item_start, call_split, exit_split)
    windows = []
    for need, iterations in ((0, -1), (0, 5), (3, 6), (2, 2)):
        got = window_table(table, accepting, item_start, call_split, exit_split, need, iterations)
        if got is not None:
            windows.append(_augmented_table(*got))
    entries = [(q, 0) for q in range(1, table.shape[0])]
    sub = subset_window(table, accepting, item_start, call_split, exit_split, 0, -1, entries, 6)
    if sub is not None:
        windows.append(_augmented_table(sub[0], sub[1]))
    assert windows
    for aug in windows:
        # the partition holds equal columns of the window (it may be finer than its own)
        cmap, first = classes
        assert np.array_equal(aug[:, first[cmap]], aug)
        own = column_classes(aug)
        assert own[1].size <= first.size
    told = []
    for aug in windows:
        trie_mod.note_column_classes(aug, classes)
        told.append(aug)

    def no_hashing(table: np.ndarray, most: int | None = None) -> None:
        raise AssertionError("a window told its classes was hashed")

    monkeypatch.setattr(trie_mod, "column_classes", no_hashing)
    for aug in told:
        n = (aug.shape[0] - 1) // 3
        for start in range(2 * n + 1, 3 * n):
            _check(trie, aug, start)
    assert trie._class_tries  # some walk was permissive and ran on the told classes
