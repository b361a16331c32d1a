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
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, ParamSpec, TypeAlias, TypeVar

import numpy as np

from ..cache import LruCache
from ..errors import (
    ConfigurationError,
    VocabularyError,
)
from ..frontends.jsonschema.source import pydantic_model_class
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..model.chat import Message
from ..model.protocol import LanguageModel
from ..sampling import SamplingParams
from ..vocab.vocabulary import Vocabulary
from .loop import decode
from .results import GenerationResult

__all__ = [
    "Prompt",
    "compile_constraint",
    "generate",
    "get_compiler",
    "stream",
]

Prompt: TypeAlias = "str | Sequence[int] | Sequence[Message]"
"""A prompt: text (the chat template is applied for instruct models), chat messages, or token
ids (used as they are)."""

DEFAULT_REGEX_DIALECT = "ecma"
"""The regex dialect of ``regex=``: ECMA-262 (``u`` flag), ASCII ``\\d \\w \\s`` -- the
semantics of JSON Schema ``pattern``.  ``dialect="python"`` gives Python ``re``'s."""
_perf = time.perf_counter

# -- compilers, one per vocabulary ---------------------------------------------------------------
_MAX_COMPILERS = 4
_COMPILERS: LruCache[str, GrammarCompiler] = LruCache(_MAX_COMPILERS)
_COMPILERS_LOCK = threading.Lock()  # get-or-create in one step: one compiler per vocabulary


def get_compiler(vocab: Vocabulary) -> GrammarCompiler:
    """The shared :class:`GrammarCompiler` of ``vocab`` (kept for the 4 most recent vocabularies;
    keyed by the vocabulary fingerprint, so an equal vocabulary reuses the cache)."""
    key = vocab.fingerprint
    with _COMPILERS_LOCK:
        _, comp = _COMPILERS.get(key)
        if comp is None:
            comp = GrammarCompiler(vocab)
            _COMPILERS.put(key, comp)
        return comp


def compile_constraint(
    vocab: Vocabulary,
    *,
    schema: Any = None,
    regex: str | None = None,
    grammar: str | None = None,
    grammar_syntax: str = "gbnf",
    compiler: GrammarCompiler | None = None,
    dialect: str = DEFAULT_REGEX_DIALECT,
) -> tuple[CompiledGrammar | None, str | None]:
    """Compile at most one constraint for ``vocab``; returns ``(compiled, kind)``.

    Args:
        schema: a JSON Schema (``dict``, ``bool`` or JSON text; ``True`` is "any JSON value"),
            or a Pydantic model class (its ``model_json_schema()``).
        regex: a regular expression (fullmatch semantics).
        grammar: grammar text in ``grammar_syntax`` (``"gbnf"`` or ``"lark"``), or ``"json"``
            for the built-in JSON grammar.
        compiler: the compiler to use (default: the shared one of ``vocab``).
        dialect: the dialect of ``regex``: ``"ecma"`` (default: ECMA-262 with the ``u`` flag,
            ASCII ``\\d \\w \\s``, as JSON Schema ``pattern``) or ``"python"`` (``re``: Unicode
            ``\\d`` admits ``٣``); see docs/regex.md.

    Returns:
        ``(None, None)`` when no constraint is given; ``kind`` is the compiled grammar's kind
        (``"regex"``, ``"json_schema"``, ``"builtin_json"``, ``"gbnf"``, ``"lark"``).

    Raises:
        ConfigurationError: more than one constraint, or a schema that is not JSON (read
            once, by :func:`~formcast.frontends.jsonschema.source.load_schema`).
        GrammarError: the constraint does not compile (syntax, unsupported feature, limits).
    """
    named = (("schema", schema), ("regex", regex), ("grammar", grammar))
    given = [n for n, v in named if v is not None]
    if len(given) > 1:
        raise ConfigurationError(f"give at most one constraint, got {', '.join(given)}")
    if not given:
        return None, None
    comp = compiler if compiler is not None else get_compiler(vocab)
    if regex is not None:
        if not isinstance(regex, str):
            raise ConfigurationError(f"regex must be str, got {type(regex).__name__}")
        cg = comp.compile_regex(regex, dialect=dialect)
        return cg, cg.kind
    if grammar is not None:
        if not isinstance(grammar, str):
            raise ConfigurationError(f"grammar must be str, got {type(grammar).__name__}")
        if grammar.strip() == "json":
            cg = comp.compile_builtin_json_grammar()
        else:
            cg = comp.compile_grammar(grammar, syntax=grammar_syntax)
        return cg, cg.kind
    cg = comp.compile_json_schema(schema)  # (text, dict, bool or Pydantic class: read there)
    return cg, cg.kind


