"""The per-vocabulary context of shared tables (:mod:`formcast.index.context`, issue #31 item 3):
one context per vocabulary (by fingerprint), bounded per slot in entries and bytes and in the
number of contexts kept without an owner; two vocabularies never share an entry; the run-time
programs' tables live in their vocabulary's context; a manifest rebuilds what a context held."""

from __future__ import annotations

import gc
import threading
from typing import Any

import numpy as np
import pytest

from formcast.index import context as ctxmod
from formcast.index.compiler import GrammarCompiler
from formcast.index.context import (
    KEPT_CONTEXTS,
    ContextSlot,
    TokenIndexContext,
    approx_nbytes,
    context_for,
)
from formcast.index.programs.residue import NUMBER_TABLES, ResidueProgram
from formcast.index.programs.unique.lexer import LEXICAL_TABLES
from formcast.limits import CacheLimits
from formcast.vocab.vocabulary import Vocabulary

BUILDS: list[tuple[str, Any]] = []


def _build_tokens(vocab: Vocabulary, key: int) -> tuple[bytes, ...]:
    """The tokens of ``vocab`` of length ``key`` (records each build)."""
    BUILDS.append((vocab.fingerprint, key))
    return tuple(t for t in vocab.tokens if len(t) == key)


TOKENS_OF_LENGTH: ContextSlot[int, tuple[bytes, ...]] = ContextSlot(
    "test_tokens_of_length", _build_tokens, max_entries=2
)
PUT_ONLY: ContextSlot[str, np.ndarray] = ContextSlot("test_put_only", max_entries=4)


def _vocab(*extra: bytes) -> Vocabulary:
    return Vocabulary.from_tokens(
        [bytes([b]) for b in range(256)] + list(extra) + [b"<eos>"],
        stop_token_ids=[256 + len(extra)],
    )


def test_one_context_per_vocabulary() -> None:
    a, a_again, b = _vocab(b"ab"), _vocab(b"ab"), _vocab(b"abc")
    assert context_for(a) is context_for(a)
    assert context_for(a_again) is context_for(a)  # (same tokens: same fingerprint)
    assert context_for(b) is not context_for(a)
    assert context_for(b).fingerprint == b.fingerprint != a.fingerprint


def test_two_vocabularies_do_not_share_entries() -> None:
    a, b = _vocab(b'"x', b"1024"), _vocab(b"xy")
    BUILDS.clear()
    got_a, got_b = TOKENS_OF_LENGTH.of(a, 2), TOKENS_OF_LENGTH.of(b, 2)
    assert got_a == (b'"x',)
    assert got_b == (b"xy",)
    assert TOKENS_OF_LENGTH.of(a, 2) is got_a  # built once per vocabulary
    assert [(a.fingerprint, 2), (b.fingerprint, 2)] == BUILDS
    # the programs' tables: one per vocabulary, each read off its own tokens
    lex_a, lex_b = LEXICAL_TABLES.of(a, None), LEXICAL_TABLES.of(b, None)
    assert lex_a is not lex_b
    assert LEXICAL_TABLES.of(a, None) is lex_a
    quote_token = len(a.tokens) - 3  # b'"x': read from outside a string, it opens one
    assert lex_a.end[0][quote_token] == 1
    assert lex_b.end[0][quote_token] == 0
    # a context refuses another vocabulary's builds
    with pytest.raises(ValueError, match="not this context's"):
        context_for(a).get(TOKENS_OF_LENGTH, b, 2)


