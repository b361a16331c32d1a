"""The reference recognizer (the test oracle) against known answers, Python's ``re``, and the
built-in JSON grammar against JSONTestSuite; plus GBNF and Lark spellings of one language
giving the same answers."""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import pytest

from formcast.errors import ConfigurationError, GrammarError, UnsupportedFeatureError
from formcast.frontends.builtin_json import json_grammar
from formcast.frontends.gbnf import parse_gbnf
from formcast.frontends.lark import parse_lark
from formcast.ir.nodes import (
    EMPTY,
    NOTHING,
    Alt,
    ByteSet,
    CharSet,
    Concat,
    Grammar,
    Literal,
    Node,
    Repeat,
    Rule,
    RuleRef,
    alt,
    concat,
    literal,
    repeat,
)
from formcast.testing.reference import ReferenceRecognizer

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def rec(text: str) -> ReferenceRecognizer:
    return ReferenceRecognizer(parse_gbnf(text))


def strings(alphabet: str, max_len: int) -> list[str]:
    return ["".join(p) for n in range(max_len + 1) for p in itertools.product(alphabet, repeat=n)]


# -- known answers --------------------------------------------------------------------------------
def test_balanced_parentheses_against_a_counter() -> None:
    r = rec('root ::= ( "(" root ")" )*')

    def balanced(s: str) -> bool:
        depth = 0
        for c in s:
            depth += 1 if c == "(" else -1
            if depth < 0:
                return False
        return depth == 0

    def prefix(s: str) -> bool:
        depth = 0
        for c in s:
            depth += 1 if c == "(" else -1
            if depth < 0:
                return False
        return True

    for s in strings("()", 10):
        assert r.matches(s) == balanced(s), s
        assert r.is_prefix(s) == prefix(s), s


def test_anbn_is_context_free() -> None:
    r = rec('root ::= "a" root "b" | ""')
    for s in strings("ab", 9):
        n = len(s) // 2
        assert r.matches(s) == (s == "a" * n + "b" * n and len(s) % 2 == 0), s
        m = s.count("a")
        assert r.is_prefix(s) == (s[:m] == "a" * m and len(s) - m <= m), s


def test_left_recursion_and_right_recursion_agree() -> None:
    left = rec('root ::= e\ne ::= e "+" t | t\nt ::= t "*" f | f\nf ::= "x" | "(" e ")"')
    right = rec('root ::= e\ne ::= t "+" e | t\nt ::= f "*" t | f\nf ::= "x" | "(" e ")"')
    for s in strings("x+*()", 5):
        assert left.matches(s) == right.matches(s), s
        assert left.is_prefix(s) == right.is_prefix(s), s
    assert left.matches("(x+x)*x+x")
    assert not left.matches("x+")
    assert left.is_prefix("x+")


def test_nullable_rules_hidden_left_recursion_and_cycles() -> None:
    # a ::= b a "c" with b nullable is hidden left recursion; n ::= n is a useless cycle.
    # The language is y^i x c^k with i <= k (each "c" pairs with one b, empty or "y").
    r = rec('root ::= a\na ::= b a "c" | "x" | n\nb ::= "" | "y"\nn ::= n')
    for s in strings("xyc", 7):
        m = re.fullmatch(r"(y*)x(c*)", s)
        assert r.matches(s) == bool(m and len(m.group(1)) <= len(m.group(2))), s
        p = re.fullmatch(r"(y*)(x(c*))?", s)
        assert r.is_prefix(s) == bool(p), s


def test_empty_rules_and_nothing() -> None:
    g = Grammar((Rule("s", concat([RuleRef("e"), RuleRef("e")])), Rule("e", EMPTY)), "s")
    r = ReferenceRecognizer(g)
    assert r.matches("")
    assert r.is_prefix("")
    assert not r.matches("a")
    assert not r.is_prefix("a")
    dead = ReferenceRecognizer.for_node(NOTHING)
    assert not dead.matches("")
    assert not dead.is_prefix("")
    # a rule that can never finish makes its prefixes non-viable
    trap = ReferenceRecognizer(
        Grammar(
            (
                Rule("s", alt([literal("ok"), concat([literal("x"), RuleRef("loop")])])),
                Rule("loop", concat([literal("y"), RuleRef("loop")])),
            ),
            "s",
        )
    )
    assert trap.matches("ok")
    assert trap.is_prefix("o")
    assert not trap.is_prefix("x")
    assert not trap.is_prefix("xy")


