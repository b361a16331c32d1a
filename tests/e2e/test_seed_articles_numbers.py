"""The seed articles' own numbers, reproduced through formcast's real pipeline.

Vocabulary -> GrammarCompiler.compile_regex -> GrammarMatcher -> token bitmask -> the sampling
chain of :mod:`formcast.sampling`.  Every number asserted here is printed in a seed article:

* seed 001: the single enum step  delete .50 / refund .30 / ask .15 / other .05  ->  refund .667,
  ask .333, and the enum value split across tokens (``ref`` + ``und``);
* seed 000: the yes/no example  ->  masked sampling says "yes" with probability .75, the model
  conditioned on validity says .006/.106 ~ .057 (computed by exact enumeration);
* seed 002: the 45-token toy vocabulary and 20-state DFA; the step-one table (98.48% of the mass
  on invalid tokens before masking, .8793/.1207 after, .9742 left on invalid tokens by a mask
  written with 0); the traced generation; 500 generations from noise that all parse; the
  zero-mask and reject-after-sampling breaks; first-character checking letting ``"}`` close the
  document early; ``0}`` flipping legality with the state.

Seed 002 ships its script, which fixes every random input: ``np.random.default_rng(seed)`` with
``rng.normal(0, 2.0, 45)`` logits per step and ``rng.choice(45, p=p)`` sampling.  formcast's
:func:`sample_token` inverts the CDF with the same single ``rng.random()`` draw as
``Generator.choice``, so the article's streams replay exactly and its printed figures (lengths
19-173, 200/200, mean 23.6 / max 142) are asserted as printed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from formcast.bitmask import allocate_token_bitmask
from formcast.index.compiled import CompiledGrammar
from formcast.index.compiler import GrammarCompiler
from formcast.runtime.matcher import GrammarMatcher
from formcast.sampling import SamplingParams, sample_token, token_probabilities
from formcast.vocab.vocabulary import Vocabulary
from index_helpers import regex_dfa

try:
    from toy import (
        ARTICLE_TOKENS,
        DIGIT1,
        DIGITS_N,
        END,
        EOS_ID,
        NAME,
        START,
        TOY_PATTERN,
        V_ARTICLE,
        ArticleDFA,
        allowed_ids,
        tid,
        toy_vocabulary,
    )
except ImportError:  # tests/ imported as a package
    from tests.toy import (  # type: ignore[import-not-found,no-redef]
        ARTICLE_TOKENS,
        DIGIT1,
        DIGITS_N,
        END,
        EOS_ID,
        NAME,
        START,
        TOY_PATTERN,
        V_ARTICLE,
        ArticleDFA,
        allowed_ids,
        tid,
        toy_vocabulary,
    )

Compiled = tuple[Vocabulary, CompiledGrammar]  # (vocabulary, grammar compiled for it)
PLAIN = SamplingParams()  # temperature 1, no truncation: the seeds' plain sampling


def mask_row(matcher: GrammarMatcher, vocab: Vocabulary) -> npt.NDArray[np.int32]:
    """The matcher's bitmask row for its current state (one row of a fresh bitmask)."""
    bm = allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(bm, 0)
    return np.array(bm[0], copy=True)


def softmax(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    e = np.exp(x - np.max(x))
    out: npt.NDArray[np.float64] = e / e.sum()
    return out


def log_probs(probs: list[float]) -> npt.NDArray[np.float64]:
    """Logits whose softmax is ``probs`` (zero probability -> -inf logit)."""
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(probs, dtype=np.float64))


# =============================================================================================
# Seed 001: one enum step
# =============================================================================================
ENUM_PATTERN = r'\{"action":"(refund|ask)"\}'


