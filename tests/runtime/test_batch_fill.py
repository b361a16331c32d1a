"""``batch_fill_next_token_bitmask``: many matchers' rows in one call.

The oracle is the per-matcher verb: for random batches -- several grammars (regex, JSON Schema
with a run-time ``uniqueItems`` check, a CFG, two vocabularies of different widths), matchers
at random depths, duplicates (forks in the same state), terminated and limit-stopped matchers,
random index subsets of a larger bitmask full of garbage -- the batch fill leaves the bitmask
exactly as ``fill_next_token_bitmask`` per matcher does (rows nobody names untouched), and its
result agrees with each matcher's own answers.  Torch CPU tensors give the same bits as numpy.
Every caller mistake raises ``ConfigurationError`` before a single word is written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from formcast import (
    BatchFillResult,
    ConfigurationError,
    GrammarCompiler,
    GrammarMatcher,
    Vocabulary,
    allocate_token_bitmask,
    batch_fill_next_token_bitmask,
)
from formcast.limits import ParserLimits

_MULTI = [b'{"', b'":', b'",', b'"}', b"name", b"age", b"tags", b"true", b"null", b"12", b'["']
TOKENS = [bytes([i]) for i in range(32, 127)] + _MULTI
WIDE = Vocabulary.from_tokens([*TOKENS, b"<eos>"], stop_token_ids=[len(TOKENS)], name="wide")
NARROW_TOKENS = [b"a", b"b", b"ab", b"0", b"1", b"-"]
NARROW = Vocabulary.from_tokens(
    [*NARROW_TOKENS, b"<eos>"], stop_token_ids=[len(NARROW_TOKENS)], name="narrow"
)
WORDS = (WIDE.vocab_size + 31) // 32

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer"},
        # the run-time uniqueItems program in a batch (mask == accept after escapes is checked
        # in tests/runtime/test_unique_items_mask_vs_oracle.py)
        "tags": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[a-c]{0,2}$"},
            "uniqueItems": True,
        },
    },
    "required": ["name"],
    "additionalProperties": False,
}
ARITH = 'root ::= expr\nexpr ::= term ("+" term)*\nterm ::= [0-9]+ | "(" expr ")"'


REGEX_WIDE, REGEX_NARROW = r"[a-c]{1,3}(-[0-9]{2})?", r"(ab|a)+-?[01]*"
DOCUMENTS: dict[str, bytes] = {}


@pytest.fixture(scope="module")
def grammars() -> list[Any]:
    wide = GrammarCompiler(WIDE)
    narrow = GrammarCompiler(NARROW)
    out = [
        wide.compile_json_schema(SCHEMA),
        wide.compile_regex(REGEX_WIDE),
        wide.compile_grammar(ARITH),
        narrow.compile_regex(REGEX_NARROW),
    ]
    for compiled, doc in zip(out, [b'{"name":"x","tags":["a","b"]}', b"ab-12", b"(1+2)", b"ab-01"]):
        DOCUMENTS[compiled.source] = doc
    assert out[0].unique_items, "the schema must exercise the run-time uniqueItems check"
    return out


def _walk(compiled: Any, rng: np.random.Generator, steps: int) -> GrammarMatcher:
    """A matcher after up to ``steps`` random allowed tokens (a stop token when drawn)."""
    m = GrammarMatcher(compiled)
    for _ in range(steps):
        ids = m.allowed_token_ids()
        if ids.size == 0 or m.is_terminated():
            break
        assert m.accept_token(int(rng.choice(ids)))
    return m


def _stopped() -> GrammarMatcher:
    """A matcher a run-time parser limit stopped (allows nothing, not terminated)."""
    compiled = GrammarCompiler(WIDE, parser_limits=ParserLimits(max_stack_depth=6))
    m = GrammarMatcher(compiled.compile_builtin_json_grammar())
    while m.accept_bytes(b"["):
        pass
    assert m.stop_reason is not None
    return m


def _pool(grammars: list[Any], rng: np.random.Generator) -> list[GrammarMatcher]:
    pool: list[GrammarMatcher] = []
    for compiled in grammars:
        for _ in range(6):
            m = _walk(compiled, rng, int(rng.integers(0, 12)))
            pool.append(m)
            pool.append(m.fork())  # a duplicate: same grammar, same state
        t = GrammarMatcher(compiled)  # a complete document, then a stop token
        assert t.accept_bytes(DOCUMENTS[compiled.source]), compiled.source
        assert t.accept_token(min(compiled.vocab.stop_token_ids))
        assert t.is_terminated()
        pool.append(t)
        pool.append(GrammarMatcher(compiled))  # the initial state
    pool.append(_stopped())
    # a dead end: the regex needs "x", which no token of the narrow vocabulary spells
    dead = GrammarMatcher(GrammarCompiler(NARROW).compile_regex("ab?-x"))
    assert dead.accept_bytes(b"a-")
    assert dead.allowed_token_ids().size == 0
    assert not dead.is_terminated()
    pool += [dead, dead.fork()]
    return pool


def _garbage(rng: np.random.Generator, rows: int, words: int) -> np.ndarray:
    return rng.integers(-(2**31), 2**31, size=(rows, words), dtype=np.int64).astype(np.int32)


def _expected(matchers: list[GrammarMatcher], start: np.ndarray, rows: list[int]) -> Any:
    bm = start.copy()
    answers = [m.fill_next_token_bitmask(bm, r) for m, r in zip(matchers, rows)]
    return bm, answers


def _check_result(res: BatchFillResult, matchers: list[GrammarMatcher], answers: list[bool]):
    assert res.allowed.tolist() == answers
    assert res.terminated.tolist() == [m.is_terminated() for m in matchers]
    assert res.accepting.tolist() == [m.is_accepting() for m in matchers]
    dead = [i for i, m in enumerate(matchers) if not answers[i] and not m.is_terminated()]
    assert res.dead_ends() == dead


@pytest.mark.parametrize("seed", range(12))
def test_batch_fill_equals_per_matcher_fill(grammars: list[Any], seed: int) -> None:
    rng = np.random.default_rng(seed)
    pool = _pool(grammars, rng)
    for _ in range(6):
        size = int(rng.integers(1, len(pool) + 1))
        picks = rng.choice(len(pool), size=size, replace=bool(rng.random() < 0.5))
        matchers = [pool[int(i)] for i in picks]
        # a repeated pick is the same matcher twice: two rows from one object
        extra_rows, extra_words = int(rng.integers(0, 5)), int(rng.integers(0, 3))
        capacity = size + extra_rows
        start = _garbage(rng, capacity, WORDS + extra_words)
        if rng.random() < 0.5:
            rows = [int(r) for r in rng.permutation(capacity)[:size]]
            indices: Any = rows if rng.random() < 0.5 else np.asarray(rows)
        else:
            rows, indices = list(range(size)), None
        want, answers = _expected(matchers, start, rows)
        got = start.copy()
        res = batch_fill_next_token_bitmask(matchers, got, indices)
        np.testing.assert_array_equal(got, want)
        assert res.rows.tolist() == rows
        _check_result(res, matchers, answers)
        assert 1 <= res.distinct <= size


def test_one_row_per_distinct_state(grammars: list[Any]) -> None:
    rng = np.random.default_rng(7)
    a = _walk(grammars[0], rng, 5)
    b = _walk(grammars[2], rng, 3)
    matchers = [a, a.fork(), b, a.fork(), b.fork(), GrammarMatcher(grammars[0])]
    bm = allocate_token_bitmask(len(matchers), WIDE.vocab_size)
    res = batch_fill_next_token_bitmask(matchers, bm)
    assert res.distinct == 3
    np.testing.assert_array_equal(bm[0], bm[1])
    np.testing.assert_array_equal(bm[0], bm[3])
    np.testing.assert_array_equal(bm[2], bm[4])
    # every terminated matcher shares one all-zero row
    done = [m for m in _pool(grammars, rng) if m.is_terminated()]
    bm = allocate_token_bitmask(len(done), WIDE.vocab_size)
    res = batch_fill_next_token_bitmask(done, bm)
    assert res.distinct == 1
    assert not bm.any()
    assert res.terminated.all()
    assert res.accepting.all()
    assert not res.allowed.any()


def test_torch_cpu_tensor_gets_the_numpy_bits(grammars: list[Any]) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    pool = _pool(grammars, rng)
    start = _garbage(rng, len(pool) + 2, WORDS)
    rows = [int(r) for r in rng.permutation(len(pool) + 2)[: len(pool)]]
    want = start.copy()
    res_np = batch_fill_next_token_bitmask(pool, want, rows)
    tensor = torch.from_numpy(start.copy())
    res_t = batch_fill_next_token_bitmask(pool, tensor, rows)
    np.testing.assert_array_equal(tensor.numpy(), want)
    assert res_t.allowed.tolist() == res_np.allowed.tolist()
    # the allocator's torch tensor, filled in place (no copy: the tensor itself changes)
    alloc = allocate_token_bitmask(len(pool), WIDE.vocab_size, framework="torch")
    assert alloc.dtype == torch.int32
    assert alloc.device.type == "cpu"
    batch_fill_next_token_bitmask(pool, alloc)
    per_row = allocate_token_bitmask(len(pool), WIDE.vocab_size)
    for i, m in enumerate(pool):
        m.fill_next_token_bitmask(per_row, i)
    np.testing.assert_array_equal(alloc.numpy(), per_row)


def test_a_one_dimensional_bitmask_takes_one_matcher(grammars: list[Any]) -> None:
    m = _walk(grammars[1], np.random.default_rng(1), 2)
    row = np.zeros(WORDS, dtype=np.int32)
    res = batch_fill_next_token_bitmask([m], row)
    want = np.zeros(WORDS, dtype=np.int32)
    m.fill_next_token_bitmask(want)
    np.testing.assert_array_equal(row, want)
    assert res.rows.tolist() == [0]
    with pytest.raises(ConfigurationError, match="2 matchers for a bitmask of 1 row"):
        batch_fill_next_token_bitmask([m, m.fork()], row)


def test_no_matchers_writes_nothing() -> None:
    bm = np.full((2, WORDS), 5, dtype=np.int32)
    res = batch_fill_next_token_bitmask([], bm)
    assert (bm == 5).all()
    assert res.distinct == 0
    assert res.rows.size == 0
    assert res.allowed.size == 0


def _bad_calls(grammars: list[Any]) -> list[tuple[str, Any, Any, str]]:
    m = GrammarMatcher(grammars[0])
    n = GrammarMatcher(grammars[3])
    two = [m, n]
    good = np.full((4, WORDS), 7, dtype=np.int32)
    read_only = good.copy()
    read_only.setflags(write=False)
    return [
        ("uint32", two, good.view(np.uint32), "must be int32"),
        ("int64", two, good.astype(np.int64), "must be int32"),
        ("3-D", two, good.reshape(2, 2, WORDS), "int32\\[batch, words\\]"),
        ("narrow", two, good[:, : WORDS - 1], f"needs {WORDS}"),
        ("read-only", two, read_only, "read-only"),
        ("list", two, good.tolist(), "numpy array"),
        ("not a matcher", [m, "x"], good, "matchers\\[1\\] is a str"),
        ("too many", [m] * 5, good, "5 matchers for a bitmask of 4 row"),
    ]


def _bad_indices() -> list[tuple[str, Any, str]]:
    return [
        ("short", [0], "1 indices for 2 matchers"),
        ("long", [0, 1, 2], "3 indices for 2 matchers"),
        ("out of range", [0, 4], "row index 4 is out of range"),
        ("negative", [-1, 0], "row index -1 is out of range"),
        ("repeated", [2, 2], "repeat a bitmask row"),
        ("bool", [True, 0], "must be ints"),
        ("float", [0, 1.0], "must be ints"),
        ("not a sequence", 3, "sequence of ints"),
        ("float array", np.array([0.0, 1.0]), "integer array"),
        ("2-D array", np.array([[0, 1]]), "1-D integer array"),
    ]


def test_bad_arguments_raise_before_anything_is_written(grammars: list[Any]) -> None:
    for what, matchers, bm, message in _bad_calls(grammars):
        before = np.array(bm, copy=True) if isinstance(bm, np.ndarray) else None
        with pytest.raises(ConfigurationError, match=message):
            batch_fill_next_token_bitmask(matchers, bm)
        if before is not None:
            np.testing.assert_array_equal(bm, before, err_msg=what)
    two = [GrammarMatcher(grammars[0]), GrammarMatcher(grammars[3])]
    for what, indices, message in _bad_indices():
        bm = np.full((4, WORDS), 7, dtype=np.int32)
        with pytest.raises(ConfigurationError, match=message):
            batch_fill_next_token_bitmask(two, bm, indices)
        assert (bm == 7).all(), what


def test_torch_bad_tensors_raise_before_anything_is_written(grammars: list[Any]) -> None:
    torch = pytest.importorskip("torch")
    two = [GrammarMatcher(grammars[0]), GrammarMatcher(grammars[1])]
    wrong = torch.full((2, WORDS), 7, dtype=torch.int64)
    with pytest.raises(ConfigurationError, match=r"must be torch\.int32"):
        batch_fill_next_token_bitmask(two, wrong)
    assert (wrong == 7).all()
    # a tensor that is not in CPU memory (the meta device stands in for CUDA here): the error
    # says how to do it (fill a CPU tensor, copy it with non_blocking=True)
    off_cpu = torch.empty((2, WORDS), dtype=torch.int32, device="meta")
    with pytest.raises(ConfigurationError, match="non_blocking=True"):
        batch_fill_next_token_bitmask(two, off_cpu)
    with pytest.raises(ConfigurationError, match="non_blocking=True"):
        two[0].fill_next_token_bitmask(off_cpu, 0)


def test_states_with_one_cached_mask_share_one_row() -> None:
    # a regex program keeps one mask per class of states that no token can tell apart: with
    # tokens of at most two digits, 1, 2 and 3 digits into [0-9]{8} look the same
    vocab = Vocabulary.from_tokens([b"0", b"1", b"12", b"<eos>"], stop_token_ids=[3])
    compiled = GrammarCompiler(vocab).compile_regex("[0-9]{8}")
    matchers = []
    for depth in (1, 2, 3):
        m = GrammarMatcher(compiled)
        assert m.accept_bytes(b"1" * depth)
        matchers.append(m)
    assert len({m.state for m in matchers}) == 3
    bm = allocate_token_bitmask(3, vocab.vocab_size)
    res = batch_fill_next_token_bitmask(matchers, bm)
    assert res.distinct == 1
    assert bm[:, 0].tolist() == [0b111] * 3
