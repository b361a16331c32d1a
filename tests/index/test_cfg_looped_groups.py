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
