"""The app's exception handlers: every error answered in OpenAI's error JSON
(:class:`~formcast.server.api_errors.APIError`), request-validation errors included (400, the
parameter named as ``messages[0].role``).

Lifetime: installed once per app by :func:`install_error_handlers`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from .api_errors import APIError

__all__ = ["install_error_handlers"]


def install_error_handlers(app: FastAPI) -> None:
    """Answer :class:`APIError`, validation errors, HTTP errors and any other exception of
    ``app``'s routes in OpenAI's error JSON."""

    def error_response(err: APIError) -> Response:
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> Response:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = [p for p in first.get("loc", ()) if p != "body"]
        param = _param_path(loc) or None
        msg = first.get("msg", "invalid request body")
        if first.get("type") == "json_invalid":
            msg, param = f"the request body is not valid JSON: {first.get('ctx', {})}", None
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        return error_response(APIError(400, f"{param or 'body'}: {msg}{more}", param=param,
                                       code="invalid_request"))

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> Response:
        return error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}",
                                       type="server_error", code="internal_error"))

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> Response:
        code = "not_found" if exc.status_code == 404 else "http_error"
        return error_response(APIError(exc.status_code, str(exc.detail), code=code))



def _param_path(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
