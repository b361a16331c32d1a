"""The level-by-level candidate check against the token-by-token one (#31, verify35).

``cfg_program._verify_by_levels`` orders the candidates longest first (those with a byte at
position ``k`` are a prefix of that order; a rejected one keeps the id -1, which indexes the
last, all-dead row of a level's tables), reads their bytes from the trie's strings laid end to
end (``TokenTrie.strings_end_to_end``), and finishes the last
``_LEVEL_TAIL`` candidates byte by byte (reading the step memo first). Its verdicts must be
those of ``_verify_in_order`` (token by token, itself checked against ``step_bytes``) and of
stepping each candidate's bytes, with every tail size (0: numpy to the end; a huge one: all in
Python), with and without the memo, on large candidate sets (real candidates
plus random strings of the Llama-3 vocabulary: long ones, dead ones, shared prefixes) of states
along documents of the builtin JSON grammar and of a counted schema (capped states, checked with
``step_capped`` as the masks check them).
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.vocab.loaders import load_vocabulary

DOC = (
    b'{"order": [1, -2.5e3, {"a": "x\\"y", "b": [null, [true, {"c": []}]]}], '
    b'"ok": true, "name": "Zo\xc3\xab", "n": {"m": {"k": [[]]}}}'
)
COUNTED = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{3,200}$"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 300},
        "n": {"type": "integer"},
    },
    "required": ["id", "tags"],
}
COUNTED_DOC = {"id": "abc_DEF-12345678901234567890xyz", "tags": ["alpha", "be ta", "", "g"], "n": 7}


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _cands(program: Any, state: Any, n: int, rng: random.Random) -> np.ndarray:
    """The state's real candidates plus ``n`` random strings (longest ones included)."""
    trie = program.vocab.trie
    picked: set[int] = set()
    for f in state.frames:
        if f.rule not in program._counted.rules:
            picked.update(program.classify(f.rule, f.state).candidates.tolist())
    picked.update(rng.sample(range(len(trie.strings)), n))
    longest = np.argsort(trie.lengths)[-40:]
    picked.update(longest.tolist())
    return np.asarray(sorted(picked), dtype=np.int64)


def _check(program: Any, state: Any, rng: random.Random, oracle: bool) -> int:
    pda = program.pda
    trie = program.vocab.trie
    step = pda.step_capped if program._counted.rules else pda.step
    cands = _cands(program, state, 2500, rng)
    want, err0 = cfg_program._verify_in_order(step, state, trie, cands)
    if oracle:
        assert want.tolist() == [
            i for i in cands.tolist() if not pda.step_bytes(state, trie.strings[i]).is_dead
        ]
    flat = trie.strings_end_to_end()
    shuffled = cands.copy()
    np.random.default_rng(rng.randrange(1 << 30)).shuffle(shuffled)
    for tail in (0, 1, 24, 10**9):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cfg_program, "_LEVEL_TAIL", tail)
            for given in (cands, shuffled):
                for memo in (pda.step_memo, None):
                    got, err = cfg_program._verify_by_levels(step, state, trie, given, flat, memo)
                    assert sorted(got.tolist()) == want.tolist(), (tail, memo)
                    assert err == err0
    return int(want.size)


def test_trie_bytes_are_the_strings(vocab: Vocabulary) -> None:
    program: Any = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar().program
    assert program is not None
    buf, offsets = vocab.trie.strings_end_to_end()
    strings = vocab.trie.strings
    assert offsets.size == len(strings) + 1
    assert int(offsets[-1]) == buf.size
    for i in [*random.Random(0).sample(range(len(strings)), 3000), 0, len(strings) - 1]:
        assert buf[offsets[i] : offsets[i + 1]].tobytes() == strings[i]
    again = vocab.trie.strings_end_to_end()
    assert again[0] is buf  # kept by the trie


def test_levels_match_in_order_on_json(vocab: Vocabulary) -> None:
    program: Any = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar().program
    pda = program.pda
    rng = random.Random(5)
    state = program.initial_state()
    accepted = 0
    for at in range(1, len(DOC)):
        state = pda.step(state, DOC[at - 1])
        assert not state.is_dead
        if at % 9 == 1:
            accepted += _check(program, state, rng, oracle=at % 27 == 1)
    assert accepted > 500


def test_levels_match_in_order_on_counted_states(vocab: Vocabulary) -> None:
    compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(COUNTED)
    program: Any = compiled.program
    assert program._counted.rules
    text = json.dumps(COUNTED_DOC, separators=(",", ":")).encode()
    matcher = GrammarMatcher(compiled)
    rng = random.Random(6)
    accepted = 0
    state = program.initial_state()
    for at in range(1, len(text)):
        state = program.pda.step_bytes(state, text[at - 1 : at])
        assert not state.is_dead
        if at % 5 == 2:
            capped = program.pda.capped(state, program._cap)
            accepted += _check(program, capped, rng, oracle=False)
    assert accepted > 1000
    assert matcher.accept_bytes(text)


def test_trie_bytes_survive_a_full_shared_cache(vocab: Vocabulary) -> None:
    """The strings end to end belong to the trie (per vocabulary), not to an evictable slot
    of the context: a grammar compiled after the context's shared caches filled and evicted
    finds the same arrays (when they were a context slot, an eviction made the next compile
    or large check rebuild them, ~5 ms inside a TTFM or a mask)."""
    from formcast.limits import CacheLimits

    first = vocab.trie.strings_end_to_end()
    tiny = CacheLimits(shared_cache_bytes=1 << 16)
    compiler = GrammarCompiler(vocab, cache_size=0, cache_limits=tiny)
    for n in range(3):
        g = compiler.compile_json_schema(
            {"type": "array", "items": {"type": "string"}, "maxItems": n + 2}
        )
        GrammarMatcher(g).allowed_token_ids()
    again = vocab.trie.strings_end_to_end()
    assert again[0] is first[0]
    assert again[1] is first[1]
