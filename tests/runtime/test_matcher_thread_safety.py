"""One ``CompiledGrammar`` shared by 8 threads, each with its own ``GrammarMatcher``, gives the
same masks as sequential runs of the same (seeded, random) walks.

The compiled grammar's caches (masks per state, classifications per stack top, memoized parser
steps, the process-wide shared walks) fill lazily from whichever thread gets there first; the
threaded run starts from a fresh compile with the process-wide caches emptied, all threads
released at once by a barrier, with a tiny switch interval so they interleave inside the fills.
"""

from __future__ import annotations

import hashlib
import sys
import threading

import numpy as np
import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary, allocate_token_bitmask
from formcast.bitmask import bitmask_to_bool
from formcast.index import cfg_program
from formcast.index.compiled import CompiledGrammar
from formcast.index.context import context_for

THREADS = 8
WALKS_PER_THREAD = 2
STEPS = 40

_MULTI = [
    b'{"',
    b'":',
    b'",',
    b'"}',
    b"name",
    b'"name"',
    b"age",
    b"tags",
    b"true",
    b"false",
    b"null",
    b"12",
    b"0.",
    b"e+",
    b', "',
    b'["',
    b'"]',
    b"  ",
    b"\\u",
    b'\\"',
    b"(",
    b"((",
    b"))",
    b"+1",
    b"*(",
    b"x+",
    b" + ",
    b"\xc3",
    b"\xa9",
    b"\xc3\xa9",
    b"\xe2\x82",
    b"\xac",
]
TOKENS = [bytes([i]) for i in range(32, 127)] + [b"\n", b"\t"] + _MULTI
VOCAB = Vocabulary.from_tokens([*TOKENS, b"<eos>"], stop_token_ids=[len(TOKENS)], name="threads")

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["a", "é", "x y"]}, "maxItems": 3},
        "child": {"$ref": "#"},
    },
    "required": ["name"],
    "additionalProperties": False,
}
ARITH = r"""
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "x" | "(" expr ")" | "-" factor
"""


def compile_fresh(kind: str) -> CompiledGrammar:
    for slot in (
        cfg_program.SHARED_WALKS,
        cfg_program.COUNTED_CLASSES,
        cfg_program.COUNTED_WINDOWS,
    ):
        context_for(VOCAB).cache(slot).clear()
    compiler = GrammarCompiler(VOCAB, cache_size=0)
    if kind == "json_schema":
        return compiler.compile_json_schema(SCHEMA)
    return compiler.compile_grammar(ARITH)


def walk(compiled: CompiledGrammar, seed: int) -> list[str]:
    """Digests of the mask at every step of a seeded random walk (with rollbacks and forks)."""
    rng = np.random.default_rng(seed)
    m = GrammarMatcher(compiled)
    bm = allocate_token_bitmask(1, VOCAB.vocab_size)
    out: list[str] = []
    for _ in range(STEPS):
        ok = m.fill_next_token_bitmask(bm)
        out.append(hashlib.sha256(bm.tobytes()).hexdigest()[:16])
        if not ok or m.is_terminated():
            break
        ids = np.flatnonzero(bitmask_to_bool(bm[0], VOCAB.vocab_size))
        # prefer text tokens so walks get deep; the stop token ends the walk when drawn
        tok = int(rng.choice(ids))
        assert m.is_token_allowed(tok)
        assert m.accept_token(tok), (seed, m.accepted_bytes(), tok)
        if rng.random() < 0.1 and m.num_accepted_tokens >= 2:
            m.rollback(2)
            out.append(f"rollback:{m.accepted_bytes()!r}")
        if rng.random() < 0.1:
            m = m.fork()
    out.append(repr(m.accepted_bytes()))
    return out


@pytest.mark.parametrize("kind", ["json_schema", "gbnf"])
def test_shared_compiled_grammar_in_8_threads_matches_sequential(kind: str) -> None:
    seeds = [[1000 * t + w for w in range(WALKS_PER_THREAD)] for t in range(THREADS)]
    sequential_grammar = compile_fresh(kind)
    expected = {s: walk(sequential_grammar, s) for row in seeds for s in row}
    assert sum(len(v) for v in expected.values()) > THREADS * WALKS_PER_THREAD * 10

    shared = compile_fresh(kind)
    got: dict[int, list[str]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def run(row: list[int]) -> None:
        try:
            barrier.wait()
            for s in row:
                got[s] = walk(shared, s)
        except BaseException as exc:  # reported below, with the thread's traceback
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(row,)) for row in seeds]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    if errors:
        raise errors[0]
    assert got == expected
    # and the shared grammar is still right afterwards, sequentially
    assert walk(shared, 7) == walk(sequential_grammar, 7)
