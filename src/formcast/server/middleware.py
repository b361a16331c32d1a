"""ASGI middleware of the app: :class:`CountRequests` (``formcast_requests_total``).

Lifetime: one instance per app, for the app's lifetime.
"""

from __future__ import annotations

from typing import Any

from .metrics import ServerMetrics

__all__ = ["CountRequests"]


class CountRequests:
    """ASGI middleware counting answered requests by path and status
    (``formcast_requests_total``).  Plain ASGI, not ``BaseHTTPMiddleware``: that one wraps
    ``receive`` and would hide a client's disconnect from the routes."""

    def __init__(self, app: Any, metrics: ServerMetrics, routes: frozenset[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes  # other paths are counted as "other": bounded label values

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def counting_send(message: Any) -> None:
            if message.get("type") == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            self.count(scope, status["code"])

    def count(self, scope: Any, code: int) -> None:
        """Count one answered request of ``scope`` with status ``code`` (what this middleware
        does when a request ends; the app's fast lane calls it for the requests it serves
        past the stack).  O(1)."""
        path = str(scope.get("path", ""))
        if path not in self.routes and not path.startswith("/v1/models/"):
            path = "other"  # bounded label values: unknown paths are one series
        self.metrics.requests.labels(endpoint=path, status=str(code)).inc()
