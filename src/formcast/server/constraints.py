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

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..frontends.jsonschema.options import JsonSchemaOptions
from ..index.spec import CombinatorSpec, ConstraintSpec, JsonSchemaSpec, KeyedSpec
from .api_errors import APIError
from .strict import check_strict_schema, open_free_form_objects

if TYPE_CHECKING:  # pragma: no cover
    from ..constraints.core import Constraint
    from ..index.compiled import CompiledGrammar
    from ..index.compiler import GrammarCompiler
    from .config import ServerConfig
    from .engine import Engine
    from .requests import ResponseFormat
    from .tool_bridge import ToolPlan

__all__ = [
    "ConstraintPlan",
    "PlanMemo",
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
    # the spec keyed by the last compiler that asked (:meth:`keyed`): at most one, written once
    _keyed: list[KeyedSpec] = field(default_factory=list, compare=False, repr=False)

    @property
    def content(self) -> tuple[Any, JsonSchemaOptions | None]:
        """The JSON Schema and its options (what the tools' plan nests as free content)."""
        return self.schema, self.options

    def spec(self) -> ConstraintSpec:
        """The constraint value to compile (reads the schema: may raise a FormcastError)."""
        if self.constraint is not None:
            return CombinatorSpec(self.constraint)
        return JsonSchemaSpec.of(self.schema, self.options)

    def keyed(self, compiler: GrammarCompiler) -> KeyedSpec:
        """``compiler.keyed(self.spec())``, made once per plan and vocabulary: a plan that
        :class:`PlanMemo` hands to the next request with the same schema is neither read
        nor keyed again.  Raises what :meth:`spec` raises (then nothing is kept)."""
        held = self._keyed
        if held and held[0].fingerprint == compiler.vocab.fingerprint:
            return held[0]
        keyed = compiler.keyed(self.spec())
        held[:] = [keyed]
        return keyed


_PlanKey = tuple[str, str, bool | None, float, bool, str]


class PlanMemo:
    """The plans of the response formats an app was sent before: a request whose format
    repeats one -- the same kind, parameter, ``strict`` and server options, and a schema with
    the same JSON text (``json.dumps``: key order, ``1`` vs ``1.0`` and ``true`` vs ``1``
    all count) -- gets the same :class:`ConstraintPlan`, with its spec read and keyed
    already (:meth:`ConstraintPlan.keyed`): no strict-mode walk, no options object, no
    schema reading and hashing again on the event loop.  Only plans made without an error
    are kept (a schema that fails strict mode is checked, and answered 400, every time).

    Exact: a plan is a function of what its key holds (a schema given as a value reads no
    file, so its grammar depends on the value alone).  Bounded: at most ``max_entries``
    plans whose schema texts total at most ``max_chars`` characters, the least recently used
    dropped first.  Cost per look-up: the schema's ``json.dumps`` (C, ~5 us for a small
    schema) and a dict look-up.  Lifetime: one per app (``ServerContext.plans``), used on
    its event loop only (not thread-safe)."""

    def __init__(self, max_entries: int = 256, max_chars: int = 4 << 20) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._plans: OrderedDict[_PlanKey, ConstraintPlan] = OrderedDict()
        self._chars = 0

    def __len__(self) -> int:
        return len(self._plans)

    def get(self, key: _PlanKey) -> ConstraintPlan | None:
        """The plan kept under ``key`` (now the most recently used), else None."""
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
        return plan

    def put(self, key: _PlanKey, plan: ConstraintPlan) -> None:
        """Keep ``plan`` under ``key`` (a text over ``max_chars`` is not kept)."""
        size = len(key[-1])
        if size > self.max_chars or key in self._plans:
            return
        self._plans[key] = plan
        self._chars += size
        while len(self._plans) > self.max_entries or self._chars > self.max_chars:
            old, _ = self._plans.popitem(last=False)
            self._chars -= len(old[-1])


def _schema_text(schema: Any) -> str | None:
    """``schema``'s JSON text (None: not JSON-serializable, then nothing is memoized)."""
    try:
        return json.dumps(schema)
    except (TypeError, ValueError):
        return None


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
    memo: PlanMemo | None = None,
) -> ConstraintPlan | None:
    """The plan of a response format: ``kind`` ``"text"`` (``None``: free text),
    ``"json_object"`` (a JSON object) or ``"json_schema"`` (``schema``, checked for strict
    mode when ``strict``; ``param`` names where it came from).  With ``memo``, a format seen
    before gets its plan from there (see :class:`PlanMemo`)."""
    if kind == "text":
        return None

    def made() -> ConstraintPlan:
        return _json_schema_plan(kind, schema, strict, param=param,
                                 compile_timeout_s=compile_timeout_s,
                                 allow_extra_properties=allow_extra_properties)

    text = None if memo is None else _schema_text(schema)
    if memo is None or text is None:
        return made()
    key = (kind, param, strict, compile_timeout_s, allow_extra_properties, text)
    plan = memo.get(key)
    if plan is None:
        plan = made()
        memo.put(key, plan)
    return plan


def _json_schema_plan(
    kind: str,
    schema: Any,
    strict: bool | None,
    *,
    param: str,
    compile_timeout_s: float,
    allow_extra_properties: bool,
) -> ConstraintPlan:
    """:func:`json_schema_plan` of a ``kind`` other than ``"text"``, made afresh."""
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


def response_format_plan(
    fmt: ResponseFormat | None, config: ServerConfig, memo: PlanMemo | None = None
) -> ConstraintPlan | None:
    """The plan of a chat or completions request's ``response_format`` (``None``: free
    text), under the server's compile timeout and extra-properties switch (``memo``: see
    :func:`json_schema_plan`)."""
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
        memo=memo,
    )


def tools_plan(tool_plan: ToolPlan) -> ConstraintPlan:
    """The plan of a request's tools: their structural tag (a ``response_format`` inside)."""
    return ConstraintPlan("tools", constraint=tool_plan.constraint())


async def compile_plan(engine: Engine, plan: ConstraintPlan | None) -> CompiledGrammar | None:
    """Compile ``plan`` off the event loop (``None``: no constraint; its spec keyed once per
    plan: :meth:`ConstraintPlan.keyed`).  Raises the 400 :class:`APIError` of a compile
    error (see :meth:`Engine.compile`)."""
    if plan is None:
        return None
    compiler = engine.compiler
    return await engine.compile(lambda: plan.keyed(compiler), param=plan.param)
