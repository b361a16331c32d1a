"""json38 (#31): the candidate sets' shared prefixes measured in the parser module, and a
parser that is no reference cycle.

* ``pda.measure_shares`` (compiled with the parser in the compiled build) completes a sorted
  string list's shared prefixes and cuts its suffixes as ``cfg_program._verify_strings``'s
  second check did in Python: held to a plain oracle (the common prefix of each string and the
  one before it, byte by byte) on random sorted sets of the vocabulary's strings with some shares
  already measured, and on a set's checks through ``_verify_strings`` (kept prefixes: the
  verdicts of the 1st, 2nd and 3rd checks equal the unkept check's).
* ``PushdownAutomaton``'s per-rule list makers are ``functools.partial`` of module functions:
  with the collector off, a parser dropped after use (its per-rule lists made) is freed by
  reference counting alone (a bound method of the parser in its own attribute made it a cycle
  that kept its caches, states and tables alive until a full collection: ttfm37).
"""

from __future__ import annotations

import gc
import json
import random

import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, Vocabulary
from formcast.automata.pda import PushdownAutomaton, measure_shares
from formcast.vocab.loaders import load_vocabulary


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _common(a: bytes, b: bytes) -> int:
    k = 0
    for x, y in zip(a, b):
        if x != y:
            break
        k += 1
    return k


def _oracle(data_of: list[bytes]) -> tuple[list[int], list[bytes]]:
    shared = [0] * min(len(data_of), 1) + [
        _common(data_of[j - 1], data_of[j]) for j in range(1, len(data_of))
    ]
    return shared, [d[k:] for d, k in zip(data_of, shared)]


def test_measure_shares_equals_oracle(vocab: Vocabulary) -> None:
    rng = random.Random(38)
    strings = vocab.trie.strings
    for case in range(300):
        n = rng.choice([0, 1, 2, 5, 40, 300])
        lo = rng.randrange(len(strings))
        # dense runs (long shared prefixes) and scattered picks (short ones)
        span = rng.choice([n + 1, 20 * n + 1, len(strings)])
        pool = range(lo, min(lo + span, len(strings)))
        picks = sorted(rng.sample(list(pool), min(n, len(pool))))
        data_of = [strings[i] for i in picks]
        want_shared, want_suffixes = _oracle(data_of)
        # some shares measured before (a first check writes those of the strings it walks)
        shared = [
            want_shared[j] if j and rng.random() < case % 3 * 0.4 else -1
            for j in range(len(data_of))
        ]
        suffixes = measure_shares(data_of, shared)
        assert shared == want_shared
        assert suffixes == want_suffixes


def test_kept_checks_equal_fresh_checks(vocab: Vocabulary) -> None:
    grammar = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar()
    pda = grammar.program.pda
    rng = random.Random(3)
    strings = vocab.trie.strings
    text = json.dumps({"a": [1, {"b": "c d"}, None], "e": 2.5}, indent=2).encode()
    st = pda.initial
    for b in text[:-3]:
        st = pda.step(st, b)
        picks = sorted(rng.sample(range(len(strings)), 200))
        data_of = [strings[i] for i in picks if strings[i]]
        fresh = cfg_program._verify_strings(pda.step, st, data_of, pda.step_memo, None)
        kept = cfg_program._Prefixes(len(data_of))
        for _ in range(3):  # plain, then measuring the shares, then from the suffixes
            got = cfg_program._verify_strings(pda.step, st, data_of, pda.step_memo, kept)
            assert got == fresh
        assert kept.suffixes == _oracle(data_of)[1]


def test_dropped_parser_is_no_cycle(vocab: Vocabulary) -> None:
    grammar = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar()
    auto = grammar.program.auto
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        pda = PushdownAutomaton(auto)
        st = pda.step_bytes(pda.initial, b'{"a": [1, 2], "b": {"c": null}}')
        assert st.accepting
        # the per-rule lists made
        assert pda._accepting
        assert pda._has_bytes
        assert pda._tail
        del pda, st
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()
