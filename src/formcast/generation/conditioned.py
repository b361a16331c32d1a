"""Sampling from the model conditioned on the constraint: :class:`ConditionedSampler`.

::

    sampler = ConditionedSampler(model, prompt, regex=r"yes|no", method="exact")
    results = sampler.sample(1000, seed=0)      # i.i.d. from p(y | y in L, |y| <= max_tokens)
    sampler.stats.model_calls, sampler.stats.acceptance_rate, sampler.stats.z_ci

Methods: ``"exact"`` (adaptive rejection over a prefix trie, below), ``"mask"`` (the usual
masked sampling of :func:`~formcast.generation.generate`, through the same class for
comparison; biased), ``"aligned"`` (grammar-aligned sampling, :mod:`formcast.generation.aligned`,
plugged in through :class:`SamplingMethod`).

Interface for the methods (``aligned.py`` plugs in here)
--------------------------------------------------------
A method is a class built as ``Method(ctx: SamplerContext)`` with
``sample_one(rng: np.random.Generator) -> GenerationResult`` (one sample; it raises
:class:`~formcast.errors.SamplingBudgetError` when ``ctx.stats.model_calls`` would pass
``ctx.max_model_calls``).  Shared pieces:

* :class:`SamplerContext` -- the model, the prompt ids, the compiled constraint, the
  :class:`~formcast.sampling.SamplingParams` (temperature/top_p; top_k 0), ``max_tokens``,
  ``max_model_calls``, the :class:`SamplerStats` to update, and :meth:`SamplerContext.result`
  (a completed :class:`GenerationResult` from a token sequence).
* :class:`PrefixTrie` / :class:`TrieNode` -- one node per explored prefix (token ids after the
  prompt).  :meth:`PrefixTrie.expand` fills a node once: the grammar's allowed ids at that
  prefix (``node.allowed``: a bool per candidate), whether the output is complete there
  (``node.complete``: only stop tokens allowed, no model call) or dead (``node.dead``: nothing
  allowed), and -- one model call, counted -- the *unmasked* next-token distribution at the
  given temperature/top_p (``node.ids``: candidate ids with probability > 0, increasing;
  ``node.probs``: their probabilities, summing to 1).  ``node.child(i)`` gets or creates the
  child for candidate index ``i``.  ``node.live`` (per candidate) and ``node.live_total`` are
  the exact sampler's dead-mass bookkeeping (a method may ignore them).
* :func:`next_token_distribution` -- ``(ids, probs)`` of a logits vector under the params.

The model is stateful (``start``/``step``): :class:`PrefixTrie` evaluates a new node by
``model.step([token])`` when the model's current sequence is the node's parent, otherwise by
``model.start(prompt + prefix)`` (a re-prefill).  Either is one counted model call.

Exact sampling, and why it is exact
-----------------------------------
Target: the model's distribution over token sequences (at the given temperature/top_p, no
mask), ``p(y) = prod_t p(y_t | y_<t)``, restricted to the set ``L`` of *complete valid*
outputs and renormalized: ``p(y | y in L) = p(y) 1[y in L] / Z`` with ``Z = p(L)``.  ``y`` is
complete when it ends with a stop token the grammar allows (its probability ``p(stop | y)``
is the model's) or when the grammar allows nothing but a stop token (the output ends there,
as in ``generate``: no model call, factor 1; ``forced_stop="model"`` multiplies in the model's
stop probability there instead, at one model call per such leaf -- docs/sampling.md, "Which
target", says why the default is 1).  ``canonical=True`` also kills every token that forms a
pair the tokenizer never produces with the previous one (:mod:`formcast.generation.tokenization`):
that mass is dead like any forbidden token, and the target becomes p(y | y in L, y
canonical).  ``max_tokens`` bounds the text tokens: the
target is ``p(y | y in L, |y| <= max_tokens)`` (a prefix of ``max_tokens`` text tokens may
still end with a stop token; any other continuation is dead).

Each trie node ``n`` carries ``live(n) in [0, 1]``: the fraction of its mass not yet *known*
to be dead (1 when unexplored).  A prefix is dead when no complete valid output extends it
within the budget: a token the mask forbids, a state with nothing allowed, a prefix at the
budget continued by a text token.  A walk starts at the root.  At a node explored before the
walk it picks child ``c`` with probability ``p(c | n) live(c) / live(n)``; at a node first
reached in this walk it picks from the unmasked ``p(. | n)`` (nothing is known there yet).
Reaching a dead token rejects the walk; choosing an allowed stop token (or reaching a
complete node) accepts it.  By telescoping, a walk proposes a sequence ``y`` that avoids
known-dead mass with probability ``p(y) / live(root)``: for every valid ``y`` that is
``p(y) / live(root)`` -- proportional to the target -- and every sequence of dead mass is
rejected.  So an accepted walk is an exact draw from ``p(y | y in L)``, whatever the
knowledge the trie had when it started; the knowledge only changes the acceptance rate
``Z / live(root)``.  What a walk learns (the mask at each new node, the dead branch it ended
in) is only used by later walks, and it is only ever mass of zero target probability, so the
samples are i.i.d.  This is the argument of constrained adaptive rejection sampling (CARS,
arXiv 2510.01902) and adaptive weighted rejection sampling (AWRS, arXiv 2504.05410).  The
mask marks every forbidden token of a node dead when the node is first expanded, without
exploring it; the dead mass is then subtracted from each ancestor's ``live``.  No node is
expanded twice, so model calls <= distinct prefixes explored.

``Z`` is estimated without bias by the mean of ``accepted_i * live_i(root)`` over the walks
(``live_i`` at the start of walk ``i``; each term has conditional mean ``Z``), with a normal
95% interval clipped to ``[mass of the distinct samples seen, live(root)]`` (both exact bounds).

Cost: one model call per new trie node (plus re-prefills when a walk leaves the model's
current sequence); the trie lives as long as the sampler (memory O(nodes x candidates)).  When
``Z`` is tiny the walks are rejected for a long time: ``max_model_calls`` bounds the work and
:class:`~formcast.errors.SamplingBudgetError` says how far it got -- never a silent fall-back
to masking.

Lifetime: a sampler holds its trie (and, for ``"exact"``, what it learned) across ``sample``
calls for the same model, prompt and constraint; it is not thread-safe.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigurationError, FormcastError, OptionError
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..model.protocol import LanguageModel, Logits
from ..runtime.matcher import GrammarMatcher
from .aligned import AlignedMethod, check_forced_stop
from .inputs import (
    DEFAULT_REGEX_DIALECT,
    Prompt,
    _prompt_ids,
    _resolve_model,
    resolve_constraint,
)
from .loop import decode
from .options import GenerationOptions, check_context
from .results import GenerationResult
from .sampler_context import (
    SamplerContext,
    SamplerStats,
    SamplingMethod,
    next_token_distribution,
)
from .tokenization import canonical_pairs_for

if TYPE_CHECKING:  # pragma: no cover
    from ..constraints.core import Constraint

__all__ = [
    "METHODS",
    "ConditionedSampler",
    "PrefixTrie",
    "TrieNode",
]

METHODS = ("exact", "aligned", "mask")
"""The sampling methods of :class:`ConditionedSampler`."""

_perf = time.perf_counter


class TrieNode:
    """One explored prefix (token ids after the prompt).  See the module docstring."""

    __slots__ = (
        "allowed",
        "children",
        "complete",
        "dead",
        "depth",
        "expanded",
        "ids",
        "index_in_parent",
        "live",
        "live_total",
        "mass",
        "parent",
        "probs",
        "stop_flags",
        "token",
    )

    def __init__(self, parent: TrieNode | None, token: int, index: int, mass: float) -> None:
        self.parent = parent
        self.token = token  # -1 for the root
        self.index_in_parent = index
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.mass = mass  # p(prefix) under the unmasked model
        self.expanded = False
        self.complete = False  # only stop tokens allowed: the output ends here
        self.dead = False  # nothing allowed (or only dead continuations known)
        self.ids: np.ndarray = np.zeros(0, dtype=np.int64)
        self.probs: np.ndarray = np.zeros(0)
        self.allowed: np.ndarray = np.zeros(0, dtype=bool)
        self.stop_flags: np.ndarray = np.zeros(0, dtype=bool)
        self.live: np.ndarray = np.zeros(0)  # per candidate: p(c | n) * live(c)
        self.live_total = 1.0  # live(n): 1 while unexplored
        self.children: dict[int, TrieNode] = {}

    def prefix(self) -> list[int]:
        """The token ids from the root to this node."""
        out: list[int] = []
        node: TrieNode | None = self
        while node is not None and node.parent is not None:
            out.append(node.token)
            node = node.parent
        out.reverse()
        return out

    def child(self, i: int) -> TrieNode:
        """The child for candidate index ``i`` (created unexpanded)."""
        node = self.children.get(i)
        if node is None:
            node = TrieNode(self, int(self.ids[i]), i, self.mass * float(self.probs[i]))
            self.children[i] = node
        return node


class PrefixTrie:
    """The explored prefixes of one (model, prompt, constraint, params): expand each once.

    The matcher is only brought to a prefix when that prefix is expanded (``rollback`` to the
    common prefix with the last expanded node, then the new tokens): a walk through known nodes
    costs no grammar work."""

    def __init__(self, ctx: SamplerContext) -> None:
        self.ctx = ctx
        self.root = TrieNode(None, -1, -1, 1.0)
        self.matcher = GrammarMatcher(ctx.compiled) if ctx.compiled is not None else None
        self._model_seq: list[int] | None = None  # the prefix the model has evaluated
        self._samples_so_far = 0
        vocab = ctx.model.vocab
        self._stop_flags = np.zeros(vocab.vocab_size, dtype=bool)
        self._stop_flags[list(vocab.stop_token_ids)] = True

    def start_walk(self, samples_so_far: int) -> TrieNode:
        """Start a walk (``samples_so_far`` goes into a budget error); returns the root."""
        self._samples_so_far = samples_so_far
        return self.root

    def descend(self, node: TrieNode, i: int) -> TrieNode:
        """Follow candidate ``i`` of ``node`` (an allowed text token)."""
        return node.child(i)

    def _allowed_ids(self, node: TrieNode) -> np.ndarray | None:
        """The ids the grammar allows after ``node``'s prefix (``None``: no constraint)."""
        matcher = self.matcher
        if matcher is None:
            return None
        target = node.prefix()
        held = matcher.accepted_token_ids
        common = 0
        for a, b in zip(held, target, strict=False):
            if a != b:
                break
            common += 1
        try:  # back to the longest common prefix of the last expanded node and this one
            matcher.rollback(len(held) - common)
        except ConfigurationError:  # pragma: no cover - a matcher with a rollback window
            matcher.reset()
            common = 0
        for tok in target[common:]:
            if not matcher.accept_token(tok):
                raise FormcastError(  # pragma: no cover - only allowed tokens are followed
                    f"internal error: token {tok} refused by the matcher"
                )
        return matcher.allowed_token_ids()

    def _canonical(self, node: TrieNode, allowed_ids: np.ndarray | None) -> np.ndarray | None:
        """``allowed_ids`` without the tokens that form a non-canonical pair with the node's
        last token (``canonical=True``; the grammar's forced stops are decided before)."""
        pairs = self.ctx.canonical
        if pairs is None or allowed_ids is None or node.token < 0:
            return allowed_ids
        restricted: np.ndarray = pairs.restrict_ids(node.token, allowed_ids)
        return restricted

    def expand(self, node: TrieNode) -> None:
        """Fill ``node`` (the walk's current node): mask first, then (if needed) one model call.

        Sets ``complete`` (only stop tokens allowed: no model call), ``dead`` (nothing
        allowed: no model call) or the candidates with their ``allowed`` flags; a node at the
        budget (``depth == max_tokens``) allows stop tokens only."""
        if node.expanded:
            return
        allowed_ids = self._allowed_ids(node)
        stop = self._stop_flags
        if allowed_ids is not None and allowed_ids.size == 0:
            node.expanded, node.dead = True, True
            self._set_live(node, 0.0)
            return
        if (
            allowed_ids is not None
            and bool(stop[allowed_ids].all())
            and self.ctx.forced_stop == "certain"
        ):
            node.expanded, node.complete = True, True
            return
        allowed_ids = self._canonical(node, allowed_ids)
        if allowed_ids is not None and allowed_ids.size == 0:  # canonical=True: a dead end
            node.expanded, node.dead = True, True
            self._set_live(node, 0.0)
            return
        at_budget = node.depth >= self.ctx.max_tokens
        if at_budget and allowed_ids is not None and not bool(stop[allowed_ids].any()):
            node.expanded, node.dead = True, True
            self._set_live(node, 0.0)
            return
        logits = self._evaluate(node)
        ids, probs = next_token_distribution(logits, self.ctx.params)
        if allowed_ids is None:
            ok = np.ones(ids.size, dtype=bool)
        else:
            ok = np.isin(ids, allowed_ids, assume_unique=True)
        flags = stop[ids]
        if at_budget:
            ok &= flags
        node.ids, node.probs, node.allowed, node.stop_flags = ids, probs, ok, flags
        node.live = np.where(ok, probs, 0.0)
        node.expanded = True
        self.ctx.stats.trie_nodes += 1
        self._set_live(node, float(node.live.sum()))

    def _evaluate(self, node: TrieNode) -> Logits:
        """The model's logits after the node's prefix: one counted call."""
        self.ctx.charge_model_call(self._samples_so_far)
        parent = node.parent
        model = self.ctx.model
        if (
            parent is not None
            and self._model_seq is not None
            and len(self._model_seq) == parent.depth
            and self._model_seq == parent.prefix()
        ):
            logits = model.step([node.token])
            self._model_seq.append(node.token)
            return logits
        prefix = node.prefix()
        logits = model.start(self.ctx.prompt_ids + prefix)
        self._model_seq = prefix
        return logits

    def _set_live(self, node: TrieNode, value: float) -> None:
        """Set ``live(node)`` and subtract the change from every ancestor."""
        value = min(max(value, 0.0), 1.0)
        delta = node.live_total - value
        node.live_total = value
        if value <= 0.0:
            node.dead = True
        child, parent = node, node.parent
        while parent is not None and delta != 0.0:
            i = child.index_in_parent
            old = float(parent.live[i])
            new = max(float(parent.probs[i]) * child.live_total, 0.0)
            parent.live[i] = new
            before = parent.live_total
            after = min(max(before - (old - new), 0.0), 1.0)
            if after <= 1e-15 and not parent.live.any():
                after = 0.0
            parent.live_total = after
            if after <= 0.0:
                parent.dead = True
            delta = before - after
            child, parent = parent, parent.parent

    def mark_dead(self, node: TrieNode, i: int) -> None:
        """Candidate ``i`` of ``node`` is dead (forbidden, or its subtree is)."""
        if node.live[i] == 0.0:
            return
        child = node.children.get(i)
        if child is not None:
            self._set_live(child, 0.0)
            return
        node.live[i] = 0.0
        node.allowed[i] = False
        self._set_live(node, float(node.live.sum()))


