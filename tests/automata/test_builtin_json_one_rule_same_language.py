"""The built-in JSON grammar written as one recursive rule accepts the same language as the
four-rule grammar it replaced (session 15, #31), with bit-identical masks.

``json_grammar`` used to have rules ``value``, ``object``, ``member`` and ``array``; the
automaton compiler kept ``json``, ``value``, ``object`` and ``array`` as rules and expanded
``value`` into each (four copies of the value automaton).  Now a nested value is a call to
``json`` (the value with its surrounding whitespace) and the start rule is the only rule left.
Each gap is still one ``ws`` (at most ``max_ws`` characters), so the languages are equal.

Differential checks, old grammar (kept here verbatim) against new, for several bound settings:

* viable prefixes over a small alphabet (all to 3 bytes, a sample to 9; byte vocabulary: the
  mask is the set of next bytes and EOS), with bounds small enough to be reached;
* seeded walks on a vocabulary of bytes plus multi-byte JSON tokens (tokens that cross nested
  values: ``":[``, ``},{"``), biased towards structure;
* seeded walks on the Llama-3 vocabulary with the built-in bounds.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from formcast import CompiledGrammar, GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.frontends.builtin_json import BUILTIN_JSON_BOUNDS, _string_body, json_grammar
from formcast.frontends.jsonschema.numbers import any_number
from formcast.ir.nodes import CharSet, Grammar, Node, Rule, RuleRef, alt, concat, literal, repeat
from formcast.vocab.loaders import load_vocabulary

EOS = 256
BYTES = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[EOS], name="bytes"
)
# multi-byte tokens that span gaps, separators and nested values
_JSON_TOKENS = [
    b'{"',
    b'":',
    b'": ',
    b'":"',
    b'":[',
    b'":{',
    b'"}',
    b'"]',
    b'},{"',
    b"},",
    b"],[",
    b"[[",
    b"]]",
    b"{}",
    b"[]",
    b"[{",
    b"}]",
    b", ",
    b',"',
    b"  ",
    b"\n  ",
    b"\n    ",
    b" \n",
    b"true",
    b"false",
    b"null",
    b"null,",
    b"12",
    b"0.",
    b".5",
    b"e+",
    b"E-1",
    b"-0",
    b"ab",
    b"\\u00",
    b"\\n",
    b' "',
    b'" ',
    b" [",
    b" ]",
    b" {",
    b" }",
    b"1]",
    b"1}",
    b"1,",
]
MIXED = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"] + _JSON_TOKENS,
    stop_token_ids=[EOS],
    name="bytes+json",
)

BOUNDS: list[dict[str, Any]] = [
    dict(whitespace="flexible", max_ws=BUILTIN_JSON_BOUNDS["max_ws"],
         max_integer_digits=20, max_fraction_digits=20, max_exponent_digits=3),
    dict(whitespace="flexible", max_ws=2, max_integer_digits=2, max_fraction_digits=1,
         max_exponent_digits=1),
    dict(whitespace="flexible", max_ws=0, max_integer_digits=1, max_fraction_digits=0,
         max_exponent_digits=0),
    dict(whitespace="flexible", max_ws=None),
    dict(whitespace="compact"),
]  # fmt: skip


def _old_json_grammar(
    whitespace: str = "flexible",
    max_ws: int | None = None,
    *,
    max_integer_digits: int | None = None,
    max_fraction_digits: int | None = None,
    max_exponent_digits: int | None = None,
) -> Grammar:
    """``json_grammar`` as it was before session 15 (rules value, object, member, array)."""
    if whitespace == "compact":
        ws_body: Node = literal("")
    else:
        ws_body = repeat(CharSet.chars(" \t\n\r"), 0, max_ws)
    ws = RuleRef("ws")
    value = RuleRef("value")
    string = RuleRef("STRING")
    member = RuleRef("member")

    def body(item: Node) -> Node:
        return repeat(
            concat([item, repeat(concat([ws, literal(","), ws, item]), 0, None), ws]), 0, 1
        )

    rules = (
        Rule("json", concat([ws, value, ws])),
        Rule(
            "value",
            alt(
                [
                    RuleRef("object"),
                    RuleRef("array"),
                    string,
                    RuleRef("NUMBER"),
                    literal("true"),
                    literal("false"),
                    literal("null"),
                ]
            ),
        ),
        Rule("object", concat([literal("{"), ws, body(member), literal("}")])),
        Rule("member", concat([string, ws, literal(":"), ws, value])),
        Rule("array", concat([literal("["), ws, body(value), literal("]")])),
        Rule("STRING", _string_body(), terminal=True),
        Rule(
            "NUMBER",
            any_number(max_integer_digits, max_fraction_digits, max_exponent_digits),
            terminal=True,
        ),
        Rule("ws", ws_body),
    )
    return Grammar(rules, "json")


def _pair(vocab: Vocabulary, bounds: dict[str, Any]) -> tuple[CompiledGrammar, CompiledGrammar]:
    compiler = GrammarCompiler(vocab, cache_size=0)
    old = compiler.compile_grammar_ir(_old_json_grammar(**bounds))
    new = compiler.compile_grammar_ir(json_grammar(**bounds))
    return old, new


def _same(a: GrammarMatcher, b: GrammarMatcher, where: bytes) -> np.ndarray:
    ma, mb = a.allowed_token_ids(), b.allowed_token_ids()
    assert np.array_equal(ma, mb), (where, sorted(set(ma.tolist()) ^ set(mb.tolist()))[:20])
    assert a.is_accepting() == b.is_accepting(), where
    return ma


@pytest.mark.parametrize("bounds", BOUNDS[1:3] + BOUNDS[4:], ids=["ws2", "ws0", "compact"])
def test_short_prefixes_have_the_same_mask(bounds: dict[str, Any]) -> None:
    """Every viable prefix of up to 3 bytes over a JSON alphabet, then a seeded sample of
    longer ones (each node expands 3 of its viable bytes, to depth 9)."""
    old, new = _pair(BYTES, bounds)
    alphabet = [ord(c) for c in '[]{}",: \n1.e-a\\u']
    rng = random.Random(7)
    stack = [(GrammarMatcher(old), GrammarMatcher(new), b"")]
    visited = 0
    while stack and visited < 2500:
        a, b, text = stack.pop()
        allowed = set(_same(a, b, text).tolist())
        visited += 1
        if len(text) >= 9:
            continue
        nexts = [byte for byte in alphabet if byte in allowed]
        if len(text) >= 3:
            nexts = rng.sample(nexts, min(3, len(nexts)))
        for byte in nexts:
            fa, fb = a.fork(), b.fork()
            assert fa.accept_token(byte)
            assert fb.accept_token(byte)
            stack.append((fa, fb, text + bytes([byte])))
    assert visited > 500


def _walk(
    old: CompiledGrammar, new: CompiledGrammar, rng: random.Random, steps: int, structural: set[int]
) -> int:
    a, b = GrammarMatcher(old), GrammarMatcher(new)
    stops = old.vocab.stop_token_ids
    text = b""
    for _ in range(steps):
        allowed = [t for t in _same(a, b, text).tolist() if t not in stops]
        if not allowed:
            break
        pick = [t for t in allowed if t in structural]
        t = rng.choice(pick if pick and rng.random() < 0.7 else allowed)
        assert a.accept_token(t)
        assert b.accept_token(t)
        text += old.vocab.tokens[t]
    _same(a, b, text)
    return len(text)


def _structural(vocab: Vocabulary) -> set[int]:
    """Tokens made of JSON punctuation, whitespace, digits and literals only (the walks prefer
    them, so they nest and close values instead of growing one long string)."""
    keep = set(b'{}[],:" \n\t\r0123456789.eE+-truefalsn')
    return {
        i
        for i, tok in enumerate(vocab.tokens)
        if tok and len(tok) <= 6 and set(tok) <= keep and i not in vocab.stop_token_ids
    }


@pytest.mark.parametrize("bounds", BOUNDS, ids=["builtin", "ws2", "ws0", "unbounded", "compact"])
def test_walks_on_multi_byte_tokens_have_the_same_masks(bounds: dict[str, Any]) -> None:
    old, new = _pair(MIXED, bounds)
    rng = random.Random(31)
    structural = _structural(MIXED)
    total = sum(_walk(old, new, rng, 80, structural) for _ in range(12))
    assert total > 200


def test_walks_on_llama3_have_the_same_masks() -> None:
    vocab = load_vocabulary("llama3")
    old, new = _pair(vocab, BOUNDS[0])
    rng = random.Random(15)
    structural = _structural(vocab)
    total = sum(_walk(old, new, rng, 40, structural) for _ in range(6))
    assert total > 100


def test_builtin_grammar_compiles_to_one_rule() -> None:
    """The point of the rewrite: one rule automaton (the old grammar had four)."""
    from formcast.automata.rules import compile_grammar_automaton
    from formcast.frontends.builtin_json import builtin_json_grammar

    auto = compile_grammar_automaton(builtin_json_grammar())
    assert auto.names == ("json",)
    old = compile_grammar_automaton(_old_json_grammar(**BOUNDS[0]))
    assert len(old.names) == 4
    assert auto.num_states < old.num_states / 3
