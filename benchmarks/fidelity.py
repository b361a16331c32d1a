"""Fidelity benchmark: how far each sampling method is from the model conditioned on validity.

For a model ``p`` and a constraint with valid set ``L``, the target is the conditioned
distribution ``p_cond(y) = p(y) / Z`` with ``Z = sum_{y in L} p(y)``.  This benchmark measures,
for each method (``mask``: per-step masking, what ``generate`` does by default; ``aligned``:
grammar-aligned sampling; ``exact``: adaptive rejection), the divergence ``KL(p_cond || p_method)``
and the total variation ``TV = 1/2 sum |p_cond - p_method|`` of its *empirical* distribution
against the number of samples, and its cost (model calls per sample).

Exact references, by enumeration.  :func:`enumerate_distributions` walks every token path the
grammar mask allows (a depth-first search over the matcher, one model evaluation per prefix)
and computes, in the same walk, both

* ``p_cond``: the product of the model's *raw* next-token probabilities along each path,
  summed over the token paths of each string and normalized by ``Z`` (see the two targets);
* ``p_mask``: the product of the probabilities *renormalized over the allowed tokens* along
  each path, i.e. the exact distribution of masked sampling (no sampling noise).

Two targets, which differ only at *forced* stops (where the grammar allows nothing but a stop
token).  ``full``: ``p(y <stop>)``, the model's probability of the complete output, its stop
token included everywhere.  ``truncated`` (the default, and the target of formcast's samplers
and of ``exact_conditioned_distribution``): a forced stop is taken with probability 1, as
``generate`` does (it never asks the model there), i.e. "the model's output, cut where the
grammar cannot continue, is valid".  They coincide when the model always stops where it must
(seed 000); the benchmark prints both, and ``--target`` picks the one of the main columns.

All token paths of a string are counted (not only the canonical tokenization).  On the toys the
walk is exhaustive; on SmolLM2 paths whose raw *and* masked probabilities both fall below
``prune`` are cut, and the mass cut is reported (bounded by ``prune`` times the number of cuts).

Empirical divergences.  TV uses the raw empirical frequencies (add-0).  KL would be infinite when
a method never produced a string that ``p_cond`` gives mass to, so the empirical distribution is
smoothed: ``q(y) = (count(y) + EPS_COUNT) / (n + EPS_COUNT * |L|)`` with ``EPS_COUNT = 0.5``
(Jeffreys/Krichevsky-Trofimov, the standard add-1/2 estimator).  With enough samples the
smoothing bias is O(|L| / n); the curves of an unbiased sampler therefore fall as ~1/n while a
biased one levels off at its true KL (for mask that limit is also given exactly, from ``p_mask``).

Cost.  Model calls are counted by a thin proxy around the model (:class:`CountingModel`: every
``start``/``step`` is one call), so methods are compared by the same meter; the sampler's own
``.stats`` are printed when it has them.

Usage::

    python benchmarks/fidelity.py                 # toys + SmolLM2, writes docs/img/*.png
    python benchmarks/fidelity.py --no-model      # toys only
    python benchmarks/fidelity.py --no-plots --sizes 100,300
    python benchmarks/fidelity.py --no-plots --only "SmolLM2 object" --object-world \
        --model-methods mask,mask+ff

Samplers: ``formcast.generation.conditioned.ConditionedSampler`` when importable (all three
methods); otherwise ``mask`` runs through :func:`formcast.generation.generate` and the others
are reported as unavailable.  ``mask+ff`` (SmolLM2 only: it needs the tokenizer) is
``generate(..., fast_forward=True)``: masked sampling that appends forced text in the
tokenizer's spelling (:mod:`formcast.generation.fast_forward`); its KL next to ``mask``'s is
the fidelity cost of fast-forward, its model calls per sample the saving.  The ``SmolLM2
object`` world (``{"sentiment": <enum>}``, added by ``--object-world``) is the schema-shaped
one, where the forced text (``{"sentiment":"``) is long.

Lifetime: a script; each run builds its toy models, samples, and prints markdown tables.  Cost:
toys a few seconds per method at 3,000 samples; SmolLM2 (one thread) a few minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from formcast.generation import LanguageModel, compile_constraint, generate
from formcast.model.callable import CallableModel
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary

__all__ = [
    "EPS_COUNT",
    "METHODS",
    "CountingModel",
    "Enumeration",
    "Toy",
    "enumerate_distributions",
    "kl_divergence",
    "nested_toy",
    "schema_toy",
    "smoothed_empirical",
    "total_variation",
    "yes_no_toy",
]

EPS_COUNT = 0.5
"""Pseudo-count added to every valid string before the empirical KL (add-1/2 smoothing)."""

METHODS = ("mask", "aligned", "exact")
UNFINISHED = "<unfinished>"
"""The outcome of a sample that did not complete inside the constraint (dead end, budget)."""

NEG = -1e9  # a logit whose exp underflows to exactly 0.0 in float64: probability exactly 0


# -- models ------------------------------------------------------------------------------------
class CountingModel:
    """A :class:`LanguageModel` proxy that counts model evaluations (``start`` + ``step``)."""

    def __init__(self, model: LanguageModel) -> None:
        self.inner = model
        self.calls = 0

    @property
    def vocab(self) -> Vocabulary:
        return self.inner.vocab

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def chat_template(self) -> Any:
        return self.inner.chat_template

    @property
    def max_context(self) -> int | None:
        return self.inner.max_context

    def tokenize(self, text: str) -> list[int]:
        return self.inner.tokenize(text)

    def start(self, prompt_ids: Sequence[int]) -> Any:
        self.calls += 1
        return self.inner.start(prompt_ids)

    def step(self, token_ids: Sequence[int]) -> Any:
        self.calls += 1
        return self.inner.step(token_ids)

    def __getattr__(self, item: str) -> Any:  # anything else a wrapper offers
        return getattr(self.inner, item)


@dataclass
class Toy:
    """A toy world: a model, its prompt (token ids), one constraint, and a label."""

    name: str
    model: LanguageModel
    prompt_ids: list[int]
    constraint: dict[str, Any]
    max_tokens: int = 32
    note: str = ""


def _table_model(
    tokens: Sequence[bytes], table: Mapping[bytes, Mapping[bytes, float]], default: bytes
) -> Callable[[list[int]], np.ndarray]:
    """Logits from a table ``context bytes -> {next token: probability}`` (missing = 0).

    The context is the text of the generated tokens (the first token, the prompt ``<bos>``, is
    skipped); a context not in the table puts all its mass on ``default``."""
    index = {t: i for i, t in enumerate(tokens)}

    def fn(ids: list[int]) -> np.ndarray:
        ctx = b"".join(tokens[i] for i in ids[1:])
        row = table.get(ctx, {default: 1.0})
        logits = np.full(len(tokens), NEG)
        for tok, p in row.items():
            if p > 0:
                logits[index[tok]] = math.log(p)
        return logits

    return fn


def yes_no_toy() -> Toy:
    """Seed 000's example: valid strings "yes" (tokens ye+s) and "no"; the model's first-step
    probabilities ye 0.30, no 0.10, maybe 0.60; after ye: s 0.02, maybe 0.98.

    Masked: P(yes) = 0.30 / 0.40 = 0.75.  Conditioned: P(yes) = 0.006 / 0.106 ~ 0.0566."""
    tokens = [b"<bos>", b"ye", b"s", b"no", b"maybe", b"<eos>"]
    table: dict[bytes, dict[bytes, float]] = {
        b"": {b"ye": 0.30, b"no": 0.10, b"maybe": 0.60},
        b"ye": {b"s": 0.02, b"maybe": 0.98},
        b"yes": {b"<eos>": 1.0},
        b"no": {b"<eos>": 1.0},
    }
    vocab = Vocabulary.from_tokens(tokens, stop_token_ids=[5], name="yes-no")
    model = CallableModel(_table_model(tokens, table, b"<eos>"), vocab, name="seed000")
    return Toy("yes/no (seed 000)", model, [0], {"regex": "yes|no"}, max_tokens=4)


def nested_toy() -> Toy:
    """``(ab|a)(c|cd)`` over single bytes: the model likes the prefix ``ab`` (0.8 after ``a``),
    which then mostly wants the forbidden ``x``; the valid strings abc, abcd, ac, acd."""
    tokens = [b"<bos>", b"a", b"b", b"c", b"d", b"x", b"<eos>"]
    table: dict[bytes, dict[bytes, float]] = {
        b"": {b"a": 0.9, b"x": 0.1},
        b"a": {b"b": 0.8, b"c": 0.1, b"x": 0.1},
        b"ab": {b"c": 0.05, b"x": 0.95},
        b"ac": {b"d": 0.3, b"<eos>": 0.5, b"x": 0.2},
        b"abc": {b"d": 0.6, b"<eos>": 0.2, b"x": 0.2},
        b"acd": {b"<eos>": 0.9, b"x": 0.1},
        b"abcd": {b"<eos>": 0.5, b"x": 0.5},
    }
    vocab = Vocabulary.from_tokens(tokens, stop_token_ids=[6], name="abcdx")
    model = CallableModel(_table_model(tokens, table, b"x"), vocab, name="nested")
    return Toy("nested (ab|a)(c|cd)", model, [0], {"regex": "(ab|a)(c|cd)"}, max_tokens=6)


SCHEMA_TOY = {
    "type": "object",
    "properties": {
        "c": {"enum": ["red", "blue"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 12},
    },
    "required": ["c", "n"],
    "additionalProperties": False,
}


def schema_toy(scale: float = 1.5, bonus: float = 6.0) -> Toy:
    """A small JSON schema (an enum and an integer in [0, 12]) over a byte vocabulary without
    whitespace (so the valid set is finite: 2 x 13 documents), with a pseudo-random model that
    half knows the format: the logits of each context are a fixed function of its bytes
    (``crc32`` seeds a generator, times ``scale``), plus ``bonus`` on the tokens the grammar
    allows there.  Most of the mass is on valid continuations, but not all, and unevenly: the
    per-step mask then redistributes what the model put on invalid tokens."""
    chars = sorted(set(b'{}":,cnredblu0123456789x'))
    tokens = [b"<bos>"] + [bytes([c]) for c in chars] + [b"<eos>"]
    eos = len(tokens) - 1
    width = len(tokens)
    vocab = Vocabulary.from_tokens(tokens, stop_token_ids=[eos], name="json-bytes")
    compiled, _ = compile_constraint(vocab, schema=SCHEMA_TOY)
    assert compiled is not None

    def fn(ids: list[int]) -> np.ndarray:
        ctx = b"".join(tokens[i] for i in ids[1:])
        rng = np.random.default_rng(zlib.crc32(ctx))
        logits = rng.standard_normal(width) * scale
        matcher = GrammarMatcher(compiled)
        if matcher.accept_tokens(ids[1:]):
            logits[[int(t) for t in matcher.allowed_token_ids()]] += bonus
        logits[0] = NEG  # never <bos>
        return logits

    model = CallableModel(fn, vocab, name="schema-toy")
    return Toy("schema {enum, int 0..12}", model, [0], {"schema": SCHEMA_TOY}, max_tokens=24)


def wide_toy(scale: float = 2.0, trap: float = 4.0) -> Toy:
    """A larger valid set, where ``aligned`` and ``exact`` part: ``[a-h]{1,3}`` (584 strings)
    over single letters, a forbidden ``z`` and ``<eos>``.  The logits are a fixed function of
    the context (``crc32``), and ``z`` gets ``trap`` times a second random draw: how much of
    each prefix's mass falls on the forbidden token varies widely and is only learnt by
    visiting that prefix, which grammar-aligned sampling does one sample at a time."""
    chars = b"abcdefgh"
    tokens = [b"<bos>"] + [bytes([c]) for c in chars] + [b"z", b"<eos>"]
    width = len(tokens)
    z = tokens.index(b"z")
    vocab = Vocabulary.from_tokens(tokens, stop_token_ids=[width - 1], name="a-h")

    def fn(ids: list[int]) -> np.ndarray:
        ctx = b"".join(tokens[i] for i in ids[1:])
        rng = np.random.default_rng(zlib.crc32(b"wide:" + ctx))
        logits = rng.standard_normal(width) * scale
        logits[z] += trap * rng.standard_normal()
        logits[0] = NEG
        return logits

    model = CallableModel(fn, vocab, name="wide-toy")
    return Toy("wide [a-h]{1,3}", model, [0], {"regex": "[a-h]{1,3}"}, max_tokens=8)


# -- exact references --------------------------------------------------------------------------
@dataclass
class Enumeration:
    """The exact distributions over strings, from a walk of every allowed token path."""

    p_raw: dict[str, float]  # unnormalized model probability p(y) per valid string
    p_mask: dict[str, float]  # exact masked-sampling probability (UNFINISHED included)
    z: float  # valid mass: sum of p_raw
    nodes: int  # model evaluations the walk made
    pruned: int = 0  # paths cut (raw and masked probability both below ``prune``)
    pruned_raw: float = 0.0  # raw mass cut
    pruned_mask: float = 0.0  # masked mass cut
    paths: dict[str, int] = field(default_factory=dict)  # token paths per string
    # p(y) with a *forced* stop (the only allowed token) taken as probability 1: what a sampler
    # that never asks the model at forced stops targets (a diagnostic; the target is p_raw)
    p_raw_forced_free: dict[str, float] = field(default_factory=dict)

    @property
    def p_cond(self) -> dict[str, float]:
        """``p(y <stop>) / Z``: the model's complete outputs, conditioned on validity."""
        return {y: p / self.z for y, p in self.p_raw.items()}

    @property
    def p_cond_truncated(self) -> dict[str, float]:
        """The same with every *forced* stop taken as probability 1 (see the module doc)."""
        zf = sum(self.p_raw_forced_free.values())
        return {y: p / zf for y, p in self.p_raw_forced_free.items()}

    def target(self, name: str) -> dict[str, float]:
        """``"full"``: :attr:`p_cond`; ``"truncated"``: :attr:`p_cond_truncated`."""
        return self.p_cond if name == "full" else self.p_cond_truncated


