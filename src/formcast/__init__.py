"""formcast: provably well-formed LLM output by masking logits with compiled constraints.

Public API (the ecosystem's names)::

    vocab = Vocabulary.from_huggingface(tokenizer)          # per model
    compiler = GrammarCompiler(vocab)                        # per model, caches grammars
    compiled = compiler.compile_regex(r"\\d{4}-\\d{2}-\\d{2}")  # per grammar, immutable
    matcher = GrammarMatcher(compiled)                       # per request
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    apply_token_bitmask_inplace(logits, bitmask)
    matcher.accept_token(token_id)

``import formcast`` imports numpy only: tokenizers, torch, transformers and llama.cpp are
imported lazily by the functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import CompileLimits
from .errors import (
    ConfigurationError,
    DeadEndDiagnostic,
    DeadEndError,
    FormcastError,
    GrammarError,
    GrammarSyntaxError,
    LimitExceededError,
    SerializationError,
    UnsatisfiableGrammarError,
    UnsupportedFeatureError,
    VocabularyError,
)
from .index.bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_to_bool,
    bool_to_bitmask,
    get_bitmask_shape,
    reset_token_bitmask,
)
from .index.compiled import CompiledGrammar
from .index.compiler import GrammarCompiler
from .runtime.matcher import GrammarMatcher
from .vocab.vocabulary import Vocabulary

if TYPE_CHECKING:  # pragma: no cover
    from .generation import GenerationResult, GenerationTimings, generate, stream
    from .models import load_model

__version__ = "0.1.0"

# generation API: loaded on first use (it still imports no model library until a model loads)
_LAZY = {
    "generate": "generation",
    "stream": "generation",
    "GenerationResult": "generation",
    "GenerationTimings": "generation",
    "load_model": "models",
}


def __getattr__(name: str) -> Any:
    """Lazy exports of the generation API."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'formcast' has no attribute {name!r}")


__all__ = [
    "CompileLimits",
    "CompiledGrammar",
    "ConfigurationError",
    "DeadEndDiagnostic",
    "DeadEndError",
    "FormcastError",
    "GenerationResult",
    "GenerationTimings",
    "GrammarCompiler",
    "GrammarError",
    "GrammarMatcher",
    "GrammarSyntaxError",
    "LimitExceededError",
    "SerializationError",
    "UnsatisfiableGrammarError",
    "UnsupportedFeatureError",
    "Vocabulary",
    "VocabularyError",
    "__version__",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_to_bool",
    "bool_to_bitmask",
    "generate",
    "get_bitmask_shape",
    "load_model",
    "reset_token_bitmask",
    "stream",
]
