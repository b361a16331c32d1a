"""Counted stack tops classified on count-down windows (``_CountedClassifier._countdown``)
get exactly the classification of the unrolled windows they replace (issue #31: the
``(cap, 2 cap)`` window of a string item was 19 MB, built inside one mask).

For string items with length bounds (counted from a few copies on), a vocabulary of tokens
up to 12 bytes (tables of 8 levels, grown to 12), every live item state and every ``(need,
left)`` the parser can hold (``need`` up to ``cap``, ``left`` within reach, at ``cap``, or
unbounded): the words and the candidates
equal the old path's (``_window`` at the old window's level, walked as before), whatever
order the tables are built in (small entries first, so tables grow; then large first).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import formcast.automata.rules as rules
from formcast.automata.counted import iterations_overlap
from formcast.automata.dfa import DEAD
from formcast.index.cfg_program import CfgProgram, Classification, _CountedClassifier
from formcast.index.compiler import GrammarCompiler
from formcast.vocab.vocabulary import Vocabulary


def _vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    chars = 'ab\\"u0,:'
    toks = {bytes([b]) for b in range(32, 127)}
    for _ in range(120):
        toks.add("".join(rng.choice(chars) for _ in range(rng.randint(2, 12))).encode())
    ordered = [*sorted(toks), b"<eos>"]
    return Vocabulary.from_tokens(ordered, stop_token_ids=[len(ordered) - 1], name=f"cd{seed}")


def _old(cc: _CountedClassifier, rule: int, state: int, need: int, left: int) -> Classification:
    cap = cc._cap
    far = left < 0 or left >= cap
    if need == 0:
        window, level = (0, cap), cap - min(left, cap)
    elif far:
        window, level = (cap, 2 * cap), cap - need
    else:
        window, level = (need, left), 0
    table = cc._window(rule, *window)
    assert table is not None
    n = cc._auto.dfas[rule].table.shape[0]
    return cc._walk_narrow(rule, table, level * n + state)  # (windows are narrow)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("descending", [False, True])
def test_countdown_windows_classify_as_the_old_windows(seed: int, descending: bool) -> None:
    vocab = _vocab(seed)
    schema = {
        "type": "array",
        "items": [
            {"type": "string", "minLength": 3, "maxLength": 40},
            {"type": "string", "minLength": 9},
            {"type": "string", "maxLength": 5},
        ],
    }
    copies = rules._COUNT_MIN_COPIES
    rules._COUNT_MIN_COPIES = 2
    try:
        program = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema).program
    finally:
        rules._COUNT_MIN_COPIES = copies
    assert isinstance(program, CfgProgram)
    cc = program._counted
    cap = cc._cap
    assert cap == 13
    checked = 0
    for rule in cc.rules:
        dfa = cc._auto.dfas[rule]
        if iterations_overlap(dfa.table, dfa.accepting, dfa.start):
            continue
        live = np.flatnonzero((dfa.table != DEAD).any(axis=1)).tolist()
        cases = [
            (need, left)
            for need in range(cap)
            for left in (*range(max(need, 1), cap), cap, cap + 3)
            if not (left >= cap and need == 0)
        ]
        cases += [(need, -1) for need in range(1, cap)]
        cases.sort(key=lambda c: max(c[0], c[1] if 0 <= c[1] < cap else 0), reverse=descending)
        for need, left in cases:
            for state in live:
                got = cc.classify(rule, state, need, left)
                want = _old(cc, rule, state, need, left)
                assert np.array_equal(got.words, want.words), (rule, state, need, left)
                assert np.array_equal(got.candidates, want.candidates), (rule, state, need, left)
                checked += 1
    assert checked > 100
