"""Language models as formcast's generation loop sees them.

:class:`LanguageModel` (the protocol: ``vocab``, ``start``, ``step``, ``tokenize``...; the
optional raw-encode capability :class:`SupportsEncodeBytes`, behind ``canonical=True``),
chat templates (:class:`ChatTemplate`: :class:`JinjaChatTemplate` renders the model's own, with
jinja2 imported on first render; :class:`TurnTemplate` is hand-written), and the wrappers that
implement the protocol:
:class:`LlamaCppModel` (llama-cpp-python), :class:`TransformersModel` (torch, transformers),
:class:`CallableModel` (any ``logits = f(token_ids)``, numpy only), which share their stored
properties through :class:`~formcast.model.base.ModelBase`; :func:`load_model` loads a bundled
model by name.  Importing this package imports no model library: each wrapper's module
is imported when its name is first used, and the library itself when a model is loaded.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .chat import CHATML, SMOLLM2_CHAT, ChatTemplate, Message, TurnTemplate
from .chat_jinja import JinjaChatTemplate
from .protocol import LanguageModel, Logits, SupportsEncodeBytes, raw_encoder

if TYPE_CHECKING:  # pragma: no cover
    from .callable import CallableModel
    from .llama_cpp import LlamaCppModel, check_llama_vocabulary
    from .loading import load_model
    from .transformers import TransformersModel, check_hf_vocabulary

__all__ = [
    "CHATML",
    "SMOLLM2_CHAT",
    "CallableModel",
    "ChatTemplate",
    "JinjaChatTemplate",
    "LanguageModel",
    "LlamaCppModel",
    "Logits",
    "Message",
    "SupportsEncodeBytes",
    "TransformersModel",
    "TurnTemplate",
    "check_hf_vocabulary",
    "check_llama_vocabulary",
    "load_model",
    "raw_encoder",
]

_LAZY = {
    "CallableModel": ".callable",
    "LlamaCppModel": ".llama_cpp",
    "check_llama_vocabulary": ".llama_cpp",
    "TransformersModel": ".transformers",
    "check_hf_vocabulary": ".transformers",
    "load_model": ".loading",
}


def __getattr__(name: str) -> Any:
    """The wrappers, imported on first use."""
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)
