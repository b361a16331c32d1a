"""OpenAI request bodies (Pydantic models) of ``/v1/chat/completions``, ``/v1/completions`` and
``/v1/responses`` (:class:`ResponsesRequest`; its parameters: :mod:`.responses_api`), and the
check that every parameter given is honoured or refused by name.

Unknown fields are ignored (as vLLM does), except the parameters OpenAI (or vLLM) defines that
this server cannot honour: those are a 400 naming them when given a value that asks for
something (:func:`check_unsupported`) -- never silently dropped.

``response_format`` (chat, and as an extension on completions):

* ``{"type": "text"}`` or absent: no constraint;
* ``{"type": "json_object"}``: a JSON object (the schema ``{"type": "object"}``);
* ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``: a document valid
  for ``schema`` (``strict``: see :mod:`formcast.server.constraints`).

Legacy ``functions`` / ``function_call`` (chat) are read as ``tools`` / ``tool_choice`` (one
call at most, as OpenAI's legacy API) and answered in ``message.function_call``; role
``function`` messages and an assistant's ``function_call`` are read as tool results and tool
calls.

Lifetime: request models live for one request; the functions are pure.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .api_errors import APIError

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "FunctionDef",
    "JsonSchemaFormat",
    "ResponseFormat",
    "ResponsesRequest",
    "TextConfig",
    "TextFormat",
    "ToolDef",
    "check_unsupported",
    "legacy_functions",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class JsonSchemaFormat(_Body):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class FunctionDef(_Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Body):
    type: Literal["function"] = "function"
    function: FunctionDef


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    function_call: dict[str, Any] | None = None  # legacy: an assistant's call


class _Sampling(_Body):
    model: str
    n: int = Field(default=1, ge=1)
    seed: int | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None  # an end-user id for abuse monitoring: accepted, not used


class ChatCompletionRequest(_Sampling):
    """The body of ``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    response_format: ResponseFormat | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    functions: list[FunctionDef] | None = None
    function_call: Literal["none", "auto"] | dict[str, Any] | None = None
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class CompletionRequest(_Sampling):
    """The body of ``POST /v1/completions`` (``response_format`` is formcast's extension)."""

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=0)
    response_format: ResponseFormat | None = None
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)


# -- the Responses API ---------------------------------------------------------------------------
class TextFormat(_Body):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(_Body):
    format: TextFormat | None = None


class ResponsesRequest(_Body):
    """The body of ``POST /v1/responses`` (see the module docstring)."""

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    text: TextConfig | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stream: bool = False
    store: bool | None = None
    metadata: dict[str, str] | None = None
    previous_response_id: str | None = None
    user: str | None = None


#: parameters this server knows and cannot honour when they ask for something: (name, does
#: the value ask for something, why).  Values that ask for nothing (null, false, 0, the
#: default) are accepted.
_REFUSED: tuple[tuple[str, Any, str], ...] = (
    ("audio", lambda v: v is not None, "audio output is not implemented"),
    ("modalities", lambda v: v not in (None, ["text"]), "only text output is implemented"),
    ("prediction", lambda v: v is not None, "predicted outputs are not implemented"),
    ("web_search_options", lambda v: v is not None, "web search is not implemented"),
    ("reasoning_effort", lambda v: v is not None, "this server serves no reasoning model"),
    ("verbosity", lambda v: v is not None, "verbosity is not implemented"),
    ("store", lambda v: bool(v), "this server stores nothing (stateless): send store: false"),
    # vLLM's own constraint parameters: a constraint silently dropped would be a wrong answer
    ("guided_json", lambda v: v is not None, "use response_format json_schema"),
    ("guided_regex", lambda v: v is not None, "not implemented on this server"),
    ("guided_choice", lambda v: v is not None, "use response_format json_schema with enum"),
    ("guided_grammar", lambda v: v is not None, "not implemented on this server"),
    ("structured_outputs", lambda v: v is not None, "use response_format json_schema"),
    ("top_k", lambda v: v not in (None, -1, 0), "top_k is not implemented"),
    ("min_p", lambda v: v not in (None, 0, 0.0), "min_p is not implemented"),
    ("repetition_penalty", lambda v: v not in (None, 1, 1.0),
     "repetition_penalty is not implemented"),
)


def check_unsupported(body: _Sampling) -> None:
    """A 400 naming the first parameter given a value the server cannot honour."""
    checks: list[tuple[str, bool, str]] = [
        ("presence_penalty", bool(body.presence_penalty), "penalties are not implemented"),
        ("frequency_penalty", bool(body.frequency_penalty), "penalties are not implemented"),
        ("logit_bias", bool(body.logit_bias), "logit_bias is not implemented"),
    ]
    if isinstance(body, ChatCompletionRequest):
        checks.append(("top_logprobs", bool(body.top_logprobs) and not body.logprobs,
                       "top_logprobs needs logprobs: true"))
        checks.append(("functions", bool(body.functions) and bool(body.tools),
                       "give tools or the legacy functions, not both"))
        checks.append(("function_call", body.function_call is not None and not body.functions,
                       "function_call needs functions"))
    if isinstance(body, CompletionRequest):
        checks += [
            ("echo", body.echo, "echo is not implemented"),
            ("suffix", bool(body.suffix), "suffix (insertion) is not implemented"),
            ("best_of", body.best_of not in (None, 1) and body.best_of != body.n,
             "best_of is not implemented"),
        ]
    extra = body.model_extra or {}
    for name, asks, why in _REFUSED:
        if name in extra:
            checks.append((name, bool(asks(extra[name])), why))
    for param, given, why in checks:
        if given:
            raise APIError(400, f"unsupported parameter {param!r}: {why}", param=param,
                           code="unsupported_parameter")


def legacy_functions(body: ChatCompletionRequest) -> tuple[list[dict[str, Any]], Any] | None:
    """``(tools, tool_choice)`` of a request with the legacy ``functions`` (``None``
    without): each function a tool; ``function_call`` ``"auto"``/``"none"``/``{"name": N}``
    the matching ``tool_choice``."""
    if not body.functions:
        return None
    tools = [{"type": "function", "function": f.model_dump(exclude_none=True)}
             for f in body.functions]
    fc = body.function_call
    if isinstance(fc, dict):
        name = fc.get("name")
        if not isinstance(name, str):
            raise APIError(400, "function_call must be 'none', 'auto' or {\"name\": ...}",
                           param="function_call", code="invalid_request")
        return tools, {"type": "function", "function": {"name": name}}
    return tools, fc