TARGETS = ("truncated", "full")


def other(target: str) -> str:
    return "full" if target == "truncated" else "truncated"


def _softmax(logits: Any) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64).reshape(-1)
    x = x - np.max(x)
    e: np.ndarray = np.exp(x)
    out: np.ndarray = e / e.sum()
    return out


def enumerate_distributions(
    model: LanguageModel,
    prompt_ids: Sequence[int],
    constraint: Mapping[str, Any],
    *,
    max_tokens: int = 32,
    prune: float = 0.0,
    temperature: float = 1.0,
) -> Enumeration:
    """Exact ``p(y)`` (raw) and masked-sampling distributions over the strings of the constraint.

    One model evaluation (``model.start(prompt + path)``) per prefix on an allowed token path;
    a path reaching ``max_tokens`` text tokens unfinished counts as ``UNFINISHED`` for masking
    (and is not valid).  ``prune > 0`` cuts paths whose raw and masked probabilities are both
    below it (for large vocabularies); the cut mass is recorded."""
    compiled, _kind = compile_constraint(model.vocab, **dict(constraint))
    if compiled is None:
        raise ValueError("enumerate_distributions needs a constraint")
    stops = set(int(i) for i in model.vocab.stop_token_ids)
    token_bytes = model.vocab.token_bytes
    out = Enumeration(p_raw={}, p_mask={}, z=0.0, nodes=0)

    def add(d: dict[str, float], key: str, value: float) -> None:
        d[key] = d.get(key, 0.0) + value

    def walk(
        matcher: GrammarMatcher, path: list[int], text: bytes, raw: float, mask: float, free: float
    ) -> None:
        if len(path) >= max_tokens:
            add(out.p_mask, UNFINISHED, mask)
            return
        allowed = [int(t) for t in matcher.allowed_token_ids()]
        if not allowed:
            add(out.p_mask, UNFINISHED, mask)
            return
        logits = np.asarray(model.start(list(prompt_ids) + path), dtype=np.float64)
        out.nodes += 1
        p = _softmax(logits / temperature)
        sub = p[allowed]
        total = float(sub.sum())
        forced_stop = all(t in stops for t in allowed)
        if forced_stop:  # the output ends here with probability 1 (once, whatever the stop id)
            y = text.decode("utf-8", errors="replace")
            add(out.p_raw_forced_free, y, free)
        for tok, pt in zip(allowed, sub, strict=True):
            r = raw * float(pt)
            m = mask * (float(pt) / total if total > 0 else 1.0 / len(allowed))
            if tok in stops:
                y = text.decode("utf-8", errors="replace")
                add(out.p_raw, y, r)
                add(out.p_mask, y, m)
                if not forced_stop:
                    add(out.p_raw_forced_free, y, free * float(pt))
                out.paths[y] = out.paths.get(y, 0) + 1
                continue
            if prune > 0 and r < prune and m < prune:
                out.pruned += 1
                out.pruned_raw += r
                out.pruned_mask += m
                continue
            child = matcher.fork()
            if not child.accept_token(tok):
                continue
            walk(child, [*path, tok], text + token_bytes(tok), r, m, free * float(pt))

    walk(GrammarMatcher(compiled), [], b"", 1.0, 1.0, 1.0)
    out.z = sum(out.p_raw.values())
    return out


