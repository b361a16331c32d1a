"""Candidate checks skip the candidates that share a prefix the parser rejected (#31).

``cfg_program._verify_in_order`` walks sorted candidates resuming from the prefix each shares
with the previous one; where a byte kills a walk, the candidates after it that start with the
dead prefix are skipped by a binary search.  The verdicts and the error must be those of
stepping every candidate's bytes one by one (``PushdownAutomaton.step_bytes``, the oracle), on
candidate sets made of long runs under shared prefixes (alive and dead ones: the tokens under
each two-byte prefix of the grammar's real candidates), in string order and shuffled (the
function sorts them), with the step memo and without.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, Vocabulary
from formcast.vocab.loaders import load_vocabulary

DOC = (
    b'{"order": [1, -2.5e3, {"a": "x\\"y", "b": [null, [true, {"c": []}]]}], '
    b'"ok": true, "name": "Zo\xc3\xab", "n": {"m": {"k": [[]]}}}'
)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _oracle(pda: Any, state: Any, strings: list[bytes], cands: np.ndarray) -> list[int]:
    return [i for i in cands.tolist() if not pda.step_bytes(state, strings[i]).is_dead]


def _runs(program: Any, state: Any, strings: list[bytes], limit: int) -> np.ndarray:
    """The tokens under each two-byte prefix of the state's real candidates (sorted)."""
    prefixes: set[bytes] = set()
    for f in state.frames:
        prefixes.update(strings[i][:2] for i in program.classify(f.rule, f.state).candidates)
    picked = [i for i, s in enumerate(strings) if s[:2] in prefixes]
    return np.asarray(picked[:limit], dtype=np.int64)


@pytest.mark.parametrize("seed", [0, 1])
def test_skipped_runs_match_the_steps(vocab: Vocabulary, seed: int) -> None:
    grammar = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar()
    program: Any = grammar.program
    pda = program.pda
    trie = vocab.trie
    rng = random.Random(seed)
    state = program.initial_state()
    skipped_runs = 0
    for at in range(1, len(DOC)):
        state = pda.step(state, DOC[at - 1])
        assert not state.is_dead
        if rng.random() > 0.4:
            continue
        cands = _runs(program, state, trie.strings, 1500)
        if cands.size < 2:
            continue
        want = _oracle(pda, state, trie.strings, cands)
        got, err = cfg_program._verify_in_order(pda.step, state, trie, cands, pda.step_memo)
        plain, err2 = cfg_program._verify_in_order(pda.step, state, trie, cands)
        shuffled = cands.copy()
        np.random.default_rng(seed + at).shuffle(shuffled)
        mixed, err3 = cfg_program._verify_in_order(pda.step, state, trie, shuffled, pda.step_memo)
        assert got.tolist() == want
        assert plain.tolist() == want
        assert mixed.tolist() == want  # in string order whatever the order given
        assert err is err2 is err3 is None
        # runs under a dead prefix were there to skip (the test can see a wrong skip)
        dead = {trie.strings[i][:2] for i in cands.tolist()} - {trie.strings[i][:2] for i in want}
        skipped_runs += len(dead)
    assert skipped_runs > 5


def test_prefix_end_bounds_the_run() -> None:
    end = cfg_program._prefix_end
    assert end(b" ]") == b" ^"
    assert end(b"a\xff") == b"b"
    for p, s in ((b" ]", b" ]\xff\xff"), (b"a\xff", b"a\xff\xff\x00"), (b"\xff", b"\xff\xff")):
        assert s < end(p)
        assert p < end(p)
