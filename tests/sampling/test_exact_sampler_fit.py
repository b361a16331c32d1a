"""``ConditionedSampler(method="exact")`` against exact enumeration: chi-square goodness of fit.

Each toy is a :class:`CallableModel` whose whole distribution over the constraint's complete
outputs can be enumerated: ``p_cond(y) = p(y) 1[y in L] / Z`` computed by a depth-first walk of
the matcher (independent of the sampler's trie).  Exact samples must fit it (chi-square far
below the 0.999 critical value, fixed seeds); masked samples, biased by construction on these
toys, must not.  Deterministic: fixed seeds, thresholds far from the observed statistics.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from formcast.generation.conditioned import ConditionedSampler
from formcast.generation.inputs import compile_constraint
from formcast.model.callable import CallableModel
from formcast.runtime.matcher import GrammarMatcher
from formcast.sampling import SamplingParams, token_probabilities
from formcast.vocab.vocabulary import Vocabulary

Key = tuple[int, ...]


# -- chi-square -----------------------------------------------------------------------------------
def chi2_critical(df: int, q: float = 0.999) -> float:
    """The ``q`` quantile of chi-square(df): scipy when installed, else Wilson-Hilferty (whose
    relative error is below 1% for df >= 1 at q = 0.999; z_{0.999} = 3.0902)."""
    try:
        from scipy.stats import chi2

        return float(chi2.ppf(q, df))
    except ImportError:  # pragma: no cover - scipy is optional
        assert q == 0.999
        z = 3.0902
        return df * (1.0 - 2.0 / (9.0 * df) + z * math.sqrt(2.0 / (9.0 * df))) ** 3


def chi2_statistic(counts: Counter[Key], p: dict[Key, float]) -> tuple[float, int]:
    """Pearson's statistic and its degrees of freedom; cells with expected < 5 are pooled."""
    n = sum(counts.values())
    assert set(counts) <= set(p), "a sample outside the valid set"
    keys = sorted(p, key=lambda k: -p[k])
    big = [k for k in keys if n * p[k] >= 5.0]
    small = [k for k in keys if n * p[k] < 5.0]
    cells = [([k], p[k]) for k in big]
    if small:
        rest = sum(p[k] for k in small)
        if n * rest >= 5.0 or not cells:
            cells.append((small, rest))
        else:
            last_keys, last_p = cells.pop()
            cells.append((last_keys + small, last_p + rest))
    stat = 0.0
    for ks, pk in cells:
        observed = sum(counts.get(k, 0) for k in ks)
        expected = n * pk
        stat += (observed - expected) ** 2 / expected
    return stat, len(cells) - 1


# -- exact enumeration ----------------------------------------------------------------------------
def enumerate_conditioned(
    fn: Callable[[list[int]], np.ndarray],
    vocab: Vocabulary,
    prompt: list[int],
    *,
    regex: str | None = None,
    schema: object = None,
    params: SamplingParams | None = None,
    max_tokens: int = 16,
) -> tuple[dict[Key, float], float]:
    """``({text token ids: p_cond}, Z)`` by visiting every valid prefix of positive mass.

    Convention (the sampler's): an output ends with an allowed stop token (the model's
    probability) or where the grammar allows only stop tokens (factor 1); at most
    ``max_tokens`` text tokens."""
    params = params or SamplingParams(temperature=1.0)
    cg, _ = compile_constraint(vocab, regex=regex, schema=schema)
    assert cg is not None
    stops = vocab.stop_token_ids
    mass: dict[Key, float] = {}

    def visit(seq: list[int], matcher: GrammarMatcher, m: float) -> None:
        allowed = [int(t) for t in matcher.allowed_token_ids()]
        if not allowed:
            return
        if all(t in stops for t in allowed):
            mass[tuple(seq)] = mass.get(tuple(seq), 0.0) + m
            return
        probs = token_probabilities(fn(prompt + seq), None, params)
        for t in allowed:
            if probs[t] <= 0.0:
                continue
            if t in stops:
                mass[tuple(seq)] = mass.get(tuple(seq), 0.0) + m * float(probs[t])
            elif len(seq) < max_tokens:
                child = matcher.fork()
                assert child.accept_token(t)
                visit([*seq, t], child, m * float(probs[t]))

    visit([], GrammarMatcher(cg), 1.0)
    z = math.fsum(mass.values())
    return {k: v / z for k, v in mass.items()}, z