def aligned_next_distribution(
    sampler: Any,
    model: LanguageModel,
    prompt_ids: Sequence[int],
    constraint: Mapping[str, Any],
    *,
    max_tokens: int = 32,
    temperature: float = 1.0,
) -> dict[str, float]:
    """The exact distribution of the *next* sample of a grammar-aligned sampler, from its trie.

    ASAp samples each step from ``p(c) * EFG(c)`` renormalized; below a prefix it has not
    stored, every EFG is the optimistic ``1`` (it samples as masking would).  This walks every
    allowed token path, using the trie's EFGs where the prefix is stored and the masked model
    probabilities elsewhere: no sampling noise, so it shows the method's own bias however large
    the valid set is.  A forced stop ends an output with factor 1 (the samplers' default).
    ``sampler`` is a ``ConditionedSampler(method="aligned")``."""
    compiled, _kind = compile_constraint(model.vocab, **dict(constraint))
    if compiled is None:
        raise ValueError("aligned_next_distribution needs a constraint")
    root = getattr(getattr(sampler, "_method", None), "sampler", None)
    trie_root = getattr(root, "_root", None)
    stops = np.zeros(model.vocab.vocab_size, dtype=bool)
    stops[list(model.vocab.stop_token_ids)] = True
    token_bytes = model.vocab.token_bytes
    out: dict[str, float] = {}

    def walk(matcher: GrammarMatcher, path: list[int], text: bytes, q: float, node: Any) -> None:
        allowed = matcher.allowed_token_ids().astype(np.int64)
        y = text.decode("utf-8", errors="replace")
        if allowed.size == 0 or (len(path) >= max_tokens and not stops[allowed].any()):
            return  # dead: ASAp discards such descents and samples again (renormalized below)
        if stops[allowed].all():
            out[y] = out.get(y, 0.0) + q
            return
        if node is not None and hasattr(node, "child_efg"):
            ids, weights = node.ids, node.probs * node.child_efg
            children = node.children
        else:
            p = _softmax(np.asarray(model.start(list(prompt_ids) + path)) / temperature)
            ids, weights, children = allowed, p[allowed], {}
            if len(path) >= max_tokens:
                weights = np.where(stops[allowed], weights, 0.0)
        total = float(weights.sum())
        if total <= 0:
            return
        for i, (tok, w) in enumerate(zip(ids.tolist(), weights.tolist(), strict=True)):
            if w <= 0:
                continue
            if stops[tok]:
                out[y] = out.get(y, 0.0) + q * w / total
                continue
            child = matcher.fork()
            if child.accept_token(tok):
                walk(child, [*path, tok], text + token_bytes(tok), q * w / total, children.get(i))

    walk(GrammarMatcher(compiled), [], b"", 1.0, trie_root)
    z = sum(out.values())
    return {k: v / z for k, v in out.items()} if z > 0 else out