def test_seed001_enum_step_renormalizes_over_refund_and_ask() -> None:
    toks = [b'{"action":"', b"delete", b"refund", b"ask", b"other", b'"}', b"<eos>"]
    vocab = Vocabulary.from_tokens(toks, stop_token_ids=[6])
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex(ENUM_PATTERN))
    assert m.accept_token(0)  # prefix {"action":"  -> state q3, the enum value

    row = mask_row(m, vocab)
    assert allowed_ids(row, vocab.vocab_size) == {2, 3}  # refund, ask
    #           prefix delete refund ask  other "}  eos
    logits = log_probs([0.0, 0.50, 0.30, 0.15, 0.05, 0.0, 0.0])
    p = token_probabilities(logits, row, PLAIN)

    assert p[2] == pytest.approx(0.667, abs=1e-3)
    assert p[3] == pytest.approx(0.333, abs=1e-3)
    assert p[2] == pytest.approx(0.30 / 0.45, abs=1e-12)
    assert p[3] == pytest.approx(0.15 / 0.45, abs=1e-12)
    assert p[1] == 0.0
    assert p[4] == 0.0
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_seed001_enum_value_split_across_tokens_is_allowed_as_a_prefix() -> None:
    # "refund may be split into ref + und ... ref must be allowed; a token that starts with
    # r but cannot complete a legal enum must be masked no matter how right its first char".
    toks = [b'{"action":"', b"ref", b"und", b"refund", b"ask", b"rex", b"r", b'"}', b"<eos>"]
    vocab = Vocabulary.from_tokens(toks, stop_token_ids=[8])
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex(ENUM_PATTERN))
    assert m.accept_token(0)
    assert allowed_ids(mask_row(m, vocab), vocab.vocab_size) == {1, 3, 4, 6}  # ref refund ask r
    assert m.accept_token(1)  # ref
    assert allowed_ids(mask_row(m, vocab), vocab.vocab_size) == {2}  # und only
    assert m.accept_token(2)
    assert allowed_ids(mask_row(m, vocab), vocab.vocab_size) == {7}  # "}
    assert m.accept_token(7)
    assert m.is_accepting()
    assert allowed_ids(mask_row(m, vocab), vocab.vocab_size) == {8}  # only the stop token


# =============================================================================================
# Seed 000: yes / no
# =============================================================================================
YN_TOKENS = [b"ye", b"s", b"no", b"maybe", b"<eos>"]
YE, S, NO, MAYBE, YN_EOS = range(5)
YN_PATTERN = "yes|no"