# -- against Python's re --------------------------------------------------------------------------
REGULAR: list[tuple[Node, str]] = [
    (repeat(literal("ab"), 2, 4), r"(?:ab){2,4}"),
    (repeat(alt([literal("a"), literal("bc")]), 0, None), r"(?:a|bc)*"),
    (
        concat([repeat(CharSet.chars("ab"), 1, 3), repeat(literal("c"), 0, 1)]),
        r"[ab]{1,3}c?",
    ),
    (repeat(repeat(literal("a"), 2, 3), 2, 2), r"(?:a{2,3}){2}"),
    (repeat(literal("a"), 5, 5), r"a{5}"),
    (repeat(literal("a"), 3, None), r"a{3,}"),
    (repeat(concat([literal("a"), repeat(literal("b"), 0, 1)]), 1, 6), r"(?:ab?){1,6}"),
    (alt([EMPTY, literal("c"), repeat(literal("a"), 7, 13)]), r"|c|a{7,13}"),
    (repeat(CharSet.chars("abc").negate(), 0, 2), r"[^abc]{0,2}"),
    (ByteSet(((0x61, 0x62),)), r"[ab]"),
]


@pytest.mark.parametrize(("node", "pattern"), REGULAR, ids=[p for _, p in REGULAR])
def test_regular_nodes_agree_with_re(node: Node, pattern: str) -> None:
    r = ReferenceRecognizer.for_node(node)
    rx = re.compile(pattern)
    for s in strings("abcd", 6):
        assert r.matches(s) == bool(rx.fullmatch(s)), s
        # viable prefix: some completion over the alphabet within 14 more characters
        viable = any(
            rx.fullmatch(s + t) for t in [""] + strings("abcd", 2) + ["a" * k for k in range(15)]
        )
        if viable:
            assert r.is_prefix(s), s


def test_huge_repeat_bounds_stay_small() -> None:
    r = ReferenceRecognizer.for_node(repeat(literal("a"), 1000, 1_000_000))
    assert not r.matches("a" * 999)
    assert r.matches("a" * 1000)
    assert r.matches("a" * 1234)
    assert r.is_prefix("a" * 10)
    assert len(r._rhs) < 200  # binary decomposition, not a million nonterminals


def test_non_ascii_and_errors() -> None:
    r = ReferenceRecognizer.for_node(repeat(CharSet(((0x4E00, 0x9FFF),)), 1, None))
    assert r.matches("中文")
    assert not r.matches("中a")
    assert not ReferenceRecognizer.for_node(CharSet.chars("a")).matches("\ud800")
    with pytest.raises(GrammarError, match="undefined rule 'nope'"):
        ReferenceRecognizer(Grammar((Rule("s", RuleRef("nope")),), "s"))
    with pytest.raises(GrammarError, match="start rule"):
        ReferenceRecognizer(Grammar((Rule("s", EMPTY),), "t"))
    with pytest.raises(UnsupportedFeatureError):
        ReferenceRecognizer.for_node(ByteSet(((0x80, 0xFF),)))


# -- the built-in JSON grammar --------------------------------------------------------------------
def _suite() -> list[tuple[str, str]]:
    folder = DATA / "JSONTestSuite" / "test_parsing"
    if not folder.is_dir():
        pytest.skip(f"{folder} is missing")
    out = []
    for path in sorted(folder.glob("[yn]_*.json")):
        raw = path.read_bytes()
        if len(raw) > 4000:
            continue
        try:
            out.append((path.name, raw.decode("utf-8")))
        except UnicodeDecodeError:
            continue  # a str-level oracle cannot see invalid UTF-8
    return out


def test_json_grammar_against_json_test_suite() -> None:
    r = ReferenceRecognizer(json_grammar())
    cases = _suite()
    assert len(cases) > 150
    wrong = [name for name, text in cases if r.matches(text) != name.startswith("y_")]
    assert wrong == []


def test_json_grammar_details() -> None:
    r = ReferenceRecognizer(json_grammar())
    for ok in [
        '""',
        '"\\u00e9\\ud83d\\ude00"',
        '"\x7f é 😀"',
        "-0.5E+10",
        ' \t\n\r{"a":[]} ',
    ]:
        assert r.matches(ok), ok
    for bad in ['"\x1f"', "01", "1.", ".5", "+1", "[1,]", '{"a"}', "\f1", "tru", ""]:
        assert not r.matches(bad), bad
    assert r.is_prefix('{"a": [tr')
    assert not r.is_prefix('{"a": [tx')


