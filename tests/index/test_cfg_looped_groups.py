"""A single top's candidates grouped by their bytes after its DFA self-loop give the masks
of the plain candidate check (#31).

``CfgProgram._looped_groups``: where the state is one stack top's own closure, a candidate's
verdict is that of its bytes after its leading looping bytes (a string's content before
``",``), so each distinct rest is checked once.  The oracle: the same program with the groups
turned off (``_verify_in_order`` per candidate), on every state a few documents reach and on
new stacks (the string top under parents it has not met), for the builtin JSON grammar and a
JSON GBNF; plus the groups are really used.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from formcast import GrammarCompiler, Vocabulary
from formcast.vocab.loaders import load_vocabulary

DOCS = [
    b'{"order": [1, -2.5e3, {"a": "x\\"y z!", "b": null}], "ok": true, "n": "Zo\xc3\xab"}',
    b'[\n  {"k": "v, w", "l": ["a]", "b}"]},\n  "end"\n]',
]
GBNF = r"""
root ::= value
value ::= object | array | string | number | ("true" | "null") ws
number ::= "-"? [0-9]+ ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}" ws
array ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\] | "\\" ["\\n] )* "\"" ws
ws ::= [ \n]*
"""


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _compile(vocab: Vocabulary, which: str) -> Any:
    compiler = GrammarCompiler(vocab, cache_size=0)
    if which == "builtin":
        return compiler.compile_builtin_json_grammar().program
    return compiler.compile_grammar(GBNF).program


def _deeper(pda: Any, state: Any, times: int) -> Any:
    """``state``'s single stack repeated ``times`` times (new frames: a stack never met)."""
    (top,) = state.frames
    chain = []
    f = top
    while f is not None:
        chain.append(f)
        f = f.parent
    par = None
    for _ in range(times):
        for fr in reversed(chain):
            par = pda.frame(fr.rule, fr.state, par, fr.need, fr.left)
    return pda.state_of(frozenset([par]), state.accepting)


@pytest.mark.parametrize("which", ["builtin", "gbnf"])
def test_groups_give_the_plain_masks(vocab: Vocabulary, which: str) -> None:
    grouped, plain = _compile(vocab, which), _compile(vocab, which)
    plain._looped_groups = lambda *a: None
    used = 0
    real = grouped._looped_groups

    def counting(*a: Any) -> Any:
        nonlocal used
        got = real(*a)
        used += got is not None
        return got

    grouped._looped_groups = counting
    for doc in DOCS:
        sa, sb = grouped.pda.initial, plain.pda.initial
        for b in doc:
            assert np.array_equal(grouped._compute_mask(sa), plain._compute_mask(sb))
            if len(sa.frames) == 1 and not sa.accepting:
                for times in (2, 3):
                    na, nb = _deeper(grouped.pda, sa, times), _deeper(plain.pda, sb, times)
                    assert np.array_equal(grouped._compute_mask(na), plain._compute_mask(nb))
            sa, sb = grouped.pda.step(sa, b), plain.pda.step(sb, b)
            assert not sa.is_dead
        assert sa.accepting
    assert used > 0


#: a schema whose parser states are often several stacks at one lexer position (MaskBench
#: Github_easy---o2231, verbatim: overlapping oneOfs of open objects; its ``"#ref"`` is an
#: unknown keyword, so those branches accept every value), where grouping must step aside
TREE = {
    "$ref": "#/definitions/One",
    "definitions": {
        "Item": {"properties": {"name": {"type": "string"}, "value": {"type": "integer"}}},
        "Three": {
            "properties": {"items": {"type": "array", "items": {"$ref": "#/definitions/Item"}}}
        },
        "Two": {
            "oneOf": [
                {
                    "properties": {
                        "threes": {"type": "array", "items": {"$ref": "#/definitions/Three"}}
                    }
                },
                {"#ref": "#/definitions/Three"},
            ]
        },
        "One": {
            "oneOf": [
                {"properties": {"twos": {"type": "array", "items": {"$ref": "#/definitions/Two"}}}},
                {"#ref": "#/definitions/Two"},
            ]
        },
    },
}
TREE_DOC = (
    b'{"twos":[{"threes":[{"items":[{"name":"Item 1","value":10},{"name":"Item 2","value":20}]},'
    b'{"items":[{"name":"Item 3","value":30}]}]},{"items":[{"name":"Item 5","value":50}]}]}'
)


def test_groups_step_aside_for_several_stacks(vocab: Vocabulary) -> None:
    """States of several stacks at one lexer position (not one top's closure) are checked
    plainly: the same masks as without groups, and no error (a mask never raises)."""
    grouped = GrammarCompiler(vocab, cache_size=0).compile_json_schema(TREE).program
    plain = GrammarCompiler(vocab, cache_size=0).compile_json_schema(TREE).program
    plain._looped_groups = lambda *a: None
    several = 0
    for _ in range(2):  # (the second pass meets every top again: groups are made then)
        sa, sb = grouped.pda.initial, plain.pda.initial
        for b in TREE_DOC:
            several += len(sa.frames) > 1
            assert np.array_equal(grouped._compute_mask(sa), plain._compute_mask(sb))
            sa, sb = grouped.pda.step(sa, b), plain.pda.step(sb, b)
            assert not sa.is_dead
        assert sa.accepting
    assert several > 0
