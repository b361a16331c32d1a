"""One action the model may call: :class:`Tool` and the checks it runs on the arguments.

::

    refund = Tool(
        name="refund",
        schema={"type": "object", "properties": {...}, "required": [...]},  # or a Pydantic class
        rules=[amount_within_order],              # business: args -> None | Failure | [Failure]
        facts=[order_exists],                     # evidence: args -> None | Failure | [Failure]
        permission=lambda principal, args: None,  # None | Failure; checked again at execution
        execute=lambda args, key: {"refund_id": ...},  # the side effect (JSON-serializable result)
        defaults={"currency": "EUR"}, derived=("total",), derive=lambda a: {"total": ...},
        inspect=lambda text, pointer: None,       # every free-text string the model wrote
    )

Every check is user code and is treated as untrusted code by the runner: an exception it raises
becomes ``Failure(layer, "raised", ...)`` (never swallowed, never a crash), and a return value
that is neither ``None`` nor failures becomes ``Failure(layer, "bad_return", ...)`` (fail
closed: ``False`` does not pass).  A failure returned for another layer is re-labelled with the
layer that ran it, so a layer's result only holds its own failures.

Schema validation runs on the **full** schema (server-filled fields included, see
:mod:`formcast.actions.schema_split`) with :mod:`jsonschema` (the schema's ``$schema`` draft,
else 2020-12) and its ``FormatChecker``; each error is a ``Failure("schema", keyword, message,
pointer)``.  A Pydantic class is validated by ``jsonschema`` on its ``model_json_schema()`` and
then by the class itself (its own validators).

Lifetime: a tool is an immutable value built once (its schemas are checked and split at
construction: one ``check_schema`` and one validator per tool); each check costs what the user
callable costs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigurationError, MissingDependencyError
from ..frontends.jsonschema.source import pydantic_model_class
from .schema_split import generation_schema, server_fields
from .types import Failure, Layer, LayerResult

__all__ = [
    "Check",
    "Inspect",
    "Permission",
    "Tool",
    "json_pointer",
    "run_checks",
]

Check = Callable[[Mapping[str, Any]], Any]
"""A business rule or fact check: ``args -> None | Failure | Iterable[Failure]``."""
Permission = Callable[[Any, Mapping[str, Any]], Any]
"""``permission(principal, args) -> None | Failure``."""
Inspect = Callable[[str, str], Any]
"""``inspect(text, pointer) -> None | Failure``: one free-text string field of the arguments."""


def json_pointer(path: Iterable[Any]) -> str:
    """The JSON pointer (RFC 6901) of a path of keys and indices (``""``: the document)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _describe(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _as_failures(layer: Layer, value: Any, fn: Any) -> list[Failure]:
    """A check's return value as failures of ``layer`` (fail closed on anything unexpected)."""
    if value is None:
        return []
    items: list[Any]
    if isinstance(value, (Failure, str, bytes, Mapping)) or not isinstance(value, Iterable):
        items = [value]
    else:
        items = list(value)
    out: list[Failure] = []
    for item in items:
        if isinstance(item, Failure):
            out.append(item if item.layer == layer else replace(item, layer=layer))
        else:
            out.append(Failure(
                layer, "bad_return",
                f"{layer} check {_describe(fn)} returned {item!r}: a check returns None (pass), "
                "a Failure or an iterable of Failures",
            ))
    return out


def _call(layer: Layer, fn: Any, *args: Any) -> list[Failure]:
    """Run one user check; its exception is a ``raised`` failure of ``layer``."""
    try:
        value = fn(*args)
    except Exception as exc:  # user code: reported as a failure, never swallowed or propagated
        return [Failure(
            layer, "raised", f"{layer} check {_describe(fn)} raised {type(exc).__name__}: {exc}"
        )]
    return _as_failures(layer, value, fn)


def run_checks(layer: Layer, checks: Iterable[Check], args: Mapping[str, Any]) -> LayerResult:
    """Every check of one layer on ``args`` (all of them run; their failures are collected in
    order).  A check gets a deep copy of the arguments: it cannot change what is executed."""
    failures: list[Failure] = []
    for check in checks:
        failures.extend(_call(layer, check, copy.deepcopy(dict(args))))
    return LayerResult(layer, not failures, tuple(failures))


def _check_callable(value: Any, what: str, tool: str) -> None:
    if value is not None and not callable(value):
        raise ConfigurationError(
            f"Tool {tool!r}: {what} must be callable or None, got {type(value).__name__}"
        )


def _callables(value: Any, what: str, tool: str) -> tuple[Check, ...]:
    if value is None:
        return ()
    if callable(value):
        value = (value,)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigurationError(
            f"Tool {tool!r}: {what} must be a list of callables args -> None | Failure, "
            f"got {type(value).__name__}"
        )
    items = tuple(value)
    bad = [i for i, fn in enumerate(items) if not callable(fn)]
    if bad:
        raise ConfigurationError(
            f"Tool {tool!r}: {what}[{bad[0]}] is not callable ({items[bad[0]]!r}): each entry "
            "is a function args -> None | Failure | Iterable[Failure]"
        )
    return items


def _validator_class(schema: Mapping[str, Any]) -> Any:
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - jsonschema is a dependency
        raise MissingDependencyError(
            "formcast.actions validates arguments with jsonschema: pip install jsonschema"
        ) from exc
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


@dataclass(frozen=True)
class Tool:
    """An action: its argument schema, its checks, and its side effect.

    Args:
        name: the tool's name (non-empty; it is the ``tool`` value the model writes when a
            runner has several tools).
        schema: the **full** JSON Schema of the arguments (a ``dict`` describing an object)
            or a Pydantic model class.
        rules: business rules (cross-field invariants), ``args -> None | Failure |
            Iterable[Failure]``.
        facts: evidence checks (database lookups), same signature.
        permission: ``(principal, args) -> None | Failure``, checked in the permission layer
            and again right before ``execute``.
        execute: ``(args, idempotency_key) -> result``, the side effect (required); the result
            must be JSON-serializable (the ledger records it).
        defaults: server-side values of top-level fields (not generated; filled before
            validation, replacing anything the model wrote there).
        derive: ``args -> {field: value}`` computing server-side fields after ``defaults``;
            the fields it may set are ``derived`` plus the schema's ``readOnly`` properties.
        inspect: ``(text, pointer) -> None | Failure`` on every string the model wrote in the
            arguments (the content-inspection layer).
        description: a sentence for humans and prompts.
        derived: the names of the fields ``derive`` sets (removed from generation).

    Raises:
        ConfigurationError: a bad name, a schema that is not an object schema or not a valid
            JSON Schema, checks that are not callable, a missing ``execute``, server-filled
            fields the schema does not declare, or ``derive`` without declared fields.
    """

    name: str
    schema: Any
    rules: Iterable[Check] = ()
    facts: Iterable[Check] = ()
    permission: Permission | None = None
    execute: Callable[[dict[str, Any], str], Any] | None = None
    defaults: Mapping[str, Any] | None = None
    derive: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None
    inspect: Inspect | None = None
    description: str = ""
    derived: Iterable[str] = ()
    full_schema: dict[str, Any] = field(init=False, repr=False, compare=False)
    generation_schema: dict[str, Any] = field(init=False, repr=False, compare=False)
    server_fields: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _validator: Any = field(init=False, repr=False, compare=False)
    _model_class: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"Tool: name must be a non-empty string, got {name!r}")
        set_ = object.__setattr__
        set_(self, "rules", _callables(self.rules, "rules", name))
        set_(self, "facts", _callables(self.facts, "facts", name))
        for what in ("permission", "execute", "derive", "inspect"):
            _check_callable(getattr(self, what), what, name)
        if self.execute is None:
            raise ConfigurationError(
                f"Tool {name!r}: execute is required: a function (args, idempotency_key) -> "
                "result performing the action"
            )
        if not isinstance(self.description, str):
            raise ConfigurationError(f"Tool {name!r}: description must be a string")
        model_class = pydantic_model_class(self.schema)
        full = self._full_schema(model_class)
        defaults = self._defaults()
        if isinstance(self.derived, str):
            raise ConfigurationError(
                f"Tool {name!r}: derived must be a list of field names, got the string "
                f"{self.derived!r}"
            )
        derived = tuple(self.derived)
        if any(not isinstance(d, str) for d in derived):
            raise ConfigurationError(f"Tool {name!r}: derived must hold field names (str)")
        try:
            fields = server_fields(full, defaults, derived)
            gen = generation_schema(full, defaults, derived)
        except ConfigurationError as exc:
            raise ConfigurationError(f"Tool {name!r}: {exc}") from None
        if self.derive is not None and not (set(derived) | set(_read_only(full))):
            raise ConfigurationError(
                f"Tool {name!r}: derive is given but no derived field is declared: name the "
                "fields it sets with derived=(...) or mark them readOnly in the schema"
            )
        validator_cls = _validator_class(full)
        try:
            validator_cls.check_schema(full)
        except Exception as exc:  # jsonschema.SchemaError: the schema itself is invalid
            raise ConfigurationError(
                f"Tool {name!r}: the schema is not a valid JSON Schema: "
                f"{getattr(exc, 'message', exc)}"
            ) from None
        from jsonschema import FormatChecker

        set_(self, "derived", derived)
        set_(self, "defaults", defaults)
        set_(self, "full_schema", full)
        set_(self, "generation_schema", gen)
        set_(self, "server_fields", fields)
        set_(self, "_validator", validator_cls(full, format_checker=FormatChecker()))
        set_(self, "_model_class", model_class)

    def _full_schema(self, model_class: Any) -> dict[str, Any]:
        if model_class is not None:
            schema = model_class.model_json_schema()
        elif isinstance(self.schema, Mapping):
            schema = self.schema
        else:
            raise ConfigurationError(
                f"Tool {self.name!r}: schema must be a JSON Schema dict or a Pydantic model "
                f"class, got {type(self.schema).__name__}"
            )
        schema = copy.deepcopy(dict(schema))
        kind = schema.get("type", "object")
        if kind != "object" and kind != ["object"]:
            raise ConfigurationError(
                f"Tool {self.name!r}: the arguments schema must describe an object "
                f"(type 'object'), got type {kind!r}"
            )
        try:
            json.dumps(schema)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"Tool {self.name!r}: the schema is not JSON: {exc}") from None
        return schema

    def _defaults(self) -> dict[str, Any]:
        if self.defaults is None:
            return {}
        if not isinstance(self.defaults, Mapping) or any(
            not isinstance(k, str) for k in self.defaults
        ):
            raise ConfigurationError(
                f"Tool {self.name!r}: defaults must be a mapping of field names to values"
            )
        out = copy.deepcopy(dict(self.defaults))
        try:
            json.dumps(out)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"Tool {self.name!r}: defaults must be JSON values: {exc}"
            ) from None
        return out

    # -- the layers the tool owns --------------------------------------------------------------
    def fill(self, generated: Mapping[str, Any]) -> tuple[dict[str, Any], LayerResult | None]:
        """The full arguments: ``generated`` plus the schema's defaults, ``defaults`` and then
        ``derive(args)`` (server values replace model values).  A failing ``derive`` (raised,
        a non-mapping, or a field it may not set) is a schema-layer result."""
        from .schema_split import schema_defaults

        args = copy.deepcopy(dict(generated))
        args.update(copy.deepcopy(schema_defaults(self.full_schema)))
        args.update(copy.deepcopy(dict(self.defaults or {})))
        if self.derive is None:
            return args, None
        allowed = set(self.derived) | set(_read_only(self.full_schema))
        try:
            extra = self.derive(copy.deepcopy(args))
        except Exception as exc:  # user code: reported, never propagated
            return args, _schema_failure(
                "derive_raised", f"derive of tool {self.name!r} raised {type(exc).__name__}: {exc}"
            )
        if not isinstance(extra, Mapping):
            return args, _schema_failure(
                "derive_bad_return",
                f"derive of tool {self.name!r} returned {type(extra).__name__}, not a mapping",
            )
        undeclared = sorted(str(k) for k in extra if k not in allowed)
        if undeclared:
            return args, _schema_failure(
                "derive_undeclared",
                f"derive of tool {self.name!r} set {undeclared}, which are not declared as "
                f"derived fields ({sorted(allowed)})",
            )
        args.update(copy.deepcopy(dict(extra)))
        return args, None

    def validate_schema(self, args: Mapping[str, Any]) -> LayerResult:
        """The schema layer: ``jsonschema`` on the full schema (every error, in document
        order), then the Pydantic class's own validation when the schema is one."""
        errors = sorted(
            self._validator.iter_errors(args),
            key=lambda e: (list(map(str, e.absolute_path)), str(e.validator)),
        )
        failures = [
            Failure("schema", str(e.validator), e.message, json_pointer(e.absolute_path))
            for e in errors
        ]
        if not failures and self._model_class is not None:
            try:
                self._model_class.model_validate(copy.deepcopy(dict(args)))
            except ValueError as exc:  # pydantic.ValidationError is a ValueError
                details = getattr(exc, "errors", None)
                for err in details() if callable(details) else []:
                    failures.append(Failure(
                        "schema", str(err.get("type", "pydantic")), str(err.get("msg", exc)),
                        json_pointer(err.get("loc", ())),
                    ))
                if not failures:
                    failures.append(Failure("schema", "pydantic", str(exc)))
        return LayerResult("schema", not failures, tuple(failures))

    def check_rules(self, args: Mapping[str, Any]) -> LayerResult:
        return run_checks("business", self.rules, args)

    def check_facts(self, args: Mapping[str, Any]) -> LayerResult:
        return run_checks("facts", self.facts, args)

    def check_inspection(self, args: Mapping[str, Any]) -> LayerResult:
        """``inspect(text, pointer)`` on every string the model wrote (server-filled fields
        excluded), depth first in document order."""
        failures: list[Failure] = []
        if self.inspect is not None:
            model_part = {k: v for k, v in args.items() if k not in self.server_fields}
            for pointer, text in _strings(model_part, ()):
                got = _call("inspection", self.inspect, text, pointer)
                failures.extend(f if f.pointer else replace(f, pointer=pointer) for f in got)
        return LayerResult("inspection", not failures, tuple(failures))

    def check_permission(self, principal: Any, args: Mapping[str, Any]) -> LayerResult:
        failures: list[Failure] = []
        if self.permission is not None:
            failures = _call("permission", self.permission, principal, copy.deepcopy(dict(args)))
        return LayerResult("permission", not failures, tuple(failures))


def _read_only(schema: Mapping[str, Any]) -> tuple[str, ...]:
    from .schema_split import read_only_fields

    return read_only_fields(schema)


def _schema_failure(code: str, message: str) -> LayerResult:
    return LayerResult("schema", False, (Failure("schema", code, message),))


def _strings(value: Any, path: tuple[Any, ...]) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield json_pointer(path), value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, (*path, i))
