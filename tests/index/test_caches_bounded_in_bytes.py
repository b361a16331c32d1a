"""Caches are bounded in bytes (``CacheLimits``) and a finished request frees what it alone used.

Measured by the caches' own byte accounting (``cache_bytes``, ``total_weight``) and by
``tracemalloc`` for what a released matcher leaves behind; nothing here is timed.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.errors import ConfigurationError
from formcast.limits import CACHE_ENTRY_BYTES, CacheLimits
from index_helpers import lru_values

LONG_STRING = {"type": "string", "maxLength": 1_000_000}


def vocab() -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"abcd", b"ab", b"<eos>"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[len(tokens) - 1])


def _walk_long_string(compiled: object, n_tokens: int) -> GrammarMatcher:
    m = GrammarMatcher(compiled)  # type: ignore[arg-type]
    assert m.accept_token(ord('"'))
    for k in range(n_tokens):
        assert m.accept_token(256)  # "abcd": a new counter value every token
        if k % 100 == 0:
            assert m.allowed_token_ids().size > 0
    return m


def test_a_long_counted_string_does_not_grow_the_shared_caches() -> None:
    compiled = GrammarCompiler(vocab(), cache_size=0).compile_json_schema(LONG_STRING)
    program = compiled.program
    m = _walk_long_string(compiled, 200)
    entries, nbytes = program.pda.cache_entries(), program.cache_bytes()
    m = _walk_long_string(compiled, 3_000)
    # 2,800 more tokens, each with a count of its own: the shared caches did not grow
    assert program.pda.cache_entries() == entries
    assert program.cache_bytes() == nbytes
    assert program.pda.cache_entries() < 50
    # still exact near the bound is covered by test_counted; here: the request still works
    assert m.accept_token(ord('"'))
    assert m.is_accepting()


def test_releasing_the_matcher_frees_its_request_only_entries() -> None:
    compiled = GrammarCompiler(vocab(), cache_size=0).compile_json_schema(LONG_STRING)
    program = compiled.program
    _walk_long_string(compiled, 50).accept_token(ord('"'))  # warm the shared part
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        m = _walk_long_string(compiled, 4_000)
        assert program.pda.cache_info()["far_frames"] >= 4_000  # the live request's own
        del m
        gc.collect()
        # the next request's first step also compacts the tables the old one grew
        _walk_long_string(compiled, 1)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert program.pda.cache_info()["far_frames"] < 10
    # before: ~5 KB per token stayed in the parser caches (20 MB here); now nothing per token
    assert retained < 200_000, retained


def test_the_mask_cache_keeps_to_its_byte_budget() -> None:
    v = vocab()
    mask_bytes = 4 * ((v.vocab_size + 31) // 32) + CACHE_ENTRY_BYTES
    limits = CacheLimits(mask_cache_bytes=5 * mask_bytes)
    for compiled in (
        GrammarCompiler(v, cache_size=0, cache_limits=limits).compile_regex("abcdefghijklmnop"),
        GrammarCompiler(v, cache_size=0, cache_limits=limits).compile_json_schema(
            {"enum": ["abcdefghijklmnop"]}
        ),
    ):
        m = GrammarMatcher(compiled)
        if compiled.kind == "json_schema":
            assert m.accept_token(ord('"'))
        for ch in "abcdefghijklmnop":
            allowed = set(m.allowed_token_ids().tolist())
            assert ord(ch) in allowed  # masks stay exact
            assert ord("z") not in allowed
            assert m.accept_token(ord(ch))
        info = compiled.cache_info()
        assert info["mask_cache_bytes"] <= 5 * mask_bytes
        assert 1 <= info["masks_cached"] <= 5


def test_the_step_cache_keeps_to_its_byte_budget() -> None:
    limits = CacheLimits(step_cache_bytes=10 * CACHE_ENTRY_BYTES)
    compiled = GrammarCompiler(vocab(), cache_size=0, cache_limits=limits).compile_regex(
        "[a-z]{0,60}"
    )
    m = GrammarMatcher(compiled)
    for ch in "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz":
        assert m.accept_token(ord(ch))
    assert compiled.cache_info()["steps_cached"] <= 10


def test_the_compiler_keeps_its_grammars_within_their_byte_budget() -> None:
    v = vocab()
    one = GrammarCompiler(v).compile_regex("[a-z]{1,20}").nbytes()
    assert one > 0
    compiler = GrammarCompiler(v, cache_limits=CacheLimits(grammar_cache_bytes=3 * one))
    first = compiler.compile_regex("[a-z]{1,20}")
    for k in range(1, 8):
        compiler.compile_regex(f"[a-z]{{1,{20 + k}}}")
        assert compiler.cache_bytes <= 3 * one + 64 * 256  # ~3 grammars of this size
    assert compiler.compile_regex("[a-z]{1,20}") is not first  # evicted, compiled again
    last = compiler.compile_regex("[a-z]{1,27}")
    assert compiler.compile_regex("[a-z]{1,27}") is last  # the newest are kept


def test_cache_limits_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        CacheLimits(mask_cache_bytes=-1)
    with pytest.raises(ConfigurationError):
        CacheLimits(grammar_cache_bytes=1.5)  # type: ignore[arg-type]
    assert CacheLimits().mask_cache_bytes == 128 << 20
    assert np.int64(CacheLimits().grammar_cache_bytes) == 1 << 30


def test_the_process_wide_automaton_caches_are_bounded_in_bytes() -> None:
    """The rule and sub-automaton caches weigh an entry by its transition rows (1 KiB a state)
    and keep to ``CacheLimits().shared_cache_bytes``, like the other shared caches."""
    from formcast.automata.regular import SUB_DFA_CACHE
    from formcast.automata.rules import RULE_DFA_CACHE, compile_grammar_automaton
    from formcast.frontends.gbnf import parse_gbnf
    from formcast.limits import CacheLimits

    budget = CacheLimits().shared_cache_bytes
    for cache in (RULE_DFA_CACHE, SUB_DFA_CACHE):
        assert cache._max_weight == budget
    RULE_DFA_CACHE.clear()
    compile_grammar_automaton(parse_gbnf('root ::= "a" [0-9]{3,5} "b"'))
    entries = lru_values(RULE_DFA_CACHE)
    assert entries
    assert RULE_DFA_CACHE.total_weight >= sum(1024 * e.value[0].num_states for e in entries)
