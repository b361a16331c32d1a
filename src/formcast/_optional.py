"""Optional libraries, imported on demand with the install command in the error.

Lifetime: process-wide, stateless.  ``require`` costs one ``importlib.import_module`` call
(a dictionary lookup once the module is loaded).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

__all__ = ["require"]

_INSTALL_HINTS = {
    "llama_cpp": "pip install llama-cpp-python==0.3.36 (builds from source, ~7 min on 2 cores; "
    "or run scripts/install_model_extras.sh)",
    "torch": "pip install torch==2.13.0 (the CPU wheel; avoid a plain 'pip install torch', "
    "which pulls a multi-GB CUDA build)",
    "transformers": "pip install transformers accelerate",
    "accelerate": "pip install accelerate (transformers needs it to load GGUF files)",
}


def require(module: str) -> ModuleType:
    """Import ``module`` or raise :class:`~formcast.errors.MissingDependencyError` with the
    install command."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(module, f"pip install {module}")
        raise MissingDependencyError(
            f"{module} is not installed ({exc}); install it: {hint}"
        ) from exc
