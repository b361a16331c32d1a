"""What a request constrains, as one value (:class:`ConstraintPlan`), and the ONE place the
server compiles it (:func:`compile_plan`).

Every route builds its constraint here -- ``response_format`` (chat, completions), the Responses
API's ``text.format``, tools (and legacy functions) as a structural tag -- and compiles it with
:func:`compile_plan`; nothing else in the server calls the compiler.

``strict`` (``response_format.json_schema.strict``, a tool's ``function.strict``, the
Responses API's ``strict``):

* ``true``: the schema must follow OpenAI's strict-mode rules (:mod:`.strict`: closed objects,
  every property required...), else a 400 naming the keyword and its JSON pointer; formcast
  fails closed on anything it cannot enforce;
* absent: formcast's whole JSON Schema support, failing closed (400) on a keyword it cannot
  enforce; objects without ``additionalProperties`` get declared properties only unless the
  server runs with ``allow_extra_properties`` (``--allow-extra-properties``) -- a free-form
  object (``{"type": "object"}`` declaring no property) stays free-form
  (:func:`~formcast.server.strict.open_free_form_objects`);
* ``false``: the same, but a keyword formcast cannot enforce is ignored and listed in the
  choice's ``formcast.warnings`` (best effort, as OpenAI's non-strict mode).

Lifetime: :class:`ConstraintPlan` is an immutable value for one request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..frontends.jsonschema.options import JsonSchemaOptions
from ..index.spec import CombinatorSpec, ConstraintSpec, JsonSchemaSpec
from .api_errors import APIError
from .strict import check_strict_schema, open_free_form_objects

if TYPE_CHECKING:  # pragma: no cover
    from ..constraints.core import Constraint
    from ..index.compiled import CompiledGrammar
    from .config import ServerConfig
    from .engine import Engine
    from .requests import ResponseFormat
    from .tool_bridge import ToolPlan

__all__ = [
    "ConstraintPlan",
    "compile_plan",
    "json_schema_plan",
    "response_format_plan",
    "schema_options",
    "tools_plan",
]


@dataclass(frozen=True)
class ConstraintPlan:
    """What to compile, and the request parameter that carried it (for error messages): a
    JSON Schema with its options (``response_format`` / ``text.format``), or a constraint
    object (the tools' structural tag).  :meth:`spec` makes the
    :class:`~formcast.index.spec.ConstraintSpec` that :func:`compile_plan` compiles; it is
    made there, so that reading a bad schema is the same 400 as compiling it."""

    param: str
    schema: Any = None
    options: JsonSchemaOptions | None = None
    constraint: Constraint | None = None
    json_output: bool = False

    @property
    def content(self) -> tuple[Any, JsonSchemaOptions | None]:
        """The JSON Schema and its options (what the tools' plan nests as free content)."""
        return self.schema, self.options

    def spec(self) -> ConstraintSpec:
        """The constraint value to compile (reads the schema: may raise a FormcastError)."""
        if self.constraint is not None:
            return CombinatorSpec(self.constraint)
        return JsonSchemaSpec.of(self.schema, self.options)


def schema_options(
    strict: bool | None, *, compile_timeout_s: float, allow_extra_properties: bool
) -> JsonSchemaOptions:
    """The :class:`JsonSchemaOptions` of a schema sent with ``strict`` (see the module
    docstring)."""
    return JsonSchemaOptions(
        lenient=strict is False,
        max_compile_seconds=compile_timeout_s,
        allow_extra_properties=False if strict else allow_extra_properties,
    )


def json_schema_plan(
    kind: str,
    schema: Any,
    strict: bool | None,
    *,
    param: str,
    compile_timeout_s: float,
    allow_extra_properties: bool,
) -> ConstraintPlan | None:
    """The plan of a response format: ``kind`` ``"text"`` (``None``: free text),
    ``"json_object"`` (a JSON object) or ``"json_schema"`` (``schema``, checked for strict
    mode when ``strict``; ``param`` names where it came from)."""
    if kind == "text":
        return None
    if kind == "json_object":
        options = JsonSchemaOptions(max_compile_seconds=compile_timeout_s)
        return ConstraintPlan(param, {"type": "object"}, options, json_output=True)
    if schema is None:
        raise APIError(
            400,
            f"a json_schema format needs its schema ({param}: the JSON Schema the output must "
            "be valid for)",
            param=param,
            code="invalid_request",
        )
    if strict:
        check_strict_schema(schema, param=param)
    elif not allow_extra_properties:
        schema = open_free_form_objects(schema)
    options = schema_options(strict, compile_timeout_s=compile_timeout_s,
                             allow_extra_properties=allow_extra_properties)
    return ConstraintPlan(param, schema, options, json_output=True)


def response_format_plan(fmt: ResponseFormat | None, config: ServerConfig) -> ConstraintPlan | None:
    """The plan of a chat or completions request's ``response_format`` (``None``: free
    text), under the server's compile timeout and extra-properties switch."""
    if fmt is None:
        return None
    spec = fmt.json_schema
    return json_schema_plan(
        fmt.type,
        None if spec is None else spec.schema_,
        None if spec is None else spec.strict,
        param="response_format.json_schema.schema" if fmt.type == "json_schema"
        else "response_format",
        compile_timeout_s=config.compile_timeout_s,
        allow_extra_properties=config.allow_extra_properties,
    )


def tools_plan(tool_plan: ToolPlan) -> ConstraintPlan:
    """The plan of a request's tools: their structural tag (a ``response_format`` inside)."""
    return ConstraintPlan("tools", constraint=tool_plan.constraint())


async def compile_plan(engine: Engine, plan: ConstraintPlan | None) -> CompiledGrammar | None:
    """Compile ``plan`` off the event loop (``None``: no constraint).  Raises the 400
    :class:`APIError` of a compile error (see :meth:`Engine.compile`)."""
    if plan is None:
        return None
    return await engine.compile(plan.spec, param=plan.param)
