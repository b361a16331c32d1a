"""The exit-byte split of the token index (``CfgProgram(exit_byte=...)``).

Tokens without the exit byte are classified on the lexer with that byte's column cut (one walk
shared by every position whose cut futures agree); tokens with it are walked per position.
The split must be exact for any byte (or none), so the CFG oracle tests run again with the exit
byte set to characters of the oracle's alphabet (``a``, ``(`` and the lead byte of ``é``) and to
None (no cut), and a JSON Schema walk compares masks with a brute-force check of every token.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

import formcast.index.cfg_program as cfg_program
import formcast.index.compiler as compiler
from cfg_oracle import oracle_tests
from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.index.context import context_for

SETTINGS = oracle_tests.SETTINGS
RandomGrammar = oracle_tests.RandomGrammar
grammars = oracle_tests.grammars
vocabularies = oracle_tests.vocabularies


@contextmanager
def exit_byte(byte: int | None) -> Iterator[None]:
    """Every grammar compiled inside gets a :class:`CfgProgram` cutting ``byte``."""
    real = cfg_program.CfgProgram

    def program(*args: Any, **kwargs: Any) -> cfg_program.CfgProgram:
        return real(*args, **{**kwargs, "exit_byte": byte})

    with mock.patch.object(compiler, "CfgProgram", program):
        yield


EXIT_BYTES = [ord("a"), ord("("), "é".encode()[0], None]


@SETTINGS
@given(g=grammars(), vocab=vocabularies(), data=st.data(), byte=st.sampled_from(EXIT_BYTES))
def test_masks_match_the_oracle_with_any_exit_byte(
    g: RandomGrammar, vocab: Vocabulary, data, byte: int | None
) -> None:
    with exit_byte(byte):
        oracle_tests.test_masks_match_the_oracle_on_random_walks.hypothesis.inner_test(
            g, vocab, data
        )


def _json_vocab() -> Vocabulary:
    chars = ['"', "\\", "a", "b", ",", ":", "{", "}", "[", "]", "1", "é", "n", "u", "l", " "]
    toks = [c.encode() for c in chars]
    toks += [
        b'{"',
        b'":"',
        b'",',
        b'"}',
        b'":',
        b'","',
        b'"]',
        b'a"',
        b'b",',
        b'\\"',
        b'":1',
        b'1,"',
        b"}}",
        b'"}}',
        b"]]",
        b"],",
        b'"]]',
        b'{"b":{"',
    ]
    return Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)], name="json")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}},
        {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
        {"type": "object", "additionalProperties": {"type": "string", "enum": ["a", "b\\"]}},
        {  # recursive: tokens like '"}}' return from the inner rule (candidates)
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}, "b": {"$ref": "#/$defs/node"}},
                }
            },
            "$ref": "#/$defs/node",
        },
        {"type": "array", "items": {"$ref": "#"}},
    ],
    ids=["two-strings", "array-anyof", "enum-values", "recursive-object", "nested-arrays"],
)
def test_json_masks_are_exact_token_by_token(schema: dict) -> None:
    """Every token is allowed iff feeding its bytes keeps the matcher alive (brute force), on
    random walks."""
    vocab = _json_vocab()
    compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
    for seed in range(6):
        rng = random.Random(seed)
        m = GrammarMatcher(compiled)
        for step in range(40):
            allowed = {int(t) for t in m.allowed_token_ids()}
            for t in range(len(vocab.tokens) - 1):
                probe = m.fork()
                assert (t in allowed) == probe.accept_token(t), (json.dumps(schema), step, t)
            nxt = sorted(allowed - set(vocab.stop_token_ids))
            if not nxt:
                break
            assert m.accept_token(rng.choice(nxt))


def test_walks_are_shared_across_grammars_and_stay_exact() -> None:
    """A string body, a number, a key: the second schema reuses the first one's walks (by
    canonical digest of the cut lexer) and its masks are still exact token by token.

    The shared walks start empty and the first schema computes its masks along a document
    (``accept_bytes`` alone classifies nothing: the hits then came only from walks earlier
    tests of this file had shared, so the test failed when run alone, pure or compiled)."""
    vocab = _json_vocab()
    shared = context_for(vocab).cache(cfg_program.SHARED_WALKS)
    shared.clear()
    first = {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"}}}
    second = {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "string"}}}}
    m = GrammarMatcher(GrammarCompiler(vocab, cache_size=0).compile_json_schema(first))
    for byte in b'{"a":"x","n":1,"zz":"q"}':
        m.allowed_token_ids()
        assert m.accept_bytes(bytes([byte]))
    assert len(shared) > 0  # the first schema's wide walks (string body, key) were shared
    hits = shared.hits
    compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(second)
    rng = random.Random(7)
    for _ in range(4):
        m = GrammarMatcher(compiled)
        for _ in range(30):
            allowed = {int(t) for t in m.allowed_token_ids()}
            for t in range(len(vocab.tokens) - 1):
                assert (t in allowed) == m.fork().accept_token(t)
            nxt = sorted(allowed - set(vocab.stop_token_ids))
            if not nxt:
                break
            assert m.accept_token(rng.choice(nxt))
    assert shared.hits > hits
    assert context_for(vocab).cache(cfg_program.SHARED_WALKS) is shared


def _key_position_signatures(compiled: object, prefix: bytes) -> set[bytes]:
    program = compiled.program  # type: ignore[attr-defined]
    state = program.pda.initial
    for b in prefix:
        state = program.pda.step(state, b)
    sigs = set()
    for frame in state.frames:
        sig = program._positions.cut_signature(program.lexer.entry(frame.rule, frame.state))
        if sig is not None:
            sigs.add(sig)
    return sigs


def test_undeclared_key_positions_share_one_digest() -> None:
    """Objects with different declared keys: their undeclared-key automata differ, but the
    cut futures agree, so the digest (taken on the quotient by stable classes) is shared and
    the masks stay exact."""
    vocab = _json_vocab()
    first = {"type": "object", "properties": {"dev": {"type": "integer"}, "ab": {}}}
    second = {"type": "object", "properties": {"zeta": {"type": "string"}}, "required": ["zeta"]}
    a = GrammarCompiler(vocab, cache_size=0).compile_json_schema(first)
    b = GrammarCompiler(vocab, cache_size=0).compile_json_schema(second)
    assert _key_position_signatures(a, b'{"') & _key_position_signatures(b, b'{"zeta":"q","')
    for compiled, prefix in ((a, b'{"'), (b, b'{"zeta":"q","')):
        m = GrammarMatcher(compiled)
        assert m.accept_bytes(prefix)
        allowed = {int(t) for t in m.allowed_token_ids()}
        for t in range(len(vocab.tokens) - 1):
            assert (t in allowed) == m.fork().accept_token(t), t
