"""Counted rules: long bounded repeats kept as one iteration plus a count in the parser frame.

* The CFG oracle tests (``test_cfg_oracle``) run again with every repeat of two or more copies
  counted, so counting, clipped mask states and window automata meet random grammars, nullable
  rules, recursion, partial UTF-8 tokens and a tiny vocabulary (short tokens: counts are
  clipped at a handful of iterations).
* Differential: a JSON Schema compiled with counters and compiled unrolled give the same mask
  at every step of random walks that run into both length bounds.
* Bounded work: ``maxLength: 100000`` and ``maxItems: 10000`` compile on a small fuel tank and
  are exact at the bound; masks are shared across counts deep inside a long string.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import formcast.automata.rules as rules
from cfg_oracle import oracle_tests
from formcast import CompileLimits, GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.frontends.jsonschema.options import JsonSchemaOptions

BYTE_VOCAB = oracle_tests.BYTE_VOCAB
SETTINGS = oracle_tests.SETTINGS
Oracle = oracle_tests.Oracle
RandomGrammar = oracle_tests.RandomGrammar
compile_gbnf = oracle_tests.compile_gbnf
grammars = oracle_tests.grammars
vocabularies = oracle_tests.vocabularies


@contextmanager
def counting_from(copies: int) -> Iterator[None]:
    """Count every repeat of at least ``copies`` copies (the default counts from 64)."""
    with mock.patch.object(rules, "_COUNT_MIN_COPIES", copies):
        yield


def _inner(test):  # the undecorated body of a hypothesis test
    return test.hypothesis.inner_test


# -- the oracle, with counting from two copies ---------------------------------------------------
@SETTINGS
@given(g=grammars(), vocab=vocabularies(), data=st.data())
def test_counted_masks_match_the_oracle(g: RandomGrammar, vocab: Vocabulary, data) -> None:
    with counting_from(2):
        _inner(oracle_tests.test_masks_match_the_oracle_on_random_walks)(g, vocab, data)


@SETTINGS
@given(g=grammars(), seed=st.integers(0, 2**32 - 1))
def test_counted_whole_strings_match_the_oracle(g: RandomGrammar, seed: int) -> None:
    with counting_from(2):
        _inner(oracle_tests.test_accept_bytes_then_is_accepting_equals_matches)(g, seed)


@SETTINGS
@given(g=grammars(), seed=st.integers(0, 2**32 - 1))
def test_counted_bytes_match_the_oracle(g: RandomGrammar, seed: int) -> None:
    with counting_from(2):
        _inner(oracle_tests.test_byte_by_byte_matches_the_oracle)(g, seed)


COUNTED_GRAMMARS = [
    'root ::= ( "a" | "é" ){3,7} "b"',
    'root ::= "a"{4,}',
    'root ::= ( "a"{2,3} "," ){2,4}',
    'root ::= "(" ( item "," ){0,5} ")"\nitem ::= "a" | root',
    'root ::= ( "a" | "ab" ){2,5} "c"',  # an iteration end that can also go on
    'root ::= "x" ( "a"+ ){2,3} "y"',  # overlapping iterations (no window automaton)
]


@pytest.mark.parametrize("text", COUNTED_GRAMMARS)
def test_counted_grammars_match_the_oracle_on_every_short_string(text: str) -> None:
    """Every string over the grammar's characters up to 9 characters, byte by byte."""
    oracle = Oracle(text)
    with counting_from(2):
        compiled = compile_gbnf(BYTE_VOCAB, text)
    assert compiled.program.auto.counts, "the grammar should have a counted rule"
    chars = sorted({c for c in text if c in "abcxyé(),"})
    frontier = [""]
    for _ in range(9):
        nxt = []
        for s in frontier:
            for c in chars:
                t = s + c
                m = GrammarMatcher(compiled)
                ok = m.accept_bytes(t.encode())
                assert ok == oracle.rec.is_prefix(t), t
                assert (ok and m.is_accepting()) == oracle.rec.matches(t), t
                if ok:
                    nxt.append(t)
        frontier = nxt