def aligned_convergence(
    toy: Toy, enum: Enumeration, checkpoints: Sequence[int], *, seed: int = 0
) -> list[tuple[int, float, float]]:
    """``(samples drawn, KL(p_cond || next-sample distribution), TV)`` of ``aligned`` at each
    checkpoint (exact, from its trie: :func:`aligned_next_distribution`)."""
    cls = conditioned_sampler_class()
    sampler = cls(
        toy.model, list(toy.prompt_ids), method="aligned", max_tokens=toy.max_tokens,
        **dict(toy.constraint),
    )  # fmt: skip
    rng_seed = seed
    drawn = 0
    p_cond = enum.p_cond_truncated
    rows: list[tuple[int, float, float]] = []
    for n in checkpoints:
        if n > drawn:
            sampler.sample(n - drawn, seed=rng_seed)
            rng_seed += 1
            drawn = n
        q = aligned_next_distribution(
            sampler, toy.model, toy.prompt_ids, toy.constraint, max_tokens=toy.max_tokens
        )
        rows.append((n, kl_divergence(p_cond, q), total_variation(p_cond, q)))
    return rows


# -- divergences -------------------------------------------------------------------------------
def total_variation(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """``1/2 sum_y |p(y) - q(y)|`` over the union of supports."""
    keys = set(p) | set(q)
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in keys)


