"""Oracles for the vLLM grammar tests: a fresh :class:`formcast.GrammarMatcher` replayed from
scratch, and the allowed set the vLLM wrapper must produce from it (request stop ids)."""

from __future__ import annotations

import random
from typing import Any

from _tiny_llama import TOKENIZER_LEN, VOCAB_SIZE

from formcast import GrammarMatcher


def replay(compiled: Any, tokens: list[int], stops: frozenset[int]) -> tuple[GrammarMatcher, bool]:
    """A fresh matcher fed ``tokens`` (a request stop token ends them): (matcher, stopped)."""
    m = GrammarMatcher(compiled)
    for t in tokens:
        if t in stops:
            assert m.is_accepting()
            return m, True
        assert m.accept_token(t)
    return m, False


def expected_allowed(
    compiled: Any, m: GrammarMatcher, stopped: bool, stops: frozenset[int]
) -> set[int]:
    """The ids the wrapper must allow: the grammar's text tokens (no stop-like ids), plus the
    request's stop ids where the output is complete."""
    if stopped:
        return set()
    vocab_stops = compiled.vocab.stop_token_ids
    ids = {int(i) for i in m.allowed_token_ids()} - vocab_stops - stops
    if m.is_accepting():
        ids |= stops
    return ids


def random_draft(rng: random.Random, compiled: Any, prefix: list[int], stops: frozenset[int],
           length: int) -> list[int]:
    """Mostly grammar-valid tokens, sometimes a random id, a stop id or a padding id."""
    m, stopped = replay(compiled, prefix, stops)
    out: list[int] = []
    for _ in range(length):
        r = rng.random()
        if stopped or r < 0.15:
            out.append(rng.choice([rng.randrange(TOKENIZER_LEN), rng.randrange(TOKENIZER_LEN,
                                   VOCAB_SIZE), *sorted(stops)]))
            continue
        allowed = sorted(expected_allowed(compiled, m, stopped, stops))
        if not allowed:
            break
        t = rng.choice(allowed)
        out.append(t)
        if t in stops:
            stopped = True
        else:
            m.accept_token(t)
    return out