# -- counted vs unrolled JSON Schema, same masks -------------------------------------------------
JSON_CHARS = ['"', "\\", "a", "b", " ", "é", "€", "u", "0", "n", ",", ":", "}", "1", "x", "😀"]


def _json_vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    toks = [c.encode() for c in JSON_CHARS] + [
        b'"',
        b'{"',
        b'":"',
        b'",',
        b'"}',
        b'\\"',
        b"\\u00e9",
    ]
    for _ in range(60):
        toks.append("".join(rng.choice(JSON_CHARS) for _ in range(rng.randint(2, 9))).encode())
    toks.append(b"\xc3")  # a partial character
    return Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)], name="json-toy")


SCHEMAS = [
    {"type": "string", "minLength": 5, "maxLength": 12},
    {
        "type": "object",
        "properties": {
            "s": {"type": "string", "minLength": 3, "maxLength": 9},
            "n": {"type": "integer"},
        },
        "required": ["s"],
    },
    {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 2, "maxItems": 6},
    {"type": "string", "pattern": "^[ab]*$", "minLength": 4, "maxLength": 10},
    {"type": "string", "minLength": 7},
]


def _walk_masks(compiled, vocab: Vocabulary, rng: random.Random, steps: int) -> list[bytes]:
    """Random walk; returns the masks (allowed ids as bytes) and the tokens taken."""
    m = GrammarMatcher(compiled)
    out = []
    for _ in range(steps):
        allowed = m.allowed_token_ids()
        out.append(np.asarray(allowed, dtype=np.int64).tobytes())
        text = [int(t) for t in allowed if int(t) not in vocab.stop_token_ids]
        if not text:
            break
        t = rng.choice(text)
        assert m.accept_token(t)
        out.append(bytes([t % 256, t // 256]))
    return out


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_counted_json_schema_masks_equal_unrolled(schema: dict) -> None:
    for seed in range(3):
        vocab = _json_vocab(seed)
        with counting_from(3):
            counted = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        assert counted.program.auto.counts
        with counting_from(10**9):
            unrolled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
        assert not getattr(unrolled.program, "auto", None) or not unrolled.program.auto.counts
        for walk in range(6):
            a = _walk_masks(counted, vocab, random.Random(walk), 40)
            b = _walk_masks(unrolled, vocab, random.Random(walk), 40)
            assert a == b, (schema, seed, walk)


# -- bounded work, exact bounds ------------------------------------------------------------------
SMALL_FUEL = CompileLimits(max_compile_work=400_000)


def _char_vocab() -> Vocabulary:
    toks = [bytes([b]) for b in range(256)] + [b"x" * 50, b'"', b"<eos>"]
    return Vocabulary.from_tokens(toks, stop_token_ids=[len(toks) - 1], name="chars+50x")


def test_max_length_100000_compiles_on_little_fuel_and_is_exact() -> None:
    vocab = _char_vocab()
    x50, quote, eos = 256, 257, 258
    compiled = GrammarCompiler(vocab, limits=SMALL_FUEL, cache_size=0).compile_json_schema(
        {"type": "string", "minLength": 99_990, "maxLength": 100_000}
    )
    m = GrammarMatcher(compiled)
    assert m.accept_token(quote)
    for _ in range(1_999):  # 99,950 characters
        assert m.accept_token(x50)
    assert not m.is_token_allowed(quote)  # 40 short of minLength
    assert not m.is_token_allowed(eos)
    fork = m.fork()
    for _ in range(40):
        assert not m.is_token_allowed(quote)
        assert m.accept_token(ord("x"))
    assert m.is_token_allowed(quote)  # 99,990
    assert not m.is_token_allowed(x50)  # 100,040 > maxLength
    for _ in range(10):
        lead, cont = "é".encode()
        assert m.accept_token(lead)
        assert m.accept_token(cont)
    assert not m.is_token_allowed(ord("x"))  # 100,000 reached
    assert m.accept_token(quote)
    assert m.is_token_allowed(eos)
    assert fork.accept_token(x50)
    assert not fork.is_token_allowed(x50)


def test_masks_are_shared_across_counts() -> None:
    """Deep inside a long string every count clips to the same state: one mask, computed once."""
    vocab = _char_vocab()
    compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
        {"type": "string", "maxLength": 100_000}
    )
    m = GrammarMatcher(compiled)
    assert m.accept_token(257)
    for _ in range(300):
        m.allowed_token_ids()
        assert m.accept_token(256)
    assert compiled.cache_info()["mask_computations"] <= 3


def test_max_items_10000_compiles_on_little_fuel_and_is_exact() -> None:
    vocab = Vocabulary.from_tokens(
        [b"[", b"]", b"1", b",", b",1", b"<eos>"], stop_token_ids=[5], name="array"
    )
    compiled = GrammarCompiler(vocab, limits=SMALL_FUEL, cache_size=0).compile_json_schema(
        {"type": "array", "items": {"const": 1}, "minItems": 2, "maxItems": 10_000}
    )
    m = GrammarMatcher(compiled)
    assert m.accept_token(0)
    assert m.accept_token(2)
    assert not m.is_token_allowed(1)  # one item, two needed
    for _ in range(9_999):
        assert m.accept_token(4)
    assert not m.is_token_allowed(4)
    assert not m.is_token_allowed(3)
    assert m.accept_token(1)
    assert m.is_token_allowed(5)


def test_long_strings_compile_with_default_options_in_little_work() -> None:
    vocab = _char_vocab()
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "maxLength": 1000 * (i + 1)} for i in range(8)},
    }
    opts = JsonSchemaOptions()
    GrammarCompiler(vocab, limits=SMALL_FUEL, cache_size=0).compile_json_schema(schema, opts)