# -- the methods ---------------------------------------------------------------------------------
class ExactMethod:
    """``method="exact"``: adaptive rejection over the prefix trie (module docstring)."""

    def __init__(self, ctx: SamplerContext) -> None:
        self.ctx = ctx
        self.trie = PrefixTrie(ctx)
        self.samples_this_call = 0
        self._seen: set[tuple[int, ...]] = set()  # distinct accepted outputs (for z_lower)

    def sample_one(self, rng: np.random.Generator) -> GenerationResult:
        """Walk until one is accepted (raises :class:`SamplingBudgetError` when out of calls)."""
        t0 = _perf()
        stats = self.ctx.stats
        trie = self.trie
        while True:
            root = trie.start_walk(self.samples_this_call)
            if root.expanded and root.live_total <= 0.0:
                raise ConfigurationError(
                    "the constraint has no complete output the model can produce within "
                    f"max_tokens={self.ctx.max_tokens} (valid mass Z = 0): raise max_tokens, "
                    "or check the constraint and the temperature/top_p truncation"
                )
            live_root = root.live_total
            stats.attempts += 1
            out = self._walk(root, rng)
            stats.z_upper = trie.root.live_total
            accepted = out is not None
            if accepted:
                assert out is not None
                ids, stop_tok, mass = out
                key = (*ids, -1 if stop_tok is None else stop_tok)
                if key not in self._seen:
                    self._seen.add(key)
                    stats.z_lower += mass
            stats._record_walk(accepted, live_root)
            if out is not None:
                stats.accepted += 1
                self.samples_this_call += 1
                return self.ctx.result(out[0], out[1], _perf() - t0)

    def _walk(
        self, root: TrieNode, rng: np.random.Generator
    ) -> tuple[list[int], int | None, float] | None:
        """One proposal: ``(text ids, stop token, p(y))`` if accepted, ``None`` if rejected."""
        trie = self.trie
        node = root
        tokens: list[int] = []
        while True:
            fresh = not node.expanded
            trie.expand(node)
            if node.complete:
                return tokens, None, node.mass
            if node.dead:
                return None
            # a node first reached in this walk: nothing was known there, the unmasked p
            weights = node.probs if fresh else node.live
            i = _choose(weights, rng)
            if not node.allowed[i]:  # dead mass (only reachable from a fresh node)
                trie.mark_dead(node, i)
                return None
            tok = int(node.ids[i])
            if node.stop_flags[i]:
                return tokens, tok, node.mass * float(node.probs[i])
            tokens.append(tok)
            node = trie.descend(node, i)


