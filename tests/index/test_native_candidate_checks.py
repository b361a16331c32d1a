"""The candidate checks' loops in the parser (#31, json37): ``PushdownAutomaton.check_strings``
and ``check_suffixes`` (compiled with the parser in the compiled build) against their Python
originals in ``cfg_program`` (``_check_strings``, ``_verify_suffixes`` without a memo).

``cfg_program._verify_strings`` and ``_verify_suffixes`` hand a check to the parser where the
step is a ``PushdownAutomaton``'s ``step`` (or ``step_capped``) with its step memo
(``_native_checks``); the parser's loops must give the same verdicts, the same limit error and
write the same shared prefixes as the Python loops (which other tests hold to the
token-by-token oracle), from any state:

* the builtin JSON grammar and a JSON GBNF: states along random documents (whitespace runs,
  nesting), each checked on a random sorted set of the trie's strings (those starting with a
  byte the state allows, and any others: runs under dead prefixes), fresh and with the shares
  kept (a set's strings resumed from shares measured before, then from its suffixes);
* a schema with a long counted string (``step_capped`` from capped states);
* a parser with a small stack-depth limit (dead steps carrying an error).
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, Vocabulary
from formcast.automata.pda import ParserState, PushdownAutomaton
from formcast.limits import ParserLimits
from formcast.vocab.loaders import load_vocabulary

JSON_GBNF = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= [ \t\n]{0,20}
"""


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _doc(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth <= 0 or r < 0.3:
        return rng.choice([1, -2.5, "ab c", True, None, 1234567, "x\u00e9"])
    if r < 0.65:
        return [_doc(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": _doc(rng, depth - 1) for i in range(rng.randint(0, 3))}


def _text(rng: random.Random) -> bytes:
    doc = {"r": _doc(rng, 4)}
    return json.dumps(doc, indent=rng.choice([None, 1, 2])).encode()


def _states(pda: PushdownAutomaton, data: bytes, every: int = 1) -> list[ParserState]:
    out: list[ParserState] = []
    st = pda.initial
    for j, b in enumerate(data):
        if j % every == 0:
            out.append(st)
        st = pda.step(st, b)
        assert not st.dead
    out.append(st)
    return out


def _sample(
    rng: random.Random, pda: PushdownAutomaton, st: ParserState, strings: Any
) -> list[bytes]:
    allowed = set(pda.next_bytes(st).tolist())
    live = [s for s in strings if s and s[0] in allowed]
    picked = rng.sample(live, min(len(live), 250)) + rng.sample(strings, 60)
    return sorted(set(picked))


def _compare(pda: PushdownAutomaton, st: ParserState, data_of: list[bytes], capped: bool) -> None:
    step = pda.step_capped if capped else pda.step
    # fresh: no shares known
    want = cfg_program._check_strings(step, st, data_of, None, None)
    assert pda.check_strings(st, data_of, None, capped) == want
    # shares measured by the check, written in place (as kept by _Prefixes)
    sh_py, sh_nat = [-1] * len(data_of), [-1] * len(data_of)
    assert cfg_program._check_strings(step, st, data_of, None, sh_py) == want
    assert pda.check_strings(st, data_of, sh_nat, capped) == want
    assert sh_nat == sh_py
    # then from the shares (all measured) and from the suffixes
    full = [0] * len(data_of)
    for j in range(1, len(data_of)):
        a, b = data_of[j], data_of[j - 1]
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        full[j] = k
    assert pda.check_strings(st, data_of, list(full), capped) == want
    suffixes = [d[k:] for d, k in zip(data_of, full)]
    assert cfg_program._verify_suffixes(step, st, full, suffixes, None) == want
    assert pda.check_suffixes(st, full, suffixes, capped) == want
    # the dispatch of cfg_program's entry points
    assert cfg_program._verify_strings(step, st, data_of, pda.step_memo) == want


@pytest.mark.parametrize("which", ["builtin", "gbnf"])
def test_parser_checks_equal_python_checks(vocab: Vocabulary, which: str) -> None:
    compiler = GrammarCompiler(vocab, cache_size=0)
    grammar = (
        compiler.compile_builtin_json_grammar()
        if which == "builtin"
        else compiler.compile_grammar(JSON_GBNF)
    )
    pda = grammar.program.pda
    strings = list(vocab.trie.strings)
    rng = random.Random(7)
    alive = 0
    for _ in range(3):
        for st in _states(pda, _text(rng), every=3):
            data_of = _sample(rng, pda, st, strings)
            _compare(pda, st, data_of, False)
            alive += len(pda.check_strings(st, data_of, None, False)[0])
    assert alive > 500


def test_parser_checks_capped_steps(vocab: Vocabulary) -> None:
    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "maxLength": 600}, "n": {"type": "integer"}},
        "required": ["s", "n"],
    }
    grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(json.dumps(schema))
    program = grammar.program
    assert program._counted.rules
    pda = program.pda
    strings = list(vocab.trie.strings)
    rng = random.Random(3)
    text = b'{"s":"' + b"abc def " * 40 + b'","n":12}'
    far = 0
    for st in _states(pda, text, every=7):
        far += st.far
        capped = pda.capped(st, program._cap)
        _compare(pda, capped, _sample(rng, pda, capped, strings), True)
    assert far  # (the long string's states are far: their steps are capped)


