"""GBNF front-end: every shared grammar parses, the syntax matches llama.cpp's reader, the
languages are right (checked with the reference recognizer) and errors carry positions."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

import pytest

from formcast.errors import GrammarSyntaxError, UnsupportedFeatureError
from formcast.frontends.gbnf import parse_gbnf
from formcast.ir.nodes import ANY_CHAR, CharSet, Literal, Repeat, RuleRef, iter_nodes
from formcast.testing.reference import ReferenceRecognizer

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
GBNF_FILES = sorted(
    [
        *(DATA / "llama.cpp-grammars" / "grammars").glob("*.gbnf"),
        *(DATA / "llguidance" / "sample_parser" / "data" / "from-llama.cpp").glob("*.gbnf"),
        *(DATA / "workloads" / "cfg").glob("*.gbnf"),
        *(DATA / "workloads" / "cfg").glob("*.tcfg.ebnf"),  # transformers-cfg: GBNF syntax
    ]
)


def rec(text: str) -> ReferenceRecognizer:
    return ReferenceRecognizer(parse_gbnf(text))


def body(text: str, rule: str = "root") -> object:
    return parse_gbnf(text).rule_map()[rule].body


# -- the shared grammars --------------------------------------------------------------------------
def test_shared_grammars_are_present() -> None:
    if not DATA.is_dir():
        pytest.skip(f"{DATA} is missing")
    assert len(GBNF_FILES) >= 20


@pytest.mark.parametrize("path", GBNF_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shared_grammar_parses(path: Path) -> None:
    g = parse_gbnf(path.read_text(encoding="utf-8"))
    assert g.start == "root"
    names = {r.name for r in g.rules}
    for rule in g.rules:
        for node in iter_nodes(rule.body):
            if isinstance(node, RuleRef):
                assert node.name in names
    ReferenceRecognizer(g)  # well-formed enough for the oracle


def _read(*parts: str) -> str:
    path = DATA.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path.read_text(encoding="utf-8")


def test_arithmetic_grammar_language() -> None:
    r = rec(_read("llama.cpp-grammars", "grammars", "arithmetic.gbnf"))
    assert r.matches("(1+2)*3=4\n")
    assert r.matches("x = y\nfoo_1 = (a +b*3)\n")  # spaces only after terms
    assert not r.matches("1+=2\n")
    assert not r.matches("(1+2)*3=4")
    assert r.is_prefix("(1+2)*3")
    assert r.is_prefix("1+")
    assert not r.is_prefix("1++")
    assert not r.is_prefix(")")


def test_c1_arith_workload_expression_grammar() -> None:
    r = rec(_read("workloads", "cfg", "c1_arith.gbnf"))
    spec = json.loads(_read("workloads", "cfg", "c1_arith.json"))
    assert r.matches(spec["valid_text"])
    for bad in spec["invalid"]:
        assert not r.matches(bad["text"]), bad["why"]
    assert r.matches("(1+2)*3")
    assert not r.matches("1+")
    assert r.is_prefix("1+")


@pytest.mark.parametrize("name", ["json.gbnf", "json_arr.gbnf"])
def test_llama_cpp_json_grammars(name: str) -> None:
    r = rec(_read("llama.cpp-grammars", "grammars", name))
    if name == "json.gbnf":
        assert r.matches('{"a": [1, -2.5, true, null, "x\\n\\u00e9"]}')
        assert r.matches('{\n  "k": {}\n}')
        assert not r.matches("[1]")
        assert not r.matches('{"a": "\x01"}')
        assert not r.matches('{"a" 1}')
    else:
        assert r.matches('[\n1,\n{"a": "b"}]')
        assert not r.matches("[1]")


def test_chess_list_english_japanese_c() -> None:
    chess = rec(_read("llama.cpp-grammars", "grammars", "chess.gbnf"))
    assert chess.matches("1. e4 e5\n2. Nf3 Nc6\n")
    assert not chess.matches("1. e4 e5\n")
    lst = rec(_read("llama.cpp-grammars", "grammars", "list.gbnf"))
    assert lst.matches("- a\n- bc\n")
    assert not lst.matches("- a\u2028b\n")
    en = rec(_read("llama.cpp-grammars", "grammars", "english.gbnf"))
    assert en.matches("Hello, world! [x]\\y")
    assert not en.matches("héllo")
    jp = rec(_read("llama.cpp-grammars", "grammars", "japanese.gbnf"))
    assert jp.matches("こんにちは 世界")
    assert not jp.matches("hello")
    c = rec(_read("llama.cpp-grammars", "grammars", "c.gbnf"))
    assert c.matches("int main(){return 0;}")
    assert not c.matches("int main(){return 0}")


# -- syntax ---------------------------------------------------------------------------------------
def test_literals_classes_and_escapes() -> None:
    assert body('root ::= "a\\n\\t\\r\\\\\\"\\x41\\u00e9\\U0001F600\\[\\]\\-"') == Literal(
        'a\n\t\r\\"Aé😀[]-'
    )
    assert body("root ::= [a-cx]") == CharSet(((0x61, 0x63), (0x78, 0x78)))
    assert body("root ::= [a-]") == CharSet.chars("a-")  # a dash before ] is literal
    assert body("root ::= [-a]") == CharSet.chars("a-")
    assert body("root ::= [\\]\\\\]") == CharSet.chars("]\\")
    neg = body("root ::= [^\\n]")
    assert isinstance(neg, CharSet)
    assert 0x0A not in neg
    assert 0x41 in neg
    assert 0xD800 not in neg
    assert 0xD800 not in body("root ::= [\\u0000-\\uFFFF]")  # type: ignore[operator]
    assert body("root ::= .") == ANY_CHAR
    assert body('root ::= ""') == body("root ::= ")  # both the empty string
    assert body("root ::= [ぁ-ゟ]") == CharSet(((0x3041, 0x309F),))


def test_repetitions() -> None:
    assert body('root ::= "a"*') == Repeat(Literal("a"), 0, None)
    assert body('root ::= "a"+') == Repeat(Literal("a"), 1, None)
    assert body('root ::= "a"?') == Repeat(Literal("a"), 0, 1)
    assert body('root ::= "ab"{3}') == Repeat(Literal("ab"), 3, 3)
    assert body('root ::= "a"{2,}') == Repeat(Literal("a"), 2, None)
    assert body('root ::= "a"{ 2 , 5 }') == Repeat(Literal("a"), 2, 5)
    assert body('root ::= "a"{,5}') == Repeat(Literal("a"), 0, 5)
    assert body('root ::= "a"{0,5000}') == Repeat(Literal("a"), 0, 5000)  # kept exactly
    r = rec('root ::= ("ab" | "c"){2,3} [0-9]{,2}')
    assert r.matches("abc")
    assert r.matches("ccc12")
    assert not r.matches("c1")
    assert not r.matches("abcabc")
    assert not r.matches("cc123")


def test_newlines_comments_and_continuations() -> None:
    g = parse_gbnf(
        "# leading comment\n"
        "root ::=   # the body may start on the next line\n"
        '  a ( "x"\n'
        '      "y" )  # inside parentheses newlines are spaces\n'
        "\n"
        'a ::= "1" |\n'
        '      "2" # a newline after | continues the rule\r\n'
        "b-c_d ::= a\n"
    )
    r = ReferenceRecognizer(g)
    assert r.matches("1xy")
    assert r.matches("2xy")
    assert not r.matches("3xy")
    assert [rule.name for rule in g.rules] == ["root", "a", "b-c_d"]


def test_alternatives_and_empty_alternative() -> None:
    r = rec('root ::= "a" ws\nws ::= | " " | "\\n" [ \\t]{0,2}')
    for ok in ["a", "a ", "a\n", "a\n\t "]:
        assert r.matches(ok), ok
    assert not r.matches("a  ")
    assert not r.matches("a\n   ")


def test_left_recursion_is_allowed() -> None:
    r = rec('root ::= list\nlist ::= list "," item | item\nitem ::= [a-z]+')
    assert r.matches("a,bc,d")
    assert not r.matches("a,,b")


def test_start_rule_option() -> None:
    g = parse_gbnf('top ::= "x"', start="top")
    assert g.start == "top"
    assert ReferenceRecognizer(g).matches("x")


# -- errors ---------------------------------------------------------------------------------------
def _error(text: str) -> GrammarSyntaxError:
    with pytest.raises(GrammarSyntaxError) as info:
        parse_gbnf(text)
    return info.value


def test_undefined_rule_is_named_with_its_position() -> None:
    e = _error('root ::= a b\na ::= "x"\n')
    assert "undefined rule 'b'" in str(e)
    assert (e.line, e.column) == (1, 12)
    assert "root ::= a b" in str(e)  # the offending line is quoted


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        ('root ::= "abc', "unterminated string", 1, 10),
        ("root ::= [abc", "unterminated character class", 1, 10),
        ('root ::= "\\q"', "unknown escape \\q", 1, 11),
        ('root ::= "\\x4"', "expecting 2 hex digits", 1, 11),
        ('root ::= "\\uD800"', "surrogate", 1, 10),
        ('root ::= "\\U00110000"', "above U+10FFFF", 1, 11),
        ('root ::= ("a"', "expecting ')'", 1, 14),
        ('root ::= "a")', "unmatched ')'", 1, 13),
        ('root ::= "a"\n  | "b"', "expecting a rule name, found '|'", 2, 3),
        ('root = "a"', "expecting '::='", 1, 6),
        ('root ::= *"a"', "nothing to repeat", 1, 10),
        ('root ::= "a"{3,1}', "below the minimum", 1, 13),
        ('root ::= "a"{x}', "expecting an integer", 1, 14),
        ("root ::= [z-a]", "reversed range", 1, 11),
        ("root ::= []", "empty character class", 1, 10),
        ('root ::= "a"\nroot ::= "b"', "defined twice", 2, 1),
        ('a ::= "x"', "no 'root' rule", 1, 1),
        ('root ::= "a" @', "expecting newline or end of input, found '@'", 1, 14),
    ],
)
def test_syntax_errors_have_positions(text: str, message: str, line: int, column: int) -> None:
    e = _error(text)
    assert message in str(e)
    assert (e.line, e.column) == (line, column), str(e)


def test_token_references_are_unsupported() -> None:
    for text in ['root ::= <think> "x"', 'root ::= !<[12]> "x"']:
        with pytest.raises(UnsupportedFeatureError) as info:
            parse_gbnf(text)
        assert info.value.feature == "token reference"
        assert "line 1, column 10" in str(info.value)


def test_deep_nesting_is_refused_not_crashed() -> None:
    e = _error("root ::= " + "(" * 600 + '"a"' + ")" * 600)
    assert "nested more than 500" in str(e)


def test_deep_nesting_within_the_bound_works() -> None:
    depth = 450  # ( "x" ( "x" ( ... "y" )? )? )?
    g = parse_gbnf("root ::= " + '("x" ' * depth + '"y"' + ")?" * depth)
    hash(g)  # trees stay shallow: deep groups are moved into synthesized rules
    assert any("::" in r.name for r in g.rules)
    r = ReferenceRecognizer(g)
    assert r.matches("x" * depth + "y")
    assert r.matches("x" * 17)
    assert not r.matches("x" * (depth - 1) + "y")


def test_random_source_only_raises_grammar_errors() -> None:
    rng = random.Random(7)
    pieces = ["root", " ::= ", "a", " ", "\n", '"x"', '"', "[a-z]", "[^", "]", "(", ")", "|"]
    pieces += ["*", "+", "?", "{2,3}", "{", "}", ",", "#c", "\\", ".", "<", "-", "_", "a ::= "]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))
        if rng.random() < 0.5:
            text = "root ::= " + text
        with contextlib.suppress(GrammarSyntaxError, UnsupportedFeatureError):
            ReferenceRecognizer(parse_gbnf(text)).is_prefix("x")
