"""The OpenAI-compatible HTTP server, ``formcast serve`` (see docs/server.md).

::

    from formcast.server import ServerConfig, create_app, run_server
    app = create_app(model, ServerConfig(model_name="smollm2"))      # a FastAPI app
    run_server(model, ServerConfig(), host="127.0.0.1", port=8000)   # uvicorn, blocks

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/responses`` (the
Responses API, stateless), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus
text).  Modules: :mod:`.config` (the one options dataclass), :mod:`.app` (the FastAPI routes and
uvicorn), one handler module per endpoint (:mod:`.chat`, :mod:`.completions`,
:mod:`.responses_api`), :mod:`.requests` (OpenAI request models, parameters refused by name),
:mod:`.constraints` (what a request constrains, and the one compile of it), :mod:`.strict`
(OpenAI's strict-mode rules), :mod:`.prompts` (messages to the chat template),
:mod:`.tool_bridge` and :mod:`.tool_stream` (tools to a constraint; the output back to calls,
streamed as written), :mod:`.responses` (outcomes to OpenAI JSON and SSE chunks),
:mod:`.context` (what the routes share), :mod:`.engine` (the bounded queue, the model thread,
compiles off the event loop), :mod:`.api_errors` (OpenAI's error JSON), :mod:`.metrics`
(Prometheus).

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
