"""Model-in-the-loop constrained decoding: :func:`generate` and :func:`stream`.

One decoding step (the order is fixed)::

    matcher.fill_next_token_bitmask  ->  [only stop tokens allowed?  finish "completed"]
      -> [exactly one token allowed?  take it without sampling (forced token)]
      -> model.step(pending tokens) -> logits
      -> mask (-inf) -> temperature -> top-k -> top-p -> sample     (formcast.sampling)
      -> matcher.accept_token

Sampling runs :func:`~formcast.sampling.sample_token` on the allowed ids only (cached per
mask): the same distribution, and for a seeded generator the same token, as the full-vocabulary
chain (masked tokens have probability 0; ids stay in increasing order), at O(allowed) cost.

Jump-forward, and why it is done this way.  When the grammar forces the next bytes
(``find_jump_forward_bytes()`` is non-empty) there are usually several token spellings of
them (``"name"`` can be ``"``+``name``+``"`` or ``"name`` + ``"``); inserting one spelling
without asking the model would produce token sequences the tokenizer would never produce
(non-canonical tokenization, mission item 14).  formcast therefore keeps sampling normally
through forced bytes: the model picks the spelling, under the mask.  The only shortcut is
exact: when the mask allows **exactly one** token, that token is taken without sampling (any
sampler would pick it), and its evaluation is deferred and batched with the next model call;
when only stop tokens are allowed the output is complete and generation ends without a model
call.  Greedy output is therefore identical to plain step-by-step masked decoding.
``fast_forward=True`` opts into the other trade: the forced bytes are appended in the
tokenizer's own spelling (the canonical one, not an arbitrary one), their last tokens held back
where a longer token could merge them with what follows, and evaluated with the next sampled
token in one model call (:mod:`formcast.generation.fast_forward`): fewer model calls, a
different (canonical) spelling of forced text, so a slightly different distribution.

Token budget.  ``max_tokens`` counts text tokens.  A stop token that the grammar forces (the
output is complete and nothing else is allowed) is accepted without a model call and without
counting.  When the budget runs out the result is ``"max_tokens"`` with the truncated text:
never ``"completed"``, never auto-completed, never parsed (``value``/``parsed`` ``None``,
``parse_error`` says why).  The output is thus bounded by the constraint *and* the budget: a
schema without ``maxItems``/``maxLength`` (or with ``10**12``) is bounded by ``max_tokens``.

Regex dialect.  ``regex=`` is ECMA-262 by default (ASCII ``\\d \\w \\s``, as JSON Schema
``pattern``); ``dialect="python"`` gives Python ``re``'s Unicode classes.

Threads.  Masks are precomputed on a background thread while the model reads the prompt; the
thread is stopped and joined before anything is yielded or returned (also when the prefill
raises), so no thread outlives the call.

Streaming.  Text pieces are decoded incrementally from the token bytes: a multi-byte UTF-8
character split across tokens is held back until it is complete, and text that could be the
start of a caller's stop string is held back until it is known not to be one.

The loop itself (mask, sample, accept, stop scan, timings) is :mod:`formcast.generation.loop`;
this module is the public surface: arguments, prompts, the shared compilers.

Lifetime: stateless functions; a compiled constraint is cached per vocabulary by the module's
:class:`~formcast.index.compiler.GrammarCompiler` (bounded LRU), so repeated calls with the same
schema or regex compile once.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import numpy as np

from ..errors import OptionError
from ..frontends.jsonschema.source import pydantic_model_class
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..model.protocol import LanguageModel
from ..vocab.canonical import CanonicalPairs
from .conditioned import ConditionedSampler
from .control import StepControl
from .fast_forward import FastForward, fast_forward_for
from .inputs import (
    Prompt,
    _prompt_ids,
    _resolve_model,
    get_compiler,
    resolve_constraint,
)
from .loop import decode
from .options import GenerationOptions, check_context
from .reasoning import ReasoningOptions, split_stream, wrap_reasoning
from .results import GenerationResult
from .tokenization import canonical_pairs_for, heal_prompt

if TYPE_CHECKING:  # pragma: no cover
    from ..constraints.core import Constraint

__all__ = ["generate", "stream"]

_perf = time.perf_counter


def _conditioned_sample(
    lm: LanguageModel, prompt: Prompt, options: GenerationOptions
) -> GenerationResult:
    """``generate(sampling="exact" | "aligned")``: one sample of a ConditionedSampler (the
    options were checked for it when they were built)."""
    sampler = ConditionedSampler.from_options(lm, prompt, options)
    result: GenerationResult = sampler.sample(1, seed=options.seed)[0]
    return result


def _prepare(
    lm: LanguageModel, prompt: Prompt, options: GenerationOptions, t_call: float
) -> Generator[str, None, GenerationResult]:
    """Compile, read the prompt, then return the (not yet started) decoding loop.

    ``options`` are valid (checked once, when they were built) and ``options.sampling`` is
    ``"mask"``; what is checked here needs the model: the constraint against its vocabulary,
    the prompt against its context."""
    o = options
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
    answer = cg
    think = o.reasoning_options
    if think is not None:
        t_wrap = _perf()
        comp = o.compiler if o.compiler is not None else get_compiler(lm.vocab)
        cg = wrap_reasoning(cg, think, comp)
        compile_s += _perf() - t_wrap
    ids = _prompt_ids(lm, prompt, chat=o.chat, system=o.system)
    check_context(lm, len(ids), o.max_tokens)
    pairs = _canonical_option(lm, cg, o.canonical)
    ff = _fast_forward_option(lm, cg, o.fast_forward)
    healed = b""
    if o.token_healing:
        ids, healed = heal_prompt(lm.vocab, ids)
    control = o.control
    if o.timeout_s is not None:
        deadline = time.monotonic() - (_perf() - t_call) + o.timeout_s  # from the call's start
        control = (control or StepControl()).with_deadline(deadline)
    schema_class = pydantic_model_class(o.schema) if cg is not None else None
    loop = decode(
        lm,
        ids,
        cg,
        o.params,
        np.random.default_rng(o.seed),
        o.max_tokens,
        o.stops,
        compile_s,
        t_call,
        schema_class,
        canonical=pairs,
        healed=healed,
        control=control,
        logprobs=o.logprobs,
        fast_forward=ff,
    )
    if think is None or answer is None:  # (wrap_reasoning refused a call without a constraint)
        return loop
    return split_stream(loop, think, answer.kind, schema_class)


def _canonical_option(
    lm: LanguageModel, compiled: CompiledGrammar | None, canonical: object
) -> CanonicalPairs | None:
    """The model's :class:`CanonicalPairs` for ``canonical=True`` (``None`` for ``False``)."""
    if not canonical:
        return None
    if compiled is None:
        raise OptionError(
            "canonical", canonical,
            "canonical=True needs a constraint (schema=, regex=, grammar=, constraint= or "
            "compiled=): unconstrained sampling follows the model's own tokenization"
        )
    return canonical_pairs_for(lm)


