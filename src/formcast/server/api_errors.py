"""OpenAI's error JSON, and how formcast's errors become it: :class:`APIError`.

Every error response has the body ``{"error": {"message", "type", "param", "code"}}`` (what the
``openai`` client reads into ``APIStatusError``); formcast adds fields only inside ``error``
(``keyword`` and ``pointer`` for an unsupported schema keyword, ``limit`` and ``value`` for a
compile limit).

=====================================  ======  =====================================
cause                                  status  ``code``
=====================================  ======  =====================================
bad body, bad parameter value          400     ``invalid_request`` / the parameter's
unsupported schema keyword             400     ``unsupported_schema_feature``
schema too large / too slow            400     ``schema_too_complex`` / ``compile_timeout``
malformed schema, regex, grammar       400     ``invalid_schema``
unknown ``model``                      404     ``model_not_found``
queue full                             429     ``queue_full`` (with ``Retry-After``)
server shutting down                   503     ``unavailable``
anything else                          500     ``internal_error``
=====================================  ======  =====================================

Lifetime: exception values; :func:`from_formcast_error` is a pure function.
"""

from __future__ import annotations

from typing import Any

from ..errors import (
    CompileBudgetError,
    CompileTimeoutError,
    ConfigurationError,
    FormcastError,
    GrammarError,
    GrammarSyntaxError,
    LimitExceededError,
    UnsupportedFeatureError,
)

__all__ = ["APIError", "from_formcast_error"]


class APIError(Exception):
    """An HTTP error answered in OpenAI's error JSON.

    Attributes:
        status: the HTTP status.
        message: what went wrong, where, and what to do.
        type: OpenAI's error type (``invalid_request_error``, ``rate_limit_error``,
            ``server_error``, ...).
        param: the request parameter at fault (``"response_format"``, ``"tools[0]"``), or
            ``None``.
        code: a stable machine-readable code (see the module table).
        extra: more fields inside ``error`` (``keyword``, ``pointer``, ``limit``...).
        headers: response headers (``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code", ...extra}}``."""
        error: dict[str, Any] = {
            "message": self.message,
            "type": self.type,
            "param": self.param,
            "code": self.code,
        }
        error.update(self.extra)
        return {"error": error}


def from_formcast_error(exc: FormcastError, *, param: str | None) -> APIError:
    """The 400 (or 500) answering a formcast error raised while preparing a request.

    ``param`` names the request parameter that carried the constraint (``"response_format"``,
    ``"tools"``).  An :class:`~formcast.errors.UnsupportedFeatureError` names its keyword and
    JSON pointer; a :class:`~formcast.errors.CompileBudgetError` (or another
    :class:`~formcast.errors.LimitExceededError`) its limit and value."""
    where = f" (in {param})" if param else ""
    if isinstance(exc, UnsupportedFeatureError):
        pointer = exc.where or "#"
        return APIError(
            400,
            f"unsupported JSON Schema keyword {exc.feature!r} at {pointer}{where}: {exc}. "
            "formcast fails closed on keywords it cannot enforce; remove or rewrite it "
            "(docs/json_schema.md lists what is supported)",
            param=param,
            code="unsupported_schema_feature",
            extra={"keyword": exc.feature, "pointer": pointer},
        )
    if isinstance(exc, CompileTimeoutError | CompileBudgetError | LimitExceededError):
        kind = "too slow to compile" if isinstance(exc, CompileTimeoutError) else "too large"
        return APIError(
            400,
            f"the constraint{where} is {kind}: limit {exc.limit}={exc.value} exceeded ({exc}); "
            "simplify it (fewer alternatives, smaller bounds) or ask the operator to raise the "
            "limit",
            param=param,
            code="schema_too_complex",
            extra={"limit": exc.limit, "value": exc.value},
        )
    if isinstance(exc, GrammarSyntaxError | GrammarError):
        return APIError(400, f"the constraint{where} does not compile: {exc}", param=param,
                        code="invalid_schema")
    if isinstance(exc, ConfigurationError):
        return APIError(400, str(exc), param=param, code="invalid_request")
    return APIError(500, f"{type(exc).__name__}: {exc}", type="server_error",
                    code="internal_error")
