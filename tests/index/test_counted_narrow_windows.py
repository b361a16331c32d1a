"""Counted stack tops classified on *narrow* windows (one column per byte class of the item,
``_CountedClassifier._item``) get exactly the classification of the 256-column windows
built and walked as before (issue #31: a 128-level window of a JSON string item was a fresh
9.4 MB table inside one mask; narrow, 0.8 MB).

The reference is the same classifier with 256-column inputs (the identity class map) walked
by ``cfg_program._walk`` (the wide walk), each on a context of its own (the shared windows
and classifications are keyed alike).  Every counted rule of string items with length bounds
(count-down windows, the unrolled ``(need, left)`` windows, one self-restarting level) and of
items whose iterations overlap (determinized windows), every live item state, every ``(need,
left)`` the parser can hold: equal words and candidates, in the compiled build (the kernel's
narrow walks) and in the pure package (class tries and level walks).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import formcast.automata.rules as rules
from formcast.automata.counted import NarrowItem
from formcast.automata.dfa import DEAD
from formcast.index.cfg_program import CfgProgram, Classification, _CountedClassifier, _walk
from formcast.index.compiler import GrammarCompiler
from formcast.index.context import TokenIndexContext
from formcast.vocab.vocabulary import Vocabulary


class _Wide(_CountedClassifier):
    """The classifier on 256-column windows, walked as before (the reference)."""

    __slots__ = ()

    def _item(self, rule: int) -> NarrowItem:
        dfa = self._auto.dfas[rule]
        calls, follow = self.rules[rule]
        every = np.arange(256)
        return NarrowItem(every.astype(np.uint8), every, dfa.table, calls, follow)

    def _walk_narrow(self, rule: int, table: np.ndarray, start: int) -> Classification:
        assert table.shape[1] == 256
        return _walk(self._vocab, table, start + 2 * ((table.shape[0] - 1) // 3))


def _vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    chars = 'ab\\"u0,:é'
    toks = {bytes([b]) for b in range(32, 127)} | {"é".encode(), b"\xc3"}
    for _ in range(150):
        toks.add("".join(rng.choice(chars) for _ in range(rng.randint(2, 12))).encode())
    ordered = [*sorted(toks), b"<eos>"]
    return Vocabulary.from_tokens(ordered, stop_token_ids=[len(ordered) - 1], name=f"nw{seed}")


def _classifiers(vocab: Vocabulary, grammar: str | dict[str, object]) -> list[_CountedClassifier]:
    copies = rules._COUNT_MIN_COPIES
    rules._COUNT_MIN_COPIES = 2
    try:
        compiler = GrammarCompiler(vocab, cache_size=0)
        if isinstance(grammar, str):
            program = compiler.compile_grammar(grammar).program
        else:
            program = compiler.compile_json_schema(grammar).program
    finally:
        rules._COUNT_MIN_COPIES = copies
    assert isinstance(program, CfgProgram)
    cc = program._counted
    fp = vocab.fingerprint
    return [
        cls(cc._auto, vocab, cc._cap, TokenIndexContext(fp)) for cls in (_CountedClassifier, _Wide)
    ]


GRAMMARS: list[str | dict[str, object]] = [
    {
        "type": "array",
        "items": [
            {"type": "string", "minLength": 3, "maxLength": 40},
            {"type": "string", "minLength": 9},
            {"type": "string", "maxLength": 5},
            {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 30},
        ],
    },
    'root ::= ( [ab]+ ","? ){2,7} "("',  # iterations overlap: determinized windows
    'root ::= "(" ( [ab]+ "," | "a" ){0,14} ")"',
    'root ::= ( "b"+ x? ){0,9} ","\nx ::= "a" | "(" x ")"',
]


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("grammar", range(len(GRAMMARS)))
def test_narrow_windows_classify_as_the_wide_ones(seed: int, grammar: int) -> None:
    vocab = _vocab(seed)
    narrow, wide = _classifiers(vocab, GRAMMARS[grammar])
    cap = narrow._cap
    assert 8 <= cap <= 26
    checked = 0
    for rule in narrow.rules:
        dfa = narrow._auto.dfas[rule]
        live = np.flatnonzero((dfa.table != DEAD).any(axis=1)).tolist()
        cases = [
            (need, left)
            for need in (*range(cap), cap)
            for left in (*range(max(need, 1), cap), cap, cap + 3, -1)
            if need <= left or left < 0
        ]
        for need, left in cases:
            for state in live:
                got = narrow.classify(rule, state, need, left)
                want = wide.classify(rule, state, need, left)
                assert np.array_equal(got.words, want.words), (rule, state, need, left)
                assert np.array_equal(got.candidates, want.candidates), (rule, state, need, left)
                checked += 1
        item = narrow._item(rule)
        assert item.table.shape[1] == item.reps.size < 256  # the windows really are narrow
    assert checked > 100
