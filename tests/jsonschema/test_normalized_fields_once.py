"""front35: ``Normalizer._string``/``_array``/``_object`` make their node once from the
keywords read (no chain of ``dataclasses.replace``): every field is the one a chain of
replaces from the default node gives, and a required key that is not declared still gets what
the object imposes on undeclared keys."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from formcast.frontends.jsonschema.nodes import ANY, SArr, SNum, SObj, SStr
from formcast.frontends.jsonschema.normalize import Normalizer
from formcast.frontends.jsonschema.options import JsonSchemaOptions


def _norm(schema: dict[str, Any]) -> Any:
    return Normalizer(schema, JsonSchemaOptions()).run()


def _changed(node: Any, default: Any) -> dict[str, Any]:
    return {
        f.name: getattr(node, f.name)
        for f in fields(node)
        if getattr(node, f.name) != getattr(default, f.name)
    }


def test_string_fields() -> None:
    s = _norm(
        {"type": "string", "minLength": 2, "maxLength": 9, "pattern": "^a+$", "format": "date"}
    )
    assert isinstance(s, SStr)
    assert _changed(s, SStr()) == {
        "min_len": 2,
        "max_len": 9,
        "patterns": ("^a+$",),
        "formats": ("date",),
    }
    assert _changed(_norm({"type": "string"}), SStr()) == {}
    look = _norm({"type": "string", "pattern": "^(?=.*x)(?!.*y).*$"})
    assert look.neg_patterns  # leading lookaheads split into both tuples


def test_array_fields() -> None:
    a = _norm(
        {
            "type": "array",
            "prefixItems": [{"type": "null"}],
            "items": {"type": "boolean"},
            "minItems": 1,
            "maxItems": 5,
            "uniqueItems": True,
            "contains": {"type": "boolean"},
            "maxContains": 3,
        }
    )
    assert isinstance(a, SArr)
    got = _changed(a, SArr())
    assert set(got) == {
        "prefix",
        "items",
        "min_items",
        "max_items",
        "unique",
        "contains",
        "eval_prefix",
        "eval_all",
        "where",
    }
    assert (got["min_items"], got["max_items"]) == (1, 5)
    assert (got["unique"], got["eval_prefix"]) == (True, 1)
    assert got["contains"][0][1:] == (1, 3)
    assert _norm({"type": "array"}).items is ANY


def test_object_fields_and_undeclared_required() -> None:
    o = _norm(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "additionalProperties": {"type": "integer"},
            "required": ["a", "b"],
            "minProperties": 1,
            "maxProperties": 4,
        }
    )
    assert isinstance(o, SObj)
    assert list(o.props) == ["a", "b"]
    assert o.required == frozenset({"a", "b"})
    assert (o.min_props, o.max_props, o.declared, o.eval_all) == (1, 4, ("a",), True)
    # the undeclared required key gets additionalProperties' schema
    assert isinstance(o.props["a"], SNum)
    assert isinstance(o.props["b"], SNum)
    assert o.props["b"].integer
