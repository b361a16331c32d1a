"""Lark ``[lazy]`` lexemes (#29 item 1): a lazy lexeme ends at its first possible end and cuts the
lexemes allowed at the same position, as llguidance's lexer does
(:mod:`formcast.frontends.lark_lazy`).

Oracles: the issue's cases with llguidance's verdicts written out; a brute-force check of the
shortest-match automaton; llguidance itself on seeded random grammars and every short string
(skipped when llguidance is not installed); the compiled matcher on a byte vocabulary.
"""

from __future__ import annotations

import itertools
import os
import random

import pytest

from formcast import GrammarCompiler, GrammarMatcher
from formcast.automata import charfa
from formcast.errors import GrammarSyntaxError, UnsupportedFeatureError
from formcast.frontends import lark_lazy
from formcast.frontends.lark import parse_lark
from formcast.frontends.regex import parse_regex
from formcast.testing.reference import ReferenceRecognizer
from formcast.vocab.vocabulary import Vocabulary

TOOL_CALL = (
    "start: tool* tail\n"
    "tail: TEXT\n"
    "head[lazy]: /(\\n|.)*<call>/\n"
    'tool: head /[0-9]+/ "</call>"\n'
    "TEXT: /(\\n|.)*/\n"
)
LLGUIDANCE_DOC = (  # llguidance docs/syntax.md "Tool calling", %json replaced by a regex
    "start: ( f_foo | f_bar )* f_end\n"
    "f_end: TEXT\n"
    "TEXT: /(.|\\n)*/\n"
    'f_foo_hd[lazy]: TEXT "<function"\n'
    'f_foo: f_foo_hd "=foo>" /[a-z]+/ "</function>"\n'
    'f_bar_hd[lazy]: TEXT "<function"\n'
    'f_bar: f_bar_hd "=bar>" /[0-9]+/ "</function>"\n'
)

# (grammar, text, llguidance 1.9's verdict)
CASES = [
    ('start: "<" r ">"\nr[lazy]: /[a-z]+/\n', "<a>", True),
    ('start: "<" r ">"\nr[lazy]: /[a-z]+/\n', "<ab>", False),
    ('start: "<" r ">"\nr[lazy]: "ab" | "abc"\n', "<ab>", True),
    ('start: "<" r ">"\nr[lazy]: "ab" | "abc"\n', "<abc>", False),
    (TOOL_CALL, "<call>x</call>", False),
    (TOOL_CALL, "x<call>", False),
    (TOOL_CALL, "<call>12</call>", True),
    (TOOL_CALL, "hello", True),
    (TOOL_CALL, "hello <call>1</call>tail", True),
    (TOOL_CALL, "a<call>1</call>b<call>2</call>", True),
    (TOOL_CALL, "a<call>1</call>b<call>", False),
    # a greedy lexeme allowed with a lazy one dies where the lazy one matches
    ('start: "<" r ">" | "<" W ">>"\nr[lazy]: /[a-z]+/\nW: /[a-z]+/\n', "<ab>>", False),
    ('start: "<" r ">" | "<" W ">>"\nr[lazy]: /[a-z]+/\nW: /[a-z]+/\n', "<a>", True),
    # ... and lives where the lazy one cannot match
    ('start: a | b\na: X Y\nb: X h\nX: "x"\nY: /[a-z]+/\nh[lazy]: /[a-z]+!/\n', "xab", True),
    ('start: a | b\na: X Y\nb: X h\nX: "x"\nY: /[a-z]+/\nh[lazy]: /[a-z]+!/\n', "xa!", True),
    # a lazy lexeme matching the empty string: empty, or ended by its first character
    ('start: r "x" | "y"\nr[lazy]: /a*/\n', "x", True),
    ('start: r "x" | "y"\nr[lazy]: /a*/\n', "ax", True),
    ('start: r "x" | "y"\nr[lazy]: /a*/\n', "aax", False),
    (LLGUIDANCE_DOC, "hi <function=foo>abc</function> there", True),
    (LLGUIDANCE_DOC, "hi <function=bar>12</function>", True),
    (LLGUIDANCE_DOC, "x <function=baz>", False),
    (LLGUIDANCE_DOC, "<function=bar>ab</function>", False),
    (LLGUIDANCE_DOC, "a<functio", True),
    # a lazy terminal as the whole grammar
    ("start[lazy]: /[a-z]+/\n", "a", True),
    ("start[lazy]: /[a-z]+/\n", "ab", False),
    # laziness inside a terminal that names a lazy terminal is only its language (Lark)
    ('start: "<" R ">"\nR: L "!"\nL[lazy]: /[a-z]+/\n', "<ab!>", True),
]