def yes_no_model(prefix: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """Seed 000's hypothetical model, as next-token probabilities.

    First token: ye .30, no .10, maybe .60.  After ``ye``: s .02, maybe .98.  Anything else
    ends the text (EOS 1.0), which makes the model's probability of the string "yes"
    .30 x .02 = .006 and of "no" .10, exactly as the seed computes them.
    """
    p = np.zeros(len(YN_TOKENS))
    if prefix == ():
        p[[YE, NO, MAYBE]] = [0.30, 0.10, 0.60]
    elif prefix == (YE,):
        p[[S, MAYBE]] = [0.02, 0.98]
    else:
        p[YN_EOS] = 1.0
    return p


def enumerate_model(
    model: Callable[[tuple[int, ...]], npt.NDArray[np.float64]], max_len: int
) -> dict[tuple[int, ...], float]:
    """Every complete (EOS-terminated) token sequence with its exact model probability."""
    done: dict[tuple[int, ...], float] = {}
    stack: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    while stack:
        prefix, prob = stack.pop()
        assert len(prefix) <= max_len
        for t, q in enumerate(model(prefix)):
            if q == 0.0:
                continue
            if t == YN_EOS:
                done[prefix] = done.get(prefix, 0.0) + prob * q
            else:
                stack.append(((*prefix, t), prob * q))
    return done


def yn_text(seq: tuple[int, ...]) -> str:
    return b"".join(YN_TOKENS[t] for t in seq).decode()


@pytest.fixture(scope="module")
def yes_no() -> Compiled:
    vocab = Vocabulary.from_tokens(YN_TOKENS, stop_token_ids=[YN_EOS])
    return vocab, GrammarCompiler(vocab).compile_regex(YN_PATTERN)


def test_seed000_masked_sampling_says_yes_with_probability_075(
    yes_no: Compiled,
) -> None:
    vocab, cg = yes_no
    # Exact distribution of masked sampling: walk the tree of every masked choice.
    outcome: dict[str, float] = {}

    def walk(m: GrammarMatcher, prefix: tuple[int, ...], prob: float) -> None:
        p = token_probabilities(log_probs(list(yes_no_model(prefix))), mask_row(m, vocab), PLAIN)
        for t in map(int, np.flatnonzero(p)):
            if t == YN_EOS:
                assert m.is_accepting()
                text = yn_text(prefix)
                outcome[text] = outcome.get(text, 0.0) + prob * p[t]
                continue
            child = m.fork()
            assert child.accept_token(t)
            walk(child, (*prefix, t), prob * p[t])

    walk(GrammarMatcher(cg), (), 1.0)
    assert set(outcome) == {"yes", "no"}
    assert outcome["yes"] == pytest.approx(0.75, abs=1e-12)
    assert outcome["no"] == pytest.approx(0.25, abs=1e-12)


def test_seed000_conditioned_on_validity_is_0057_by_exact_enumeration(
    yes_no: Compiled,
) -> None:
    vocab, cg = yes_no
    complete = enumerate_model(yes_no_model, max_len=3)
    assert sum(complete.values()) == pytest.approx(1.0, abs=1e-12)

    # Validity by an oracle independent of formcast: Python's re, fullmatch.
    valid = {s: q for s, q in complete.items() if re.fullmatch(YN_PATTERN, yn_text(s))}
    p_valid = sum(valid.values())
    p_yes = sum(q for s, q in valid.items() if yn_text(s) == "yes")
    assert p_valid == pytest.approx(0.106, abs=1e-12)
    assert p_yes == pytest.approx(0.006, abs=1e-12)
    assert p_yes / p_valid == pytest.approx(0.006 / 0.106, abs=1e-12)
    assert p_yes / p_valid == pytest.approx(0.057, abs=1e-3)

    # formcast agrees with the oracle on every sequence the model can produce: a valid one is
    # accepted token by token and ends accepting (with the stop token allowed); an invalid one
    # is refused at some token or does not end accepting.
    for seq in complete:
        m = GrammarMatcher(cg)
        ok = all(m.accept_token(t) for t in seq) and m.is_accepting()
        assert ok == (seq in valid), yn_text(seq)
        if ok:
            assert allowed_ids(mask_row(m, vocab), vocab.vocab_size) == {YN_EOS}


def test_seed000_sampled_frequencies_show_the_distortion(
    yes_no: Compiled,
) -> None:
    vocab, cg = yes_no
    rng = np.random.default_rng(0)
    n, yes = 4000, 0
    for _ in range(n):
        m = GrammarMatcher(cg)
        prefix: tuple[int, ...] = ()
        while True:
            logits = log_probs(list(yes_no_model(prefix)))
            t = sample_token(logits, mask_row(m, vocab), PLAIN, rng)
            assert m.accept_token(t)
            if t == YN_EOS:
                break
            prefix = (*prefix, t)
        assert m.is_terminated()
        yes += yn_text(prefix) == "yes"
    # masked sampling: .75 (binomial sd .0068 at n=4000; 4 sd)
    assert abs(yes / n - 0.75) < 0.03

    # Rejection sampling from the unconstrained model: the reference for "conditioned on
    # validity" (sd ~ .005 with ~2100 accepted samples).
    complete = enumerate_model(yes_no_model, max_len=3)
    seqs = list(complete)
    draws = rng.choice(len(seqs), size=20_000, p=[complete[s] for s in seqs])
    texts = [yn_text(seqs[i]) for i in draws]
    accepted = [t for t in texts if re.fullmatch(YN_PATTERN, t)]
    assert abs(len(accepted) / len(texts) - 0.106) < 0.01
    assert abs(accepted.count("yes") / len(accepted) - 0.057) < 0.02


# =============================================================================================
# Seed 002: the 45-token toy
# =============================================================================================
@pytest.fixture(scope="module")
def toy() -> Compiled:
    vocab = toy_vocabulary()
    return vocab, GrammarCompiler(vocab).compile_regex(TOY_PATTERN)


@pytest.fixture(scope="module")
def ref() -> ArticleDFA:
    return ArticleDFA()


def matcher_after(cg: CompiledGrammar, ids: list[int]) -> GrammarMatcher:
    m = GrammarMatcher(cg)
    for t in ids:
        assert m.accept_token(t), ARTICLE_TOKENS[t]
    return m


def text_ids(row: npt.NDArray[np.int32], vocab: Vocabulary) -> set[int]:
    """Allowed ids among the article's 45 text tokens."""
    return {i for i in allowed_ids(row, vocab.vocab_size) if i < V_ARTICLE}


def article_logits(rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """One step of the article's stand-in model, widened by the stop token (never wanted)."""
    return np.append(rng.normal(0, 2.0, V_ARTICLE), -np.inf)


def test_seed002_vocabulary_is_the_articles(ref: ArticleDFA) -> None:
    vocab = toy_vocabulary()
    assert len(ARTICLE_TOKENS) == 45 == len(set(ARTICLE_TOKENS))
    assert vocab.vocab_size == 46
    assert vocab.stop_token_ids == frozenset({EOS_ID})
    assert [vocab.token_bytes(i).decode() for i in range(45)] == list(ARTICLE_TOKENS)
    for awkward in ('":"', '","', '"}', "0}", "9}", "36}", '{"', "\n"):
        assert awkward in ARTICLE_TOKENS
    # The reference DFA is the article's: 20 states, 15 of them single literal steps.
    assert ref.num_states == 20
    assert ref.num_states - 5 == 15


def test_seed002_compiled_dfa_has_20_states(toy: Compiled) -> None:
    _, cg = toy
    assert regex_dfa(cg).num_states == 20  # live states; the dead state is not counted


def test_seed002_index_matches_the_articles_table(toy: Compiled, ref: ArticleDFA) -> None:
    vocab, cg = toy
    paths = ref.token_paths()
    # States 7 and 8 ({"n, {"na) exist in the DFA but no token path reaches them.
    assert set(paths) == set(range(20)) - {7, 8}
    for state, path in paths.items():
        row = mask_row(matcher_after(cg, path), vocab)
        assert text_ids(row, vocab) == set(ref.allowed(state)), f"article state {state}"
        assert (EOS_ID in allowed_ids(row, vocab.vocab_size)) == (state in ref.accepting)

    counts = {s: len(text_ids(mask_row(matcher_after(cg, paths[s]), vocab), vocab))
              for s in (START, NAME, DIGIT1, DIGITS_N, END)}  # fmt: skip
    assert counts == {START: 2, NAME: 18, DIGIT1: 13, DIGITS_N: 16, END: 0}
    start = text_ids(mask_row(GrammarMatcher(cg), vocab), vocab)
    assert {ARTICLE_TOKENS[i] for i in start} == {"{", '{"'}


def test_seed002_step_one_before_and_after_and_the_zero_mask(
    toy: Compiled,
) -> None:
    vocab, cg = toy
    rng = np.random.default_rng(7)  # the article's demo 2
    logits = rng.normal(0, 2.0, V_ARTICLE)
    # The article's printed logits: the RNG stream is the article's.
    assert logits[tid("\n")] == pytest.approx(2.718, abs=5e-4)
    assert logits[tid('{"')] == pytest.approx(-1.983, abs=5e-4)

    row = mask_row(GrammarMatcher(cg), vocab)
    allowed = np.zeros(V_ARTICLE, dtype=bool)
    allowed[list(text_ids(row, vocab))] = True

    before = softmax(logits)
    assert round(float(before[~allowed].sum()), 4) == 0.9848

    # formcast's chain takes the 45-wide logits under the 46-bit mask.
    after = token_probabilities(logits, row, PLAIN)
    assert after[~allowed].sum() == 0.0
    assert np.all(after[~allowed] == 0.0)
    assert round(float(after[tid("{")]), 4) == 0.8793
    assert round(float(after[tid('{"')]), 4) == 0.1207
    assert after.sum() == pytest.approx(1.0, abs=1e-12)

    # The classic bug: the same mask written with 0.0 instead of -inf.
    zeroed = np.where(allowed, logits, 0.0)
    leak = float(softmax(zeroed)[~allowed].sum())
    assert round(leak, 4) == 0.9742


def generate(
    cg: CompiledGrammar,
    vocab: Vocabulary,
    rng: np.random.Generator,
    max_steps: int = 400,
    on_step: Callable[[GrammarMatcher, npt.NDArray[np.int32], int], None] | None = None,
) -> tuple[list[int], GrammarMatcher]:
    """The article's generate() loop with formcast doing the masking and the sampling."""
    m, out = GrammarMatcher(cg), []
    for _ in range(max_steps):
        row = mask_row(m, vocab)
        tok = sample_token(article_logits(rng), row, PLAIN, rng)
        if on_step is not None:
            on_step(m, row, tok)
        assert m.accept_token(tok)
        out.append(tok)
        if m.is_accepting():
            break
    return out, m


def test_seed002_traced_generation(toy: Compiled) -> None:
    vocab, cg = toy
    ids, m = generate(cg, vocab, np.random.default_rng(3))  # the article's demo 3 trace
    assert [ARTICLE_TOKENS[i] for i in ids] == [
        "{", '"', "name", '":"', "ada", "nam", "ada", '","', "age", '":', "36}",
    ]  # fmt: skip
    text = vocab.decode(ids).decode()
    assert text == '{"name":"adanamada","age":36}'
    assert json.loads(text) == {"name": "adanamada", "age": 36}
    assert m.is_accepting()


def test_seed002_500_generations_from_noise_all_parse(toy: Compiled, ref: ArticleDFA) -> None:
    vocab, cg = toy
    rng = np.random.default_rng(11)  # the article's demo 3 batch
    lengths, truncated = [], 0
    ref_state: list[int | None] = [START]

    def check(m: GrammarMatcher, row: npt.NDArray[np.int32], tok: int) -> None:
        # At every step formcast's mask is exactly the article's index for that state.
        state = ref_state[0]
        assert state is not None
        assert text_ids(row, vocab) == set(ref.allowed(state))
        ref_state[0] = ref.step_token(state, ARTICLE_TOKENS[tok])

    for _ in range(500):
        ref_state[0] = START
        ids, m = generate(cg, vocab, rng, on_step=check)
        text = vocab.decode(ids).decode()
        lengths.append(len(text))
        if not m.is_accepting():
            truncated += 1
            continue
        assert ref_state[0] == END
        obj = json.loads(text)
        assert set(obj) == {"name", "age"}
        assert isinstance(obj["name"], str)
        assert isinstance(obj["age"], int)
        assert re.fullmatch(TOY_PATTERN, text)
        # Finished: only the stop token remains, and it terminates the matcher.
        assert allowed_ids(mask_row(m, vocab), vocab.vocab_size) == {EOS_ID}
        assert m.accept_token(EOS_ID)
        assert m.is_terminated()
    assert truncated == 0
    assert (min(lengths), max(lengths)) == (19, 173)  # the article's printed range


def test_seed002_mask_with_zero_breaks_200_of_200(toy: Compiled, ref: ArticleDFA) -> None:
    vocab, cg = toy
    bad_counts = []
    for zero_mask in (True, False):
        rng = np.random.default_rng(21)  # the article's demo 7(a)
        bad = 0
        for _ in range(200):
            m = GrammarMatcher(cg)
            for _ in range(400):
                row = mask_row(m, vocab)
                logits = article_logits(rng)
                if zero_mask:  # the bug, written outside formcast: 0.0 on disallowed tokens
                    allowed = np.zeros(V_ARTICLE, dtype=bool)
                    allowed[list(text_ids(row, vocab))] = True
                    tok = sample_token(np.where(allowed, logits[:-1], 0.0), None, PLAIN, rng)
                else:
                    tok = sample_token(logits, row, PLAIN, rng)
                if not m.accept_token(tok):
                    bad += 1
                    break
                if m.is_accepting():
                    break
            else:
                bad += 1
        bad_counts.append(bad)
    assert bad_counts == [200, 0]


def test_seed002_reject_after_sampling_costs_23_6_draws(
    toy: Compiled,
) -> None:
    vocab, cg = toy
    first = text_ids(mask_row(GrammarMatcher(cg), vocab), vocab)
    rng = np.random.default_rng(31)  # the article's demo 7(c)
    counts = []
    for _ in range(300):
        tries = 0
        while True:
            tries += 1
            tok = sample_token(rng.normal(0, 2.0, V_ARTICLE), None, PLAIN, rng)
            if tok in first:
                break
        counts.append(tries)
    assert f"{np.mean(counts):.1f}" == "23.6"
    assert max(counts) == 142
    # Masking first: one draw, always legal.
    row = mask_row(GrammarMatcher(cg), vocab)
    assert all(sample_token(article_logits(rng), row, PLAIN, rng) in first for _ in range(300))


def test_seed002_first_char_check_lets_quote_brace_close_early(
    toy: Compiled, ref: ArticleDFA
) -> None:
    vocab, cg = toy
    # The article's table, inside the name string (state 1).
    whole = ref.allowed(NAME)
    first = ref.first_char_allowed(NAME)
    table = {'"}': (True, False), '","': (True, True), "lovelace": (True, True),
             "ace": (True, True), "}": (False, False), "age": (True, True),
             '":"': (True, False)}  # fmt: skip
    for tok, (first_ok, whole_ok) in table.items():
        assert (tid(tok) in first, tid(tok) in whole) == (first_ok, whole_ok), tok

    # A first-char checker builds {"name":"ada"} : valid JSON, wrong schema, no age field.
    sloppy_ids = [tid(t) for t in ('{"', "name", '":"', "ada", '"}')]
    state: int | None = START
    for i in sloppy_ids:
        assert state is not None
        assert i in ref.first_char_allowed(state)
        state = ref.step_token(state, ARTICLE_TOKENS[i]) if i in ref.allowed(state) else None
    text = "".join(ARTICLE_TOKENS[i] for i in sloppy_ids)
    assert text == '{"name":"ada"}'
    assert json.loads(text) == {"name": "ada"}  # parses...
    assert re.fullmatch(TOY_PATTERN, text) is None  # ...but is not in the language

    # formcast, in the same state: the quote alone is legal, the quote+brace token is not.
    m = matcher_after(cg, sloppy_ids[:-1])
    row = mask_row(m, vocab)
    ids = allowed_ids(row, vocab.vocab_size)
    assert tid('"') in ids  # the first character of '"}' is fine here...
    assert tid('"}') not in ids  # ...the token as a unit is not
    assert tid('":"') not in ids
    assert text_ids(row, vocab) == set(whole)
    assert not m.accept_token(tid('"}'))
    # A refused token leaves the state alone: the same mask, and the document can go on.
    assert np.array_equal(mask_row(m, vocab), row)
    assert m.accept_token(tid('","'))


def test_seed002_zero_brace_flips_legality_with_the_state(toy: Compiled, ref: ArticleDFA) -> None:
    vocab, cg = toy
    prefix = [tid(t) for t in ('{"', "name", '":"', "ada", '","', "age", '":')]
    zb = tid("0}")
    assert zb not in text_ids(mask_row(GrammarMatcher(cg), vocab), vocab)  # start
    assert zb not in text_ids(mask_row(matcher_after(cg, prefix[:4]), vocab), vocab)  # name
    m = matcher_after(cg, prefix)  # need a digit: JSON forbids a leading zero
    assert zb not in text_ids(mask_row(m, vocab), vocab)
    assert tid("0") not in text_ids(mask_row(m, vocab), vocab)
    assert m.accept_token(tid("3"))  # in age
    assert zb in text_ids(mask_row(m, vocab), vocab)
    assert m.accept_token(zb)
    assert m.is_accepting()
    assert text_ids(mask_row(m, vocab), vocab) == set()
    # The reference agrees: '0}' is legal only from "in age", where it ends in "done".
    assert {s: ref.step_token(s, "0}") for s in (START, NAME, DIGIT1, DIGITS_N, END)} == {
        START: None, NAME: None, DIGIT1: None, DIGITS_N: END, END: None,
    }  # fmt: skip
