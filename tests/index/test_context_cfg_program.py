"""The pushdown programs' shared tables live in their vocabulary's context (issue #31 item 3):
the shared walks and the counted windows, subsets and classifications are slots of the
:class:`~formcast.index.context.TokenIndexContext` a ``GrammarCompiler`` holds and hands to the
programs it builds; two compilers of one vocabulary share it, its slots stay within their
bounds, and a grammar loaded from disk finds it again through the registry.  No module-level
cache of them is left in :mod:`formcast.index.cfg_program`."""

from __future__ import annotations

import gc
import random

import formcast.index.cfg_program as cfg_program
from formcast import GrammarMatcher
from formcast.cache import LruCache
from formcast.index.cfg_program import (
    COUNTED_CLASSES,
    COUNTED_SUBSETS,
    COUNTED_WINDOWS,
    SHARED_WALKS,
    CfgProgram,
)
from formcast.index.compiled import CompiledGrammar
from formcast.index.compiler import GrammarCompiler
from formcast.index.context import ContextSlot, TokenIndexContext, context_for
from formcast.limits import CacheLimits
from formcast.vocab.vocabulary import Vocabulary

SLOTS = (SHARED_WALKS, COUNTED_WINDOWS, COUNTED_SUBSETS, COUNTED_CLASSES)

#: strings (shared walks: a string body, a number) and a counted repeat (windows, classes)
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "n": {"type": "integer"},
        "code": {"type": "string", "pattern": "^[a-z]{0,300}$"},
        "tag": {"type": "string", "pattern": "^(\\w+-?){0,100}$"},
    },
    "required": ["name", "n", "code", "tag"],
}
DOC = b'{"name":"ab cd","n":-12,"code":"abcdefghij","tag":"ab-cd-ef"}'


def _vocab(tag: bytes) -> Vocabulary:
    """A small vocabulary of its own (``tag`` makes its fingerprint unique to the test)."""
    words = [b'{"', b'":"', b'","', b'"}', b'":', b",", b'"', b"ab", b"cd", b"-12", b"ab-"]
    words += [b"name", b"code", b"tag", b"abcdefghij", b"x" * 12, tag]
    tokens = [bytes([b]) for b in range(256)] + words + [b"<eos>"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[len(tokens) - 1])


def _cfg(compiled: CompiledGrammar) -> CfgProgram:
    program = compiled.program
    assert isinstance(program, CfgProgram)
    return program


def _walk(compiled: CompiledGrammar, seed: int = 0) -> None:
    """Accept DOC token by token (longest token first: each must be allowed), then a random
    walk, asking every mask on the way (fills the classifications)."""
    vocab = compiled.vocab
    m = GrammarMatcher(compiled)
    rest = DOC
    while rest:
        tid = max(
            (i for i, t in enumerate(vocab.tokens) if t and rest.startswith(t)),
            key=lambda i: len(vocab.tokens[i]),
        )
        assert tid in set(m.allowed_token_ids().tolist())
        assert m.accept_token(tid)
        rest = rest[len(vocab.tokens[tid]) :]
    m = GrammarMatcher(compiled)
    rng = random.Random(seed)
    for _ in range(40):
        nxt = m.allowed_token_ids().tolist()
        if not nxt or m.is_terminated():
            break
        assert m.accept_token(rng.choice(nxt))


def test_two_compilers_of_one_vocabulary_share_one_context() -> None:
    vocab = _vocab(b"<share>")
    one, two = GrammarCompiler(vocab, cache_size=0), GrammarCompiler(vocab, cache_size=0)
    assert isinstance(one.context, TokenIndexContext)
    assert one.context is two.context is context_for(vocab)
    a, b = one.compile_json_schema(SCHEMA), two.compile_json_schema(SCHEMA)
    assert _cfg(a).context is _cfg(b).context is one.context
    _walk(a)
    filled = {slot.name: len(one.context.cache(slot)) for slot in SLOTS}
    assert filled[SHARED_WALKS.name] > 0, filled
    assert filled[COUNTED_CLASSES.name] > 0, filled
    assert filled[COUNTED_WINDOWS.name] + filled[COUNTED_SUBSETS.name] > 0, filled
    hits = one.context.cache(COUNTED_CLASSES).hits
    _walk(b)  # the second compiler's grammar: the first one's counted classifications
    assert one.context.cache(COUNTED_CLASSES).hits > hits