@pytest.mark.parametrize(
    ("pattern", "ok", "too_long", "short"),
    [
        (r"[a-z]{1,5000}", "q" * 5000, "q" * 5001, ""),
        (r"(ab|c){100}x", "ab" * 60 + "c" * 40 + "x", "ab" * 101 + "x", "ab" * 99 + "x"),
        (r".{64,}é", "é" * 64, "", "é" * 64),
    ],
    ids=["az5000", "abc100", "dot64plus"],
)
def test_counted_regex_through_the_compiler(pattern: str, ok: str, too_long: str, short: str):
    """A regex with a long bounded repeat is served by the pushdown program, exact at the
    bounds (checked against Python's ``re``)."""
    import re

    compiled = GrammarCompiler(_char_vocab(), limits=SMALL_FUEL, cache_size=0).compile_regex(
        pattern
    )
    assert compiled.program.auto.counts
    for text in (ok, too_long, short, ok[:-1]):
        m = GrammarMatcher(compiled)
        got = m.accept_bytes(text.encode()) and m.is_accepting()
        assert got == bool(re.fullmatch(pattern, text, re.DOTALL)), (pattern, len(text))


def test_counts_survive_parser_cache_resets() -> None:
    """The parser's caches are cleared every few dozen entries; a matcher that keeps
    walking a long counted string through the resets stays exact at the bound.  (States with
    counts out of a token's reach are never cached, so only the positions within reach of a
    bound fill the caches: the limit is small.)"""
    from formcast.limits import ParserLimits

    vocab = _char_vocab()
    compiled = GrammarCompiler(
        vocab, parser_limits=ParserLimits(max_cache_entries=40), cache_size=0
    ).compile_json_schema({"type": "string", "minLength": 150, "maxLength": 400})
    m = GrammarMatcher(compiled)
    assert m.accept_token(257)
    resets = []
    for i in range(400):
        allowed = set(m.allowed_token_ids().tolist())
        assert (257 in allowed) == (i >= 150), i  # the closing quote
        assert (ord("x") in allowed) == (i < 400), i
        assert (256 in allowed) == (i <= 350), i  # fifty more
        assert m.accept_token(ord("x"))
        resets.append(compiled.cache_info()["cache_resets"])
    assert resets[-1] > 2
    assert not m.is_token_allowed(ord("x"))
    assert m.accept_token(257)
    assert m.is_accepting()