def test_json_grammar_whitespace_modes() -> None:
    compact = ReferenceRecognizer(json_grammar("compact"))
    assert compact.matches('{"a":[1,2]}')
    assert not compact.matches('{"a": [1,2]}')
    bounded = ReferenceRecognizer(json_grammar(max_ws=2))
    assert bounded.matches("[ 1,\n\t2 ]")
    assert not bounded.matches("[   1]")
    assert bounded.matches("  1  ")
    assert not bounded.matches("   1")
    assert not bounded.is_prefix("[   ")
    for bad in [
        {"whitespace": "pretty"},
        {"max_ws": -1},
        {"whitespace": "compact", "max_ws": 1},
    ]:
        with pytest.raises(ConfigurationError):
            json_grammar(**bad)  # type: ignore[arg-type]
    g = json_grammar()
    terminals = {r.name for r in g.rules if r.terminal}
    assert terminals == {"STRING", "NUMBER"}
    assert g.start == "json"


# -- GBNF and Lark spellings of one language -------------------------------------------------------
PAIRS = [
    (
        "arithmetic",
        (
            'root ::= e\ne ::= t (("+" | "-") t)*\nt ::= f (("*" | "/") f)*\n'
            'f ::= [0-9]+ | "(" e ")" | "-" f\n'
        ),
        (
            'start: e\ne: t (("+" | "-") t)*\nt: f (("*" | "/") f)*\n'
            'f: NUM | "(" e ")" | "-" f\nNUM: "0".."9"+\n'
        ),
        "12+-*/()",
    ),
    (
        "lists with %ignore",
        (
            'root ::= ws list ws\nlist ::= "[" ws (item ws ("," ws item ws)*)? "]"\n'
            'item ::= [0-9]+ | list\nws ::= " "*\n'
        ),
        (
            'start: list\nlist: "[" [item ("," item)*] "]"\nitem: NUMBER | list\n'
            'NUMBER: "0".."9"+\n%ignore " "\n'
        ),
        "[1, ]",
    ),
    (
        "left recursion",
        'root ::= e\ne ::= e "+" t | t\nt ::= "x" | "(" e ")"\n',
        'start: e\ne: e "+" t | t\nt: "x" | "(" e ")"\n',
        "x+()",
    ),
    (
        "bounded repeats",
        'root ::= ("ab" | "c"){1,3} "d"? "e"{2}\n',
        'start: ("ab" | "c")~1..3 "d"? "e"{2}\n',
        "abcde",
    ),
]


def _sample(g: Grammar, rng: random.Random, budget: int = 25) -> str | None:
    """A random string of the grammar's language (None when the budget runs out)."""
    rules = g.rule_map()
    out: list[str] = []
    stack: list[Node] = [RuleRef(g.start)]
    for step in range(budget * 50):
        if not stack:
            return "".join(out)
        node = stack.pop()
        # past the budget, take the first choices and the fewest repetitions
        deep = len(stack) > budget or step > budget * 10
        if isinstance(node, RuleRef):
            stack.append(rules[node.name].body)
        elif isinstance(node, Literal):
            out.append(node.text)
        elif isinstance(node, CharSet):
            lo, hi = rng.choice(node.ranges)
            out.append(chr(rng.randint(lo, min(hi, lo + 20))))
        elif isinstance(node, Concat):
            stack.extend(reversed(node.items))
        elif isinstance(node, Alt):
            stack.append(node.items[0] if deep else rng.choice(node.items))
        elif isinstance(node, Repeat):
            hi_ = node.min if deep else (node.max if node.max is not None else node.min + 3)
            stack.extend([node.item] * rng.randint(node.min, min(hi_, node.min + 3)))
    return None


@pytest.mark.parametrize(("name", "gbnf", "lark", "alphabet"), PAIRS, ids=[p[0] for p in PAIRS])
def test_gbnf_and_lark_spellings_agree(name: str, gbnf: str, lark: str, alphabet: str) -> None:
    a = ReferenceRecognizer(parse_gbnf(gbnf))
    g_lark = parse_lark(lark)
    b = ReferenceRecognizer(g_lark)
    rng = random.Random(1234)
    texts = strings(alphabet, 3)
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(5, 12))) for _ in range(400)]
    samples = [s for s in (_sample(g_lark, rng) for _ in range(200)) if s is not None]
    assert len(samples) > 50
    for s in texts + samples:
        assert a.matches(s) == b.matches(s), s
        assert a.is_prefix(s) == b.is_prefix(s), s
    assert all(a.matches(s) for s in samples)