def test_parser_checks_limit_errors(vocab: Vocabulary) -> None:
    grammar = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar()
    pda = PushdownAutomaton(grammar.program.auto, ParserLimits(max_stack_depth=6))
    strings = sorted({b"[[[[", b"[[[", b"[[", b"[", b"[1", b"[]", b" [[", b"{}", b"[[]]", b"1"})
    strings += sorted(s for s in vocab.trie.strings if s[:1] in (b"[", b"{"))[:200]
    data_of = sorted(set(strings))
    errors = 0
    for st in _states(pda, b"[[[ [", every=1):
        ok, err = pda.check_strings(st, data_of, None, False)
        assert (ok, err) == cfg_program._check_strings(pda.step, st, data_of, None, None)
        errors += err is not None
        _compare(pda, st, data_of, False)
    assert errors


def test_native_checks_dispatch(vocab: Vocabulary) -> None:
    grammar = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar()
    pda = grammar.program.pda
    assert cfg_program._native_checks(pda.step, pda.step_memo) == (pda, False)
    assert cfg_program._native_checks(pda.step_capped, pda.step_memo) == (pda, True)
    assert cfg_program._native_checks(pda.step, None) is None
    assert cfg_program._native_checks(lambda s, b: s, pda.step_memo) is None
    other = PushdownAutomaton(grammar.program.auto)
    assert cfg_program._native_checks(pda.step, other.step_memo) is None
    # an empty set
    assert pda.check_strings(pda.initial, [], [], False) == ([], None)
    assert pda.check_suffixes(pda.initial, [], [], False) == ([], None)
    assert np.asarray([], dtype=np.int64).size == 0


def test_sorted_union_is_numpy_unique() -> None:
    rng = np.random.default_rng(5)
    for trial in range(300):
        parts = [
            rng.integers(0, 1 + trial * 50, size=int(rng.integers(0, 40)), dtype=np.int64)
            for _ in range(int(rng.integers(1, 5)))
        ]
        got = cfg_program._sorted_union(parts)
        want = np.unique(np.concatenate(parts))
        assert got.dtype == want.dtype
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("which", ["builtin", "gbnf"])
def test_masks_with_and_without_parser_checks(
    vocab: Vocabulary, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from formcast import GrammarMatcher

    rng = random.Random(11)
    texts = [_text(rng) for _ in range(8)]
    trie = vocab.trie
    by_string = {s: int(trie.first_token[i]) for i, s in enumerate(trie.strings) if len(s) <= 6}
    docs = []
    for data in texts:  # greedy longest match over short strings (any split is valid)
        ids, at = [], 0
        while at < len(data):
            n = next(
                n for n in range(min(6, len(data) - at), 0, -1) if data[at : at + n] in by_string
            )
            ids.append(by_string[data[at : at + n]])
            at += n
        docs.append(ids)
    masks: dict[bool, list[bytes]] = {}
    for on in (True, False):
        monkeypatch.setattr(cfg_program, "_NATIVE_CHECKS", on)
        compiler = GrammarCompiler(vocab, cache_size=0)
        grammar = (
            compiler.compile_builtin_json_grammar()
            if which == "builtin"
            else compiler.compile_grammar(JSON_GBNF)
        )
        masks[on] = []
        for ids in docs:
            m = GrammarMatcher(grammar)
            for tok in [*ids, None]:
                masks[on].append(m.next_token_words().tobytes())
                if tok is None:
                    break
                assert m.accept_token(tok)
    assert masks[True] == masks[False]
    assert len(masks[True]) > 150