def log(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        out: np.ndarray = np.log(p)
    return out


# -- toys -----------------------------------------------------------------------------------------
YESNO = Vocabulary.from_tokens(
    [b"<bos>", b"ye", b"s", b"no", b"maybe", b"<eos>"], stop_token_ids=[5], name="yesno"
)


def yes_no(seq: list[int]) -> np.ndarray:
    """Seed 000's toy: ye 0.30, no 0.10, maybe 0.60; after ye: s 0.02, maybe 0.98."""
    out, p = seq[1:], np.zeros(6)
    if not out:
        p[[1, 3, 4]] = [0.3, 0.1, 0.6]
    elif out == [1]:
        p[[2, 4]] = [0.02, 0.98]
    else:
        p[5] = 1.0
    return log(p)


def byte_vocab(extra: tuple[bytes, ...]) -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>", *extra]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[256], name="bytes+")


CHOICE_VOCAB = byte_vocab((b"ac", b"bd", b"ax", b"cx"))


def hashed_model(
    vocab: Vocabulary, favourites: bytes, spread: float = 1.0, eos: float = 2.0
) -> Callable[[list[int]], np.ndarray]:
    """Logits that depend on the whole sequence (a seeded normal draw per prefix): the
    favourite bytes and every extra token get N(0, spread), EOS N(eos, spread), the other
    bytes -4."""
    fav = [b for b in favourites] + list(range(256, vocab.vocab_size))

    def fn(seq: list[int]) -> np.ndarray:
        g = np.random.default_rng(zlib.crc32(np.asarray(seq, dtype=np.int64).tobytes()))
        logits = np.full(vocab.vocab_size, -4.0)
        logits[fav] = g.normal(0.0, spread, len(fav))
        logits[256] += eos
        return logits

    return fn


def table_model(
    vocab: Vocabulary, tables: dict[bytes, dict[bytes, float]], default: dict[bytes, float]
) -> Callable[[list[int]], np.ndarray]:
    """Next-token probabilities by the text so far (after a one-token prompt): ``tables[text]``
    or ``default``, keyed by token bytes (``b"<eos>"`` for the stop token)."""
    by_bytes = {vocab.token_bytes(i): i for i in range(vocab.vocab_size)}
    by_bytes[b"<eos>"] = min(vocab.stop_token_ids)

    def fn(seq: list[int]) -> np.ndarray:
        text = b"".join(vocab.token_bytes(t) for t in seq[1:])
        p = np.zeros(vocab.vocab_size)
        for tok, q in tables.get(text, default).items():
            p[by_bytes[tok]] = q
        return log(p / p.sum())

    return fn


CHOICE_TABLES = {
    b"": {b"a": 0.4, b"b": 0.2, b"ac": 0.1, b"bd": 0.05, b"ax": 0.15, b"x": 0.1},
    b"a": {b"c": 0.1, b"d": 0.2, b"x": 0.5, b"<eos>": 0.2},  # "a" mostly goes wrong
    b"b": {b"c": 0.3, b"d": 0.1, b"cx": 0.4, b"<eos>": 0.2},
}
CHOICE_DEFAULT = {b"<eos>": 0.3, b"x": 0.3, b"a": 0.2, b"b": 0.1, b"ac": 0.1}
ENUM_TABLES = {
    b"": {b'"': 0.3, b'"re': 0.2, b'"green"': 0.1, b'"b': 0.1, b"x": 0.3},
    b'"': {b"r": 0.3, b"g": 0.2, b"b": 0.2, b"bl": 0.1, b"x": 0.2},
    b'"re': {b"d": 0.3, b'd"': 0.3, b"x": 0.4},
    b'"red': {b'"': 0.6, b"x": 0.4},
    b'"b': {b"l": 0.5, b"lu": 0.0, b"x": 0.5},
    b'"bl': {b"u": 0.3, b'ue"': 0.3, b"x": 0.4},
}
ENUM_DEFAULT = {
    tok: 1.0 for tok in (b"x", b'"', b"r", b"e", b"d", b"g", b"n", b"b", b"l", b"u", b'd"', b'ue"')
}


def counts_of(results: list) -> Counter[Key]:  # type: ignore[type-arg]
    assert all(r.finish_reason == "completed" for r in results)
    return Counter(tuple(r.token_ids) for r in results)


# -- the tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_yes_no_exact_fits_the_conditioned_distribution(seed: int) -> None:
    p, z = enumerate_conditioned(yes_no, YESNO, [0], regex="yes|no")
    assert z == pytest.approx(0.106)
    assert p[(1, 2)] == pytest.approx(0.006 / 0.106)
    sampler = ConditionedSampler(CallableModel(yes_no, YESNO), [0], regex="yes|no")
    counts = counts_of(sampler.sample(4000, seed=seed))
    stat, df = chi2_statistic(counts, p)
    assert stat < chi2_critical(df), (stat, counts)
    assert counts[(1, 2)] / 4000 == pytest.approx(0.057, abs=0.015)
    assert sampler.stats.z_estimate == pytest.approx(0.106, abs=1e-9)  # trie fully explored
    assert sampler.stats.model_calls == 2  # the root and "ye": nothing else is ever needed


def test_yes_no_mask_is_rejected_by_the_same_test() -> None:
    p, _ = enumerate_conditioned(yes_no, YESNO, [0], regex="yes|no")
    sampler = ConditionedSampler(CallableModel(yes_no, YESNO), [0], regex="yes|no", method="mask")
    counts = counts_of(sampler.sample(400, seed=0))
    assert counts[(1, 2)] / 400 == pytest.approx(0.75, abs=0.06)
    stat, df = chi2_statistic(counts, p)
    assert stat > 10 * chi2_critical(df)


def choice_model(kind: str) -> Callable[[list[int]], np.ndarray]:
    if kind == "table":
        return table_model(CHOICE_VOCAB, CHOICE_TABLES, CHOICE_DEFAULT)
    return hashed_model(CHOICE_VOCAB, b"abcdx")


@pytest.mark.parametrize(
    ("kind", "regex", "params"),
    [
        ("table", "(a|b)(c|d)?", SamplingParams(temperature=1.0)),
        ("table", "(a|b)(c|d)?", SamplingParams(temperature=0.7, top_p=0.9)),
        ("hashed", "((a|b)(c|d)?){1,3}", SamplingParams(temperature=1.3)),
    ],
)
def test_nested_choices_exact_fits(kind: str, regex: str, params: SamplingParams) -> None:
    fn = choice_model(kind)
    p, z = enumerate_conditioned(fn, CHOICE_VOCAB, [ord("q")], regex=regex, params=params)
    assert len(p) >= 5
    assert z < 0.9
    model = CallableModel(fn, CHOICE_VOCAB)
    sampler = ConditionedSampler(
        model, [ord("q")], regex=regex, temperature=params.temperature, top_p=params.top_p
    )
    for seed in (0, 1):
        counts = counts_of(sampler.sample(4000, seed=seed))
        stat, df = chi2_statistic(counts, p)
        assert stat < chi2_critical(df), (seed, stat, df)
    lo, hi = sampler.stats.z_ci
    assert lo - 1e-12 <= z <= hi + 1e-12
    assert sampler.stats.z_lower <= z + 1e-12 <= sampler.stats.z_upper + 2e-12


@pytest.mark.parametrize("kind", ["table", "hashed"])
def test_nested_choices_mask_is_rejected(kind: str) -> None:
    fn = choice_model(kind)
    regex = "(a|b)(c|d)?" if kind == "table" else "((a|b)(c|d)?){1,3}"
    p, _ = enumerate_conditioned(fn, CHOICE_VOCAB, [ord("q")], regex=regex)
    sampler = ConditionedSampler(
        CallableModel(fn, CHOICE_VOCAB), [ord("q")], regex=regex, method="mask"
    )
    stat, df = chi2_statistic(counts_of(sampler.sample(800, seed=0)), p)
    assert stat > 2 * chi2_critical(df), (stat, df)


ENUM_VOCAB = byte_vocab((b'"re', b'd"', b'"green"', b"bl", b'ue"', b'"b', b"lu"))


@pytest.mark.parametrize("seed", [3, 4])
def test_schema_enum_exact_fits(seed: int) -> None:
    schema = {"enum": ["red", "green", "blue"]}
    fn = table_model(ENUM_VOCAB, ENUM_TABLES, ENUM_DEFAULT)
    p, _ = enumerate_conditioned(fn, ENUM_VOCAB, [ord("q")], schema=schema)
    assert len(p) >= 6  # several tokenizations of each colour
    sampler = ConditionedSampler(CallableModel(fn, ENUM_VOCAB), [ord("q")], schema=schema)
    results = sampler.sample(4000, seed=seed)
    assert {r.value for r in results} <= {"red", "green", "blue"}
    stat, df = chi2_statistic(counts_of(results), p)
    assert stat < chi2_critical(df), (stat, df)


def test_schema_integer_with_stop_token_choice_fits() -> None:
    """A bounded integer: the stop token competes with more digits (the model's p(eos))."""
    schema = {"type": "integer", "minimum": 0, "maximum": 40}
    vocab = byte_vocab((b"12", b"40"))
    fn = hashed_model(vocab, b"0123456789x")
    p, _ = enumerate_conditioned(fn, vocab, [ord("q")], schema=schema)
    sampler = ConditionedSampler(CallableModel(fn, vocab), [ord("q")], schema=schema)
    results = sampler.sample(4000, seed=5)
    assert all(0 <= r.value <= 40 for r in results)
    stat, df = chi2_statistic(counts_of(results), p)
    assert stat < chi2_critical(df), (stat, df)


def test_max_tokens_conditions_the_target() -> None:
    """With max_tokens=2 the target is p(y | y in L, |y| <= 2): longer outputs never appear."""
    regex = "((a|b)(c|d)?){1,3}"
    fn = hashed_model(CHOICE_VOCAB, b"abcdx")
    p, _ = enumerate_conditioned(fn, CHOICE_VOCAB, [ord("q")], regex=regex, max_tokens=2)
    sampler = ConditionedSampler(
        CallableModel(fn, CHOICE_VOCAB), [ord("q")], regex=regex, max_tokens=2
    )
    counts = counts_of(sampler.sample(4000, seed=7))
    assert max(len(k) for k in counts) <= 2
    stat, df = chi2_statistic(counts, p)
    assert stat < chi2_critical(df), (stat, df)


@pytest.mark.parametrize("toy", ["yesno", "choice", "enum"])
def test_first_sample_of_a_fresh_sampler_is_exact(toy: str) -> None:
    """Every sample drawn while the trie is still unexplored is exact too (the frontier is
    where a wrong proposal or acceptance rule shows: a long-lived sampler mostly walks known
    nodes, so this test is the sharp one)."""
    fn: Callable[[list[int]], np.ndarray]
    kw: dict[str, object]
    if toy == "yesno":
        fn, vocab, prompt, kw = yes_no, YESNO, [0], {"regex": "yes|no"}
    elif toy == "choice":
        fn, vocab, prompt = choice_model("table"), CHOICE_VOCAB, [ord("q")]
        kw = {"regex": "(a|b)(c|d)?"}
    else:
        fn, vocab, prompt = table_model(ENUM_VOCAB, ENUM_TABLES, ENUM_DEFAULT), ENUM_VOCAB, [113]
        kw = {"schema": {"enum": ["red", "green", "blue"]}}
    p, _ = enumerate_conditioned(fn, vocab, prompt, **kw)  # type: ignore[arg-type]
    model = CallableModel(fn, vocab)
    results = [
        ConditionedSampler(model, prompt, **kw).sample(1, seed=seed)[0]  # type: ignore[arg-type]
        for seed in range(1500)
    ]
    stat, df = chi2_statistic(counts_of(results), p)
    assert stat < chi2_critical(df), (stat, df)
