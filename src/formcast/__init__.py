"""formcast: language-model output that provably conforms to a regex, a JSON Schema or a grammar.

A constraint compiles once into byte-level automata that know the tokenizer; at every step the
matcher fills a token bitmask (illegal tokens get ``-inf``), the sampler draws from what is left,
and the matcher advances.  Three lifetimes::

    vocab = Vocabulary.from_huggingface(tokenizer)           # per model
    compiler = GrammarCompiler(vocab)                         # per model, caches grammars
    compiled = compiler.compile_json_schema(schema)           # per grammar: immutable
    matcher = GrammarMatcher(compiled)                        # per request
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    apply_token_bitmask_inplace(logits, bitmask)
    matcher.accept_token(token_id)

Or the whole loop: ``generate(load_model("smollm2"), prompt, schema=...)``.

Layers (each folder imports only those above it in this list; see docs/architecture.md):
``ir`` (the grammar IR and its passes) → ``automata`` (byte NFA/DFA) → ``frontends`` (regex,
GBNF, Lark, JSON Schema → IR) → ``constraints`` (constraints as Python objects: combinators,
state machines) → ``vocab`` (tokenizers → exact token bytes) → ``index`` (token
classes per state, ``GrammarCompiler``, ``CompiledGrammar``) → ``runtime`` (``GrammarMatcher``)
→ ``sampling`` → ``model`` (the ``LanguageModel`` protocol and its wrappers) → ``generation``
(``generate``, ``stream``) → ``actions`` (actions that commit exactly once: validation layers,
retries, ledgers, metrics) → ``tools`` (tool-call formats, ``tool_choice`` constraints, parsing)
→ ``integrations`` (formcast inside vLLM, SGLang, llama-cpp-python, transformers) → ``server``
(``formcast serve``, the OpenAI-compatible HTTP server) → ``cli``.

A server request (docs/architecture.md follows one): the HTTP body is validated into a typed
request, admitted by the engine's bounded queue, its ``response_format`` or ``tools`` turned into
a constraint and compiled off the event loop (``GrammarCompiler.compile_async``: memory cache,
disk cache, worker process), then the model thread runs ``generation.stream`` -- logits, the
matcher's bitmask, the sampling chain, ``accept_token`` per step -- and the pieces go back as
JSON or server-sent events.

Native code: ``pip install .`` builds C kernels and mypyc-compiled modules where a C compiler
is present, each falling back to the pure Python source (docs/native.md; ``formcast --version``
names the build that runs).

``import formcast`` imports numpy only: tokenizers, torch, transformers, llama.cpp and
jsonschema are imported by the functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_to_bool,
    bool_to_bitmask,
    get_bitmask_shape,
    reset_token_bitmask,
)
from .errors import (
    CompileBudgetError,
    CompileTimeoutError,
    CompileWorkerError,
    ConfigurationError,
    ConstraintError,
    ContextLengthError,
    DeadEndDiagnostic,
    DeadEndError,
    FormcastError,
    GrammarError,
    GrammarSyntaxError,
    LimitExceededError,
    MissingDependencyError,
    ModelFileError,
    OptionError,
    SamplingBudgetError,
    SerializationError,
    ToolCallError,
    UnsatisfiableGrammarError,
    UnsupportedFeatureError,
    VocabularyError,
)
from .frontends.jsonschema.files import json_schema_registry
from .frontends.jsonschema.options import JsonSchemaOptions
from .index.compiled import CompiledGrammar
from .index.compiler import GrammarCompiler
from .ir.nodes import Grammar, Rule
from .limits import CacheLimits, CompileLimits, ParserLimits
from .runtime.batch import BatchFillResult, batch_fill_next_token_bitmask
from .runtime.matcher import GrammarMatcher
from .sampling import SamplingParams
from .vocab.loaders import load_vocabulary
from .vocab.vocabulary import Vocabulary

if TYPE_CHECKING:  # pragma: no cover
    from . import constraints
    from .generation import (
        ConditionedSampler,
        GenerationOptions,
        GenerationResult,
        GenerationTimings,
        ReasoningOptions,
        ReasoningText,
        StepControl,
        TokenLogprob,
        generate,
        stream,
    )
    from .index.structural_tag import StructuralTag
    from .model import CallableModel, LanguageModel, LlamaCppModel, TransformersModel
    from .model.loading import load_model
    from .tools import ToolCall

# loaded on first use (still no model library until a model loads)
_LAZY = {
    "generate": "generation",
    "stream": "generation",
    "ConditionedSampler": "generation",
    "GenerationOptions": "generation",
    "GenerationResult": "generation",
    "GenerationTimings": "generation",
    "ReasoningOptions": "generation",
    "ReasoningText": "generation",
    "StepControl": "generation",
    "TokenLogprob": "generation",
    "load_model": "model.loading",
    "LanguageModel": "model",
    "CallableModel": "model",
    "LlamaCppModel": "model",
    "TransformersModel": "model",
    "StructuralTag": "index.structural_tag",
    "ToolCall": "tools",
}


def __getattr__(name: str) -> Any:
    """Lazy exports of the generation API, the model wrappers and ``formcast.constraints``."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name == "constraints":  # the combinator package (formcast.constraints), on first use
        import importlib

        return importlib.import_module(".constraints", __name__)
    raise AttributeError(f"module 'formcast' has no attribute {name!r}")


__all__ = [
    "BatchFillResult",
    "CacheLimits",
    "CallableModel",
    "CompileBudgetError",
    "CompileLimits",
    "CompileTimeoutError",
    "CompileWorkerError",
    "CompiledGrammar",
    "ConditionedSampler",
    "ConfigurationError",
    "ConstraintError",
    "ContextLengthError",
    "DeadEndDiagnostic",
    "DeadEndError",
    "FormcastError",
    "GenerationOptions",
    "GenerationResult",
    "GenerationTimings",
    "Grammar",
    "GrammarCompiler",
    "GrammarError",
    "GrammarMatcher",
    "GrammarSyntaxError",
    "JsonSchemaOptions",
    "LanguageModel",
    "LimitExceededError",
    "LlamaCppModel",
    "MissingDependencyError",
    "ModelFileError",
    "OptionError",
    "ParserLimits",
    "ReasoningOptions",
    "ReasoningText",
    "Rule",
    "SamplingBudgetError",
    "SamplingParams",
    "SerializationError",
    "StepControl",
    "StructuralTag",
    "TokenLogprob",
    "ToolCall",
    "ToolCallError",
    "TransformersModel",
    "UnsatisfiableGrammarError",
    "UnsupportedFeatureError",
    "Vocabulary",
    "VocabularyError",
    "__version__",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "batch_fill_next_token_bitmask",
    "bitmask_to_bool",
    "bool_to_bitmask",
    "constraints",
    "generate",
    "get_bitmask_shape",
    "json_schema_registry",
    "load_model",
    "load_vocabulary",
    "reset_token_bitmask",
    "stream",
]
