"""The minimal generation schema: what the model writes vs what the server fills.

A tool's *full* schema describes the arguments the action needs; some of them need no
judgement from the model: constants of the deployment (a currency, a channel), values with a
schema ``default``, and fields the server derives from the others (a total, a timestamp, the
caller's account).  :func:`generation_schema` removes those **top-level** fields from
``properties`` and ``required``; the model generates only the rest (fewer fields: fewer
compiled states, fewer tokens, nothing for the model to get wrong there), and the runner fills
them -- ``defaults`` first, then ``derive(args)`` -- before validating against the **full**
schema.  A server-filled field is always the server's: a value the model wrote there (possible
only when the schema admits extra keys) is replaced.

Server-filled fields are: the keys of ``defaults``; top-level properties with a ``default``
keyword in the schema (:func:`schema_defaults`); the ``derived`` names given to the tool; and
top-level properties marked ``"readOnly": true`` (JSON Schema's "managed by the owning
authority").

Lifetime: pure functions over schema dicts (the input is never modified); cost linear in the
top level of the schema (nested schemas are shared, not copied).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = ["generation_schema", "read_only_fields", "schema_defaults", "server_fields"]


def _properties(full_schema: Mapping[str, Any]) -> Mapping[str, Any]:
    props = full_schema.get("properties", {})
    if not isinstance(props, Mapping):
        raise ConfigurationError(
            f"the schema's 'properties' must be an object, got {type(props).__name__}"
        )
    return props


def schema_defaults(full_schema: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level properties that carry a ``default`` keyword, with their defaults."""
    return {
        name: sub["default"]
        for name, sub in _properties(full_schema).items()
        if isinstance(sub, Mapping) and "default" in sub
    }


def read_only_fields(full_schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The top-level properties marked ``"readOnly": true`` (filled by the server)."""
    return tuple(
        name for name, sub in _properties(full_schema).items()
        if isinstance(sub, Mapping) and sub.get("readOnly") is True
    )


def server_fields(
    full_schema: Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
    derived_fields: Iterable[str] = (),
) -> tuple[str, ...]:
    """The top-level fields the server fills, in schema order then the rest (see the module
    docstring).

    Raises:
        ConfigurationError: a default or derived field that the schema's ``properties`` do not
            declare (a typo would otherwise add an undeclared key).
    """
    props = _properties(full_schema)
    named = [*(defaults or {}), *derived_fields]
    unknown = [n for n in named if n not in props]
    if unknown:
        raise ConfigurationError(
            f"server-filled fields {unknown} are not declared in the schema's top-level "
            f"'properties' ({sorted(props)}): declare them there (the full schema validates "
            "them) or fix the names"
        )
    wanted = {*named, *schema_defaults(full_schema), *read_only_fields(full_schema)}
    return tuple(n for n in props if n in wanted)


def generation_schema(
    full_schema: Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
    derived_fields: Iterable[str] = (),
) -> dict[str, Any]:
    """The schema the model generates under: ``full_schema`` without the server-filled fields.

    Args:
        full_schema: the tool's JSON Schema (an object schema); not modified.
        defaults: server-side values by field name (removed from generation).
        derived_fields: names of the fields ``derive(args)`` computes (removed).

    Returns:
        A shallow copy of ``full_schema`` whose ``properties``, ``required`` and
        ``dependentRequired``/``dependencies`` no longer mention the server-filled fields
        (``$defs`` and every other keyword are kept as they are).

    Raises:
        ConfigurationError: see :func:`server_fields`.
    """
    drop = set(server_fields(full_schema, defaults, derived_fields))
    out = dict(full_schema)
    if not drop:
        return out
    out["properties"] = {k: v for k, v in _properties(full_schema).items() if k not in drop}
    if isinstance(full_schema.get("required"), list):
        out["required"] = [r for r in full_schema["required"] if r not in drop]
    for key in ("dependentRequired", "dependencies"):
        deps = full_schema.get(key)
        if isinstance(deps, Mapping):
            kept: dict[str, Any] = {}
            for name, need in deps.items():
                if name in drop:
                    continue
                if isinstance(need, list):
                    need = [n for n in need if n not in drop]
                kept[name] = need
            out[key] = kept
    if isinstance(full_schema.get("minProperties"), int):
        out["minProperties"] = max(0, full_schema["minProperties"] - len(drop))
    if isinstance(full_schema.get("maxProperties"), int):
        out["maxProperties"] = max(0, full_schema["maxProperties"] - len(drop))
    return out