# -- prompts -------------------------------------------------------------------------------------
def _prompt_ids(
    model: LanguageModel, prompt: Prompt, *, chat: bool | None, system: str | None
) -> list[int]:
    """The token ids of ``prompt`` (text, chat messages or ids); never empty."""
    if isinstance(prompt, str):
        ids = _text_prompt_ids(model, prompt, chat=chat, system=system)
    elif isinstance(prompt, Sequence) and prompt and isinstance(prompt[0], Mapping):
        ids = _chat_prompt_ids(model, prompt, chat=chat, system=system)
    elif isinstance(prompt, Sequence) and all(
        isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in prompt
    ):
        ids = _checked_token_ids(model, prompt)
    else:
        raise ConfigurationError(
            "prompt must be text, a list of chat messages or a list of token ids, "
            f"got {type(prompt).__name__}"
        )
    if not ids:
        raise ConfigurationError("the prompt is empty: give at least one token of context")
    return ids


def _text_prompt_ids(
    model: LanguageModel, prompt: str, *, chat: bool | None, system: str | None
) -> list[int]:
    """A text prompt, in the chat template when ``chat`` (default: when the model has one)."""
    template = model.chat_template
    if chat is None:
        chat = template is not None
    if chat:
        if template is None:
            raise ConfigurationError(
                f"chat=True but model {model.name!r} has no chat template; pass chat=False "
                "or give the model a template (chat_template=...)"
            )
        prompt = template.render_user(prompt, system=system)
    return model.tokenize(prompt)


def _chat_prompt_ids(
    model: LanguageModel, prompt: Sequence[Any], *, chat: bool | None, system: str | None
) -> list[int]:
    """Chat messages, rendered by the model's chat template."""
    template = model.chat_template
    if chat is False or template is None:
        raise ConfigurationError(
            "chat messages need a chat template: the model has none (or chat=False); "
            "pass the prompt as text or token ids"
        )
    messages: list[Message] = list(prompt)  # render() checks the messages
    return model.tokenize(template.render(messages, system=system))


def _checked_token_ids(model: LanguageModel, prompt: Sequence[Any]) -> list[int]:
    """Token ids given by the caller, checked against the vocabulary size."""
    ids = [int(t) for t in prompt if isinstance(t, (int, np.integer))]
    bad = [t for t in ids if not 0 <= t < model.vocab.vocab_size]
    if bad:
        raise ConfigurationError(
            f"prompt token ids {bad[:5]} are out of range for vocab_size "
            f"{model.vocab.vocab_size}"
        )
    return ids


# -- arguments -----------------------------------------------------------------------------------
def _resolve_model(model: Any) -> LanguageModel:
    """A model wrapper as given, or the one :func:`~formcast.model.loading.load_model` loads
    (and caches) for a name or GGUF path."""
    if isinstance(model, str):
        from ..model.loading import load_model

        return load_model(model)
    if not isinstance(model, LanguageModel):
        raise ConfigurationError(
            f"model must be a formcast model wrapper (LlamaCppModel, TransformersModel, "
            f"CallableModel) or a model name such as 'smollm2', got {type(model).__name__}"
        )
    return model


def _check_max_tokens(max_tokens: Any) -> None:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ConfigurationError(f"max_tokens must be an int >= 0, got {max_tokens!r}")