@pytest.mark.parametrize(("grammar", "text", "expected"), CASES)
def test_lazy_cases_match_llguidance(grammar: str, text: str, expected: bool) -> None:
    assert ReferenceRecognizer(parse_lark(grammar)).matches(text) is expected


def test_lazy_was_ignored_before() -> None:
    """The rewrite is what rejects ``<ab>``: the same grammar without it accepts it."""
    g = parse_lark('start: "<" r ">"\nr: /[a-z]+/\n')
    assert ReferenceRecognizer(g).matches("<ab>")


def byte_vocab() -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>", b"<call>", b"</call>", b"ll>"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[256], name="bytes+")


@pytest.mark.parametrize("tiny", [False, True])
def test_compiled_matcher_and_mask(tiny: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the compiler: accept/reject and the mask at every byte; ``tiny`` forces the
    right-linear rules the rewrite falls back on for large cut terminals."""
    if tiny:
        monkeypatch.setattr(lark_lazy, "_MAX_EXPRESSION", 1)
    vocab = byte_vocab()
    compiled = GrammarCompiler(vocab).compile_grammar(TOOL_CALL, syntax="lark")
    for grammar, text, expected in CASES:
        if grammar != TOOL_CALL:
            continue
        m = GrammarMatcher(compiled)
        assert (m.accept_bytes(text.encode()) and m.is_accepting()) is expected, text
    rec = ReferenceRecognizer(parse_lark(TOOL_CALL))
    m = GrammarMatcher(compiled)
    text = "a<call>1</call>b<cal"
    for i, ch in enumerate(text):
        allowed = set(m.allowed_token_ids().tolist())
        for tok in (ord("<"), ord("x"), ord("1"), 257, 258, 259):
            want = rec.is_prefix(text[:i] + vocab.tokens[tok].decode())
            assert (tok in allowed) is want, (text[:i], vocab.tokens[tok])
        assert m.accept_bytes(ch.encode())


def test_shortest_match_dfa_brute_force() -> None:
    rng = random.Random(7)
    for _ in range(60):
        pattern = _random_regex(rng)
        d = charfa.dfa_from_node(parse_regex(pattern))
        s = lark_lazy.shortest_match_dfa(d)
        for n in range(7):
            for w in map("".join, itertools.product("ab", repeat=n)):
                want = d.matches(w) and not any(d.matches(w[:i]) for i in range(1, len(w)))
                assert s.matches(w) is want, (pattern, w)


def test_known_over_approximation() -> None:
    """Lexemes look allowed together when they follow the same terminal anywhere: here ``W``
    (after ``"a" "x"``) is cut by ``h`` (after ``"b" "x"``) although llguidance, which knows
    the parse, allows ``axab!c``.  Stricter, never looser (docs/grammars.md)."""
    g = 'start: "a" "x" W | "b" "x" h\nW: /[a-z!]+/\nh[lazy]: /[a-z]+!/\n'
    rec = ReferenceRecognizer(parse_lark(g))
    assert not rec.matches("axab!c")
    assert rec.matches("axab")
    assert rec.matches("bxab!")


# -- llguidance as a differential oracle ----------------------------------------------------------
def _random_regex(rng: random.Random, depth: int = 0) -> str:
    k = rng.randrange(6 if depth < 3 else 2)
    if k == 0:
        return rng.choice("ab")
    if k == 1:
        return "[ab]" if rng.random() < 0.3 else rng.choice("ab")
    if k == 2:
        return _random_regex(rng, depth + 1) + _random_regex(rng, depth + 1)
    if k == 3:
        return f"({_random_regex(rng, depth + 1)}|{_random_regex(rng, depth + 1)})"
    if k == 4:
        return f"({_random_regex(rng, depth + 1)}){rng.choice('*+?')}"
    return "".join(_random_regex(rng, depth + 1) for _ in range(3))


def _random_grammar(rng: random.Random) -> tuple[str, str]:
    """A grammar with lazy lexemes and the alphabet of its test strings.  Greedy lexemes are
    followed only by text they cannot contain: llguidance's maximal munch, which formcast does
    not apply (every split is in its language), plays no part."""
    a, b = _random_regex(rng), _random_regex(rng)
    shapes = [
        (f'start: "<" x ">"\nx[lazy]: /{a}/\n', "<>ab"),
        (f'start: "<" x ">" | "<" W ">>"\nx[lazy]: /{a}/\nW: /{b}/\n', "<>ab"),
        (f'start: (x ";")* TEXT\nx[lazy]: /{a}/\nTEXT: /[ab;]*/\n', "ab;"),
        (f'start: "<" (x | y) ">"\nx[lazy]: /{a}/\ny[lazy]: /{b}/\n', "<>ab"),
        (f'start: tool* TEXT\nhead[lazy]: /[ab]*{a}/\ntool: head "0" ";"\nTEXT: /[ab]*/\n', "ab0;"),
        (f'start: "<" x "!" | "<" W "?"\nx[lazy]: /{a}/\nW: /{b}/\n', "<!?ab"),
        (f'start: p x ">" | q W ">"\np: "<"\nq: "<"\nx[lazy]: /{a}/\nW: /{b}/\n', "<>ab"),
        (f'start: item+\nitem: "<" x ">" | "[" W "]"\nx[lazy]: /{a}/\nW: /{b}/\n', "<>[]ab"),
    ]
    return shapes[rng.randrange(len(shapes))]


def test_random_grammars_against_llguidance() -> None:
    llguidance = pytest.importorskip("llguidance")

    class _Bytes:  # a tokenizer of the 256 bytes and an end-of-sequence token
        tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        eos_token_id, bos_token_id, special_token_ids = 256, None, [256]

        def __call__(self, s: str | bytes) -> list[int]:
            return list(s.encode() if isinstance(s, str) else s)

    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()), slices=[])
    rng = random.Random(29)
    checked = 0
    for _ in range(int(os.environ.get("FORMCAST_ORACLE_EXAMPLES", "20"))):
        grammar, alphabet = _random_grammar(rng)
        m0 = llguidance.LLMatcher(tok, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)
        assert not m0.is_error(), m0.get_error()
        rec = ReferenceRecognizer(parse_lark(grammar))
        for n in range(6):
            words = list(map("".join, itertools.product(alphabet, repeat=n)))
            for text in rng.sample(words, min(len(words), 150)):
                m = m0.deep_copy()
                theirs = all(m.consume_token(x) for x in text.encode()) and m.is_accepting()
                assert rec.matches(text) is theirs, (grammar, text, theirs)
                checked += 1
    assert checked > 2_000


# -- every option the reader accepts works or is refused by name (#29 item 1 audit) ---------------
@pytest.mark.parametrize(
    ("grammar", "feature"),
    [
        ("start: r\nr[max_tokens=3]: /[a-z]+/\n", "lexeme option 'max_tokens'"),
        ("start: r\nr[temperature=0.5]: /[a-z]+/\n", "lexeme option 'temperature'"),
        ('start: r\nr[stop=""]: /[a-z]+/\n', "lexeme option 'stop'"),
        ('start: r\nr[suffix="x"]: /[a-z]+/\n', "lexeme option 'suffix'"),
        ('start: r\nr[stop_capture="x"]: /[a-z]+/\n', "lexeme option 'stop_capture'"),
        ('%llguidance {"skip_repetition": "once"}\nstart: "a"\n', "%llguidance option"),
        ('%llguidance {"allow_invalid_utf8": true}\nstart: "a"\n', "%llguidance option"),
        ("start: /a/x\n", "verbose flag"),
        ("start: <|eot|>\n", "special token"),
        ("start: @sub\n", "grammar reference"),
        ('start: %json {"type": "string"}\n', "%json"),
        ("%declare A\nstart: A\n", "%declare"),
    ],
)
def test_options_refused_by_name(grammar: str, feature: str) -> None:
    with pytest.raises(UnsupportedFeatureError) as e:
        parse_lark(grammar)
    assert feature in e.value.feature


@pytest.mark.parametrize(
    "grammar",
    [
        "start: r\nr[lazy=false]: /[a-z]+/\n",  # llguidance: "Expected token ']'"
        'start: r\nr[lazy="x"]: /[a-z]+/\n',
        "start: r\nr[capture=3]: /[a-z]+/\n",
        "start: /a/l\n",  # llguidance: "l-flag is not supported"
    ],
)
def test_malformed_options_are_syntax_errors(grammar: str) -> None:
    with pytest.raises(GrammarSyntaxError):
        parse_lark(grammar)


def test_accepted_options_keep_the_language() -> None:
    """``capture``, ``-> alias``, ``?``/``!`` and priorities do not change what matches (captures
    and trees are not formcast's output; priorities steer Lark's choices, not its language)."""
    plain = ReferenceRecognizer(parse_lark('start: "<" r ">"\nr: R\nR: /[a-z]+/\n'))
    for g in [
        'start: "<" r ">"\nr[capture]: R\nR: /[a-z]+/\n',
        'start: "<" r ">"\nr[capture="x"]: R\nR: /[a-z]+/\n',
        '?start: "<" r ">" -> x\n!r: R\nR.2: /[a-z]+/\n',
    ]:
        rec = ReferenceRecognizer(parse_lark(g))
        for text in ["<a>", "<ab>", "<>", "ab", "<a1>"]:
            assert rec.matches(text) is plain.matches(text), (g, text)
