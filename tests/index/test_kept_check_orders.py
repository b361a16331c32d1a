"""Candidate checks keep what they measured of a candidate set for its next check (#31 item 2).

``cfg_program._verify_strings`` resumes each sorted string from the prefix it shares with the
string walked before it.  With a :class:`cfg_program._Prefixes` kept by the caller (a
program's candidate sets by their bytes, a top's loop groups) the first check of a set
records the shared prefixes it measures, the second measures the rest and cuts the suffixes,
and the later ones run on them alone (``_verify_suffixes``: a string sharing the last walk's
dead prefix is rejected by its shared length, no binary search).  Whatever the set's history,
every check must take exactly the steps of the uncached check, in the same order (so the same
verdicts and the same limit error):

* synthetic: random sorted strings over a small alphabet (long runs under shared prefixes,
  strings that are prefixes of others) on a toy step whose dead prefixes (some with an error)
  are random; each set checked four times from several start states, the steps recorded;
* programs: deep random JSON documents (nesting 6-14, random whitespace, indentation) walked
  on the builtin JSON grammar and on a JSON GBNF grammar with the switch on and off, every
  mask equal, and at each state the token-by-token check with one kept cache over the whole
  walk (sets met 1, 2, 3+ times) equal to the uncached one and to ``step_bytes``.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast._native import compiled_modules
from formcast.cache import LruCache
from formcast.vocab.loaders import load_vocabulary

#: the toy parser's states are no ParserState: the compiled functions (formcast.index.cfg_program
#: compiled with mypyc) refuse them, so the toy tests run on the pure package (the programs'
#: tests below run in both builds)
toy_states = pytest.mark.skipif(
    compiled_modules().get("formcast.index.cfg_program", False),
    reason="toy parser states (cfg_program compiled with mypyc checks ParserState)",
)


class _Toy:
    """A toy parser: a state is the bytes read so far; a prefix in ``dead`` kills the walk
    (with an error for those in ``errors``).  Records every step taken."""

    def __init__(self, dead: set[bytes], errors: set[bytes]) -> None:
        self.dead, self.errors = dead, errors
        self.calls: list[tuple[bytes, int]] = []

    def step(self, st: Any, b: int) -> Any:
        self.calls.append((st.data, b))
        nxt = st.data + bytes((b,))
        if nxt in self.dead:
            return _St(nxt, True, "limit" + nxt.hex() if nxt in self.errors else None)
        return _St(nxt, False, None)


class _St:
    __slots__ = ("data", "dead", "error")

    def __init__(self, data: bytes, dead: bool, error: str | None) -> None:
        self.data, self.dead, self.error = data, dead, error


def _strings(rng: random.Random) -> list[bytes]:
    alphabet = b"ab \n}"
    out: set[bytes] = set()
    stems = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(8)]
    for _ in range(rng.randint(1, 120)):
        stem = rng.choice(stems)
        out.add(stem + bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 6))))
    return sorted(out)


@toy_states
@pytest.mark.parametrize("seed", range(60))
def test_kept_prefixes_take_the_uncached_steps(seed: int) -> None:
    rng = random.Random(seed)
    strings = _strings(rng)
    prefixes = sorted({s[:j] for s in strings for j in range(1, len(s) + 1)})
    dead = {p for p in prefixes if rng.random() < rng.choice((0.05, 0.2, 0.5))}
    errors = {p for p in dead if rng.random() < 0.3}
    kept = cfg_program._Prefixes(len(strings))
    for start in [b"", b"", b"a", b" ", b"", b"b"]:  # the set checked again and again
        plain_toy = _Toy({start + p for p in dead}, {start + p for p in errors})
        want = cfg_program._verify_strings(plain_toy.step, _St(start, False, None), strings)
        toy = _Toy(plain_toy.dead, plain_toy.errors)
        got = cfg_program._verify_strings(toy.step, _St(start, False, None), strings, None, kept)
        assert got == want
        assert toy.calls == plain_toy.calls  # the same steps, in the same order
        # the oracle: a string is accepted where none of its prefixes is dead
        assert want[0] == [
            i for i, s in enumerate(strings) if not any(s[:j] in dead for j in range(1, len(s) + 1))
        ]
    assert kept.suffixes is not None  # the later checks ran on the suffixes
    assert kept.shared[1:] == [
        next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        for a, b in itertools.pairwise(strings)
    ]


@toy_states
@pytest.mark.parametrize("strings", [[], [b"a"], [b"", b"a"]])
def test_small_sets_checked_again_and_again(strings: list[bytes]) -> None:
    """An empty candidate set (a grammar's dead end) and one-string sets, checked more than
    twice with kept prefixes: the same verdicts as unkept, and no error (a session-22 merge
    raised IndexError on the empty set's second check)."""
    kept = cfg_program._Prefixes(len(strings))
    toy = _Toy({b"a"}, set())
    for _ in range(4):
        want = cfg_program._verify_strings(toy.step, _St(b"", False, None), strings)
        got = cfg_program._verify_strings(toy.step, _St(b"", False, None), strings, None, kept)
        assert got == want
    assert kept.suffixes is not None
    assert len(kept.suffixes) == len(strings)


def _random_json(rng: random.Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.15:
        return rng.choice(
            [
                None,
                True,
                False,
                rng.randint(-5000, 5000),
                round(rng.random() * 100, 3),
                "x" * rng.randint(0, 5),
            ]
        )
    if rng.random() < 0.5:
        return [_random_json(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {
        f"k{rng.randint(0, 9)}{i}": _random_json(rng, depth - 1) for i in range(rng.randint(0, 3))
    }


def _deep(rng: random.Random) -> str:
    doc: Any = _random_json(rng, 3)
    spine = rng.randint(6, 14)
    for _ in range(spine):  # a deep spine: the stacks of the warm masks
        doc = [doc] if rng.random() < 0.5 else {"a": doc, "b": rng.randint(0, 9)}
    # (indentation within the grammars' 20 whitespace characters a gap)
    indent = rng.choice([None, 0, 1, 2 if spine + 5 <= 10 else 1])
    text = json.dumps(doc, indent=indent)
    return text.replace(", ", rng.choice([", ", ",", ",  "]))


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


def _compile(vocab: Vocabulary, which: str) -> Any:
    compiler = GrammarCompiler(vocab, cache_size=0)
    if which == "builtin":
        return compiler.compile_builtin_json_grammar()
    return compiler.compile_grammar(JSON_GBNF)


def _walk_masks(grammar: Any, docs: list[list[int]]) -> tuple[list[bytes], list[Any]]:
    """Every mask along the documents (one matcher each, on one compile) and the states."""
    masks: list[bytes] = []
    states: list[Any] = []
    for ids in docs:
        m = GrammarMatcher(grammar)
        for tok in [*ids, None]:
            states.append(m.state)
            masks.append(m.next_token_words().tobytes())
            if tok is None:
                break
            assert m.accept_token(tok)
    return masks, states


@pytest.mark.parametrize("which", ["builtin", "gbnf"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masks_with_and_without_kept_orders(
    vocab: Vocabulary, which: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    texts = [_deep(rng) for _ in range(4)]
    if which == "gbnf":  # (the GBNF root is an object)
        texts = [t if t.startswith("{") else '{"r": ' + t + "}" for t in texts]
    docs = [_encode(vocab, t) for t in texts]
    masks = {}
    for on in (True, False):
        monkeypatch.setattr(cfg_program, "_KEEP_ORDERS", on)
        masks[on], states = _walk_masks(_compile(vocab, which), docs)
    assert masks[True] == masks[False]
    # the token-by-token check itself, one kept cache for the whole walk (sets met again)
    grammar = _compile(vocab, which)
    program: Any = grammar.program
    pda, trie = program.pda, vocab.trie
    _, states = _walk_masks(grammar, docs)
    kept: LruCache[bytes, Any] = LruCache(10_000)
    again = 0
    for state in states:
        cands = [program.classify(f.rule, f.state).candidates for f in state.frames]
        cands = [c for c in cands if c.size]
        if not cands:
            continue
        c = np.unique(np.concatenate(cands))
        want, err0 = cfg_program._verify_in_order(pda.step, state, trie, c, pda.step_memo)
        seen = kept.get(c.tobytes())[1]
        again += seen is not None and seen[2].suffixes is not None
        got, err1 = cfg_program._verify_in_order(pda.step, state, trie, c, pda.step_memo, kept)
        assert got.tolist() == want.tolist()
        assert err0 == err1
        oracle = [i for i in c.tolist() if not pda.step_bytes(state, trie.strings[i]).is_dead]
        assert sorted(want.tolist()) == oracle
    assert again > 10  # sets checked from their suffixes (a third check or later)


def _encode(vocab: Vocabulary, text: str) -> list[int]:
    """The document's tokens: a greedy longest match over the vocabulary's strings (of up
    to 8 bytes; any split is a path the grammar accepts)."""
    data = text.encode()
    trie = vocab.trie
    ids: list[int] = []
    at = 0
    by_string = {s: int(trie.first_token[i]) for i, s in enumerate(trie.strings) if len(s) <= 8}
    while at < len(data):
        for n in range(min(8, len(data) - at), 0, -1):
            got = by_string.get(data[at : at + n])
            if got is not None:
                ids.append(got)
                at += n
                break
        else:
            raise AssertionError(f"no token for {data[at : at + 1]!r}")
    return ids
