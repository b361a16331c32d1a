"""Engine tests: formcast inside the real vLLM (``bash scripts/test_engines.sh`` runs them in
vLLM's own virtual environment).

In the main suite vLLM is not installed: every module here is skipped, saying so and naming
the command that runs it.  Under ``scripts/test_engines.sh`` (``FORMCAST_ENGINE_TESTS=1``) a
missing vLLM is an error, never a skip.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ENGINE_RUN = os.environ.get("FORMCAST_ENGINE_TESTS") == "1"


def pytest_sessionstart(session: pytest.Session) -> None:
    if ENGINE_RUN and importlib.util.find_spec("vllm") is None:
        raise pytest.UsageError(
            "FORMCAST_ENGINE_TESTS=1 but vLLM cannot be imported: run the engine tests with "
            "`bash scripts/test_engines.sh`, which builds vLLM's virtual environment"
        )


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Llama (real Llama-3 tokenizer, padded logits) saved for vLLM."""
    from _tiny_llama import build_tiny_llama

    path = tmp_path_factory.mktemp("tiny-llama")
    return build_tiny_llama(path)