def kl_divergence(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """``KL(p || q) = sum_y p(y) log(p(y) / q(y))`` in nats; ``inf`` where ``q`` misses mass."""
    total = 0.0
    for k, pk in p.items():
        if pk <= 0:
            continue
        qk = q.get(k, 0.0)
        if qk <= 0:
            return math.inf
        total += pk * math.log(pk / qk)
    return max(total, 0.0)


def empirical(outcomes: Sequence[str]) -> dict[str, float]:
    """Raw frequencies (add-0)."""
    n = len(outcomes)
    return {k: c / n for k, c in Counter(outcomes).items()}


def smoothed_empirical(outcomes: Sequence[str], support: Sequence[str]) -> dict[str, float]:
    """Frequencies with ``EPS_COUNT`` added to every string of ``support`` (and to any other
    outcome seen), for a finite empirical KL."""
    counts = Counter(outcomes)
    keys = set(support) | set(counts)
    denom = len(outcomes) + EPS_COUNT * len(keys)
    return {k: (counts.get(k, 0) + EPS_COUNT) / denom for k in keys}


# -- samplers ----------------------------------------------------------------------------------
def conditioned_sampler_class() -> Any:
    try:
        from formcast.generation.conditioned import ConditionedSampler
    except ImportError:
        return None
    return ConditionedSampler


@dataclass
class Run:
    method: str
    outcomes: list[str]
    calls: int
    seconds: float
    stats: Any = None
    error: str | None = None
    noncanonical: float = math.nan  # fraction of completed outputs the tokenizer would respell
    dead_ends: int = 0


def split_method(method: str) -> tuple[str, bool]:
    """``"exact+canonical"`` -> ``("exact", True)``."""
    base, _, flag = method.partition("+")
    return base, flag == "canonical"


FAST_FORWARD = "mask+ff"
"""The method name of masked sampling with ``fast_forward=True`` (through ``generate``; it
needs a model with ``encode_bytes``, so SmolLM2 only)."""


def noncanonical_rate(model: LanguageModel, results: Sequence[Any]) -> float:
    """Fraction of the completed outputs whose token ids are not ``encode(their bytes)``
    (``nan`` when the model has no ``encode_bytes``)."""
    encode = getattr(model, "encode_bytes", None)
    if not callable(encode):
        return math.nan
    from formcast.vocab.canonical import is_canonical

    done = [r for r in results if r.finish_reason == "completed"]
    if not done:
        return math.nan
    bad = sum(is_canonical(model.vocab, encode, r.token_ids) is False for r in done)
    return bad / len(done)


def _outcome(result: Any) -> str:
    return str(result.text) if result.finish_reason == "completed" else UNFINISHED


def run_method(
    method: str,
    model: LanguageModel,
    prompt_ids: Sequence[int],
    constraint: Mapping[str, Any],
    n: int,
    *,
    seed: int,
    max_tokens: int,
    forced_stop: str = "certain",
) -> Run:
    """Draw ``n`` samples with ``method`` (``"exact+canonical"``: with ``canonical=True``);
    model calls counted by :class:`CountingModel`."""
    counting = CountingModel(model)
    cls = conditioned_sampler_class()
    base, canonical = split_method(method)
    t0 = time.perf_counter()
    if method == FAST_FORWARD:
        return _run_generate(counting, model, prompt_ids, constraint, n, seed=seed,
                             max_tokens=max_tokens, t0=t0, fast_forward=True)  # fmt: skip
    if cls is not None:
        extra: dict[str, Any] = {"canonical": True} if canonical else {}
        if forced_stop != "certain":
            extra["forced_stop"] = forced_stop
        try:
            sampler = cls(
                counting,
                list(prompt_ids),
                method=base,
                temperature=1.0,
                top_p=1.0,
                max_tokens=max_tokens,
                **extra,
                **dict(constraint),
            )
            results = sampler.sample(n, seed=seed)
        except Exception as exc:  # report, do not hide: a method that fails is a result
            return Run(method, [], counting.calls, time.perf_counter() - t0, None, repr(exc))
        return Run(
            method,
            [_outcome(r) for r in results],
            counting.calls,
            time.perf_counter() - t0,
            getattr(sampler, "stats", None),
            noncanonical=noncanonical_rate(model, results),
            dead_ends=sum(r.finish_reason == "dead_end" for r in results),
        )
    if method != "mask":
        return Run(method, [], 0, 0.0, None, "ConditionedSampler not importable")
    return _run_generate(
        counting, model, prompt_ids, constraint, n, seed=seed, max_tokens=max_tokens, t0=t0
    )


def _run_generate(
    counting: CountingModel,
    model: LanguageModel,
    prompt_ids: Sequence[int],
    constraint: Mapping[str, Any],
    n: int,
    *,
    seed: int,
    max_tokens: int,
    t0: float,
    fast_forward: bool = False,
) -> Run:
    """``n`` samples of ``generate`` (temperature 1, seeds ``seed * 1_000_003 + i``)."""
    method = FAST_FORWARD if fast_forward else "mask"
    extra: dict[str, Any] = {"fast_forward": True} if fast_forward else {}
    results = []
    try:
        for i in range(n):
            results.append(
                generate(
                    counting,
                    list(prompt_ids),
                    max_tokens=max_tokens,
                    temperature=1.0,
                    seed=seed * 1_000_003 + i,
                    **extra,
                    **dict(constraint),
                )
            )
    except Exception as exc:  # report, do not hide: a method that fails is a result
        return Run(method, [], counting.calls, time.perf_counter() - t0, None, repr(exc))
    return Run(
        method,
        [_outcome(r) for r in results],
        counting.calls,
        time.perf_counter() - t0,
        noncanonical=noncanonical_rate(model, results),
        dead_ends=sum(r.finish_reason == "dead_end" for r in results),
    )


# -- the benchmark -----------------------------------------------------------------------------
@dataclass
class Row:
    world: str
    method: str
    n: int
    kl: float
    tv: float
    calls_per_sample: float
    seconds: float
    error: str | None = None
    kl_other: float = math.nan
    tv_other: float = math.nan
    noncanonical: float = math.nan
    dead_ends: int = 0


def evaluate(
    world: str,
    model: LanguageModel,
    prompt_ids: Sequence[int],
    constraint: Mapping[str, Any],
    enum: Enumeration,
    sizes: Sequence[int],
    *,
    seed: int,
    max_tokens: int,
    methods: Sequence[str] = METHODS,
    target: str = "truncated",
) -> list[Row]:
    """KL and TV of each method's first ``n`` samples, for each ``n`` in ``sizes``."""
    p_cond, p_trunc = enum.target(target), enum.target(other(target))
    support = sorted(p_cond)
    rows: list[Row] = []
    n_max = max(sizes)
    for method in methods:
        run = run_method(
            method,
            model,
            prompt_ids,
            constraint,
            n_max,
            seed=seed,
            max_tokens=max_tokens,
            forced_stop="model" if target == "full" else "certain",
        )
        if run.error is not None:
            rows.append(Row(world, method, n_max, math.nan, math.nan, math.nan, 0.0, run.error))
            continue
        cps = run.calls / max(len(run.outcomes), 1)
        for n in sizes:
            head = run.outcomes[:n]
            rows.append(
                Row(
                    world,
                    method,
                    n,
                    kl_divergence(p_cond, smoothed_empirical(head, support)),
                    total_variation(p_cond, empirical(head)),
                    cps,
                    run.seconds,
                    None,
                    kl_divergence(p_trunc, smoothed_empirical(head, support)),
                    total_variation(p_trunc, empirical(head)),
                    run.noncanonical if n == n_max else math.nan,
                    run.dead_ends if n == n_max else 0,
                )
            )
        if run.stats is not None:
            print(f"    {world} / {method} stats: {run.stats}", file=sys.stderr)
    return rows


def fmt_dist(d: Mapping[str, float], limit: int = 6) -> str:
    items = sorted(d.items(), key=lambda kv: -kv[1])[:limit]
    return ", ".join(f"{json.dumps(k)}: {v:.4f}" for k, v in items)


def print_reference(world: str, enum: Enumeration, target: str = "truncated") -> None:
    p_cond = enum.target(target)
    print(f"\n### {world}\n")
    print(
        f"- valid strings: {len(p_cond)}, valid mass (full) Z = {enum.z:.6g}, walk: {enum.nodes} "
        f"model evaluations"
        + (
            f", {enum.pruned} paths pruned (raw mass <= "
            f"{enum.pruned_raw:.2g}, masked mass <= {enum.pruned_mask:.2g})"
            if enum.pruned
            else ""
        )
    )
    print(f"- p_cond ({target}): {fmt_dist(p_cond)}")
    print(f"- p_cond ({other(target)}): {fmt_dist(enum.target(other(target)))}")
    print(f"- p_mask (exact): {fmt_dist(enum.p_mask)}")
    print(
        f"- exact KL(p_cond ({target}) || p_mask) = {kl_divergence(p_cond, enum.p_mask):.4f} nats, "
        f"TV = {total_variation(p_cond, enum.p_mask):.4f}"
    )
    zf = sum(enum.p_raw_forced_free.values())
    full, trunc = enum.p_cond, enum.p_cond_truncated
    print(
        f"- truncated target: Z' = {zf:.6g}; KL(full || truncated) = "
        f"{kl_divergence(full, trunc):.4f} nats, TV = {total_variation(full, trunc):.4f}"
    )


def print_table(rows: Sequence[Row], *, canonical_columns: bool = False) -> None:
    """The markdown table; ``canonical_columns`` adds the non-canonical rate and the dead
    ends (filled on each run's last row: they are over the whole run)."""
    extra = " non-canonical | dead ends |" if canonical_columns else ""
    print(
        "\n| world | method | samples | KL(p_cond‖p̂) nats | TV | KL / TV vs the other "
        f"target | model calls / sample | s |{extra}"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if canonical_columns else ""))
    for r in rows:
        world = r.world.replace("|", "\\|")  # a markdown table cell
        if r.error:
            print(f"| {world} | {r.method} | – | – | – | – | ({r.error[:70]}) | – |")
            continue
        tail = ""
        if canonical_columns:
            rate = "" if math.isnan(r.noncanonical) else f"{r.noncanonical:.1%}"
            dead = str(r.dead_ends) if rate else ""
            tail = f" {rate} | {dead} |"
        print(
            f"| {world} | {r.method} | {r.n} | {r.kl:.4f} | {r.tv:.4f} | "
            f"{r.kl_other:.4f} / {r.tv_other:.4f} | {r.calls_per_sample:.3f} | "
            f"{r.seconds:.1f} |{tail}"
        )


