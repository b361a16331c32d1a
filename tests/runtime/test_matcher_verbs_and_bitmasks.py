"""GrammarMatcher, token bitmasks, vocabularies and the compiler cache.

Covers the runtime verbs (rollback / fork / validate_tokens / accept_tokens agree with sequential
accepts), rejection leaving the state unchanged, stop tokens only in accepting states, terminated
matchers, the bitmask layout (bit ``j % 32`` of word ``j // 32``), ``-inf`` masking, seed 002's
tokenizer pitfalls (``"}`` inside a string, ``0}`` flipping with the state, an enum split across
tokens), dead-end diagnostics, vocabulary fingerprints and the cache key, the rollback bound, and
vocabulary validation errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formcast import (
    ConfigurationError,
    GrammarCompiler,
    GrammarMatcher,
    Vocabulary,
    VocabularyError,
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_to_bool,
    bool_to_bitmask,
    get_bitmask_shape,
)
from index_helpers import regex_dfa


def make(pattern: str, tokens: list[bytes | str], **kwargs):
    """(vocab, matcher) for ``tokens`` plus a trailing ``<eos>`` stop token."""
    toks = [t.encode() if isinstance(t, str) else t for t in tokens]
    vocab = Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)])
    return vocab, GrammarMatcher(GrammarCompiler(vocab).compile_regex(pattern), **kwargs)


def allowed(vocab: Vocabulary, m: GrammarMatcher) -> set[bytes]:
    return {vocab.tokens[i] for i in m.allowed_token_ids().tolist()}


def tid(vocab: Vocabulary, text: str | bytes) -> int:
    b = text.encode() if isinstance(text, str) else text
    return vocab.tokens.index(b)


def snapshot(m: GrammarMatcher):
    return (
        m.state,
        m.accepted_token_ids,
        m.accepted_bytes(),
        m.is_terminated(),
        m.is_accepting(),
        m.allowed_token_ids().tolist(),
    )


# -- runtime verbs agree with sequential accepts (property) ------------------------------------
TOKENS = [b"a", b"b", b"ab", b"ba", b"aa", b"c", b"\xc3", b"\xa9", b"\xc3\xa9", b"\xa9a"]
VOCAB = Vocabulary.from_tokens([*TOKENS, b"<eos>"], stop_token_ids=[len(TOKENS)])
STOP = len(TOKENS)
COMPILER = GrammarCompiler(VOCAB)
PATTERNS = ["(a|b)*c", "a{0,3}b?é?", "(ab|ba)*", "[ab]*é[ab]*", "é+|a+"]
token_lists = st.lists(st.integers(0, STOP), max_size=10)


def sequential(pattern: str, ids: list[int]) -> tuple[list[object], int]:
    """States after each accepted token, stopping at the first rejection; and that count."""
    m = GrammarMatcher(COMPILER.compile_regex(pattern))
    states = [snapshot(m)]
    for t in ids:
        if not m.accept_token(t):
            break
        states.append(snapshot(m))
    return states, len(states) - 1


@settings(max_examples=150, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), head=token_lists, ids=token_lists)
def test_validate_and_accept_tokens_agree_with_sequential(pattern, head, ids):
    m = GrammarMatcher(COMPILER.compile_regex(pattern))
    _head_states, k0 = sequential(pattern, head)
    assert m.accept_tokens(head[:k0])
    seq_states, k = sequential(pattern, head[:k0] + ids)
    expect_n = k - k0
    before = snapshot(m)
    assert before == seq_states[k0]
    # validate_tokens: the length of the accepted prefix, no state change
    assert m.validate_tokens(ids) == expect_n
    assert snapshot(m) == before
    # accept_tokens: all or nothing
    ok = m.accept_tokens(ids)
    assert ok == (expect_n == len(ids))
    assert snapshot(m) == (seq_states[k] if ok else before)


@settings(max_examples=150, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), ids=token_lists, data=st.data())
def test_rollback_fork_reset_agree_with_sequential(pattern, ids, data):
    states, k = sequential(pattern, ids)
    m = GrammarMatcher(COMPILER.compile_regex(pattern))
    for t in ids[:k]:
        assert m.accept_token(t)
    assert snapshot(m) == states[k]
    # fork: an independent copy
    twin = m.fork()
    assert snapshot(twin) == snapshot(m)
    j = data.draw(st.integers(0, k), label="rollback")
    twin.rollback(j)
    assert snapshot(twin) == states[k - j]
    assert snapshot(m) == states[k]  # the original is untouched
    for t in ids[k - j : k]:  # re-accepting replays the same states
        assert twin.accept_token(t)
    assert snapshot(twin) == states[k]
    with pytest.raises(ConfigurationError):
        m.rollback(k + 1)
    with pytest.raises(ConfigurationError):
        m.rollback(-1)
    m.reset()
    assert snapshot(m) == states[0]


@settings(max_examples=100, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), ids=token_lists)
def test_stop_only_in_accepting_states_and_terminated_rejects_all(pattern, ids):
    m = GrammarMatcher(COMPILER.compile_regex(pattern))
    bm = allocate_token_bitmask(1, VOCAB.vocab_size)
    for t in ids:
        accepting = m.is_accepting()
        m.fill_next_token_bitmask(bm)
        stop_bit = bool(bitmask_to_bool(bm[0], VOCAB.vocab_size)[STOP])
        assert stop_bit == accepting
        if t == STOP:
            assert m.accept_token(STOP) == accepting
            if accepting:
                break
        else:
            m.accept_token(t)
    if m.is_terminated():
        text = m.accepted_bytes()
        assert regex_dfa(COMPILER.compile_regex(pattern)).matches(text)
        assert m.is_accepting()
        for t in range(VOCAB.vocab_size):
            assert not m.accept_token(t)
        assert not m.accept_bytes(b"a")
        assert not m.fill_next_token_bitmask(bm)
        assert not bm.any()
        assert m.allowed_token_ids().size == 0
        assert m.find_jump_forward_bytes() == b""
        diag = m.diagnose()
        assert diag is not None
        assert "terminated" in diag.reason
        m.rollback(1)  # undo the stop token: generation can continue
        assert not m.is_terminated()
        assert m.fill_next_token_bitmask(bm)


def test_rejected_token_leaves_state_unchanged():
    vocab, m = make("ab*", ["a", "b", "ba", "c"])
    assert m.accept_token(tid(vocab, "a"))
    before = snapshot(m)
    for bad in (tid(vocab, "a"), tid(vocab, "c"), tid(vocab, "ba"), -1, 5, 10**6, 2**40):
        assert not m.accept_token(bad)
        assert snapshot(m) == before
    assert not m.accept_bytes(b"x")
    assert snapshot(m) == before
    assert not m.accept_tokens([tid(vocab, "b"), tid(vocab, "c")])
    assert snapshot(m) == before


def test_special_token_is_never_matched_by_its_text():
    vocab = Vocabulary.from_tokens(
        [b"a", b"b", b"a", b"<eos>"], stop_token_ids=[3], special_token_ids=[2]
    )
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex("a+"))
    assert m.allowed_token_ids().tolist() == [0]
    assert not m.accept_token(2)
    assert m.accept_token(0)
    assert m.allowed_token_ids().tolist() == [0, 3]


def test_multiple_stop_tokens():
    vocab = Vocabulary.from_tokens([b"a", b"<eos>", b"<eot>"], stop_token_ids=[1, 2])
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex("a"))
    assert m.allowed_token_ids().tolist() == [0]
    assert m.accept_token(0)
    assert m.allowed_token_ids().tolist() == [1, 2]
    twin = m.fork()
    assert m.accept_token(1)
    assert twin.accept_token(2)
    assert m.is_terminated()
    assert twin.is_terminated()


def test_accept_bytes_counts_as_one_step_and_jump_forward():
    vocab, m = make(r'\{"name":"[a-z]+"\}', ["{", "a", '"', "}", '"}'])
    forced = m.find_jump_forward_bytes()
    assert forced == b'{"name":"'
    assert m.accept_bytes(forced)
    assert m.find_jump_forward_bytes() == b""
    assert allowed(vocab, m) == {b"a"}
    assert m.accept_token(tid(vocab, "a"))
    assert m.find_jump_forward_bytes() == b""
    m.rollback(2)
    assert m.accepted_bytes() == b""
    assert m.find_jump_forward_bytes() == forced
    _, m2 = make("ab(c|d)", ["a"])
    assert m2.find_jump_forward_bytes() == b"ab"
    _, m3 = make("é中", ["a"])
    assert m3.find_jump_forward_bytes() == "é中".encode()


# -- bitmasks ------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(bits=st.lists(st.booleans(), min_size=1, max_size=200))
def test_bitmask_round_trip_and_layout(bits):
    allowed_ = np.asarray(bits, dtype=bool)
    n = allowed_.size
    words = bool_to_bitmask(allowed_, n)
    assert words.dtype == np.int32
    assert words.shape == (get_bitmask_shape(1, n)[1],) == ((n + 31) // 32,)
    for j in range(n):
        assert ((int(words[j // 32]) >> (j % 32)) & 1) == int(allowed_[j])
    # bits past n are zero
    for j in range(n, words.size * 32):
        assert ((int(words[j // 32]) >> (j % 32)) & 1) == 0
    assert np.array_equal(bitmask_to_bool(words, n), allowed_)


def test_allocated_bitmask_is_all_ones():
    bm = allocate_token_bitmask(3, 70)
    assert bm.shape == (3, 3)
    assert bm.dtype == np.int32
    assert bitmask_to_bool(bm[2], 70).all()
    with pytest.raises(ConfigurationError):
        get_bitmask_shape(0, 10)


def test_vocab_size_not_multiple_of_32_and_extra_ids_never_allowed():
    tokens = [bytes([c]) for c in b"abcdefghijklmnopqrstuvwxyz0123456789"]  # 36 tokens
    vocab = Vocabulary.from_tokens([*tokens, b"<eos>"], stop_token_ids=[36], vocab_size=70)
    assert vocab.vocab_size == 70
    assert len(vocab) == 37
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex(".*"))
    bm = allocate_token_bitmask(2, vocab.vocab_size)
    assert bm.shape == (2, 3)
    assert m.fill_next_token_bitmask(bm, 1)
    assert bm[0].tolist() == [-1, -1, -1]  # row 0 untouched
    row = bitmask_to_bool(bm[1], 96)
    assert row[:37].all()  # every text token and the stop token (".*" accepts "")
    assert not row[37:].any()  # ids 37..69 (past the tokenizer) and the padding bits
    for extra in (37, 50, 69):
        assert not m.is_token_allowed(extra)
        assert not m.accept_token(extra)
    assert not m.is_token_allowed(70)
    too_small = np.zeros((1, 2), dtype=np.int32)
    with pytest.raises(ConfigurationError):
        m.fill_next_token_bitmask(too_small)
    wide = np.full((1, 5), -1, dtype=np.int32)  # a wider row: the surplus words are cleared
    m.fill_next_token_bitmask(wide)
    assert wide[0, 3:].tolist() == [0, 0]


@pytest.mark.parametrize("ndim", [1, 2])
def test_apply_bitmask_sets_minus_inf_never_zero(ndim):
    rng = np.random.default_rng(0)
    v = 45
    allowed_ = rng.random((3, v)) < 0.3
    logits = rng.normal(size=(3, v)).astype(np.float32) - 5.0  # all negative: 0 would win
    bm = np.stack([bool_to_bitmask(a, v) for a in allowed_])
    if ndim == 1:
        lg = logits[1].copy()
        apply_token_bitmask_inplace(lg, bm[1])
        expect = np.where(allowed_[1], logits[1], -np.inf)
    else:
        lg = logits.copy()
        apply_token_bitmask_inplace(lg, bm)
        expect = np.where(allowed_, logits, -np.inf)
    assert np.array_equal(lg, expect)
    assert not (lg == 0).any()
    assert np.isneginf(lg[~(allowed_[1] if ndim == 1 else allowed_)]).all()


def test_apply_bitmask_logits_wider_than_bitmask_and_indices():
    v = 40
    allowed_ = np.zeros(v, dtype=bool)
    allowed_[[0, 31, 32, 39]] = True
    bm = np.stack([bool_to_bitmask(allowed_, v)] * 2)
    logits = np.ones((2, 100), dtype=np.float64)
    apply_token_bitmask_inplace(logits, bm, indices=[1])
    assert (logits[0] == 1).all()  # row 0 not selected
    assert np.flatnonzero(np.isfinite(logits[1])).tolist() == [0, 31, 32, 39]
    with pytest.raises(ConfigurationError):
        apply_token_bitmask_inplace([0.0, 1.0], bm[0])


def test_apply_bitmask_torch_when_available():
    torch = pytest.importorskip("torch")
    allowed_ = np.array([True, False, True] + [False] * 30 + [True])
    bm = bool_to_bitmask(allowed_, allowed_.size)
    lg = torch.zeros(allowed_.size)
    apply_token_bitmask_inplace(lg, bm)
    assert torch.isneginf(lg).tolist() == (~allowed_).tolist()


# -- seed 002's pitfalls ------------------------------------------------------------------------
TOY = r'\{"name":"[a-z ]*","age":[1-9][0-9]*\}'
TOY_TOKENS = ["{", "}", '"', ":", ",", '{"', '":"', '","', '":', '"}', "name", "age", "ada",
              "0", "1", "3", "36", "0}", "9}", "36}", "null", "\n"]  # fmt: skip


def test_quote_brace_token_rejected_as_a_whole_inside_a_string():
    vocab, m = make(TOY, TOY_TOKENS)
    assert m.accept_bytes('{"name":"ada')
    # '"' is a legal first character (it closes the string), but '"}' as a whole is not
    assert m.is_token_allowed(tid(vocab, '"'))
    assert m.is_token_allowed(tid(vocab, '","'))
    assert not m.is_token_allowed(tid(vocab, '"}'))
    assert not m.accept_token(tid(vocab, '"}'))
    assert m.accept_token(tid(vocab, '","'))


def test_zero_brace_token_flips_with_state():
    vocab, m = make(TOY, TOY_TOKENS)
    assert m.accept_bytes('{"name":"ada","age":')
    zb = tid(vocab, "0}")
    assert not m.is_token_allowed(zb)  # no leading zero
    assert m.is_token_allowed(tid(vocab, "36}"))
    assert m.accept_token(tid(vocab, "3"))
    assert m.is_token_allowed(zb)  # "30}" completes the document
    assert not m.is_token_allowed(next(iter(vocab.stop_token_ids)))
    assert m.accept_token(zb)
    assert allowed(vocab, m) == {b"<eos>"}
    assert m.accepted_bytes() == b'{"name":"ada","age":30}'


def test_enum_split_across_tokens():
    tokens = ["ref", "und", "refund", "re", "f", "ask", "a", "sk", "refunds", "delete", "u"]
    vocab, m = make("refund|ask", tokens)
    assert allowed(vocab, m) == {b"ref", b"refund", b"re", b"ask", b"a"}
    assert m.accept_token(tid(vocab, "ref"))
    assert allowed(vocab, m) == {b"und", b"u"}
    assert m.accept_token(tid(vocab, "und"))
    assert allowed(vocab, m) == {b"<eos>"}
    assert m.accept_token(tid(vocab, "<eos>"))
    assert m.accepted_bytes() == b"refund"


# -- dead ends -----------------------------------------------------------------------------------
def test_dead_end_names_expected_bytes_fingerprint_and_prefix():
    vocab, m = make("ab~c", ["a", "b", "c", "abc"])  # no token contains "~"
    bm = allocate_token_bitmask(1, vocab.vocab_size)
    assert m.fill_next_token_bitmask(bm)
    assert m.diagnose() is None
    assert m.accept_token(tid(vocab, "a"))
    assert m.accept_token(tid(vocab, "b"))
    assert not m.fill_next_token_bitmask(bm)
    assert not bm.any()
    diag = m.diagnose()
    assert diag is not None
    assert diag.expected_bytes == (ord("~"),)
    assert "~" in diag.expected
    assert diag.prefix == b"ab"
    assert diag.vocabulary_fingerprint == vocab.fingerprint
    assert not diag.accepting
    assert "~" in diag.reason
    text = str(diag)
    assert "b'ab'" in text
    assert vocab.fingerprint[:16] in text


def test_dead_end_at_the_start_and_multibyte_expected():
    _vocab, m = make("中", ["a", "\xe4".encode("latin-1")])  # only the lead byte E4 exists
    assert m.allowed_token_ids().tolist() == [1]
    assert m.accept_token(1)
    diag = m.diagnose()
    assert diag is not None
    assert diag.expected_bytes == (0xB8,)
    assert diag.prefix == b"\xe4"
    _, m2 = make("z", ["a"])
    assert not m2.fill_next_token_bitmask(allocate_token_bitmask(1, 2))
    d2 = m2.diagnose()
    assert d2 is not None
    assert d2.prefix == b""
    assert d2.expected_bytes == (ord("z"),)


# -- vocabulary fingerprint and the compiler cache ---------------------------------------------
BASE = [b"a", b"b", b"ab", b"<eos>"]


def fp(tokens=BASE, stops=(3,), specials=(), size=None) -> str:
    return Vocabulary.from_tokens(
        tokens, stop_token_ids=stops, special_token_ids=specials, vocab_size=size
    ).fingerprint


def test_vocabulary_fingerprint_changes_with_any_token_or_id():
    base = fp()
    assert fp() == base  # deterministic
    assert Vocabulary.from_tokens(BASE, stop_token_ids=[3], name="other").fingerprint == base
    variants = [
        fp(tokens=[b"a", b"c", b"ab", b"<eos>"]),  # one token's bytes
        fp(tokens=[b"a", b"b", b"a", b"<eos>"]),
        fp(tokens=[b"a", b"ba", b"b", b"<eos>"]),  # same concatenation, other split
        fp(tokens=[b"b", b"a", b"ab", b"<eos>"]),  # order (ids)
        fp(tokens=[*BASE, b"x"]),
        fp(tokens=[b"a", b"b", b"ab", b"</s>"]),  # the stop token's bytes
        fp(stops=(3, 0)),
        fp(tokens=[*BASE, b"x"], stops=(4,)),
        fp(specials=(0,)),
        fp(size=64),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_changed_vocabulary_never_reuses_a_compiled_grammar():
    v1 = Vocabulary.from_tokens(BASE, stop_token_ids=[3])
    v2 = Vocabulary.from_tokens([b"a", b"c", b"ab", b"<eos>"], stop_token_ids=[3])
    c1 = GrammarCompiler(v1)
    g1 = c1.compile_regex("(ab|c)+")
    assert c1.compile_regex("(ab|c)+") is g1
    assert c1.hits == 1
    assert c1.compile_regex("(ab|c)+", dialect="python") is not g1  # another dialect: another entry
    g2 = GrammarCompiler(v2).compile_regex("(ab|c)+")
    assert g2 is not g1
    assert g2.vocab is v2
    assert g1.fingerprint != g2.fingerprint
    # the same tokens in a new Vocabulary object: equal fingerprint, equal key
    v1b = Vocabulary.from_tokens(list(BASE), stop_token_ids=[3])
    assert GrammarCompiler(v1b).compile_regex("(ab|c)+").fingerprint == g1.fingerprint
    # masks really differ: id 1 is "b" in v1 and "c" in v2
    m1, m2 = GrammarMatcher(g1), GrammarMatcher(g2)
    assert m1.allowed_token_ids().tolist() == [0, 2]
    assert m2.allowed_token_ids().tolist() == [0, 1, 2]
    # a changed stop id changes the key too
    v3 = Vocabulary.from_tokens(BASE, stop_token_ids=[3, 1])
    assert GrammarCompiler(v3).compile_regex("(ab|c)+").fingerprint != g1.fingerprint


def test_compiler_cache_is_bounded():
    c = GrammarCompiler(Vocabulary.from_tokens(BASE, stop_token_ids=[3]), cache_size=2)
    a = c.compile_regex("a")
    c.compile_regex("b")
    c.compile_regex("ab")  # evicts "a"
    assert c.compile_regex("a") is not a
    c0 = GrammarCompiler(Vocabulary.from_tokens(BASE, stop_token_ids=[3]), cache_size=0)
    assert c0.compile_regex("a") is not c0.compile_regex("a")


# -- the rollback bound --------------------------------------------------------------------------
def test_max_rollback_tokens_bound():
    vocab, m = make("a*b?", ["a", "b"], max_rollback_tokens=3)
    a = tid(vocab, "a")
    for _ in range(5):
        assert m.accept_token(a)
    assert m.num_accepted_tokens == 3  # only the last 3 are kept for rollback
    assert m.accepted_bytes() == b"aaaaa"  # but the text is complete
    with pytest.raises(ConfigurationError):
        m.rollback(4)
    m.rollback(3)
    assert m.accepted_bytes() == b"aa"
    assert m.is_accepting()
    with pytest.raises(ConfigurationError):
        m.rollback(1)
    assert m.fork().accepted_bytes() == b"aa"
    with pytest.raises(ConfigurationError):
        make("a", ["a"], max_rollback_tokens=-1)
    _, m0 = make("a*", ["a"], max_rollback_tokens=0)
    assert m0.accept_token(0)
    assert m0.accept_token(0)
    assert m0.accepted_bytes() == b"aa"
    assert m0.num_accepted_tokens == 0


def test_validate_tokens_longer_than_rollback_bound():
    _vocab, m = make("a*b?", ["a", "b"], max_rollback_tokens=2)
    assert m.validate_tokens([0, 0, 0, 0]) == 4
    assert m.accepted_bytes() == b""


def test_accept_tokens_longer_than_rollback_bound_is_atomic():
    _vocab, m = make("a*b?", ["a", "b"], max_rollback_tokens=2)
    assert not m.accept_tokens([0, 0, 0, 1, 0])
    assert m.accepted_bytes() == b""


# -- vocabulary errors ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tokens", "kwargs", "match"),
    [
        ([], {"stop_token_ids": [0]}, "empty"),
        ([b"a", b"<eos>"], {"stop_token_ids": [2]}, "out of range"),
        ([b"a", b"<eos>"], {"stop_token_ids": [-1]}, "out of range"),
        ([b"a", b"<eos>"], {"stop_token_ids": []}, "no stop token"),
        ([b"a", b"<eos>"], {"stop_token_ids": [1], "special_token_ids": [9]}, "out of range"),
        ([b"a", "b", b"<eos>"], {"stop_token_ids": [2]}, "not bytes"),
        ([b"a", b"<eos>"], {"stop_token_ids": [1], "vocab_size": 1}, "smaller"),
    ],
)
def test_vocabulary_errors(tokens, kwargs, match):
    with pytest.raises(VocabularyError, match=match):
        Vocabulary.from_tokens(tokens, **kwargs)
    assert issubclass(VocabularyError, ValueError)


def test_stop_id_past_tokenizer_but_inside_vocab_size_is_allowed():
    vocab = Vocabulary.from_tokens([b"a"], stop_token_ids=[5], vocab_size=8)
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex("a"))
    assert m.accept_token(0)
    assert m.allowed_token_ids().tolist() == [5]


def test_matcher_and_compiler_argument_errors():
    with pytest.raises(ConfigurationError):
        GrammarCompiler(["a"])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        GrammarMatcher("a")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        GrammarCompiler(VOCAB).compile_regex(b"a")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        GrammarCompiler(VOCAB).compile_regex("a", dialect="perl")
