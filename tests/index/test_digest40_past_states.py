"""digest40 (session 26, #31 grammar warm p99): lexer states known past the digest bound,
kept per classifier across regions (``_LazyExitSplitClassifier._past_states``).

A class found past :data:`~formcast.index.cfg_program._SHARED_WALK_STATES` reachable classes
in a *stable* region (its partition converged: classes are futures) has every member state
past the bound in every region; ``_region_digest`` then answers None for a state that is, or
whose row leads to, one of them, without the class walk.  The tests ask every class of every
region in random orders (regions met in different orders) and compare each answer with a
fresh :func:`~formcast.index.cfg_program._quotient_digest` (no kept state), and the masks of
a lazy compile with the kept states against those of one whose kept states are dropped
before every mask.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cp
from formcast import GrammarCompiler, Vocabulary
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


# grammar_bench's json_gbnf shape (llama.cpp's json.gbnf): a value's region per context
# (several of 134 classes, past the bound), and the builtin JSON grammar (one of 140)
JSON_GBNF = (
    'root ::= object\nvalue ::= object | array | string | number | ("true" | "false" | "null") '
    "ws\n"
    'object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws\n'
    'array ::= "[" ws ( value ("," ws value)* )? "]" ws\n'
    'string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\bfnrt] | "u" [0-9a-fA-F]{4}) )* '
    '"\\"" ws\n'
    'number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? '
    "ws\n"
    'ws ::= | " " | "\\n" [ \\t]{0,20}\n'
)
GRAMMARS = ["builtin_json", JSON_GBNF]


# documents (nested values, compact and indented: the second meets value contexts the first
# did not, as grammar_bench's warm run)
DOCS = [
    '{"a": [1, 2.5, {"b": null}], "c": {"d": "x\\n", "e": [true, false]}, "f": -3e5}',
    '{\n  "id": 17,\n  "tags": [\n    "p",\n    {"q": [1, {"r": []}]}\n  ],\n'
    '  "s": {\n    "t": "u",\n    "v": [0.5, -2]\n  }\n}',
]


def _drive(grammar: Any, seed: int) -> list[np.ndarray]:
    """Every document of :data:`DOCS`, fed in random pieces of 1-5 bytes with a mask before
    each piece and after the last; returns the masks."""
    from formcast import GrammarMatcher, allocate_token_bitmask

    rng = np.random.default_rng(seed)
    out = []
    for doc in DOCS:
        data = doc.encode()
        m = GrammarMatcher(grammar)
        at = 0
        while True:
            buf = allocate_token_bitmask(1, grammar.vocab_size)
            m.fill_next_token_bitmask(buf)
            out.append(buf[0].copy())
            if at >= len(data):
                break
            n = int(rng.integers(1, 6))
            assert m.accept_bytes(data[at : at + n])
            at += n
    return out


def _compile(vocab: Vocabulary, src: str) -> Any:
    context_for(vocab).cache(cp.SHARED_WALKS).clear()
    compiler = GrammarCompiler(vocab, cache_size=0)
    with mock.patch.object(cp, "LAZY_INDEX", True):
        if src == "builtin_json":
            return compiler.compile_builtin_json_grammar()
        return compiler.compile_grammar(src)


def _compiled(vocab: Vocabulary, src: str, seed: int) -> Any:
    grammar = _compile(vocab, src)
    _drive(grammar, seed)
    return grammar


@pytest.mark.parametrize("order_seed", [0, 1, 2])
@pytest.mark.parametrize("source", range(len(GRAMMARS)))
def test_region_digests_with_past_states(vocab: Vocabulary, source: int, order_seed: int) -> None:
    grammar = _compiled(vocab, GRAMMARS[source], source)
    clf: Any = grammar.program._positions
    assert isinstance(clf, cp._LazyExitSplitClassifier)
    col_of_byte = clf._cut_columns()[1]
    rng = np.random.default_rng(order_seed)
    # the regions in a random order, every class of each (so regions meet states another
    # region found past: the kept states are what answers them)
    asked = [(rid, q) for rid, r in enumerate(clf._regions) for q in range(1, r[1].size)]
    want: dict[tuple[int, int], bytes | None] = {}
    for rid, q in asked:
        _, _, _, dpart, sub, cut_split, rep = clf._regions[rid]
        want[rid, q] = cp._quotient_digest(
            clf._vocab, clf.exit_byte, dpart, sub, cut_split, q, col_of_byte, rep, {}
        )
    rids = rng.permutation(len(clf._regions)).tolist()
    for rid in rids:
        mine = [at for at in asked if at[0] == rid]
        for i in rng.permutation(len(mine)).tolist():
            at = mine[i]
            assert clf._region_digest(at) == want[at], at
    known = clf._past_states
    assert known, "no lexer state was kept past the bound"
    # every kept state is past the bound wherever a stable region holds it
    for rid, region in enumerate(clf._regions):
        idx = region[1].tolist()
        if region[3] is not region[2]:
            continue
        for q, state in enumerate(idx):
            if q and state in known:
                assert want[rid, q] is None, (rid, q, state)
    if GRAMMARS[source] is JSON_GBNF:
        assert len(clf._regions) > 2  # (several value regions: the kept states are shared)


def test_kept_states_answer_a_later_region_without_its_walk(vocab: Vocabulary) -> None:
    """The check reads the kept set: a state whose digest is not None is answered None once
    the set holds a state its row leads to (what a set recording too much would do: the
    test above then fails), and its digest again once the set is empty."""
    grammar = _compiled(vocab, JSON_GBNF, 0)
    clf: Any = grammar.program._positions
    col_of_byte = clf._cut_columns()[1]
    for rid, (_, idx, _, dpart, sub, cut_split, rep) in enumerate(clf._regions):
        for q in range(2, idx.size):
            targets = sub[q][sub[q] != 0]
            fresh = cp._quotient_digest(
                clf._vocab, clf.exit_byte, dpart, sub, cut_split, q, col_of_byte, rep, {}
            )
            if fresh is None or not targets.size or clf._region_digest((rid, q)) is None:
                continue
            kept = clf._past
            clf._past = {r: set(v) for r, v in (kept or {}).items()}
            clf._past_states = {int(idx[int(targets[0])])}
            assert clf._region_digest((rid, q)) is None
            clf._past, clf._past_states = kept, set()
            assert clf._region_digest((rid, q)) == fresh
            return
    raise AssertionError("no region state with a digest")


@pytest.mark.parametrize("source", range(len(GRAMMARS)))
def test_masks_with_and_without_kept_states(vocab: Vocabulary, source: int) -> None:
    """Differential: the masks of the documents in random pieces with the kept states, and
    on a fresh compile with them dropped before every piece, are equal."""
    src = GRAMMARS[source]
    a = _compile(vocab, src)
    got = _drive(a, 7)
    assert a.program._positions._past_states
    b = _compile(vocab, src)
    clf: Any = b.program._positions
    from formcast import GrammarMatcher, allocate_token_bitmask

    rng = np.random.default_rng(7)
    masks = []
    for doc in DOCS:
        data = doc.encode()
        m = GrammarMatcher(b)
        at = 0
        while True:
            clf._past_states = set()
            buf = allocate_token_bitmask(1, b.vocab_size)
            m.fill_next_token_bitmask(buf)
            masks.append(buf[0].copy())
            if at >= len(data):
                break
            n = int(rng.integers(1, 6))
            assert m.accept_bytes(data[at : at + n])
            at += n
    assert np.array_equal(np.stack(masks), np.stack(got))