def _seeded_rng(seed: Any) -> np.random.Generator:
    """The sampler's generator: seeded by ``seed``, or fresh entropy for ``None``."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigurationError(f"seed must be an int or None, got {seed!r}")
    return np.random.default_rng(seed)


def _stop_strings(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    """``stop`` as a tuple of non-empty strings."""
    stops: tuple[str, ...]
    if stop is None:
        stops = ()
    elif isinstance(stop, str):
        stops = (stop,)
    else:
        stops = tuple(stop)
    if any(not isinstance(s, str) or not s for s in stops):
        raise ConfigurationError(f"stop must be a non-empty string or a list of them, got {stop!r}")
    return stops


def _check_compiled(compiled: Any, model: LanguageModel, *constraints: Any) -> CompiledGrammar:
    """``compiled=`` given instead of a constraint: alone, a CompiledGrammar, for the model's
    vocabulary."""
    if any(v is not None for v in constraints):
        raise ConfigurationError("give either compiled= or one of schema/regex/grammar")
    if not isinstance(compiled, CompiledGrammar):
        raise ConfigurationError(
            f"compiled must be a CompiledGrammar, got {type(compiled).__name__}"
        )
    if compiled.vocab.fingerprint != model.vocab.fingerprint:
        raise VocabularyError(
            f"the constraint was compiled for vocabulary {compiled.vocab.name!r}, not for "
            f"the model's {model.vocab.name!r}: compile it with GrammarCompiler(model.vocab)"
        )
    return compiled


def _check_context(model: LanguageModel, ids: list[int], max_tokens: int) -> None:
    limit = model.max_context
    if limit is not None and len(ids) + max_tokens > limit:
        raise ConfigurationError(
            f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceeds the model's "
            f"context of {limit} tokens: lower max_tokens or load the model with a larger n_ctx"
        )


def _prepare(
    model: LanguageModel | str,
    prompt: Prompt,
    *,
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
    dialect: str = DEFAULT_REGEX_DIALECT,
) -> Generator[str, None, GenerationResult]:
    """Validate everything and compile, then return the (not yet started) decoding loop.

    The one signature of :func:`generate` and :func:`stream` (documented on ``generate``);
    the checks run in this order, before the model is called."""
    t_call = _perf()
    lm = _resolve_model(model)
    _check_max_tokens(max_tokens)
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    rng = _seeded_rng(seed)
    stops = _stop_strings(stop)
    if compiled is not None:
        cg: CompiledGrammar | None = _check_compiled(compiled, lm, schema, regex, grammar)
        compile_s = 0.0
    else:
        t_compile = _perf()
        cg, _ = compile_constraint(
            lm.vocab,
            schema=schema,
            regex=regex,
            grammar=grammar,
            grammar_syntax=grammar_syntax,
            compiler=compiler,
            dialect=dialect,
        )
        compile_s = _perf() - t_compile if cg is not None else 0.0
    ids = _prompt_ids(lm, prompt, chat=chat, system=system)
    _check_context(lm, ids, max_tokens)
    schema_class = pydantic_model_class(schema) if cg is not None else None
    return decode(lm, ids, cg, params, rng, max_tokens, stops, compile_s, t_call, schema_class)


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
@_takes_arguments_of(_prepare)
def generate(model: LanguageModel | str, prompt: Prompt, **options: Any) -> GenerationResult:
    """Generate text from ``model`` under at most one constraint.

    Args:
        model: a model wrapper (:class:`~formcast.model.llama_cpp.LlamaCppModel`,
            :class:`~formcast.model.transformers.TransformersModel`,
            :class:`~formcast.model.callable.CallableModel`) or a model name /
            GGUF path for :func:`formcast.model.loading.load_model` (``"smollm2"``: the bundled
            default model on llama.cpp, loaded once and cached).
        prompt: text (the model's chat template is applied when it has one, see ``chat``),
            chat messages ``[{"role": ..., "content": ...}]``, or token ids (used as given).
        schema: a JSON Schema (dict, bool or JSON text) or a Pydantic model class: output is
            a JSON document valid for it; ``result.value`` is the parsed document and
            ``result.parsed`` the class's instance (``Model.model_validate_json``), both only
            when ``finish_reason == "completed"``.
        regex: a regular expression the whole output must match, in ``dialect``.
        grammar: a GBNF (or ``grammar_syntax="lark"``) grammar, or ``"json"`` for any JSON.
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

    Returns:
        A :class:`GenerationResult` (``finish_reason`` says how it ended).  The output is
        bounded by the constraint *and* ``max_tokens``: a schema without ``maxItems`` /
        ``maxLength`` (or with a huge one) is bounded by the budget alone, and running out
        of it is ``"max_tokens"`` with ``value``/``parsed`` ``None`` -- never a completion.

    Raises:
        ConfigurationError: bad arguments (several constraints, bad sampling values, prompt
            longer than the context...), before anything runs.
        GrammarError: the constraint does not compile (before the model runs).
        VocabularyError: a constraint compiled for another vocabulary.
    """
    loop = _prepare(model, prompt, **options)
    while True:
        try:
            next(loop)
        except StopIteration as done:
            result: GenerationResult = done.value
            return result


@_takes_arguments_of(_prepare)
def stream(
    model: LanguageModel | str, prompt: Prompt, **options: Any
) -> Generator[str | GenerationResult, None, GenerationResult]:
    """Like :func:`generate`, but yields the text as it is produced.

    Yields non-empty ``str`` pieces, each made of whole characters (a multi-byte UTF-8
    character is never split across pieces), whose concatenation is ``result.text``; the last
    item is the :class:`GenerationResult`.  Arguments are validated and the constraint is
    compiled when this function is called, before the first item is requested: bad input
    raises here, not in the loop.

    A stream shows progress, not a commitment: act on the output (execute a tool call, store a
    record) only after the final result says ``"completed"`` and it passes your validation.
    Closing the generator early (``.close()``, or leaving a ``for`` loop and dropping it) stops
    generation; the model is left mid-sequence and the next call starts over.  The generator's
    return value (``StopIteration.value``) is the result as well.
    """
    return _stream_items(_prepare(model, prompt, **options))


def _stream_items(
    loop: Generator[str, None, GenerationResult],
) -> Generator[str | GenerationResult, None, GenerationResult]:
    result: GenerationResult = yield from loop
    yield result
    return result
