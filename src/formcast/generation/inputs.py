"""The inputs of a generation, checked and prepared once for every entry point
(:func:`~formcast.generation.generate`, :func:`~formcast.generation.stream`,
:class:`~formcast.generation.ConditionedSampler`): prompts to token ids, model names to
models, seeds, stop strings, sampling methods, and the constraint compiled by a compiler shared
per vocabulary.

Lifetime: stateless functions, plus the process-wide LRU of compilers (at most
``_MAX_COMPILERS``, one per vocabulary fingerprint) whose compiled constraints are cached, so
repeated calls with the same schema or regex compile once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from ..cache import LruCache
from ..errors import (
    ConfigurationError,
    VocabularyError,
)
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..index.spec import AnyJsonSpec, ConstraintSpec, GrammarTextSpec, JsonSchemaSpec, RegexSpec
from ..model.chat import Message
from ..model.protocol import LanguageModel
from ..vocab.vocabulary import Vocabulary

if TYPE_CHECKING:  # pragma: no cover
    from ..constraints.core import Constraint

__all__ = [
    "DEFAULT_REGEX_DIALECT",
    "SAMPLING_METHODS",
    "Prompt",
    "compile_constraint",
    "get_compiler",
    "resolve_constraint",
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
    constraint: Constraint | ConstraintSpec | None = None,
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
        constraint: a constraint object built with :mod:`formcast.constraints`
            (combinators, state machines), or a :class:`~formcast.index.spec.ConstraintSpec`
            (``GrammarCompiler.compile``).

    Every argument becomes one spec, compiled by ``GrammarCompiler.compile`` (the one compile
    path).

    Returns:
        ``(None, None)`` when no constraint is given; ``kind`` is the compiled grammar's kind
        (``"regex"``, ``"json_schema"``, ``"builtin_json"``, ``"gbnf"``, ``"lark"``,
        ``"constraint"``).

    Raises:
        ConfigurationError: more than one constraint, or a schema that is not JSON (read
            once, by :func:`~formcast.frontends.jsonschema.source.load_schema`).
        GrammarError: the constraint does not compile (syntax, unsupported feature, limits).
    """
    named = (
        ("schema", schema),
        ("regex", regex),
        ("grammar", grammar),
        ("constraint", constraint),
    )
    given = [n for n, v in named if v is not None]
    if len(given) > 1:
        raise ConfigurationError(f"give at most one constraint, got {', '.join(given)}")
    if not given:
        return None, None
    comp = compiler if compiler is not None else get_compiler(vocab)
    spec: ConstraintSpec | Constraint
    if constraint is not None:
        spec = constraint  # a spec or a constraint object (compile checks which)
    elif regex is not None:
        if not isinstance(regex, str):
            raise ConfigurationError(f"regex must be str, got {type(regex).__name__}")
        spec = RegexSpec(regex, dialect)
    elif grammar is not None:
        if not isinstance(grammar, str):
            raise ConfigurationError(f"grammar must be str, got {type(grammar).__name__}")
        is_json = grammar.strip() == "json"
        spec = AnyJsonSpec() if is_json else GrammarTextSpec(grammar, grammar_syntax)
    else:
        spec = JsonSchemaSpec.of(schema)  # (text, dict, bool or Pydantic class: read here)
    cg = comp.compile(spec)
    return cg, cg.kind


def resolve_constraint(
    model: LanguageModel,
    *,
    compiled: CompiledGrammar | None = None,
    schema: Any = None,
    regex: str | None = None,
    grammar: str | None = None,
    grammar_syntax: str = "gbnf",
    compiler: GrammarCompiler | None = None,
    dialect: str = DEFAULT_REGEX_DIALECT,
    constraint: Constraint | None = None,
) -> tuple[CompiledGrammar | None, float]:
    """The one constraint of a call, ready for ``model``: ``(compiled, compile seconds)``.

    ``compiled=`` is checked (alone, a :class:`CompiledGrammar` of the model's vocabulary) and
    costs ``0.0`` seconds; otherwise the constraint is compiled by :func:`compile_constraint`
    and timed (``0.0`` when there is none, ``(None, 0.0)``).  Shared by
    :func:`~formcast.generation.generate`, ``stream`` and
    :class:`~formcast.generation.ConditionedSampler`.

    Raises:
        ConfigurationError, GrammarError, VocabularyError: as :func:`compile_constraint` and
            for a bad ``compiled=``.
    """
    if compiled is not None:
        return _check_compiled(compiled, model, schema, regex, grammar, constraint), 0.0
    t0 = _perf()
    cg, _ = compile_constraint(
        model.vocab,
        schema=schema,
        regex=regex,
        grammar=grammar,
        grammar_syntax=grammar_syntax,
        compiler=compiler,
        dialect=dialect,
        constraint=constraint,
    )
    return cg, (_perf() - t0 if cg is not None else 0.0)


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


def _check_compiled(compiled: Any, model: LanguageModel, *constraints: Any) -> CompiledGrammar:
    """``compiled=`` given instead of a constraint: alone, a CompiledGrammar, for the model's
    vocabulary."""
    if any(v is not None for v in constraints):
        raise ConfigurationError("give either compiled= or one of schema/regex/grammar/constraint")
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


SAMPLING_METHODS = ("mask", "exact", "aligned")
"""The values of ``generate(sampling=...)`` (see :mod:`formcast.generation.conditioned`)."""


