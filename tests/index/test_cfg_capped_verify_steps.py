"""Candidate checks of a capped state step with capped far results (#31).

``PushdownAutomaton.step_capped``: where a step from a capped state makes far frames (a
counter above ``far_count``: a string of ``maxLength`` far beyond the longest token), its
result is clipped to ``far_count`` too, so those steps are memoized and shared by every count.
Exact for a token's bytes (fewer than ``far_count``).  The oracle: a token is allowed iff the
*uncapped* state (the matcher's own) survives the token's bytes through a separate automaton
without far frames or capping (``far_count=None``), at every step of walks through counted
strings, arrays and nested counts, on a vocabulary whose longest token (5 bytes) puts every
count above 6 out of reach.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.automata.pda import PushdownAutomaton

CHARS = [b"a", b"b", b"t", b"k", b"-", b'"', b",", b"[", b"]", b"{", b"}", b":", b"1"]
# tokens that cross a string's end into the structure after it (the candidates)
EXTRA = [b'ab",', b'a"}', b'-b"', b'b","', b'"t":"', b'"k":[', b'a"]', b'ba",', b'b"],"', b'aa"]}']
SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "t": {
                "type": "string",
                "minLength": 2,
                "maxLength": 300,
                "pattern": "^[ab][ab-]*[ab]$",
            },
            "k": {"type": "array", "items": {"type": "string", "maxLength": 500}},
        },
        "required": ["t", "k"],
    },
    {
        "type": "object",
        "properties": {
            "k": {"type": "string", "minLength": 9, "maxLength": 1000},
            "l": {
                "type": "array",
                "items": {"type": "string", "maxLength": 12},
                "minItems": 2,
                "maxItems": 900,
            },
        },
        "required": ["k", "l"],
    },
]


def _vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    toks = {c for c in CHARS} | set(EXTRA)
    while len(toks) < 150:
        toks.add(b"".join(rng.choice(CHARS) for _ in range(rng.randint(2, 5))))
    ordered = sorted(toks)
    return Vocabulary([*ordered, b""], stop_token_ids=[len(ordered)], name=f"capped{seed}")


def _walk(rng: random.Random, matcher: GrammarMatcher, vocab: Vocabulary, oracle: Any) -> int:
    program = matcher.compiled.program
    checked = 0
    for _ in range(60):
        state = matcher._history[-1]
        mask = program.token_mask(state)
        allowed = []
        for t, data in enumerate(vocab.tokens):
            if t in vocab.stop_token_ids:
                continue
            want = not oracle.step_bytes(oracle_state(oracle, state), data).is_dead
            got = bool(mask[t >> 5] >> np.uint32(t & 31) & 1)
            assert got == want, (t, data, state)
            checked += 1
            if want:
                allowed.append(t)
        if not allowed:
            break
        assert matcher.accept_token(rng.choice(allowed))
    return checked


def oracle_state(oracle: PushdownAutomaton, state: Any) -> Any:
    """``state`` rebuilt in ``oracle`` (same rules, no far frames)."""
    memo: dict[int, Any] = {}

    def frame(f: Any) -> Any:
        got = memo.get(id(f))
        if got is None:
            parent = None if f.parent is None else frame(f.parent)
            got = memo[id(f)] = oracle.frame(f.rule, f.state, parent, f.need, f.left)
        return got

    return oracle.state_of(frozenset(frame(f) for f in state.frames), state.accepting)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("schema", range(len(SCHEMAS)))
def test_capped_candidate_steps_match_the_uncapped_parser(seed: int, schema: int) -> None:
    vocab = _vocab(seed)
    compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(SCHEMAS[schema])
    program = compiled.program
    assert program._cap == 6  # the longest token + 1: every count above it is far
    oracle = PushdownAutomaton(program.auto, far_count=None)
    rng = random.Random(seed * 7 + schema)
    checked = 0
    for _ in range(4):
        checked += _walk(rng, GrammarMatcher(compiled), vocab, oracle)
    assert checked > 1000
    assert program.pda.cache_info()["steps"] > 0
    assert program.pda._capped_steps, "no far step was capped"