def _fast_forward_option(
    lm: LanguageModel, compiled: CompiledGrammar | None, fast_forward: bool
) -> FastForward | None:
    """The model's :class:`FastForward` for ``fast_forward=True`` (``None`` for ``False``)."""
    if not fast_forward:
        return None
    if compiled is None:
        raise OptionError(
            "fast_forward", fast_forward,
            "fast_forward=True needs a constraint (schema=, regex=, grammar=, constraint= or "
            "compiled=): without one nothing is forced",
        )
    return fast_forward_for(lm)


def _arguments(
    model: LanguageModel | str,
    prompt: Prompt,
    *,
    options: GenerationOptions | None = None,
    schema: Any = None,
    regex: str | None = None,
    grammar: str | None = None,
    grammar_syntax: str = "gbnf",
    compiled: CompiledGrammar | None = None,
    max_tokens: int = 256,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    stop: str | Sequence[str] | None = None,
    chat: bool | None = None,
    system: str | None = None,
    compiler: GrammarCompiler | None = None,
    dialect: str = "ecma",
    sampling: str = "mask",
    canonical: bool = False,
    token_healing: bool = False,
    constraint: Constraint | None = None,
    reasoning: bool | ReasoningOptions | Mapping[str, Any] | None = None,
    logprobs: int | None = None,
    timeout_s: float | None = None,
    control: StepControl | None = None,
    fast_forward: bool = False,
) -> None:
    """The one signature of :func:`generate` and :func:`stream` (for ``help()``, type
    checkers and the argument check): the keywords are the fields of
    :class:`GenerationOptions`, with its defaults (a test keeps them equal)."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _takes_arguments_of(
    template: Callable[_P, object],
) -> Callable[[Callable[..., _R]], Callable[_P, _R]]:
    """Give the decorated ``fn(model, prompt, **options)`` the parameters of ``template``: for
    type checkers, ``help()`` and :func:`inspect.signature` (its own return type is kept)."""

    def adopt(fn: Callable[..., _R]) -> Callable[_P, _R]:
        returns = inspect.signature(fn).return_annotation
        signature = inspect.signature(template).replace(return_annotation=returns)

        @functools.wraps(fn)
        def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:  # a wrong argument is reported against the public name, before any work
                signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{fn.__name__}(): {exc}") from None
            return fn(*args, **kwargs)

        checked.__signature__ = signature  # type: ignore[attr-defined]
        return checked

    return adopt


# -- the public entry points ---------------------------------------------------------------------
@_takes_arguments_of(_arguments)
def generate(
    model: LanguageModel | str,
    prompt: Prompt,
    *,
    options: GenerationOptions | None = None,
    **kwargs: Any,
) -> GenerationResult:
    """Generate text from ``model`` under at most one constraint.

    Args:
        model: a model wrapper (:class:`~formcast.model.llama_cpp.LlamaCppModel`,
            :class:`~formcast.model.transformers.TransformersModel`,
            :class:`~formcast.model.callable.CallableModel`) or a model name /
            GGUF path for :func:`formcast.model.loading.load_model` (``"smollm2"``: the bundled
            default model on llama.cpp, loaded once and cached).
        prompt: text (the model's chat template is applied when it has one, see ``chat``),
            chat messages ``[{"role": ..., "content": ...}]``, or token ids (used as given).
        options: a :class:`~formcast.generation.GenerationOptions` holding the options below
            (built once, reusable); keyword arguments given as well override its fields.
        schema: a JSON Schema (dict, bool or JSON text) or a Pydantic model class: output is
            a JSON document valid for it; ``result.value`` is the parsed document and
            ``result.parsed`` the class's instance (``Model.model_validate_json``), both only
            when ``finish_reason == "completed"``.
        regex: a regular expression the whole output must match, in ``dialect``.
        grammar: a GBNF (or ``grammar_syntax="lark"``) grammar, or ``"json"`` for any JSON.
        constraint: a constraint object built with :mod:`formcast.constraints`
            (combinators such as ``seq("Answer: ", json(schema))``, state machines).
        compiled: a constraint compiled beforehand with ``GrammarCompiler(model.vocab)``.
        max_tokens: the budget of text tokens (``>= 0``).
        temperature, top_k, top_p: the sampler chain, applied after the mask
            (``temperature=0`` is greedy).
        seed: seeds the sampler (``None``: fresh entropy).  Greedy decoding draws nothing.
        stop: stop string(s): generation ends when one appears; it is not part of the text.
        chat: apply the model's chat template to a text prompt (default: when it has one).
        system: the system message for the chat template (default: the template's own).
        compiler: the :class:`GrammarCompiler` to use (default: one shared per vocabulary).
        dialect: the dialect of ``regex``: ``"ecma"`` (default; ECMA-262 ``u`` mode, ASCII
            ``\\d \\w \\s`` as in JSON Schema ``pattern``) or ``"python"`` (``re``'s
            Unicode classes).
        sampling: ``"mask"`` (default: per-step masking, what every engine does; cheap but it
            changes the distribution over valid outputs), ``"exact"`` (one sample of the
            model conditioned on the constraint, :class:`~formcast.ConditionedSampler`;
            needs ``temperature > 0``, no ``stop``/``top_k``; may raise
            :class:`~formcast.errors.SamplingBudgetError`) or ``"aligned"``
            (grammar-aligned).  ``stream`` supports ``"mask"`` only.
        canonical: mask, after each output token, the tokens the tokenizer never puts after
            it (``encode(a + b) != [a, b]``; needs a constraint and a model with
            ``encode_bytes``; see :mod:`formcast.generation.tokenization` for what it
            guarantees).  With ``"mask"`` a state where the test forbids every allowed token
            ends as ``"dead_end"``; ``"exact"`` samples p(y | y in L, y canonical).
        token_healing: back off the prompt's last (text) token and make the output re-spell
            its bytes first, so that the model may merge them with what follows
            (``"mask"`` only).  ``result.prompt_ids`` is the prompt after the back-off,
            ``result.token_ids`` every generated token, ``result.text`` / ``raw`` exclude the
            removed bytes (the constraint applies to ``text`` as without healing).
        reasoning: think, then constrain (``"mask"`` only): ``True``, a
            :class:`~formcast.generation.ReasoningOptions` or a dict of its fields
            (``end_marker="</think>"``, ``max_thinking_tokens``, ``max_thinking_bytes``).  The
            output starts with free text (the thinking) until the first ``end_marker``, then
            follows the constraint; ``result.reasoning`` is the thinking (marker excluded),
            ``result.text`` / ``value`` / ``parsed`` the answer after the marker.  Thinking
            tokens count in ``max_tokens``; once a thinking budget is spent only the marker
            may follow.  Stop strings are scanned over the whole output.  ``stream`` yields
            the thinking as :class:`~formcast.generation.ReasoningText` pieces (a ``str``
            subclass), never the marker, then the answer as plain ``str``.  The prompt (or
            chat template) must open the thinking if the model needs a ``<think>`` tag.
        logprobs: ``None`` (off) or ``k`` in 0..20: ``result.logprobs`` holds each output
            token's log-probability under the distribution it was drawn from (the allowed
            tokens' log-softmax at temperature 1; 0 for a forced token) and the ``k`` most
            likely allowed tokens (:class:`~formcast.generation.TokenLogprob`; ``"mask"``
            only).
        timeout_s: seconds from the call after which the output ends as ``"timeout"``
            (checked before every model call; ``"mask"`` only).
        control: a :class:`~formcast.generation.StepControl`: a cancel flag (ends the output
            as ``"cancelled"``), a :func:`time.monotonic` deadline (``"timeout"``) and an
            ``on_step(step)`` callback, checked by the decoding loop before every model call
            (``"mask"`` only).
        fast_forward: where the constraint forces the next bytes, append them as the
            tokenizer's own tokens without sampling (evaluated with the next sampled token in
            one model call; the run's last tokens are left to the model when a longer token
            could merge them with what follows).  Fewer model calls on schema-shaped output;
            the spelling of forced text is the tokenizer's instead of the model's choice,
            which changes the distribution (and greedy output may differ).  Needs a
            constraint and a model with ``encode_bytes``; ``"mask"`` only; no ``logprobs``
            (the model never scores the appended tokens).  ``result.timings.forced_tokens``
            counts them with the single-token forced ones.  See
            :mod:`formcast.generation.fast_forward`.

    Returns:
        A :class:`GenerationResult` (``finish_reason`` says how it ended).  The output is
        bounded by the constraint *and* ``max_tokens``: a schema without ``maxItems`` /
        ``maxLength`` (or with a huge one) is bounded by the budget alone, and running out
        of it is ``"max_tokens"`` with ``value``/``parsed`` ``None`` -- never a completion.

    Raises:
        OptionError: a bad option (it names the option and the value), before the model is
            loaded or called; several constraints at once are an ``OptionError`` too.
        ContextLengthError: the prompt plus ``max_tokens`` exceed the model's context.
        ConfigurationError: other bad arguments (a prompt the model cannot read...), before
            anything runs (both errors above are ``ConfigurationError`` s).
        GrammarError: the constraint does not compile (before the model runs).
        VocabularyError: a constraint compiled for another vocabulary.
    """
    t_call = _perf()
    opts = GenerationOptions.build(options, **kwargs)
    lm = _resolve_model(model)
    if opts.sampling != "mask":
        return _conditioned_sample(lm, prompt, opts)
    loop = _prepare(lm, prompt, opts, t_call)
    while True:
        try:
            next(loop)
        except StopIteration as done:
            result: GenerationResult = done.value
            return result


@_takes_arguments_of(_arguments)
def stream(
    model: LanguageModel | str,
    prompt: Prompt,
    *,
    options: GenerationOptions | None = None,
    **kwargs: Any,
) -> Generator[str | GenerationResult, None, GenerationResult]:
    """Like :func:`generate`, but yields the text as it is produced.

    Yields non-empty ``str`` pieces, each made of whole characters (a multi-byte UTF-8
    character is never split across pieces), whose concatenation is ``result.text``; the last
    item is the :class:`GenerationResult`.  With ``reasoning=`` the thinking comes first as
    :class:`~formcast.generation.ReasoningText` pieces (concatenating to ``result.reasoning``;
    the end marker is not yielded), then the answer's plain ``str`` pieces (to ``result.text``).
    Arguments are validated and the constraint is compiled when this function is called,
    before the first item is requested: bad input raises here, not in the loop.

    A stream shows progress, not a commitment: act on the output (execute a tool call, store a
    record) only after the final result says ``"completed"`` and it passes your validation.
    Closing the generator early (``.close()``, or leaving a ``for`` loop and dropping it) stops
    generation; the model is left mid-sequence and the next call starts over.  The generator's
    return value (``StopIteration.value``) is the result as well.
    """
    t_call = _perf()
    opts = GenerationOptions.build(options, **kwargs)
    if opts.sampling != "mask":
        raise OptionError(
            "sampling", opts.sampling,
            f"stream() samples with the mask only, got sampling={opts.sampling!r}: use "
            "generate(..., sampling=...) or formcast.ConditionedSampler for the others",
        )
    return _stream_items(_prepare(_resolve_model(model), prompt, opts, t_call))


def _stream_items(
    loop: Generator[str, None, GenerationResult],
) -> Generator[str | GenerationResult, None, GenerationResult]:
    result: GenerationResult = yield from loop
    yield result
    return result
