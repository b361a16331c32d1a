"""Lark front-end (llguidance's dialect): every shared grammar parses or fails with a named
reason, %ignore is compiled in correctly, and errors carry positions."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

import pytest

from formcast.errors import GrammarError, GrammarSyntaxError, UnsupportedFeatureError
from formcast.frontends.lark import COMMON_TERMINALS, IGNORE_RULE, parse_lark
from formcast.ir.nodes import CharSet, Grammar, Repeat, RuleRef, is_regular
from formcast.testing.reference import ReferenceRecognizer

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

OK = "ok"
NO_START = (GrammarSyntaxError, "no 'start' rule")
RELATIVE = (UnsupportedFeatureError, "relative %import")
TEMPLATES = (UnsupportedFeatureError, "templates")

# Every Lark grammar in shared/data and what parse_lark does with it.
EXPECTED: dict[str, object] = {
    "lark/examples/advanced/python2.lark": (UnsupportedFeatureError, "%declare"),
    "lark/examples/advanced/template_lark.lark": TEMPLATES,
    "lark/examples/composition/csv.lark": OK,
    "lark/examples/composition/json.lark": OK,
    "lark/examples/composition/storage.lark": RELATIVE,
    "lark/examples/grammars/verilog.lark": (UnsupportedFeatureError, "lookahead"),
    "lark/examples/relative-imports/multiple2.lark": OK,
    "lark/examples/relative-imports/multiple3.lark": OK,
    "lark/examples/relative-imports/multiples.lark": RELATIVE,
    "lark/examples/standalone/json.lark": OK,
    "lark/examples/tests/negative_priority.lark": OK,
    "lark/examples/tests/no_newline_at_end.lark": OK,
    "lark/lark/grammars/common.lark": (UnsupportedFeatureError, "lookbehind"),
    "lark/lark/grammars/lark.lark": (UnsupportedFeatureError, "lookahead"),
    "lark/lark/grammars/python.lark": TEMPLATES,
    "lark/lark/grammars/unicode.lark": NO_START,
    "lark/tests/grammars/ab.lark": NO_START,
    "lark/tests/grammars/leading_underscore_grammar.lark": NO_START,
    "lark/tests/grammars/templates.lark": TEMPLATES,
    "lark/tests/grammars/test.lark": NO_START,
    "lark/tests/grammars/test_relative_import_of_nested_grammar.lark": RELATIVE,
    "lark/tests/grammars/test_relative_import_of_nested_grammar__grammar_to_import.lark": RELATIVE,
    "lark/tests/grammars/test_relative_import_of_nested_grammar__nested_grammar.lark": NO_START,
    "lark/tests/grammars/test_unicode.lark": NO_START,
    "lark/tests/grammars/three_rules_using_same_token.lark": NO_START,
    "llguidance/sample_parser/data/lark.lark": OK,
    "llguidance/sample_parser/data/rfc.lark": OK,
    "workloads/cfg/c1_arith.lark": OK,
    "workloads/cfg/c2_arith_stmt.lark": OK,
}
# Grammars without a 'start' rule parse with the start rule named explicitly.
OTHER_START = {
    "lark/tests/grammars/ab.lark": "startab",
    "lark/tests/grammars/leading_underscore_grammar.lark": "c",
    "lark/tests/grammars/three_rules_using_same_token.lark": "a",
}


def _read(rel: str) -> str:
    path = DATA / rel
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path.read_text(encoding="utf-8")


def rec(text: str, start: str = "start") -> ReferenceRecognizer:
    return ReferenceRecognizer(parse_lark(text, start=start))


def _check_shape(g: Grammar) -> None:
    names = {r.name for r in g.rules}
    assert len(names) == len(g.rules)
    for rule in g.rules:
        if rule.terminal:
            assert is_regular(rule.body), rule.name
    ReferenceRecognizer(g)  # every reference resolves


# -- the shared grammars --------------------------------------------------------------------------
def test_the_table_lists_every_shared_lark_grammar() -> None:
    if not DATA.is_dir():
        pytest.skip(f"{DATA} is missing")
    found = {
        str(p.relative_to(DATA))
        for sub in ("lark", "llguidance", "workloads")
        for p in (DATA / sub).rglob("*.lark")
    }
    assert found == set(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_shared_grammar_parses_or_names_its_reason(rel: str) -> None:
    text = _read(rel)
    expected = EXPECTED[rel]
    if expected == OK:
        _check_shape(parse_lark(text))
        return
    assert isinstance(expected, tuple)
    cls, needle = expected
    with pytest.raises(GrammarError) as info:
        parse_lark(text)
    assert type(info.value) is cls
    assert needle in str(info.value)
    if rel in OTHER_START:
        _check_shape(parse_lark(text, start=OTHER_START[rel]))


def test_workload_arithmetic_grammars() -> None:
    for name in ("c1_arith", "c2_arith_stmt"):
        r = rec(_read(f"workloads/cfg/{name}.lark"))
        spec = json.loads(_read(f"workloads/cfg/{name}.json"))
        assert r.matches(spec["valid_text"])
        for bad in spec["invalid"]:
            assert not r.matches(bad["text"]), bad["why"]
    r = rec(_read("workloads/cfg/c1_arith.lark"))
    assert r.matches("(1+2)*3")
    assert r.matches(" ( 1 +2 ) *  3 ")  # %ignore /[ ]+/ between any two lexemes
    assert not r.matches("1+")
    assert r.is_prefix("1+")
    assert not r.matches("1 2")  # but not inside a NUMBER


def test_json_examples() -> None:
    standalone = rec(_read("lark/examples/standalone/json.lark"))
    assert standalone.matches('{ "a" : [1, -2.5e3, true, null, "x\\"y"] }\n')
    assert not standalone.matches('{"a" 1}')
    assert not standalone.matches("[1,]")
    composed = rec(_read("lark/examples/composition/json.lark"))  # explicit _WS, no %ignore
    assert composed.matches('{"a": [1,\n 2]}')
    assert not composed.matches('{"a":1}')  # pair: string ":" _WS value


def test_ab_csv_and_relative_import_examples() -> None:
    ab = rec(_read("lark/tests/grammars/ab.lark"), start="startab")
    for ok in ["ab", "aabb", " a a b\tb\n"]:
        assert ab.matches(ok), ok
    assert not ab.matches("aab")
    csv = rec(_read("lark/examples/composition/csv.lark"))
    assert csv.matches("# name age\nbob,12\nann,7\n")
    assert not csv.matches("name age\nbob,12\n")
    m3 = rec(_read("lark/examples/relative-imports/multiple3.lark"))  # multiples of three
    for n in range(40):
        assert m3.matches(f"{n:b}") == (n % 3 == 0), n


def test_llguidance_samples() -> None:
    lark_in_lark = rec(_read("llguidance/sample_parser/data/lark.lark"))
    for rel in ("workloads/cfg/c1_arith.lark", "lark/examples/composition/json.lark"):
        src = _read(rel)
        assert lark_in_lark.matches(src), rel
        assert not lark_in_lark.matches(src.replace(":", "", 1)), rel
    rfc = rec(_read("llguidance/sample_parser/data/rfc.lark"))
    xml = _read("llguidance/sample_parser/data/rfc.xml")
    assert rfc.matches(xml)
    assert not rfc.matches(xml.replace("</front>", "</frnt>"))


# -- %ignore --------------------------------------------------------------------------------------
def test_ignore_goes_between_lexemes_only() -> None:
    g = parse_lark('start: "a" B c+\nB: "b" "b"\nc: "c"\n%ignore " "')
    assert g.rule_map()[IGNORE_RULE].body == Repeat(RuleRef('" "'), 0, None)
    r = ReferenceRecognizer(g)
    for ok in ["abbc", " a bb c c ", "a  bbccc", "abb c  c"]:
        assert r.matches(ok), ok
    for bad in ["ab bc", "a b b c", "abb"]:
        assert not r.matches(bad), bad


def test_ignore_with_several_patterns_and_optional_items() -> None:
    r = rec('start: "x" ["y"] "z"\n%import common.WS\n%ignore WS\n%ignore /#[^\\n]*/\n')
    for ok in ["xz", "x z", "x # comment\n y\tz", "xyz #end"]:
        assert r.matches(ok), ok
    assert not r.matches("x y y z")
    # A lexer with maximal munch would read "#z" as one comment; the IR's language allows
    # every split into lexemes (the runtime applies munch rules to terminals).
    assert r.matches("x #z")


def test_terminal_bodies_never_get_ignore() -> None:
    g = parse_lark('start: WORD+\nWORD: "a".."z"+\n%ignore " "')
    word = g.rule_map()["WORD"]
    assert word.terminal
    assert is_regular(word.body)
    r = ReferenceRecognizer(g)
    assert r.matches("ab cd")
    assert r.matches("abcd")  # one WORD, or two: the IR leaves lexing to the runtime


# -- features -------------------------------------------------------------------------------------
def test_strings_ranges_and_case_insensitivity() -> None:
    r = rec('start: "if"i " " "a".."c" "\\x41\\u00e9\\n\\t\\"\\\\"')
    for ok in ['if aAé\n\t"\\', 'IF cAé\n\t"\\', 'iF bAé\n\t"\\']:
        assert r.matches(ok), ok
    assert not r.matches('if dAé\n\t"\\')


def test_repetition_forms() -> None:
    cases = {
        'start: "a"~2': ({"aa"}, {"a", "aaa"}),
        'start: "a" ~ 2..3': ({"aa", "aaa"}, {"a", "aaaa"}),
        'start: "a"{2}': ({"aa"}, {"a", "aaa"}),
        'start: "a"{2,}': ({"aa", "aaaaa"}, {"a"}),
        'start: "a"{,2}': ({"", "a", "aa"}, {"aaa"}),
        'start: "a"{1,3}': ({"a", "aaa"}, {"", "aaaa"}),
        'start: ("a" "b")* "c"? ["d"]': ({"", "abab", "abcd", "d"}, {"a", "cc"}),
    }
    for text, (good, bad) in cases.items():
        r = rec(text)
        assert all(r.matches(s) for s in good), text
        assert not any(r.matches(s) for s in bad), text


def test_rule_modifiers_aliases_priorities_and_lazy() -> None:
    g = parse_lark(
        "?start: item+ -> items\n"
        "!item.2: NAME | tail\n"
        "NAME.-1: /[a-z]+/\n"
        'tail[lazy, capture]: /[0-9]+/ ";"\n'
        'other[capture="x"]: NAME\n'
        "%llguidance {}\n"
        '%llguidance {"no_forcing": true}\n'
    )
    rules = g.rule_map()
    assert rules["tail"].terminal
    assert rules["tail"].lazy
    assert is_regular(rules["tail"].body)
    assert not rules["item"].terminal
    r = ReferenceRecognizer(g)
    assert r.matches("abc12;x")
    assert not r.matches("12")


def test_common_imports() -> None:
    g = parse_lark(
        "start: _WS? SIGNED_NUMBER (_WS ESCAPED_STRING)? CNAME?\n"
        "%import common.WS -> _WS\n"
        "%import common (SIGNED_NUMBER, ESCAPED_STRING,\n    CNAME)\n"
    )
    r = ReferenceRecognizer(g)
    for ok in ["1", " -1.5e3", "+.5", '2 "a\\"b"', '3 ""_x1']:
        assert r.matches(ok), ok
    for bad in ['1 "a"b"', '1 "a\nb"', "1.2.3"]:
        assert not r.matches(bad), bad
    for name, (body, _) in COMMON_TERMINALS.items():
        assert is_regular(body), name


def test_common_terminal_languages() -> None:
    def m(name: str, text: str) -> bool:
        return ReferenceRecognizer.for_node(COMMON_TERMINALS[name][0]).matches(text)

    assert m("FLOAT", "1e5")
    assert m("FLOAT", "1.")
    assert m("FLOAT", ".5E-2")
    assert not m("FLOAT", "1")
    assert not m("INT", "-1")
    assert m("SIGNED_INT", "-1")
    assert m("NUMBER", "12")
    assert m("DECIMAL", "1.")
    assert not m("DECIMAL", ".")
    assert m("C_COMMENT", "/* a * b **/")
    assert not m("C_COMMENT", "/* a */ b */")
    assert m("NEWLINE", "\r\n\n")
    assert not m("NEWLINE", "\r")
    assert m("HEXDIGIT", "F")
    assert m("WORD", "abC")
    assert not m("CNAME", "1a")
    assert m("SH_COMMENT", "# x")
    assert m("CPP_COMMENT", "// x")
    assert m("SQL_COMMENT", "-- x")
    assert m("ESCAPED_STRING", '"\\\\"')
    assert not m("ESCAPED_STRING", '"\\"')


def test_newline_tolerance_and_comments() -> None:
    r = rec(
        "// comment\n"
        'start: ( "a"\n'
        '       | "b" )   # comment\n'
        "     // a comment line between alternatives\n"
        '     | "c"\n'
        "\n"
    )
    assert r.matches("a")
    assert r.matches("b")
    assert r.matches("c")
    assert not r.matches("d")


def test_deep_nesting() -> None:
    depth = 450
    g = parse_lark("start: " + '("x" ' * depth + '"y"' + ")?" * depth + '\n%ignore " "')
    hash(g)
    r = ReferenceRecognizer(g)
    assert r.matches("x " * depth + "y")
    assert not r.matches("x" * (depth - 1) + "y")
    with pytest.raises(GrammarSyntaxError, match="nested more than 500"):
        parse_lark("start: " + "(" * 600 + '"a"' + ")" * 600)
    with pytest.raises(GrammarSyntaxError, match="nested too deeply"):
        parse_lark("start: A\nA: " + '("x" ' * depth + '"y"' + ")?" * depth)
    g = parse_lark("start: A\nA: " + '("x" ' * 60 + '"y"' + ")?" * 60)
    assert ReferenceRecognizer(g).matches("x" * 60 + "y")


# -- unsupported features -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "feature"),
    [
        ('start: sep{A}\nsep{x}: x\nA: "a"', "templates"),
        ('start: sep{"a", ","}', "templates"),
        ("start: A\n%declare A", "%declare"),
        ('start: "a"\n%override start: "b"', "%override"),
        ("start: A\n%import .other.A", "relative %import"),
        ("start: A\n%import unicode.WS -> A", "%import from 'unicode'"),
        ('start: %json {"type": "object"}', "%json"),
        ('start: %regex {"substring_words": "a b"}', "%regex"),
        ('start: <|eot_id|> "a"', "special token"),
        ("start: @sub", "grammar reference"),
        ("start: A\nA: /[a-z]+/ & ~/x/", "'&' (and) operator"),
        ("start: A\nA: ~/x/", "'~' (not) operator"),
        ('start: g\ng[stop="x"]: /.*/', "lexeme option 'stop'"),
        ("start: g\ng[max_tokens=5]: /.*/", "lexeme option 'max_tokens'"),
        ('%llguidance {"skip_repetition": "once"}\nstart: "a"', "%llguidance option"),
        ("start: A\nA: /a(?=b)b/", "lookahead"),
    ],
)
def test_unsupported_features_are_named(text: str, feature: str) -> None:
    with pytest.raises(UnsupportedFeatureError) as info:
        parse_lark(text)
    assert feature in str(info.value)
    assert "line " in str(info.value)


# -- syntax errors --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        ('start: a\na: "x" b', "undefined rule 'b'", 2, 8),
        ('start: A B\nA: "a"', "undefined terminal 'B'", 1, 10),
        ('start: "a"\nstart: "b"', "defined twice", 2, 1),
        ('start: A\nA: "a" b\nb: "b"', "terminal 'A' cannot refer to rule 'b'", 2, 8),
        ('start: A\nA: "a" B\nB: A?', "refers to itself", 2, 1),
        ('start: ("a"', "unclosed '('", 1, 8),
        ('start: "a")', "unmatched ')'", 1, 11),
        ('start: ("a"]', "does not close '('", 1, 12),
        ('start: "abc', "unterminated string", 1, 8),
        ('start: "a\\qb"', "unknown escape \\q", 1, 10),
        ('start: "a"\n%foo', "unknown directive '%foo'", 2, 1),
        ('start "a"', "expecting ':' after the name", 1, 7),
        ('other: "a"', "no 'start' rule", 1, 1),
        ('start: "a"\n%import common.NOPE', "common has no terminal 'NOPE'", 2, 16),
        ("start: A\nA: /a(b/", "unterminated subpattern", 2, 6),
        ('start: * "a"', "nothing to repeat", 1, 8),
        ('start: "a"{3,1}', "below the minimum", 1, 11),
        ('start: "b".."a"', "reversed range", 1, 8),
    ],
)
def test_syntax_errors_have_positions(text: str, message: str, line: int, column: int) -> None:
    with pytest.raises(GrammarSyntaxError) as info:
        parse_lark(text)
    assert message in str(info.value)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)


def test_empty_alternatives_and_charsets() -> None:
    r = rec('start: "a" | | "b".."d" | "x"*+')
    assert r.matches("")
    assert r.matches("a")
    assert r.matches("c")
    assert r.matches("xx")
    assert not r.matches("e")
    g = parse_lark('start: X\nX: "b".."d"')
    assert g.rule_map()["X"].body == CharSet(((0x62, 0x64),))


def test_random_source_only_raises_grammar_errors() -> None:
    rng = random.Random(7)
    pieces = ["start", ": ", "a", "A", " ", "\n", '"x"', '"', "/[a-z]/", "/", "(", ")", "["]
    pieces += ["]", "|", "*", "+", "?", "{2}", "{", "}", ",", "~", "..", ".", "->", "%ignore "]
    pieces += ["%import common.WS", "\\", "//c", "#", "A: ", "a: ", '"a".."b"', "<x>", "!", "="]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))
        if rng.random() < 0.5:
            text = "start: " + text
        with contextlib.suppress(GrammarError):
            ReferenceRecognizer(parse_lark(text)).is_prefix("x")


def test_case_insensitive_regex_terminal() -> None:
    from formcast.testing.reference import ReferenceRecognizer

    grammar = parse_lark("start: A\nA: /ab/i")
    rec = ReferenceRecognizer(grammar)
    assert all(rec.matches(s) for s in ("ab", "AB", "aB", "Ab"))
    assert not rec.matches("ac")
