"""Candidate checks read the parser's step memo first, and answer as the steps do (#31).

``cfg_program._verify_in_order`` looks each ``(state, byte)`` up in the parser's step memo
before calling ``step`` (most steps of a warm mask are memoized).  The verdicts and the error
must be those of stepping every candidate's bytes one by one (``PushdownAutomaton.step_bytes``,
the oracle), with the memo cold, warm, and cleared in the middle of a check (a reset of the
parser's caches replaces what the memo holds).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, Vocabulary
from formcast.vocab.loaders import load_vocabulary

DOC = b'{"order": [1, -2.5e3, {"a": "x\\"y", "b": null}], "ok": true, "name": "Zo\xc3\xab"}'


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _oracle(pda: Any, state: Any, strings: list[bytes], cands: np.ndarray) -> list[int]:
    return [i for i in cands.tolist() if not pda.step_bytes(state, strings[i]).is_dead]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_memo_reads_match_the_steps(vocab: Vocabulary, seed: int) -> None:
    grammar = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar()
    program: Any = grammar.program
    pda = program.pda
    trie = vocab.trie
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(DOC)), 8))
    calls = [0]

    def step_clearing(st: Any, b: int) -> Any:  # the memo emptied now and then
        calls[0] += 1
        if calls[0] % 7 == 0:
            pda._steps.clear()
        return pda.step(st, b)

    state = program.initial_state()
    at = 0
    for cut in cuts:
        state = pda.step_bytes(state, DOC[at:cut])
        at = cut
        assert not state.is_dead
        picks = rng.sample(range(trie.num_strings), 600)
        cands = np.asarray(sorted(picks), dtype=np.int64)
        want = _oracle(pda, state, trie.strings, cands)
        plain, err0 = cfg_program._verify_in_order(pda.step, state, trie, cands)
        warm, err1 = cfg_program._verify_in_order(pda.step, state, trie, cands, pda.step_memo)
        pda._steps.clear()
        cleared, err2 = cfg_program._verify_in_order(
            step_clearing, state, trie, cands, pda.step_memo
        )
        assert plain.tolist() == want
        assert warm.tolist() == want
        assert cleared.tolist() == want
        assert err0 is err1 is err2 is None
    assert calls[0] >= 7  # the memo was cleared mid-check
