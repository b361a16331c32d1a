"""What ``strict: true`` means on this server: OpenAI's strict-mode schema rules, checked.

OpenAI's Structured Outputs (``response_format.json_schema.strict``, a function tool's
``strict``, the Responses API's ``text.format.strict``) accept a subset of JSON Schema and
refuse the rest with a 400.  The server checks the same rules before compiling, so a schema
that works here with ``strict: true`` works there, and one refused there is refused here:

* the root is an object schema (``"type": "object"``; not ``anyOf`` at the root);
* every object schema is closed -- ``"additionalProperties": false`` -- and lists every
  property in ``required`` (an optional field is written as a union with ``null``);
* the keywords OpenAI's strict mode does not support are refused: the composition keywords
  ``allOf``, ``not``, ``if``/``then``/``else``, ``dependentRequired``, ``dependentSchemas``,
  and ``patternProperties``, ``unevaluatedProperties``, ``propertyNames``,
  ``minProperties``/``maxProperties``, ``unevaluatedItems``, ``contains``/``minContains``/
  ``maxContains``, ``uniqueItems``.

Departure, deliberate: value keywords formcast enforces beyond OpenAI's documented list
(``minLength``/``maxLength`` on strings) are accepted and enforced rather than refused.
Everything the output must satisfy is enforced by the mask either way; ``strict`` only decides
which schemas are *accepted*.  See docs/server.md, "strict".

Without ``strict``, the server generates declared properties only (``ServerConfig.
allow_extra_properties``); :func:`open_free_form_objects` keeps a free-form object free there.

Lifetime: pure functions.
"""

from __future__ import annotations

from typing import Any

from .api_errors import APIError

__all__ = ["UNSUPPORTED_IN_STRICT", "check_strict_schema", "open_free_form_objects"]

#: keywords OpenAI's strict mode refuses (see the module docstring)
UNSUPPORTED_IN_STRICT = (
    "allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
    "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties",
    "maxProperties", "unevaluatedItems", "contains", "minContains", "maxContains", "uniqueItems",
)
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _refuse(param: str, pointer: str, why: str, keyword: str) -> APIError:
    return APIError(
        400,
        f"invalid schema for strict mode in {param} at {pointer}: {why}. With \"strict\": true "
        "this server accepts the schemas OpenAI's strict mode accepts (docs/server.md, "
        "\"strict\"); send \"strict\": false or leave it out to use formcast's whole JSON "
        "Schema support",
        param=param,
        code="invalid_strict_schema",
        extra={"keyword": keyword, "pointer": pointer},
    )


def _is_object(schema: dict[str, Any]) -> bool:
    t = schema.get("type")
    return t == "object" or (isinstance(t, list) and "object" in t) or "properties" in schema


def check_strict_schema(schema: Any, *, param: str) -> None:
    """Raise the 400 :class:`APIError` OpenAI's strict mode answers for ``schema`` (nothing
    when it follows the rules of the module docstring).  ``param`` names the request
    parameter that carried it."""
    if not isinstance(schema, dict):
        raise _refuse(param, "#", "the schema must be a JSON object", "type")
    if "anyOf" in schema and "type" not in schema:
        raise _refuse(param, "#", "the root must be an object schema, not anyOf", "anyOf")
    if schema.get("type") != "object":
        raise _refuse(param, "#", f"the root must have \"type\": \"object\", got "
                      f"{schema.get('type')!r}", "type")
    _walk(schema, "#", param)


def _walk(schema: Any, pointer: str, param: str) -> None:
    if not isinstance(schema, dict):
        return
    for key in UNSUPPORTED_IN_STRICT:
        if key in schema:
            raise _refuse(param, pointer, f"{key!r} is not permitted", key)
    if _is_object(schema):
        if schema.get("additionalProperties") is not False:
            raise _refuse(param, pointer, "\"additionalProperties\" is required to be supplied "
                          "and to be false", "additionalProperties")
        props = schema.get("properties") or {}
        required = schema.get("required") or []
        missing = [k for k in props if k not in required]
        if missing:
            raise _refuse(param, pointer, "\"required\" is required to be supplied and to be an "
                          f"array including every key in properties; missing {missing[0]!r}",
                          "required")
    for key in _SUBSCHEMA_MAPS:
        sub = schema.get(key)
        if isinstance(sub, dict):
            for name, s in sub.items():
                _walk(s, f"{pointer}/{key}/{_escape(str(name))}", param)
    for key in _SUBSCHEMA_LISTS:
        sub = schema.get(key)
        if isinstance(sub, list):
            for j, s in enumerate(sub):
                _walk(s, f"{pointer}/{key}/{j}", param)
    for key in _SUBSCHEMAS:
        _walk(schema.get(key), f"{pointer}/{key}", param)


#: the keywords whose values are subschemas (by name, in a list, in a mapping of names)
_SUB_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
            "propertyNames", "unevaluatedItems", "unevaluatedProperties")
_SUB_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUB_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
#: an object schema with none of these declares no property: a free-form object
_DECLARING = frozenset(("properties", "patternProperties", "additionalProperties",
                        "unevaluatedProperties", "required", "propertyNames", "allOf", "anyOf",
                        "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef",
                        "dependentSchemas", "dependentRequired", "enum", "const"))


def open_free_form_objects(schema: Any) -> Any:
    """A copy of ``schema`` with ``"additionalProperties": true`` written on each free-form
    object (``{"type": "object"}`` declaring no property in any way); ``schema`` itself is
    not changed.  Only schema positions are visited (never ``enum``/``const``/``default``
    values).

    The same language under the specification (an absent ``additionalProperties`` is
    ``true``); under the server's default ``allow_extra_properties=False`` it keeps a
    free-form object (a ``dict`` field, a tool taking any arguments) free, where "declared
    properties only" would leave it nothing but ``{}``."""
    if isinstance(schema, list):
        return [open_free_form_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if out.get("type") == "object" and not (_DECLARING & out.keys()):
        out["additionalProperties"] = True
    for key in _SUB_ONE:
        if isinstance(out.get(key), dict):
            out[key] = open_free_form_objects(out[key])
    for key in _SUB_LIST:
        if isinstance(out.get(key), list):
            out[key] = open_free_form_objects(out[key])
    for key in _SUB_MAP:
        sub = out.get(key)
        if isinstance(sub, dict):
            out[key] = {k: open_free_form_objects(v) for k, v in sub.items()}
    return out
