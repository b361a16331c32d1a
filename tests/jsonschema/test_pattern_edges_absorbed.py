"""A pattern's search-semantics IR drops what the text around a match already covers
(``regexlang._absorb``: ``^[^:]+://[^/]+(:\\d+)?(/.*)?`` without ``$`` is ``^[^:]+://[^/]`` then
anything) — the same language, a much smaller byte automaton once JSON-escaped.

Oracle: the construction without the rewrite (the pattern parsed, anchors resolved for "the
text before/after the match is empty or not", ``Σ+`` around), compared as minimal code-point
automata (equivalent iff both differences are empty), over hand-picked edge shapes and a
deterministic sample of the public pattern corpus (``../shared/data/derived``).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from formcast.automata import charfa
from formcast.errors import FormcastError
from formcast.frontends.jsonschema.regexlang import pattern_node
from formcast.frontends.regex import _has_anchor, _Parser, _resolve_anchors
from formcast.ir.nodes import ANY_CHAR, EMPTY, Node, alt, concat, repeat

CORPUS = Path(__file__).resolve().parents[2].parent / "shared/data/derived/patterns_public.jsonl"
MAX_STATES = 2_000

SHAPES = [
    r"^[^:]+://[^:/]+(:[0-9]+)?(/[^?#/]+)*(\?([^=#&]+=[^=#&]+)(&([^=#&]+=[^=#&]+))*)?(#.+)?",
    r"[a-z]+@[a-z]+",
    r"(ab)*c(de)?",
    r"(a|b?)x(c|d*)",
    r"^a|b$",
    r"^(a+|b)(c{2,5})",
    r"x{3,}y{2,4}",
    r"(^a|b)c(d$|e)?",
    r"((a|bc)+)?d",
    r"^$",
    r"",
    r"a*",
    r"^(?:x+y?)+$",
    r"^a(b|$)",
]


def _reference(pattern: str) -> Node:
    raw = _Parser(pattern, "ecma", __import__("formcast").CompileLimits()).parse()
    star, plus = repeat(ANY_CHAR, 0, None), repeat(ANY_CHAR, 1, None)
    if not _has_anchor(raw):
        return concat([star, raw, star])
    parts: list[Node] = []
    for before in (True, False):
        for after in (True, False):
            core = _resolve_anchors(raw, "yes" if before else "no", "yes" if after else "no", "")
            parts.append(concat([EMPTY if before else plus, core, EMPTY if after else plus]))
    return alt(parts)


def _same(pattern: str) -> bool | None:
    """True/False: the two constructions agree/differ; None: either is refused or too big."""
    try:
        ref = charfa.dfa_from_node(_reference(pattern), MAX_STATES)
        got = charfa.dfa_from_node(pattern_node(pattern), MAX_STATES)
    except FormcastError:
        return None
    return (
        charfa.difference(ref, got, 4 * MAX_STATES).is_empty()
        and charfa.difference(got, ref, 4 * MAX_STATES).is_empty()
    )


@pytest.mark.parametrize("pattern", SHAPES)
def test_shapes(pattern: str) -> None:
    assert _same(pattern) is True


def test_url_prefix_pattern_is_small() -> None:
    d = charfa.dfa_from_node(pattern_node(SHAPES[0]))
    assert d.num_states <= 8


def test_corpus_sample() -> None:
    if not CORPUS.is_file():
        pytest.skip(f"pattern corpus not found at {CORPUS}")
    rows = [json.loads(x) for x in CORPUS.read_text(encoding="utf-8").splitlines() if x]
    patterns = list(dict.fromkeys(r["regex"] for r in rows))
    # a deterministic eighth, without the patterns with word boundaries (their reference
    # construction is refused)
    sample = [p for p in patterns if zlib.crc32(p.encode("utf-8", "surrogatepass")) % 8 == 0]
    compared = 0
    for p in sample:
        got = _same(p)
        assert got is not False, p
        compared += got is True
    assert compared >= len(sample) // 2