def _choose(weights: np.ndarray, rng: np.random.Generator) -> int:
    """Index ``i`` with probability ``weights[i] / sum(weights)`` (one ``rng.random()``)."""
    cdf = np.cumsum(weights)
    total = cdf[-1]
    i = int(np.searchsorted(cdf, rng.random() * total, side="right"))
    i = min(i, weights.size - 1)
    while weights[i] <= 0.0:  # pragma: no cover - float edge at the top of the cdf
        i -= 1
    return i


class MaskMethod:
    """``method="mask"``: the masked sampling of :func:`~formcast.generation.generate`."""

    def __init__(self, ctx: SamplerContext) -> None:
        self.ctx = ctx

    def sample_one(self, rng: np.random.Generator) -> GenerationResult:
        ctx = self.ctx
        if ctx.stats.model_calls >= ctx.max_model_calls:
            ctx.charge_model_call(0)  # raises
        t_call = _perf()
        loop = decode(
            ctx.model,
            ctx.prompt_ids,
            ctx.compiled,
            ctx.params,
            rng,
            ctx.max_tokens,
            (),
            ctx.compile_s,
            t_call,
            ctx.schema_class,
            canonical=ctx.canonical,
        )
        while True:
            try:
                next(loop)
            except StopIteration as done:
                result: GenerationResult = done.value
                break
        ctx.stats.model_calls += 1 + len(result.timings.decode_step_s)
        ctx.stats.attempts += 1
        ctx.stats.accepted += 1
        return result


