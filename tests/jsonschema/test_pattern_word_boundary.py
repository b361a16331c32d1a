"""``\\b`` and ``\\B`` in JSON Schema patterns are compiled exactly (word_boundary.py).

Oracles: Python's ``re.search`` with ``re.ASCII`` (ECMA's word characters are ``[A-Za-z0-9_]``
without the ``u``/``i`` flags, which is what ``re.ASCII`` gives ``\\w`` and ``\\b``) on random
strings over an alphabet of word and non-word characters, and ``jsonschema`` through a whole
compile.  One difference is Python's, not ECMA's: before Python 3.14, ``\\B`` never matches in
the empty string (ECMA: ``/\\B/.test("")`` is true, both neighbours being the non-word ends),
so the empty string is left out for patterns with ``\\B``.
"""

from __future__ import annotations

import json
import random
import re

import pytest

import jsonschema
from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.automata import charfa
from formcast.errors import GrammarSyntaxError, LimitExceededError
from formcast.frontends.jsonschema.regexlang import pattern_node

PATTERNS = [
    r"\bnative\b",
    r"^(?!.*\bnative\b)[a-zA-Z][a-zA-Z0-9_]*(\.[a-zA-Z][a-zA-Z0-9_]*)+$",  # expo's package
    r"\b\d{3}\b",
    r"foo\B",
    r"\Bfoo\b",
    r"^\w+\b$",
    r"a\b-",
    r"(\b|x)y",
    r"\b",
    r"\B",
    r"^\b$",
    r"^\B$",
    r"x\b\by",
    r"\b\B",
    r"\bfoo|bar\b",
    r"(?:\bab)+",
    r"^(\ba|b\b)*c$",
    r"[\b]x",  # in a class: the backspace character
    r"é\b",  # é is not an ECMA word character
]
ALPHABET = "natvefo -xy_ab9.é\b"


def _strings(rnd: random.Random, n: int) -> list[str]:
    out = ["", "native", "a native b", "foo", "xfoo", "foox", "123", " 123 ", "é", "aé"]
    for _ in range(n):
        s = "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 8)))
        if rnd.random() < 0.3:
            k = rnd.randint(0, len(s))
            s = s[:k] + rnd.choice(["native", "foo", "bar", "123", "ab"]) + s[k:]
        out.append(s)
    return out


@pytest.mark.parametrize("pattern", PATTERNS)
def test_pattern_node_agrees_with_re(pattern: str) -> None:
    d = charfa.dfa_from_node(pattern_node(pattern), 5_000)
    rnd = random.Random(pattern)
    for s in _strings(rnd, 2_000):
        if s == "" and "\\B" in pattern:
            continue  # Python's \B never matches in "" (ECMA's does)
        assert d.matches(s) == bool(re.search(pattern, s, re.ASCII)), (pattern, s)


def test_boundary_in_the_empty_string_follows_ecma() -> None:
    # the ends count as non-word neighbours: \B holds in "", \b does not
    assert charfa.dfa_from_node(pattern_node(r"^\B$")).matches("")
    assert not charfa.dfa_from_node(pattern_node(r"^\b$")).matches("")


def test_a_repeated_boundary_is_a_syntax_error() -> None:
    for p in (r"\b+", r"a\B*", r"\b{2}"):
        with pytest.raises(GrammarSyntaxError):
            pattern_node(p)


def test_too_large_fails_closed() -> None:
    with pytest.raises(LimitExceededError):
        pattern_node(r"\b[a-z.]{1,300}\.[a-z]{1,9}\b")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": r"^(?!.*\bnative\b)[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"},
        {"type": "object", "patternProperties": {r"\bid\b": {"type": "integer"}}},
        {"type": "string", "pattern": r"\b\d{2}\b", "maxLength": 6},
    ],
)
def test_whole_compile_agrees_with_jsonschema(schema: dict[str, object]) -> None:
    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )
    compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rnd = random.Random(json.dumps(schema))
    values: list[object] = []
    for s in _strings(rnd, 300):
        values += [s, s.replace("é", "") + ".native", "com." + s.replace(" ", ""), {s: 1}]
        values += [{s: "x"}, {"id": 1, s: 2}, "x 12", "12", "a12 b"]
    for v in values:
        if isinstance(v, str) and "é" in v:
            continue  # jsonschema's re is Unicode: é is a word character there, not in ECMA
        if isinstance(v, dict) and any("é" in k for k in v):
            continue
        m = GrammarMatcher(compiled)
        text = json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()
        got = m.accept_bytes(text) and m.is_accepting()
        assert got == validator.is_valid(v), (schema, v)
