"""Counted rules whose iterations overlap, and large candidate sets, against the Earley oracle.

An item such as ``[ab]+ ","?`` can end an iteration and go on inside it on the same byte, so
its unrolled *window* is not deterministic (``window_table`` gives None).  Such stack tops are
classified on the window determinized by subset construction
(:func:`formcast.automata.counted.subset_window`); candidate sets of 64 tokens or more are
verified level by level (``cfg_program._verify_by_levels``).  Both must leave every mask
exactly what the brute-force oracle (``ReferenceRecognizer``, Earley over characters) says:

* fixed grammars with overlapping counted items, every repeat of two or more copies counted,
  on a vocabulary of tokens up to 4 bytes (counts clipped at 5: the walks meet windows with
  no bound within reach, the upper bound only, the lower bound only, and both), along seeded
  random walks that run into the bounds;
* the same with every candidate set verified level by level (threshold 1), and the random
  grammars and vocabularies of the CFG oracle tests likewise;
* the determinized window is really used (not its fallback), and agrees with the per-token
  path: verifying candidates one by one gives the same masks.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

import formcast.automata.rules as rules
from cfg_oracle import oracle_tests
from formcast import GrammarMatcher, Vocabulary
from formcast.automata import counted
from formcast.index import cfg_program
from formcast.index.context import live_contexts

Oracle = oracle_tests.Oracle
compile_gbnf = oracle_tests.compile_gbnf
SETTINGS = oracle_tests.SETTINGS

# items that may end an iteration and go on inside it on the same byte
OVERLAPPING = [
    'root ::= ( [ab]+ ","? ){2,7} "("',
    'root ::= ( "a" | "ab" | "b"+ ){0,8} ")"',
    'root ::= "(" ( "a"+ ){3,9} ( "," | ")" )',
    'root ::= ( [ab]+ ","? ){1,9}',
    'root ::= ( [ab]+ ","? ){6,}',
    'root ::= "(" ( [ab]+ "," | "a" ){0,14} ")"',
    'root ::= "(" ( "a" | "aa" ){0,9} ")"',
    'root ::= ( "b"+ x? ){0,9} ","\nx ::= "a" | "(" x ")"',
    'root ::= ( x? "b"+ ){0,9} ","\nx ::= "a" | "(" x ")"',
]


def _vocab(seed: int) -> Vocabulary:
    """Every single character, plus random tokens of 2 to 4 characters over ``a b , ( )``
    (mostly letters, so tokens cross many iterations)."""
    rng = random.Random(seed)
    chars = "aaabbb,()"
    toks = [c.encode() for c in "ab,()"]
    for _ in range(80):
        toks.append("".join(rng.choice(chars) for _ in range(rng.randint(2, 4))).encode())
    toks = sorted(set(toks))
    return Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)], name="ov")


@contextmanager
def counting_from(copies: int) -> Iterator[None]:
    with mock.patch.object(rules, "_COUNT_MIN_COPIES", copies):
        yield


@contextmanager
def verify_by_levels_from(size: int) -> Iterator[None]:
    with mock.patch.object(cfg_program, "_LEVEL_VERIFY_MIN", size):
        yield


def _fresh_shared_caches() -> None:
    for slot in (
        cfg_program.COUNTED_CLASSES,
        cfg_program.COUNTED_WINDOWS,
        cfg_program.COUNTED_SUBSETS,
    ):
        for ctx in live_contexts():
            ctx.cache(slot).clear()


def _walk_against_oracle(
    text: str, vocab: Vocabulary, seed: int, steps: int = 12, *, check: bool = True
) -> list[bytes]:
    """Compare every mask of a seeded random walk with the oracle (unless not ``check``);
    the masks, as bytes."""
    oracle = Oracle(text)
    with counting_from(2):
        compiled = compile_gbnf(vocab, text)
    assert compiled.program.auto.counts, "the grammar should have a counted rule"
    rng = random.Random(seed)
    m = GrammarMatcher(compiled)
    prefix = b""
    masks = []
    for step in range(steps):
        got = set(m.allowed_token_ids().tolist())
        want = oracle.allowed(vocab, prefix) if check else got
        assert got == want, (
            f"{text}\nprefix {prefix!r} step {step}: extra "
            f"{sorted(vocab.tokens[i] for i in got - want)} missing "
            f"{sorted(vocab.tokens[i] for i in want - got)}"
        )
        masks.append(repr(sorted(got)).encode())
        text_ids = sorted(got - vocab.stop_token_ids)
        if not text_ids:
            break
        # mostly long tokens, so walks run into the bounds
        longest = sorted(text_ids, key=lambda t: -len(vocab.tokens[t]))[:8]
        t = rng.choice(longest if rng.random() < 0.7 else text_ids)
        assert m.accept_token(t)
        prefix += vocab.tokens[t]
    return masks


@pytest.mark.parametrize("text", OVERLAPPING)
@pytest.mark.parametrize("seed", [0, 1])
def test_overlapping_counted_items_match_the_oracle(text: str, seed: int) -> None:
    _fresh_shared_caches()
    built = []
    real = counted.subset_window

    def spy(*args, **kwargs):
        got = real(*args, **kwargs)
        built.append(got is not None)
        return got

    with mock.patch.object(cfg_program, "subset_window", spy):
        _walk_against_oracle(text, _vocab(seed), seed)
    assert any(built), "no determinized window was built"


@pytest.mark.parametrize("text", OVERLAPPING)
def test_level_verification_matches_the_oracle(text: str) -> None:
    _fresh_shared_caches()
    with verify_by_levels_from(1):
        _walk_against_oracle(text, _vocab(7), 7)


@pytest.mark.parametrize("text", OVERLAPPING)
def test_determinized_windows_and_candidate_checks_agree(text: str) -> None:
    """The masks with the determinized windows equal those where every crossing token of an
    overlapping item is a candidate checked by the parser token by token."""
    vocab = _vocab(3)
    _fresh_shared_caches()
    with verify_by_levels_from(10**9):
        fast = _walk_against_oracle(text, vocab, 3, steps=30, check=False)
    _fresh_shared_caches()
    with (
        mock.patch.object(cfg_program, "subset_window", return_value=None),
        verify_by_levels_from(10**9),
    ):
        slow = _walk_against_oracle(text, vocab, 3, steps=30, check=False)
    assert fast == slow


def _inner(test):  # the undecorated body of a hypothesis test
    return test.hypothesis.inner_test


@SETTINGS
@given(g=oracle_tests.grammars(), vocab=oracle_tests.vocabularies(), data=st.data())
def test_random_grammars_with_level_verification_match_the_oracle(
    g: oracle_tests.RandomGrammar, vocab: Vocabulary, data
) -> None:
    with counting_from(2), verify_by_levels_from(1):
        _inner(oracle_tests.test_masks_match_the_oracle_on_random_walks)(g, vocab, data)