# -- the public class ----------------------------------------------------------------------------
class ConditionedSampler:
    """Samples from ``model`` under a constraint with a chosen fidelity/cost trade-off.

    Args:
        model: a model wrapper or a model name (see :func:`~formcast.generation.generate`).
        prompt: text, chat messages or token ids (as in ``generate``).
        schema, regex, grammar, constraint, compiled: exactly one constraint (as in
            ``generate``).
        method: ``"exact"`` (i.i.d. from the model conditioned on the constraint; cost grows
            as the valid mass shrinks), ``"aligned"`` (approaches it as samples accumulate),
            ``"mask"`` (per-step masking: cheapest, biased).
        temperature, top_p: the model distribution sampled from (``top_k`` is not offered:
            the target is the model's own distribution, truncated only by ``top_p``).
        max_tokens: the most text tokens of an output (the target is conditioned on it).
        max_model_calls: the budget of model calls over the sampler's life.
        chat, system, compiler, grammar_syntax, dialect: as in ``generate``.
        canonical: mask token pairs the tokenizer never produces (``encode(a + b) != [a, b]``,
            :mod:`formcast.generation.tokenization`; needs ``model.encode_bytes``).  For
            ``"exact"`` the target becomes p(y | y in L, y canonical); for ``"aligned"`` the
            same target is approached; ``"mask"`` may end in ``"dead_end"`` where the test
            forbids every token the grammar allows.
        forced_stop: where the grammar allows nothing but a stop token, ``"certain"`` (the
            default: the output ends there with probability 1, no model call, as in
            ``generate``) or ``"model"`` (the model's probability of a stop token there is
            multiplied in: the target becomes p(y + stop | valid); one more model call per
            complete output).  ``"mask"`` samples the same either way.

    Raises:
        ConfigurationError: a bad argument (unknown method, no constraint, bad numbers).
        GrammarError, VocabularyError: as ``generate``.
    """

    def __init__(
        self,
        model: LanguageModel | str,
        prompt: Prompt,
        *,
        schema: Any = None,
        regex: str | None = None,
        grammar: str | None = None,
        compiled: CompiledGrammar | None = None,
        method: str = "exact",
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int = 256,
        max_model_calls: int = 100_000,
        chat: bool | None = None,
        system: str | None = None,
        compiler: GrammarCompiler | None = None,
        grammar_syntax: str = "gbnf",
        dialect: str = DEFAULT_REGEX_DIALECT,
        canonical: bool = False,
        constraint: Constraint | None = None,
        forced_stop: str = "certain",
    ) -> None:
        if method not in METHODS:
            raise OptionError(
                "method", method, f"method must be one of {', '.join(METHODS)}, got {method!r}"
            )
        options = GenerationOptions(
            schema=schema,
            regex=regex,
            grammar=grammar,
            compiled=compiled,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            chat=chat,
            system=system,
            compiler=compiler,
            grammar_syntax=grammar_syntax,
            dialect=dialect,
            canonical=canonical,
            constraint=constraint,
        )
        self._setup(_resolve_model(model), prompt, options, method, max_model_calls, forced_stop)

    @classmethod
    def from_options(
        cls,
        model: LanguageModel | str,
        prompt: Prompt,
        options: GenerationOptions,
        *,
        max_model_calls: int = 100_000,
        forced_stop: str = "certain",
    ) -> ConditionedSampler:
        """A sampler for ``options`` (:class:`GenerationOptions`), its method being
        ``options.sampling`` (what ``generate(sampling="exact" | "aligned")`` uses).

        Raises:
            OptionError: an option the conditioned samplers do not take (``stop``, ``top_k``,
                ``reasoning``, ``token_healing``, ``logprobs``, ``timeout_s``, ``control``).
            GrammarError, VocabularyError: as the constructor.
        """
        self = cls.__new__(cls)
        self._setup(
            _resolve_model(model), prompt, options, options.sampling, max_model_calls, forced_stop
        )
        return self

    def _setup(
        self,
        lm: LanguageModel,
        prompt: Prompt,
        options: GenerationOptions,
        method: str,
        max_model_calls: int,
        forced_stop: str,
    ) -> None:
        """The constructor's work, once the options are valid and the model is resolved."""
        if (
            isinstance(max_model_calls, bool)
            or not isinstance(max_model_calls, int)
            or max_model_calls < 1
        ):
            raise OptionError(
                "max_model_calls", max_model_calls,
                f"max_model_calls must be an int >= 1, got {max_model_calls!r}",
            )
        _refuse_unconditioned_options(options)
        o = options
        max_tokens, canonical, schema = o.max_tokens, o.canonical, o.schema
        params = o.params
        cg, compile_s = resolve_constraint(
            lm,
            compiled=o.compiled,
            schema=o.schema,
            regex=o.regex,
            grammar=o.grammar,
            grammar_syntax=o.grammar_syntax,
            compiler=o.compiler,
            dialect=o.dialect,
            constraint=o.constraint,
        )
        if cg is None and method != "mask":
            raise ConfigurationError(
                f"method={method!r} needs a constraint: give schema=, regex=, grammar=, "
                "constraint= or compiled= (without one, plain sampling already follows the model)"
            )
        ids = _prompt_ids(lm, prompt, chat=o.chat, system=o.system)
        check_context(lm, len(ids), max_tokens)
        if canonical and cg is None:
            raise OptionError(
                "canonical", canonical,
                "canonical=True needs a constraint (schema=, regex=, grammar=, constraint= or "
                "compiled=)"
            )
        pairs = canonical_pairs_for(lm) if canonical else None
        stop_rule = check_forced_stop(forced_stop)
        from ..frontends.jsonschema.source import pydantic_model_class

        self.method = method
        self.options = options
        self.stats = SamplerStats()
        self.context = SamplerContext(
            model=lm,
            prompt_ids=ids,
            compiled=cg,
            params=params,
            max_tokens=max_tokens,
            max_model_calls=max_model_calls,
            stats=self.stats,
            compile_s=compile_s,
            schema_class=pydantic_model_class(schema) if cg is not None else None,
            canonical=pairs,
            forced_stop=stop_rule,
        )
        self._method: SamplingMethod
        if method == "exact":
            self._method = ExactMethod(self.context)
        elif method == "mask":
            self._method = MaskMethod(self.context)
        else:
            self._method = AlignedMethod(self.context)

    def sample(self, n: int, seed: int | None = 0) -> list[GenerationResult]:
        """``n`` samples (i.i.d. from the conditioned distribution for ``"exact"``).

        Raises:
            ConfigurationError: ``n`` not an int >= 0, or a bad seed.
            SamplingBudgetError: ``max_model_calls`` ran out (the error says how many samples
                were drawn and the estimated valid mass).
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigurationError(f"n must be an int >= 0, got {n!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise OptionError("seed", seed, f"seed must be an int or None, got {seed!r}")
        rng = np.random.default_rng(seed)
        t0 = _perf()
        if isinstance(self._method, ExactMethod):
            self._method.samples_this_call = 0
        out: list[GenerationResult] = []
        try:
            for _ in range(n):
                out.append(self._method.sample_one(rng))
        finally:
            self.stats.seconds += _perf() - t0
        return out


_UNCONDITIONED = ("stop", "top_k", "reasoning", "token_healing", "logprobs", "timeout_s", "control")


def _refuse_unconditioned_options(options: GenerationOptions) -> None:
    """The options a :class:`ConditionedSampler` does not take, set to something else than
    their default (``sampling="exact"``/``"aligned"`` options refuse them already)."""
    defaults = {f.name: f.default for f in dataclasses.fields(GenerationOptions)}
    for name in _UNCONDITIONED:
        value = getattr(options, name)
        if value != defaults[name] and not (name == "stop" and value == ()):
            raise OptionError(
                name, value,
                f"ConditionedSampler does not take {name}= (got {value!r}): it samples the "
                "model's distribution under the constraint; use generate()/stream() for it",
            )
