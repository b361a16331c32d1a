"""Grammar-aligned sampling (ASAp) and exact enumeration of the conditioned distribution.

:class:`AlignedSampler` implements ASAp (Park et al., "Grammar-Aligned Decoding",
arXiv 2405.21047).  Masked sampling renormalizes over the tokens the grammar allows one step
ahead, which distorts the distribution over valid outputs (seed 000: "yes" 0.75 instead of
0.057).  ASAp keeps a trie of every prefix it has sampled.  Each node stores the model's
next-token probabilities (one model call when the node is first created) and, per allowed child,
an *expected future grammaticality* (EFG) estimate: the probability that a continuation from
that child ends as a complete, valid output.  Unexplored children start at the optimistic bound
``1`` (forbidden tokens are ``0``: the mask).  A step samples from ``p(token) * EFG(token)``,
renormalized.  After every sample the EFGs on the sampled path are recomputed bottom-up::

    EFG(node) = sum over allowed children c of p(c | node) * EFG(c)

A complete output (a stop token, or a state where only stop tokens are allowed) has EFG ``1``;
a dead end (nothing allowed, or a text token after ``max_tokens`` text tokens: a prefix at the
budget may still end with an allowed stop token) has ``0``.  The target is therefore
p(y | y in L, |y| <= max_tokens), the same as ``method="exact"`` in
:mod:`formcast.generation.conditioned`.

**What it guarantees, and its limits.**  Every EFG is an upper bound on the true valid mass
below its node (unexplored children count as 1, explored ones are exact sums of bounds), and it
only ever decreases towards the truth.  Once the whole subtree below a node has been explored,
its EFG is exact, and sampling through it follows p(y | y in L) exactly.  So the sampling
distribution approaches the conditioned one as samples accumulate *for the same prompt,
constraint and parameters* (the trie lives in the sampler).  It is **not exact per sample**:
the first sample is exactly masked sampling, and prefixes never visited keep the optimistic
bound, so on a large language (long JSON) the distribution stays biased towards rarely-explored
regions for a long time.  Use ``method="exact"`` when i.i.d. samples from p(y | y in L) are
required; ASAp is the cheaper choice when many samples are drawn for one prompt.

EFGs are plain float64 masses (not logs): a valid mass below about ``1e-300`` (hundreds of
tokens each far from the model's preference) underflows to 0 and reads as "no valid output".

**Cost.**  One model call per new trie node (re-visited prefixes cost nothing), plus one
``model.start`` per sample that reaches a new node (the prefix is re-evaluated from the prompt).
It never rejects a grammatical path: only outputs cut by ``max_tokens``, dead ends or tokens
of model probability zero are discarded, and each discard lowers the EFGs so that the same path
is never taken twice.  Memory: O(trie nodes * allowed tokens per node).

**Model probabilities.**  ``p`` is the model's distribution after the sampling chain without
the mask (temperature, top-k, top-p: :func:`~formcast.sampling.token_probabilities` with no
bitmask), restricted to the allowed tokens.  A state where only stop tokens are allowed is
complete without a model call and contributes a factor 1 (as in :func:`generate`, and as in
seed 000's example: "yes" = p(ye) * p(s) = 0.30 * 0.02); forced single tokens do count with
their model probability.  ``forced_stop="model"`` instead evaluates the model there and counts
its stop probability (the "full" target); ``canonical`` removes the tokens that form a pair the
tokenizer never produces with the previous token (their EFG is 0).
:func:`exact_conditioned_distribution` enumerates that same distribution exactly on small
languages.

Lifetime: one :class:`AlignedSampler` per (model, prompt, constraint, parameters); it owns the
model between its calls (it calls ``model.start``/``model.step``), one sample at a time, not
thread-safe.  :func:`exact_conditioned_distribution` is a stateless function.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..errors import ConfigurationError, FormcastError
from ..index.compiled import CompiledGrammar
from ..model.protocol import LanguageModel
from ..runtime.matcher import GrammarMatcher
from ..sampling import SamplingParams, token_probabilities
from ..vocab.canonical import CanonicalPairs
from .results import GenerationResult, GenerationTimings
from .sampler_context import SamplerContext, completed_result

__all__ = [
    "FORCED_STOP",
    "AlignedMethod",
    "AlignedSampler",
    "AlignedStats",
    "ConditionedDistribution",
    "EnumerationBudgetError",
    "exact_conditioned_distribution",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_COMPLETE = 1.0
_DEAD = 0.0

FORCED_STOP = ("certain", "model")
"""How a stop that the grammar forces counts: ``"certain"`` (probability 1, the default, as in
``generate``) or ``"model"`` (the model's probability of stopping there)."""


def check_forced_stop(value: object) -> str:
    """``value`` if it is one of :data:`FORCED_STOP`, else a :class:`ConfigurationError`."""
    if value not in FORCED_STOP:
        raise ConfigurationError(
            f"forced_stop must be one of {', '.join(map(repr, FORCED_STOP))}, got {value!r}"
        )
    return str(value)


class EnumerationBudgetError(FormcastError):
    """:func:`exact_conditioned_distribution` needed more trie nodes than ``max_nodes``."""


class _Node:
    """One sampled prefix: the allowed ids, their model probabilities, the children's EFGs."""

    __slots__ = ("child_efg", "children", "efg", "ids", "is_stop", "probs")

    def __init__(
        self, ids: IntArray, probs: FloatArray, is_stop: npt.NDArray[np.bool_], at_budget: bool
    ) -> None:
        self.ids = ids
        self.probs = probs
        self.is_stop = is_stop
        live = probs > 0.0
        if at_budget:  # max_tokens text tokens so far: only a stop token may follow
            live &= is_stop
        self.child_efg = np.where(live, 1.0, 0.0)
        self.children: dict[int, _Node | float] = {}  # index in ids -> node or terminal EFG
        self.efg = float(np.dot(self.probs, self.child_efg))


@dataclass
class AlignedStats:
    """Counters of one :class:`AlignedSampler` (cumulative over its lifetime).

    Attributes:
        samples: completed outputs returned.
        attempts: descents from the root (``attempts - samples`` were discarded: budget or dead
            end; each one lowers the EFGs on its path).
        model_calls: ``model.start`` plus ``model.step`` calls (one per new trie node).
        trie_nodes: prefixes stored.
        time_s: wall time spent sampling.
        root_efg: the root's EFG after the last sample (see :attr:`estimated_valid_mass`).
    """

    samples: int = 0
    attempts: int = 0
    model_calls: int = 0
    trie_nodes: int = 0
    time_s: float = 0.0
    root_efg: float = math.nan

    @property
    def estimated_valid_mass(self) -> float:
        """The root's EFG: an upper bound on Z = p(y in L), exact once the trie is complete."""
        return self.root_efg

    @property
    def acceptance_rate(self) -> float:
        return self.samples / self.attempts if self.attempts else math.nan

    @property
    def model_calls_per_sample(self) -> float:
        return self.model_calls / self.samples if self.samples else math.nan


class _Expander:
    """Creates trie nodes: the matcher's allowed ids plus the model's probabilities."""

    def __init__(
        self,
        model: LanguageModel,
        prompt_ids: Sequence[int],
        compiled: CompiledGrammar,
        params: SamplingParams,
        max_tokens: int,
    ) -> None:
        if not isinstance(compiled, CompiledGrammar):
            raise ConfigurationError(
                f"a CompiledGrammar is required (compile_constraint(...)), got "
                f"{type(compiled).__name__}"
            )
        if not isinstance(params, SamplingParams):
            raise ConfigurationError(f"params must be SamplingParams, got {type(params).__name__}")
        if params.is_greedy:
            raise ConfigurationError(
                "grammar-aligned sampling needs temperature > 0 (greedy decoding has no "
                "distribution to align); use generate(...) for greedy output"
            )
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigurationError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
        ids = [int(t) for t in prompt_ids]
        if not ids:
            raise ConfigurationError("prompt_ids must be non-empty (the model needs a context)")
        self.model = model
        self.prompt_ids = ids
        self.compiled = compiled
        self.params = params
        self.max_tokens = max_tokens
        vocab = model.vocab
        self.stop_flags = np.zeros(vocab.vocab_size, dtype=bool)
        self.stop_flags[list(vocab.stop_token_ids)] = True
        self.calls = 0
        self.charge: Callable[[], None] | None = None  # called before each model call
        self.canonical: CanonicalPairs | None = None  # canonical=True: the pair rows
        self.forced_stop = "certain"  # or "model": p(stop | y) multiplied in at forced stops
        self.call_times: list[float] = []
        self._model_seq: list[int] | None = None  # what the model evaluated, within one sample

    def begin(self) -> None:
        """A new descent: the model's state is unknown (someone may have used it since)."""
        self._model_seq = None

    def terminal(self, matcher: GrammarMatcher, depth: int) -> float | None:
        """EFG of a state that needs no node: ``1`` complete, ``0`` dead; ``None`` otherwise."""
        if matcher.is_terminated():
            return _COMPLETE
        allowed = matcher.allowed_token_ids()
        if allowed.size == 0:
            return _DEAD
        stops = self.stop_flags[allowed]
        if stops.all() and self.forced_stop == "certain":
            return _COMPLETE  # only stop tokens: complete without a model call (as generate)
        if depth >= self.max_tokens and not stops.any():
            return _DEAD
        return None

    def expand(self, matcher: GrammarMatcher, path: list[int]) -> _Node:
        """The node of ``path`` (not terminal): one model call."""
        if self.charge is not None:
            self.charge()
        seq = self.prompt_ids + path
        t0 = time.perf_counter()
        prev = self._model_seq
        if prev is not None and len(prev) < len(seq) and seq[: len(prev)] == prev:
            logits = self.model.step(seq[len(prev) :])
        else:
            logits = self.model.start(seq)
        self.call_times.append(time.perf_counter() - t0)
        self.calls += 1
        self._model_seq = seq
        probs = token_probabilities(logits, None, self.params)
        ids = matcher.allowed_token_ids().astype(np.int64)
        if self.canonical is not None and path:  # pairs the tokenizer never produces: dead
            ids = self.canonical.restrict_ids(path[-1], ids)
        return _Node(
            ids, probs[ids].astype(np.float64), self.stop_flags[ids], len(path) >= self.max_tokens
        )


class AlignedSampler:
    """ASAp: samples that approach p(y | y in L) as they accumulate (see the module docstring).

    Args:
        model: any :class:`~formcast.model.protocol.LanguageModel`.
        prompt_ids: the prompt as token ids (chat template already applied), non-empty.
        compiled: the constraint compiled for ``model.vocab``.
        params: temperature / top-k / top-p of the model distribution (temperature > 0).
        max_tokens: text tokens per output; a path that needs more is discarded (EFG 0).
        charge: called before every model call (a budget hook: it may raise to stop).
        max_attempts: descents allowed per :meth:`sample_one` call before giving up.
        canonical: ``canonical=True``'s pair test: a token that forms a pair the tokenizer
            never produces with the previous one is dead (EFG 0), so the target becomes
            p(y | y in L, y canonical).
        forced_stop: ``"certain"`` (a stop the grammar forces has probability 1, no model
            call) or ``"model"`` (the model's probability of a stop token there is multiplied
            in: one model call per such leaf); see docs/sampling.md, "Which target".

    Raises:
        ConfigurationError: greedy params, ``max_tokens < 1``, an empty prompt, not a
            CompiledGrammar.
    """

    def __init__(
        self,
        model: LanguageModel,
        prompt_ids: Sequence[int],
        compiled: CompiledGrammar,
        params: SamplingParams | None = None,
        max_tokens: int = 256,
        *,
        max_attempts: int = 1000,
        charge: Callable[[], None] | None = None,
        canonical: CanonicalPairs | None = None,
        forced_stop: str = "certain",
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        self._x = _Expander(model, prompt_ids, compiled, params or SamplingParams(), max_tokens)
        self._x.charge = charge
        self._x.canonical = canonical
        self._x.forced_stop = check_forced_stop(forced_stop)
        self._root: _Node | float | None = None
        self.max_attempts = max_attempts
        self.stats = AlignedStats()

    @property
    def estimated_valid_mass(self) -> float:
        """Upper bound on p(y in L) from the trie so far (``nan`` before the first sample)."""
        root = self._root
        if root is None:
            return math.nan
        return root.efg if isinstance(root, _Node) else root

    def sample(self, n: int, rng: np.random.Generator) -> list[GenerationResult]:
        """``n`` samples in sequence (each one refines the trie for the next)."""
        return [self.sample_one(rng) for _ in range(n)]

    def sample_one(self, rng: np.random.Generator) -> GenerationResult:
        """One complete, valid output.

        Raises:
            FormcastError: no valid output within ``max_tokens`` has positive probability
                (the root's EFG fell to 0), or ``max_attempts`` descents were all discarded.
        """
        if not isinstance(rng, np.random.Generator):
            raise ConfigurationError(
                f"rng must be a numpy.random.Generator, got {type(rng).__name__}"
            )
        t0 = time.perf_counter()
        calls0 = len(self._x.call_times)
        try:
            for _ in range(self.max_attempts):
                if self.estimated_valid_mass == 0.0:
                    raise FormcastError(
                        "aligned sampling: no complete output within max_tokens="
                        f"{self._x.max_tokens} has positive probability under these sampling "
                        "parameters (the valid mass is 0); raise max_tokens or check the "
                        "constraint"
                    )
                self.stats.attempts += 1
                out = self._descend(rng)
                if out is not None:
                    self.stats.samples += 1
                    return self._result(out[0], out[1], t0, calls0)
            raise FormcastError(
                f"aligned sampling: {self.max_attempts} descents in a row were discarded "
                "(max_tokens reached or dead ends); raise max_attempts or max_tokens"
            )
        finally:
            self.stats.model_calls = self._x.calls
            self.stats.root_efg = self.estimated_valid_mass
            self.stats.time_s += time.perf_counter() - t0

    # -- one descent ------------------------------------------------------------------------------
    def _descend(self, rng: np.random.Generator) -> tuple[list[int], int | None] | None:
        """Sample a path; update the EFGs on it; ``(tokens, stop id)`` or ``None`` if dead."""
        x = self._x
        x.begin()
        matcher = GrammarMatcher(x.compiled)
        path: list[int] = []
        trail: list[tuple[_Node, int]] = []
        if self._root is None:
            self._root = self._make(matcher, path)
        cur: _Node | float = self._root
        stop: int | None = None
        while isinstance(cur, _Node):
            node = cur
            i = _draw(node.probs * node.child_efg, rng)
            tok = int(node.ids[i])
            trail.append((node, i))
            if not matcher.accept_token(tok):  # pragma: no cover - ids come from the mask
                raise FormcastError(f"internal error: token {tok} rejected by the matcher")
            child = node.children.get(i)
            if child is None:
                if node.is_stop[i]:
                    child = _COMPLETE
                else:
                    path.append(tok)
                    child = self._make(matcher, path)
                    path.pop()
                node.children[i] = child
            if node.is_stop[i]:
                stop = tok
            else:
                path.append(tok)
            cur = child
        self._update(trail, cur)
        if cur == _COMPLETE:
            return path, stop
        return None

    def _make(self, matcher: GrammarMatcher, path: list[int]) -> _Node | float:
        term = self._x.terminal(matcher, len(path))
        if term is not None:
            return term
        node = self._x.expand(matcher, path)
        self.stats.trie_nodes += 1
        # every allowed continuation has model probability 0 (or is past the budget): dead
        return node if node.efg > 0.0 else _DEAD

    def _update(self, trail: list[tuple[_Node, int]], leaf: _Node | float) -> None:
        """Bottom-up EFG update along the sampled path (the heart of ASAp)."""
        value = leaf.efg if isinstance(leaf, _Node) else leaf
        for node, i in reversed(trail):
            node.child_efg[i] = value
            node.efg = float(np.dot(node.probs, node.child_efg))
            value = node.efg

    def _result(self, ids: list[int], stop: int | None, t0: float, calls0: int) -> GenerationResult:
        x = self._x
        if stop is None:  # completed by a state that allows only stop tokens
            matcher = GrammarMatcher(x.compiled)
            matcher.accept_tokens(ids)
            allowed = matcher.allowed_token_ids()
            stop = int(allowed[0]) if allowed.size else None
        steps = tuple(x.call_times[calls0:])
        total = time.perf_counter() - t0
        return completed_result(
            x.model.vocab,
            ids,
            stop,
            compiled=x.compiled,
            prompt_ids=x.prompt_ids,
            timings=GenerationTimings(
                prefill_s=steps[0] if steps else 0.0,
                time_to_first_token_s=total,
                total_s=total,
                prompt_tokens=len(x.prompt_ids),
                output_tokens=len(ids),
                decode_step_s=steps[1:],
            ),
        )


def _draw(weights: FloatArray, rng: np.random.Generator) -> int:
    """Index drawn with probability proportional to ``weights`` (one ``rng.random()``)."""
    cum = np.cumsum(weights)
    total = float(cum[-1])
    if not total > 0.0:  # pragma: no cover - a node of EFG 0 is never entered
        raise FormcastError("internal error: aligned sampling entered a node of EFG 0")
    i = int(np.searchsorted(cum, rng.random() * total, side="right"))
    if i >= weights.size or weights[i] <= 0.0:  # float rounding at the top end
        i = int(np.flatnonzero(weights > 0.0)[-1])
    return i


class AlignedMethod:
    """``method="aligned"`` of :class:`~formcast.generation.conditioned.ConditionedSampler`:
    an :class:`AlignedSampler` built from the sampler's context.

    Model calls are charged to ``ctx`` (``ctx.max_model_calls`` bounds them:
    :class:`~formcast.errors.SamplingBudgetError`); ``ctx.stats`` gets the attempts, the
    samples, the trie size and ``z_upper`` (the root's EFG, an upper bound on Z).

    Raises:
        ConfigurationError: no constraint (``ctx.compiled is None``), or as
            :class:`AlignedSampler`.
    """

    def __init__(self, ctx: SamplerContext) -> None:
        if ctx.compiled is None:
            raise ConfigurationError(
                "method='aligned' needs a constraint (schema=, regex=, grammar=, constraint= "
                "or compiled=); without one, plain sampling already follows the model"
            )
        self.ctx = ctx
        self._drawn = 0
        self.sampler = AlignedSampler(
            ctx.model,
            ctx.prompt_ids,
            ctx.compiled,
            ctx.params,
            ctx.max_tokens,
            max_attempts=max(ctx.max_model_calls, 1),
            charge=self._charge,
            canonical=ctx.canonical,
            forced_stop=ctx.forced_stop,
        )

    def _charge(self) -> None:
        self.ctx.charge_model_call(self._drawn)

    def sample_one(self, rng: np.random.Generator) -> GenerationResult:
        t0 = time.perf_counter()
        own = self.sampler.stats
        attempts0, samples0, nodes0 = own.attempts, own.samples, own.trie_nodes
        stats = self.ctx.stats
        try:
            result = self.sampler.sample_one(rng)
            self._drawn += 1
        finally:
            stats.attempts += own.attempts - attempts0
            stats.accepted += own.samples - samples0
            stats.trie_nodes += own.trie_nodes - nodes0
            z = self.sampler.estimated_valid_mass
            if not math.isnan(z):
                stats.z_upper = z
        seconds = time.perf_counter() - t0
        out = self.ctx.result(list(result.token_ids), result.stop_token_id, seconds)
        return out


# -- exact enumeration ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ConditionedDistribution:
    """p(y | y in L) enumerated exactly on a small language.

    Attributes:
        probabilities: token ids of each valid output (stop token excluded) -> conditioned
            probability (sums to 1).
        texts: the same outputs by decoded text (outputs spelled by several token sequences
            are summed).
        valid_mass: Z = p(y in L), the unnormalized total (same convention as
            :class:`AlignedSampler`: forced completion contributes 1).
        nodes: prefixes expanded (model calls made).
    """

    probabilities: dict[tuple[int, ...], float]
    texts: dict[str, float]
    valid_mass: float
    nodes: int
    unnormalized: dict[tuple[int, ...], float] = field(default_factory=dict)


def exact_conditioned_distribution(
    model: LanguageModel,
    prompt_ids: Sequence[int],
    compiled: CompiledGrammar,
    params: SamplingParams | None = None,
    max_tokens: int = 256,
    *,
    max_nodes: int = 100_000,
    min_probability: float = 0.0,
    canonical: CanonicalPairs | None = None,
    forced_stop: str = "certain",
) -> ConditionedDistribution:
    """Enumerate every valid output and its probability: the target of the samplers' tests.

    Depth-first over the mask-allowed tokens, multiplying the model's probabilities (the
    chain without the mask: temperature, top-k, top-p, as :class:`AlignedSampler`); a state
    where only stop tokens are allowed ends an output with factor 1; outputs needing more than
    ``max_tokens`` text tokens are not valid (after ``max_tokens`` text tokens only an allowed
    stop token, with its model probability, may follow).  Branches whose probability is ``0``
    (or below ``min_probability``, which makes the result approximate) are pruned.

    ``forced_stop="model"`` multiplies in the model's stop probability where the grammar
    forces the stop (the "full" target, p(y + stop)); the default ``"certain"`` does not.
    With ``canonical``, a token forming a pair the tokenizer never produces with the previous
    one is not followed: the distribution is p(y | y in L, y canonical).

    Cost: one model call per prefix expanded (``model.start`` of the whole prefix), exponential
    in the length of the language; for toy models and small enumerable constraints only (the
    depth-first search recurses once per token: ``max_tokens`` well under Python's recursion
    limit).

    Raises:
        EnumerationBudgetError: more than ``max_nodes`` prefixes would be expanded.
        FormcastError: no valid output has positive probability (Z = 0).
        ConfigurationError: as :class:`AlignedSampler`.
    """
    x = _Expander(model, prompt_ids, compiled, params or SamplingParams(), max_tokens)
    x.canonical = canonical
    x.forced_stop = check_forced_stop(forced_stop)
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise ConfigurationError(f"max_nodes must be an int >= 1, got {max_nodes!r}")
    found: dict[tuple[int, ...], float] = {}
    matcher = GrammarMatcher(compiled)
    path: list[int] = []

    def visit(mass: float) -> None:
        term = x.terminal(matcher, len(path))
        if term is not None:
            if term == _COMPLETE:
                key = tuple(path)
                found[key] = found.get(key, 0.0) + mass
            return
        if x.calls >= max_nodes:
            raise EnumerationBudgetError(
                f"exact enumeration needs more than max_nodes={max_nodes} model calls; the "
                "language is too large to enumerate (raise max_nodes, lower max_tokens, or "
                "set min_probability)"
            )
        x.begin()
        node = x.expand(matcher, path)
        for i in range(node.ids.size):
            p = mass * float(node.probs[i])
            if node.child_efg[i] == 0.0 or p <= 0.0 or p < min_probability:
                continue
            tok = int(node.ids[i])
            if node.is_stop[i]:
                key = tuple(path)
                found[key] = found.get(key, 0.0) + p
                continue
            if not matcher.accept_token(tok):  # pragma: no cover - ids come from the mask
                raise FormcastError(f"internal error: token {tok} rejected by the matcher")
            path.append(tok)
            visit(p)
            path.pop()
            matcher.rollback(1)

    visit(1.0)
    z = math.fsum(found.values())
    if not z > 0.0:
        raise FormcastError(
            "exact enumeration: no valid output within max_tokens has positive probability"
        )
    probs = {k: v / z for k, v in found.items()}
    texts: dict[str, float] = {}
    vocab = model.vocab
    for k, v in probs.items():
        t = vocab.decode(k).decode("utf-8", errors="replace")
        texts[t] = texts.get(t, 0.0) + v
    return ConditionedDistribution(
        probabilities=probs, texts=texts, valid_mass=z, nodes=x.calls, unnormalized=found
    )
