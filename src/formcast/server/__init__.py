"""The OpenAI-compatible HTTP server, ``formcast serve`` (see docs/server.md).

::

    from formcast.server import ServerConfig, create_app, run_server
    app = create_app(model, ServerConfig(model_name="smollm2"))      # a FastAPI app
    run_server(model, ServerConfig(), host="127.0.0.1", port=8000)   # uvicorn, blocks

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (Prometheus text).  Modules: :mod:`.config` (the one options
dataclass), :mod:`.engine` (the bounded queue, the model thread, compiles off the event loop),
:mod:`.requests` (OpenAI request bodies to generation jobs), :mod:`.responses` (jobs' outcomes
to OpenAI JSON and SSE chunks), :mod:`.api_errors` (OpenAI's error JSON), :mod:`.metrics`
(Prometheus), :mod:`.app` (the FastAPI routes and uvicorn).

Needs the ``server`` extra (``pip install 'formcast[server]'``: FastAPI and uvicorn).
Importing this package imports neither: the names below load their module on first use.

Lifetime: one app per served model; the app owns one engine (one model thread, one compiler).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .app import create_app, run_server
    from .config import ServerConfig

__all__ = ["ServerConfig", "create_app", "run_server"]

_LAZY = {"ServerConfig": ".config", "create_app": ".app", "run_server": ".app"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'formcast.server' has no attribute {name!r}")
    try:
        loaded = importlib.import_module(module, __name__)
    except ImportError as exc:
        from ..errors import MissingDependencyError

        raise MissingDependencyError(
            f"the formcast server needs FastAPI and uvicorn ({exc}); install them: "
            "pip install 'formcast[server]'"
        ) from exc
    return getattr(loaded, name)
