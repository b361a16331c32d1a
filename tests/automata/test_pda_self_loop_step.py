"""The parser's lock-free steps answer as the full step does (#31).

``PushdownAutomaton.step`` returns, without the lock or any interning, the dead state where
every top's DFA rejects the byte, and a single-top, non-accepting state itself where the
byte loops on the top's DFA state and the state is that frame's own closure (the rejected
bytes after a return and the string content bytes of a candidate check on a new stack).  The
oracle: the full step (``_step``), which interns, so the very same object must come back,
for every byte from every state a few documents reach (builtin JSON, a JSON GBNF with a
string rule, a grammar whose string is inside a counted rule), before and after a reset of
the parser's caches.
"""

from __future__ import annotations

from typing import Any

import pytest

from formcast import GrammarCompiler, Vocabulary
from formcast.limits import ParserLimits
from formcast.vocab.loaders import load_vocabulary

JSON_DOC = b'{"order": [1, -2.5e3, {"a": "x\\"y z!", "b": null}], "ok": true, "n": "Zo\xc3\xab"}'
GBNF = r"""
root ::= "[" ws ( item ( "," ws item ){0,3} )? "]"
item ::= string | [0-9]+ | root
string ::= "\"" ( [^"\\] | "\\" ["\\n] )* "\""
ws ::= [ \n]*
"""
GBNF_DOC = b'[ "ab c!", 12,["x\\"y"],  "q"]'


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _sig(state: Any) -> tuple[frozenset[tuple[tuple[int, int, int, int], ...]], bool]:
    """A state by value (frames are interned: a reset makes equal ones anew)."""
    stacks = set()
    for f in state.frames:
        chain = []
        while f is not None:
            chain.append((f.rule, f.state, f.need, f.left))
            f = f.parent
        stacks.add(tuple(chain))
    return frozenset(stacks), state.accepting


def _check(pda: Any, doc: bytes) -> int:
    """Every byte from every state along ``doc``; the number of self-loop answers."""
    state = pda.initial
    loops = 0
    for b in doc:
        for x in range(256):
            got = pda.step(state, x)
            want = pda._step(state, x)
            assert got is want or (got.is_dead and want.is_dead and got.error == want.error)
            if got is state:
                loops += 1
        state = pda.step(state, b)
        assert not state.is_dead
    assert state.accepting
    return loops


@pytest.mark.parametrize("which", ["builtin", "gbnf"])
def test_self_loop_steps_are_the_full_steps(vocab: Vocabulary, which: str) -> None:
    compiler = GrammarCompiler(vocab, cache_size=0)
    if which == "builtin":
        grammar, doc = compiler.compile_builtin_json_grammar(), JSON_DOC
    else:
        grammar, doc = compiler.compile_grammar(GBNF), GBNF_DOC
    pda: Any = grammar.program.pda
    assert _check(pda, doc) > 0  # the fast path answered (string content bytes)
    pda._reset_caches()  # old states, frames no longer interned: the full path again
    pda._initial_state = pda._initial()
    assert _check(pda, doc) > 0


def test_small_caches_keep_answers(vocab: Vocabulary) -> None:
    compiler = GrammarCompiler(
        vocab, cache_size=0, parser_limits=ParserLimits(max_cache_entries=60)
    )
    pda: Any = compiler.compile_builtin_json_grammar().program.pda
    state = pda.initial
    for b in JSON_DOC:
        for x in range(256):
            got = pda.step(state, x)
            assert _sig(got) == _sig(pda._step(state, x))
        state = pda.step(state, b)
        assert not state.is_dead
    assert state.accepting
    assert pda.cache_resets > 0