def plot(
    rows: Sequence[Row],
    refs: Mapping[str, Enumeration],
    out_dir: Path,
    target: str = "truncated",
    convergence: Sequence[tuple[int, float, float]] = (),
) -> list[Path]:
    """KL against samples (log-log, one panel per world) and seed 000's bar chart; on the
    wide toy also aligned's exact next-sample KL (``convergence``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    worlds = list(dict.fromkeys(r.world for r in rows))
    ncols = min(3, len(worlds))
    nrows = -(-len(worlds) // ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(4.0 * ncols, 3.1 * nrows), squeeze=False)
    flat = list(grid.flat)
    for extra in flat[len(worlds) :]:
        extra.set_visible(False)
    axes = [flat[: len(worlds)]]
    colors = {"mask": "tab:red", "aligned": "tab:orange", "exact": "tab:green"}
    for ax, world in zip(axes[0], worlds, strict=True):
        for method in METHODS:
            pts = [
                (r.n, r.kl)
                for r in rows
                if r.world == world and r.method == method and not r.error and r.kl > 0
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), "o-", label=method, color=colors[method])
        pts_next = [(n, kl) for n, kl, _tv in convergence if n > 0 and kl > 0]
        if world.startswith("wide") and pts_next:
            ax.plot(
                *zip(*pts_next, strict=True), "s:", color=colors["aligned"], ms=3,
                label="aligned, next sample (exact)",
            )  # fmt: skip
            ax.legend(fontsize=6, loc="lower left")
        enum = refs.get(world)
        if enum is not None:
            exact = kl_divergence(enum.target(target), enum.p_mask)
            if 0 < exact < math.inf:
                ax.axhline(exact, ls="--", color=colors["mask"], lw=0.8, label="mask (exact)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(world, fontsize=9)
        ax.set_xlabel("samples")
        ax.grid(True, which="both", lw=0.3)
    for ax in axes[0][::ncols]:
        ax.set_ylabel(f"KL(p_cond ‖ p̂), nats ({target})", fontsize=8)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "fidelity_kl.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    written.append(path)

    seed = refs.get("yes/no (seed 000)")
    if seed is not None:
        fig, ax = plt.subplots(figsize=(4.2, 3.0))
        labels = ["yes", "no"]
        cond = [seed.p_cond.get(k, 0.0) for k in labels]
        mask = [seed.p_mask.get(k, 0.0) for k in labels]
        x = np.arange(len(labels))
        ax.bar(x - 0.2, cond, 0.4, label="model conditioned on validity", color="tab:green")
        ax.bar(x + 0.2, mask, 0.4, label="masked sampling", color="tab:red")
        for xi, v in zip(x - 0.2, cond, strict=True):
            ax.text(xi, v + 0.02, f"{v:.3f}", ha="center", fontsize=8)
        for xi, v in zip(x + 0.2, mask, strict=True):
            ax.text(xi, v + 0.02, f"{v:.3f}", ha="center", fontsize=8)
        ax.set_xticks(x, labels)
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("probability")
        ax.set_title("seed 000: yes|no", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / "fidelity_seed000.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        written.append(path)
    return written


def save_run(
    path: Path,
    rows: Sequence[Row],
    refs: Mapping[str, Enumeration],
    convergence: Sequence[tuple[int, float, float]] = (),
) -> None:
    """Rows, references and the aligned convergence as JSON, for a later ``--load`` (one
    plot from several runs)."""
    from dataclasses import asdict

    data = {
        "convergence": [list(c) for c in convergence],
        "rows": [asdict(r) for r in rows],
        "refs": {
            k: {"p_raw": e.p_raw, "p_mask": e.p_mask, "z": e.z, "nodes": e.nodes,
                "p_raw_forced_free": e.p_raw_forced_free}
            for k, e in refs.items()
        },
    }  # fmt: skip
    path.write_text(json.dumps(data))


def load_run(
    path: Path,
) -> tuple[list[Row], dict[str, Enumeration], list[tuple[int, float, float]]]:
    """The inverse of :func:`save_run`."""
    data = json.loads(path.read_text())
    rows = [Row(**r) for r in data["rows"]]
    refs = {k: Enumeration(**v) for k, v in data["refs"].items()}
    convergence = [(int(n), float(kl), float(tv)) for n, kl, tv in data.get("convergence", [])]
    return rows, refs, convergence


SMOL_REVIEW = (
    'Review: "The battery died after two days and support never answered my emails."\n'
    "The sentiment of this review (positive, negative or neutral) as a JSON string:"
)
SMOL_QUESTION = "Question: Is Paris the capital of France? Answer yes or no.\nAnswer:"
SMOL_REVIEW_OBJECT = (
    'Review: "The battery died after two days and support never answered my emails."\n'
    'The sentiment of this review (positive, negative or neutral) as a JSON object '
    '{"sentiment": ...}:'
)
SENTIMENT_OBJECT = {
    "type": "object",
    "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]}},
    "required": ["sentiment"],
    "additionalProperties": False,
}


def smollm2_worlds(
    *, object_world: bool = False
) -> list[tuple[str, LanguageModel, list[int], dict[str, Any], int]]:
    """The SmolLM2 worlds; ``object_world`` adds the schema-shaped one (its enumeration walks
    ~1,800 prefixes: minutes on one thread)."""
    from formcast import load_model

    model = load_model("smollm2")
    worlds = [
        (
            "SmolLM2 enum",
            model,
            model.tokenize(SMOL_REVIEW),
            {"schema": {"enum": ["positive", "negative", "neutral"]}},
            12,
        ),
        ("SmolLM2 regex", model, model.tokenize(SMOL_QUESTION), {"regex": " ?(yes|no)"}, 6),
    ]
    if object_world:
        worlds.append(
            (
                "SmolLM2 object",
                model,
                model.tokenize(SMOL_REVIEW_OBJECT),
                {"schema": SENTIMENT_OBJECT},
                16,
            )
        )
    return worlds


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="100,300,1000,3000", help="sample counts (nested prefixes)")
    ap.add_argument("--model-sizes", default="100,300,1000", help="sample counts for SmolLM2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-model", action="store_true", help="skip SmolLM2")
    ap.add_argument("--no-plots", action="store_true", help="skip the PNGs")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument(
        "--model-methods",
        default=",".join([*METHODS, *(f"{m}+canonical" for m in METHODS), FAST_FORWARD]),
        help=(
            "methods on SmolLM2 ('+canonical': with canonical=True; 'mask+ff': generate with "
            "fast_forward=True)"
        ),
    )
    ap.add_argument("--only", default="", help="run only the worlds whose name contains this")
    ap.add_argument(
        "--object-world",
        action="store_true",
        help="add the schema-shaped SmolLM2 world {\"sentiment\": <enum>} (minutes)",
    )
    ap.add_argument("--save", default="", help="write this run's rows and references (JSON)")
    ap.add_argument(
        "--load", default="", help="add the rows and references of --save files (a,b,...)"
    )
    ap.add_argument(
        "--checkpoints",
        default="0,1,10,30,100,300,1000,3000",
        help="samples drawn before each exact next-sample KL of aligned (wide toy)",
    )
    ap.add_argument(
        "--target",
        choices=TARGETS,
        default="truncated",
        help="the reference p_cond of the KL/TV columns and plot (see module doc)",
    )
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" / "img"))
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    methods = [m for m in args.methods.split(",") if m]
    print(f"ConditionedSampler: {'available' if conditioned_sampler_class() else 'missing'}")

    rows: list[Row] = []
    refs: dict[str, Enumeration] = {}
    convergence: list[tuple[int, float, float]] = []
    for toy in (yes_no_toy(), nested_toy(), schema_toy(), wide_toy()):
        if args.only and args.only not in toy.name:
            continue
        enum = enumerate_distributions(
            toy.model, toy.prompt_ids, toy.constraint, max_tokens=toy.max_tokens
        )
        refs[toy.name] = enum
        print_reference(toy.name, enum, args.target)
        rows += evaluate(
            toy.name,
            toy.model,
            toy.prompt_ids,
            toy.constraint,
            enum,
            sizes,
            seed=args.seed,
            max_tokens=toy.max_tokens,
            methods=methods,
            target=args.target,
        )
        if toy.name.startswith("wide") and "aligned" in methods and args.target == "truncated":
            checkpoints = [int(c) for c in args.checkpoints.split(",")]
            convergence = aligned_convergence(toy, enum, checkpoints, seed=args.seed)
    print_table(rows)
    if convergence:
        print(
            "\n**aligned on the wide toy: the exact distribution of its next sample** "
            "(from its trie, no sampling noise; mask: constant, exact: 0 by construction)\n"
        )
        print("| samples drawn | KL(p_cond ‖ q_next) nats | TV |")
        print("|---:|---:|---:|")
        for n, kl, tv in convergence:
            print(f"| {n} | {kl:.2e} | {tv:.4f} |")

    model_rows: list[Row] = []
    if not args.no_model:
        msizes = [int(s) for s in args.model_sizes.split(",")]
        model_methods = [m for m in args.model_methods.split(",") if m]
        for world, model, ids, constraint, max_tokens in smollm2_worlds(
            object_world=args.object_world
        ):
            if args.only and args.only not in world:
                continue
            t0 = time.perf_counter()
            enum = enumerate_distributions(
                model, ids, constraint, max_tokens=max_tokens, prune=1e-6
            )
            print_reference(world, enum, args.target)
            print(
                f"- enumeration: {time.perf_counter() - t0:.1f} s; token paths per string: "
                f"{enum.paths}"
            )
            refs[world] = enum
            model_rows += evaluate(
                world,
                model,
                ids,
                constraint,
                enum,
                msizes,
                seed=args.seed,
                max_tokens=max_tokens,
                methods=model_methods,
                target=args.target,
            )
        print_table(model_rows, canonical_columns=True)
    if args.save:
        save_run(Path(args.save), rows + model_rows, refs, convergence)
    loaded: list[Row] = []
    for name in [f for f in args.load.split(",") if f]:
        old_rows, old_refs, old_convergence = load_run(Path(name))
        seen = {r.world for r in rows + model_rows}
        loaded += [r for r in old_rows if r.world not in seen]
        refs = {**old_refs, **refs}
        convergence = convergence or old_convergence
    rows = sorted(loaded + rows, key=lambda r: r.world.startswith("SmolLM2"))  # toys first
    if not args.no_plots:
        for path in plot(rows + model_rows, refs, Path(args.out), args.target, convergence):
            print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
