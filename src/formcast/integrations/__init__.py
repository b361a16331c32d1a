"""Engine integrations, each an optional extra imported lazily.

=================================================  ===========================================
:mod:`formcast.integrations.llama_cpp`             :class:`LlamaCppModel` (llama-cpp-python)
:mod:`formcast.integrations.transformers`          :class:`TransformersModel` and
                                                   :class:`FormcastLogitsProcessor` for
                                                   ``model.generate()`` (torch, transformers)
:mod:`formcast.integrations.numpy_loop`            :class:`CallableModel`: any
                                                   ``logits = f(token_ids)`` (numpy only)
=================================================  ===========================================

Importing this package imports no model library; ``from formcast.integrations import
LlamaCppModel`` imports the submodule (and still not llama_cpp itself, which is imported when a
model is loaded).  A missing library raises :class:`MissingDependencyError` naming the
``pip install`` that fixes it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import FormcastError

if TYPE_CHECKING:  # pragma: no cover
    from .llama_cpp import LlamaCppModel, check_llama_vocabulary
    from .numpy_loop import CallableModel
    from .transformers import FormcastLogitsProcessor, TransformersModel

__all__ = [
    "CallableModel",
    "FormcastLogitsProcessor",
    "LlamaCppModel",
    "MissingDependencyError",
    "ModelFileError",
    "TransformersModel",
    "check_llama_vocabulary",
    "require",
]


class MissingDependencyError(FormcastError, ImportError):
    """An optional library needed by an integration is not installed (the message says how to
    install it)."""


class ModelFileError(FormcastError):
    """A model file is missing, unreadable, or fails its checksum (the message says the fix)."""


_INSTALL_HINTS = {
    "llama_cpp": "pip install llama-cpp-python==0.3.36 (builds from source, ~7 min on 2 cores; "
    "or run scripts/install_model_extras.sh)",
    "torch": "pip install torch==2.13.0 (the CPU wheel; avoid a plain 'pip install torch', "
    "which pulls a multi-GB CUDA build)",
    "transformers": "pip install transformers accelerate",
    "accelerate": "pip install accelerate (transformers needs it to load GGUF files)",
}


def require(module: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` with the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(module, f"pip install {module}")
        raise MissingDependencyError(
            f"{module} is not installed ({exc}); install it: {hint}"
        ) from exc


_LAZY = {
    "LlamaCppModel": ".llama_cpp",
    "check_llama_vocabulary": ".llama_cpp",
    "CallableModel": ".numpy_loop",
    "TransformersModel": ".transformers",
    "FormcastLogitsProcessor": ".transformers",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)
