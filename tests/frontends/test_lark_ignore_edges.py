"""``%ignore`` text before the first and after the last token (#29 item 3).

formcast follows Lark: ignored text may stand anywhere between, before and after the tokens
(``%ignore /[ _]+/`` with ``start: "a" "b"`` accepts ``_ab`` and ``ab_``).  llguidance and
XGrammar skip it only between tokens; the reason for the choice is in docs/grammars.md
(``%ignore``).  Oracle: Lark itself (the ``lark`` package, when installed) on every short string.
"""

from __future__ import annotations

import itertools

import pytest

from formcast.frontends.lark import parse_lark
from formcast.testing.reference import ReferenceRecognizer

GRAMMARS = [
    ('%ignore /[ _]+/\nstart: "a" "b"\n', "ab _"),
    ('%ignore " "\nstart: item*\nitem: "a" | "(" item* ")"\n', "a() "),
    ('%ignore /_+/\n%ignore " "\nstart: "a"? "b"\n', "ab _"),
]


def test_ignored_text_at_both_ends() -> None:
    rec = ReferenceRecognizer(parse_lark(GRAMMARS[0][0]))
    for text in ["ab", "_ab", "ab_", "_a_b_", "  a  b  "]:
        assert rec.matches(text), text
    for text in ["_", "a", "_a_", "abb", "a-b"]:
        assert not rec.matches(text), text


@pytest.mark.parametrize(("grammar", "alphabet"), GRAMMARS)
def test_against_lark(grammar: str, alphabet: str) -> None:
    lark = pytest.importorskip("lark")
    parsers = [lark.Lark(grammar, parser="earley"), lark.Lark(grammar, parser="lalr")]
    rec = ReferenceRecognizer(parse_lark(grammar))
    for n in range(6):
        for text in map("".join, itertools.product(alphabet, repeat=n)):
            for p in parsers:
                try:
                    p.parse(text)
                    theirs = True
                except lark.exceptions.LarkError:
                    theirs = False
                assert rec.matches(text) is theirs, (grammar, text, p.options.parser)