def test_slots_are_bounded_in_entries_and_bytes() -> None:
    v = _vocab(b"ab", b"abc", b"abcd")
    ctx = context_for(v)
    for n in (1, 2, 3, 4):
        TOKENS_OF_LENGTH.of(v, n)
    cache = ctx.cache(TOKENS_OF_LENGTH)
    assert [k for k, _ in cache.items()] == [3, 4]  # max_entries=2, least recent out
    small = TokenIndexContext(v.fingerprint, CacheLimits(shared_cache_bytes=10_000))
    put = small.cache(PUT_ONLY)
    for i in range(4):
        put.put(str(i), np.zeros(1_000, dtype=np.int32))  # 4 KB each
    assert len(put) == 2
    assert put.total_weight <= 10_000
    put.put("huge", np.zeros(100_000, dtype=np.int32))  # heavier than the budget: not kept
    assert put.get("huge") == (False, None)
    with pytest.raises(KeyError):
        small.get(PUT_ONLY, v, "missing")  # (a slot without a build has only what is put)
    assert small.nbytes() == put.total_weight
    small.clear()
    assert small.nbytes() == 0
    assert len(put) == 0


def test_the_registry_keeps_a_few_contexts_and_every_held_one() -> None:
    held_vocab = _vocab(b"held")
    held = context_for(held_vocab)
    TOKENS_OF_LENGTH.of(held_vocab, 4)
    others = []
    for i in range(KEPT_CONTEXTS + 3):
        v = _vocab(b"other%d" % i)
        context_for(v)
        others.append(v.fingerprint)
    gc.collect()
    assert len(ctxmod._CONTEXTS) <= KEPT_CONTEXTS
    # the unheld others are gone (the contexts other tests' compilers hold may live on)
    alive = [fp for fp in others if fp in ctxmod._LIVE]
    assert len(alive) <= KEPT_CONTEXTS
    assert set(alive) <= set(ctxmod._CONTEXTS)
    assert context_for(held_vocab) is held  # an owner keeps it (a compiler)
    assert ("test_tokens_of_length", 4) in held.manifest()


def test_manifest_rebuilds_the_entries() -> None:
    v = _vocab(b"ab", b"abc")
    ctx = context_for(v)
    TOKENS_OF_LENGTH.of(v, 2)
    LEXICAL_TABLES.of(v, None)
    ctx.cache(PUT_ONLY).put("x", np.zeros(3))
    manifest = ctx.manifest()
    assert ("test_tokens_of_length", 2) in manifest
    assert ("json_lexical_tables", None) in manifest
    assert all(name != "test_put_only" for name, _ in manifest)  # (nothing can rebuild it)
    fresh = TokenIndexContext(v.fingerprint)
    assert fresh.warm(v, [*manifest, ("no_such_slot", 1)]) == len(manifest)
    assert fresh.manifest() == manifest
    assert fresh.get(TOKENS_OF_LENGTH, v, 2) == (b"ab",)


def test_a_missing_entry_is_built_once_under_contention() -> None:
    v = _vocab(b"race")
    BUILDS.clear()
    barrier = threading.Barrier(6)
    got: list[Any] = []

    def worker() -> None:
        barrier.wait()
        got.append(TOKENS_OF_LENGTH.of(v, 4))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [(v.fingerprint, 4)] == BUILDS
    assert all(x is got[0] for x in got)


def test_a_compiled_grammar_fills_its_vocabularys_context_only() -> None:
    a, b = _vocab(b"1024", b"00}"), _vocab(b"12")
    compiled = GrammarCompiler(a, cache_size=0).compile_json_schema(
        {"type": "integer", "multipleOf": 1024}
    )
    assert isinstance(compiled.program, ResidueProgram)
    assert ("json_number_tables", None) in context_for(a).manifest()
    assert ("json_number_tables", None) not in context_for(b).manifest()
    assert compiled.program._num is NUMBER_TABLES.of(a, None)


def test_slot_names_are_unique_and_weights_count_arrays() -> None:
    with pytest.raises(ValueError, match="exists already"):
        ContextSlot("test_tokens_of_length")
    arr = np.zeros(1000, dtype=np.int64)
    assert approx_nbytes(arr) >= 8000
    assert approx_nbytes({"k": [arr, arr]}) >= 16000
    assert approx_nbytes([1] * 100) >= 800