def test_the_context_outlives_no_owner_and_another_vocabulary_shares_nothing() -> None:
    vocab, other = _vocab(b"<own>"), _vocab(b"<other>")
    compiler = GrammarCompiler(vocab, cache_size=0)
    ctx = compiler.context
    _walk(compiler.compile_json_schema(SCHEMA))
    for i in range(8):  # more vocabularies than the registry keeps without an owner
        context_for(_vocab(b"<filler%d>" % i))
    gc.collect()
    assert context_for(vocab) is ctx  # the compiler holds it
    assert all(len(context_for(other).cache(slot)) == 0 for slot in SLOTS)


def test_slots_are_bounded_by_the_compilers_cache_limits() -> None:
    vocab = _vocab(b"<bounded>")
    # below what the unbounded slots hold (asserted at the end): counted windows are built on
    # their item's byte classes since session 23, so they weigh hundreds of bytes here, not KB
    limit = 400
    compiler = GrammarCompiler(
        vocab, cache_size=0, cache_limits=CacheLimits(shared_cache_bytes=limit)
    )
    ctx = compiler.context
    assert ctx.limits.shared_cache_bytes == limit
    compiled = compiler.compile_json_schema(SCHEMA)
    for seed in range(6):
        _walk(compiled, seed)
    for slot in SLOTS:
        cache = ctx.cache(slot)
        assert cache.total_weight <= limit, slot
        assert len(cache) <= slot.max_entries, slot
    assert ctx.nbytes() <= limit * len(ctx._caches)
    # the masks do not depend on what the bounds evicted: an unbounded context agrees
    free = GrammarCompiler(_vocab(b"<free>"), cache_size=0)
    free_compiled = free.compile_json_schema(SCHEMA)
    for seed in range(6):
        _walk(free_compiled, seed)
    # (the bound bit: unbounded, a slot holds more)
    assert any(free.context.cache(slot).total_weight > limit for slot in SLOTS)
    m1, m2 = GrammarMatcher(compiled), GrammarMatcher(free_compiled)
    for tok in (b'{"', b"name", b'":"', b"ab", b'","', b"n", b'":', b"-12", b","):
        assert m1.allowed_token_ids().tolist() == m2.allowed_token_ids().tolist()
        tid = vocab.tokens.index(tok)
        assert m1.accept_token(tid)
        assert m2.accept_token(tid)


def test_a_loaded_grammar_finds_the_context_through_the_registry() -> None:
    vocab = _vocab(b"<load>")
    compiler = GrammarCompiler(vocab, cache_size=0)
    compiled = compiler.compile_json_schema(SCHEMA)
    _walk(compiled)
    data = compiled.serialize()
    compiler.context.cache(COUNTED_CLASSES).clear()
    loaded = CompiledGrammar.deserialize(data, vocab)
    # the counted classifications written with the grammar went back to the context
    assert len(compiler.context.cache(COUNTED_CLASSES)) > 0
    assert _cfg(loaded).context is compiler.context
    _walk(loaded)


def test_no_module_level_cache_is_left_in_cfg_program() -> None:
    caches = [n for n, v in vars(cfg_program).items() if isinstance(v, LruCache)]
    assert caches == []
    for slot in SLOTS:
        assert isinstance(slot, ContextSlot)
    for gone in ("_SHARED_WALKS", "_COUNTED_WINDOWS", "_COUNTED_SUBSETS", "_COUNTED_CLASSES"):
        assert not hasattr(cfg_program, gone)
