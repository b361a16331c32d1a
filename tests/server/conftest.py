"""Fixtures of the server tests: one real uvicorn server on the toy model per module.

The tests need the server extra and the ``openai`` client (both in the ``test`` extra).  Without
them the directory is left out, saying why; under ``CI=true`` that is an error instead.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from server_harness import ToyModel, running_server

from _assets import in_ci

_MISSING = [m for m in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None]
if _MISSING:
    _WHY = (f"the server tests need {', '.join(_MISSING)}: pip install -e '.[test]' (the server "
            "extra and the openai client)")
    if in_ci():  # CI installs the test extra: a missing package there fails, never skips
        raise pytest.UsageError(f"CI is set, so the server tests may not be left out: {_WHY}")
    collect_ignore_glob = ["test_*.py"]
    print(f"tests/server left out: {_WHY}")


@pytest.fixture(scope="module")
def toy_model() -> ToyModel:
    return ToyModel()


@pytest.fixture(scope="module")
def toy_server(toy_model: ToyModel) -> Iterator[Any]:
    from formcast.server import ServerConfig

    with running_server(toy_model, ServerConfig(model_name="toy", compile_workers=0)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(toy_server: Any) -> Any:
    import openai

    return openai.OpenAI(base_url=toy_server.base_url, api_key="unused", max_retries=0,
                         timeout=60)
