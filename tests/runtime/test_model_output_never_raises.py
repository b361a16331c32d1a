"""Run-time calls on model output never raise and never corrupt state; caller mistakes are
``ConfigurationError`` before anything is written.

* ids that are not tokens (``-1``, ``>= vocab_size``, ``True``, floats, ``None``, strings) are
  refused alike by ``accept_token`` and ``is_token_allowed``; numpy integers are ids;
* a stop token mid-document is refused; ``accept_tokens`` / ``validate_tokens`` leave the state
  as it was when their iterator raises;
* a bitmask of the wrong dtype (int8, bool, uint32, int64) or shape, a bad row index, logits of
  the wrong dtype/shape: ``ConfigurationError``, and the arrays are left untouched;
* ``rollback(n)`` with ``n < 0``, ``n >`` what can be undone or a non-int: ``ConfigurationError``,
  state unchanged;
* ``max_rollback_tokens`` keeps a step O(1): no step copies the text accepted so far.

Every case runs on a regular (one-DFA) program and on a pushdown (CFG) program.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest

from formcast import (
    ConfigurationError,
    GrammarCompiler,
    GrammarMatcher,
    Vocabulary,
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
)

TOKENS = [b"a", b"b", b"ab", b"(", b")", b"c"]
EOS = len(TOKENS)
# vocab_size 40 > len(tokens): ids 7..39 are logits columns without a token
VOCAB = Vocabulary.from_tokens([*TOKENS, b"<eos>"], stop_token_ids=[EOS], vocab_size=40)
COMPILER = GrammarCompiler(VOCAB)
A, B, AB, LP, RP, C = range(6)


def regex_matcher(**kw: object) -> GrammarMatcher:
    return GrammarMatcher(COMPILER.compile_regex(r"(\((a|b)+\)|(a|b)+)c?"), **kw)  # type: ignore[arg-type]


def cfg_matcher(**kw: object) -> GrammarMatcher:
    g = COMPILER.compile_grammar('root ::= item "c"?\nitem ::= "(" item ")" | [ab]+')
    return GrammarMatcher(g, **kw)  # type: ignore[arg-type]


MAKERS = {"regex": regex_matcher, "cfg": cfg_matcher}


def snapshot(m: GrammarMatcher) -> tuple[object, ...]:
    return (
        m.state,
        m.accepted_token_ids,
        m.accepted_bytes(),
        m.is_terminated(),
        m.is_accepting(),
        m.stop_reason,
        m.allowed_token_ids().tolist(),
    )


BAD_IDS: list[object] = [
    -1,
    -(2**70),
    VOCAB.vocab_size,
    VOCAB.vocab_size + 1,
    2**70,
    True,
    False,
    np.bool_(True),
    np.bool_(False),
    0.0,
    1.0,
    np.float32(0),
    None,
    "0",
    b"a",
    [0],
    np.int64(-1),
    np.uint64(2**63),
    7,  # inside vocab_size, no token behind it
    39,
]


@pytest.fixture(params=sorted(MAKERS))
def make(request: pytest.FixtureRequest):
    return MAKERS[request.param]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_non_token_ids_are_refused_by_accept_and_is_allowed(make, bad: object) -> None:
    m = make()
    assert m.accept_token(A)  # False (id 0) and True (id 1) would be legal here as ints
    before = snapshot(m)
    assert m.is_token_allowed(A)
    assert m.is_token_allowed(B)
    assert m.is_token_allowed(bad) is False  # type: ignore[arg-type]
    assert m.accept_token(bad) is False  # type: ignore[arg-type]
    assert snapshot(m) == before
    assert m.accept_tokens([B, bad]) is False  # type: ignore[list-item]
    assert snapshot(m) == before
    assert m.validate_tokens([B, bad, B]) == 1  # type: ignore[list-item]
    assert snapshot(m) == before


@pytest.mark.parametrize("kind", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64])
def test_numpy_integers_are_token_ids(make, kind: type) -> None:
    m = make()
    assert m.is_token_allowed(kind(A))
    assert m.accept_token(kind(A))
    assert m.accept_tokens([kind(B), np.int64(AB)])
    assert m.validate_tokens(np.array([A, B], dtype=kind)) == 2  # type: ignore[arg-type]
    assert m.accepted_token_ids == [A, B, AB]
    assert all(type(t) is int for t in m.accepted_token_ids)


def test_stop_token_mid_document_is_refused(make) -> None:
    m = make()
    assert not m.is_token_allowed(EOS)
    assert not m.accept_token(EOS)  # nothing accepted yet: not a sentence
    assert m.accept_token(LP)
    assert m.accept_token(A)
    before = snapshot(m)
    assert not m.is_token_allowed(EOS)
    assert not m.accept_token(EOS)  # "(a": the ")" is missing
    assert snapshot(m) == before
    assert m.accept_token(RP)
    assert m.accept_token(EOS)
    assert m.is_terminated()
    assert not m.accept_token(A)
    assert not m.accept_token(EOS)


class Boom(RuntimeError):
    pass


def exploding(ids: list[int]) -> Iterator[int]:
    yield from ids
    raise Boom("the caller's iterator failed")


@pytest.mark.parametrize("limit", [None, 0, 2])
def test_accept_tokens_is_atomic_when_the_iterator_raises(make, limit: int | None) -> None:
    m = make(max_rollback_tokens=limit)
    assert m.accept_token(LP)
    before = snapshot(m)
    with pytest.raises(Boom):
        m.accept_tokens(exploding([A, B, AB]))
    assert snapshot(m) == before
    # a stop token accepted inside the batch is undone too
    assert m.accept_tokens([A, RP])
    before = snapshot(m)
    with pytest.raises(Boom):
        m.accept_tokens(exploding([C, EOS]))
    assert snapshot(m) == before
    assert not m.is_terminated()
    assert m.accept_tokens([C, EOS])
    assert m.is_terminated()


@pytest.mark.parametrize("limit", [None, 1])
def test_validate_tokens_leaves_state_when_the_iterator_raises(make, limit: int | None) -> None:
    m = make(max_rollback_tokens=limit)
    assert m.accept_token(A)
    before = snapshot(m)
    with pytest.raises(Boom):
        m.validate_tokens(exploding([B, AB, C, EOS]))  # type: ignore[arg-type]
    assert snapshot(m) == before
    assert m.validate_tokens([B, C, EOS, A]) == 3
    assert snapshot(m) == before


@pytest.mark.parametrize("n", [-1, -5, 3, 10, True, 1.0, None, "1"], ids=repr)
def test_rollback_out_of_range_or_not_an_int_raises_and_keeps_state(make, n: object) -> None:
    m = make(max_rollback_tokens=2)
    for t in (LP, A, B):
        assert m.accept_token(t)
    assert m.num_accepted_tokens == 2
    before = snapshot(m)
    with pytest.raises(ConfigurationError):
        m.rollback(n)  # type: ignore[arg-type]
    assert snapshot(m) == before
    m.rollback(np.int64(2))  # type: ignore[arg-type]
    assert m.accepted_bytes() == b"("


def test_accept_bytes_refuses_non_text_and_lone_surrogates(make) -> None:
    m = make()
    before = snapshot(m)
    for bad in (5, None, [97], 1.0):
        with pytest.raises(ConfigurationError, match="bytes or str"):
            m.accept_bytes(bad)  # type: ignore[arg-type]
        assert snapshot(m) == before
    assert not m.accept_bytes("\ud800")  # not UTF-8 text: refused, no UnicodeEncodeError
    assert snapshot(m) == before
    assert m.accept_bytes(bytearray(b"(a"))
    assert m.accept_bytes(memoryview(b"b)"))
    assert m.accepted_bytes() == b"(ab)"


def test_jump_forward_tokens_with_a_bad_encoder_never_raises() -> None:
    vocab = Vocabulary.from_tokens([b"{", b'"', b"k", b'{"', b"<eos>"], stop_token_ids=[4])
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex(r'\{"k+'))
    before = (m.state, m.accepted_bytes())
    assert m.jump_forward_tokens(lambda data: [True, -1, None], backoff=0) == []  # type: ignore[list-item,return-value]
    assert m.jump_forward_tokens(lambda data: [0, 99], backoff=0) == [0]
    assert m.jump_forward_tokens(lambda data: [3, 2], backoff=1) == [3]
    assert (m.state, m.accepted_bytes()) == before
    for bad in (-1, None, 1.0, True):
        with pytest.raises(ConfigurationError, match="backoff"):
            m.jump_forward_tokens(lambda data: [0], backoff=bad)  # type: ignore[arg-type]
    assert (m.state, m.accepted_bytes()) == before


# -- bitmasks ---------------------------------------------------------------------------------
WORDS = (VOCAB.vocab_size + 31) // 32


def sentinel(shape: tuple[int, ...], dtype: object) -> np.ndarray:
    return np.full(shape, 5, dtype=dtype)  # type: ignore[call-overload,no-any-return]


@pytest.mark.parametrize(
    "dtype", [np.int8, np.uint8, np.bool_, np.uint32, np.int64, np.float32, ">i4"], ids=str
)
def test_fill_refuses_a_bitmask_of_another_dtype_before_writing(make, dtype: object) -> None:
    m = make()
    bm = sentinel((2, WORDS * 4), dtype)
    copy = bm.copy()
    with pytest.raises(ConfigurationError, match="int32"):
        m.fill_next_token_bitmask(bm)
    np.testing.assert_array_equal(bm, copy)


def test_a_uint32_buffer_works_through_an_int32_view(make) -> None:
    m = make()
    buf = np.zeros((1, WORDS), dtype=np.uint32)
    assert m.fill_next_token_bitmask(buf.view(np.int32))
    ref = allocate_token_bitmask(1, VOCAB.vocab_size)
    m.fill_next_token_bitmask(ref)
    np.testing.assert_array_equal(buf.view(np.int32), ref)


@pytest.mark.parametrize(
    ("shape", "index"),
    [
        ((2, WORDS), 2),
        ((2, WORDS), -1),
        ((2, WORDS), True),
        ((2, WORDS), 0.0),
        ((2, WORDS), None),
        ((WORDS,), 1),
        ((WORDS,), -1),
        ((2, WORDS - 1 if WORDS > 1 else 0), 0),  # too narrow
        ((1, 2, WORDS), 0),
        ((), 0),
    ],
    ids=repr,
)
def test_fill_refuses_bad_shapes_and_row_indices_before_writing(
    make, shape: tuple[int, ...], index: object
) -> None:
    m = make()
    bm = sentinel(shape, np.int32)
    copy = bm.copy()
    with pytest.raises(ConfigurationError):
        m.fill_next_token_bitmask(bm, index)  # type: ignore[arg-type]
    np.testing.assert_array_equal(bm, copy)


def test_fill_accepts_numpy_row_indices_and_refuses_read_only(make) -> None:
    m = make()
    bm = np.zeros((3, WORDS), dtype=np.int32)
    assert m.fill_next_token_bitmask(bm, np.int64(2))
    assert bm[2].any()
    assert not bm[:2].any()
    bm.setflags(write=False)
    with pytest.raises(ConfigurationError, match="read-only"):
        m.fill_next_token_bitmask(bm, 0)
    with pytest.raises(ConfigurationError):
        m.fill_next_token_bitmask([[0] * WORDS])  # type: ignore[arg-type]
    from formcast.bitmask import writable_bitmask_row

    with pytest.raises(ConfigurationError):
        writable_bitmask_row(np.zeros((1, WORDS), np.int32), 0, WORDS + 1)


@pytest.mark.parametrize(
    "dtype", [np.int8, np.uint8, np.bool_, np.uint32, np.int64, np.float32], ids=str
)
def test_apply_refuses_a_bitmask_of_another_dtype(dtype: object) -> None:
    logits = np.zeros((1, VOCAB.vocab_size), dtype=np.float32)
    bm = np.ones((1, WORDS), dtype=dtype)  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match="int32"):
        apply_token_bitmask_inplace(logits, bm)
    assert not np.isinf(logits).any()


@pytest.mark.parametrize(
    ("logits_shape", "logits_dtype", "bm_rows", "kwargs"),
    [
        ((VOCAB.vocab_size,), np.int32, 1, {}),  # integer logits cannot hold -inf
        ((VOCAB.vocab_size,), np.bool_, 1, {}),
        ((2, VOCAB.vocab_size), np.float32, 1, {}),  # a logits row without a bitmask row
        ((2, 2, VOCAB.vocab_size), np.float32, 2, {}),
        ((), np.float32, 1, {}),
        ((2, VOCAB.vocab_size), np.float32, 2, {"indices": [0, 2]}),
        ((2, VOCAB.vocab_size), np.float32, 2, {"indices": [1, -1]}),
        ((2, VOCAB.vocab_size), np.float32, 2, {"indices": [True]}),
        ((2, VOCAB.vocab_size), np.float32, 2, {"indices": 1}),
        ((2, VOCAB.vocab_size), np.float32, 2, {"vocab_size": 0}),
        ((2, VOCAB.vocab_size), np.float32, 2, {"vocab_size": VOCAB.vocab_size + 1}),
        ((2, VOCAB.vocab_size), np.float32, 2, {"vocab_size": 3.0}),
    ],
    ids=repr,
)
def test_apply_refuses_bad_logits_rows_and_indices_before_writing(
    logits_shape: tuple[int, ...], logits_dtype: object, bm_rows: int, kwargs: dict[str, object]
) -> None:
    logits = np.zeros(logits_shape, dtype=logits_dtype)  # type: ignore[call-overload]
    copy = logits.copy()
    bm = np.zeros((bm_rows, WORDS), dtype=np.int32)  # everything disallowed
    with pytest.raises(ConfigurationError):
        apply_token_bitmask_inplace(logits, bm, **kwargs)  # type: ignore[arg-type]
    np.testing.assert_array_equal(logits, copy)


def test_apply_with_good_arguments_still_masks() -> None:
    logits = np.zeros((3, VOCAB.vocab_size), dtype=np.float32)
    bm = np.zeros((3, WORDS), dtype=np.int32)
    bm[:, 0] = 0b101
    apply_token_bitmask_inplace(logits, bm, indices=[np.int64(2), 0])
    assert np.isfinite(logits[1]).all()
    for r in (0, 2):
        assert np.flatnonzero(np.isfinite(logits[r])).tolist() == [0, 2]
    one = np.zeros(VOCAB.vocab_size, dtype=np.float64)
    apply_token_bitmask_inplace(one, bm[0], vocab_size=10)
    assert np.flatnonzero(np.isfinite(one)).tolist() == [0, 2, *range(10, VOCAB.vocab_size)]


# -- max_rollback_tokens: O(1) per step ---------------------------------------------------------
def test_max_rollback_steps_do_not_copy_the_accepted_text(make) -> None:
    """With a rollback bound, a step used to re-concatenate the whole forgotten prefix (a copy
    of everything accepted so far, so the run was quadratic).  Measured by memory, not time:
    the largest allocation during 200 steps after 100 KB of text stays tiny."""
    m = make(max_rollback_tokens=4)
    assert m.accept_token(A)
    for _ in range(50_000):
        assert m.accept_token(AB)
    text_len = len(m.accepted_bytes())
    assert text_len == 100_001
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        for _ in range(200):
            assert m.accept_token(AB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - base < 20_000, peak - base  # the old code copied >= 100 KB per step
    assert m.accepted_bytes() == b"a" + b"ab" * 50_200
    assert m.num_accepted_tokens == 4


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_bounded_rollback_agrees_with_unbounded(make, limit: int) -> None:
    rng = np.random.default_rng(limit)
    free, bounded = make(), make(max_rollback_tokens=limit)
    for step in range(300):
        t = int(rng.integers(0, EOS))  # text tokens: a bound of 0 could not undo a stop
        assert bounded.accept_token(t) == free.accept_token(t)
        if step % 7 == 0 and bounded.num_accepted_tokens:
            k = int(rng.integers(0, bounded.num_accepted_tokens + 1))
            free.rollback(k)
            bounded.rollback(k)
        assert bounded.accepted_bytes() == free.accepted_bytes()
        assert bounded.state == free.state
        assert bounded.num_accepted_tokens <= limit
        twin = bounded.fork()
        assert twin.accepted_bytes() == free.accepted_bytes()
        assert twin.state == free.state
    bounded.reset()
    assert bounded.accepted_bytes() == b""
    assert bounded.num_accepted_tokens == 0
