"""``allOf`` of many ``if``/``then`` on one discriminating member (issue #29, SchemaStore).

Real schemas (minecraft-item-modifier, numberProvider: ``allOf: [{if: {properties: {type:
{const: c_i}}}, then: ...}, ...]``) distribute into a product of unions whose terms mostly
require a member no value can take (``type`` equal to two constants).  Such a term is an empty
object and is dropped as soon as the merge builds it, so the product stays small instead of
passing ``max_union``.  Exactness against ``jsonschema`` on every instance of a small space.
"""

from __future__ import annotations

import itertools
import json

import jsonschema
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.testing.reference import ReferenceRecognizer

K = 12


def _schema(required: bool) -> dict[str, object]:
    chain = []
    for i in range(K):
        cond: dict[str, object] = {"properties": {"type": {"const": f"t{i}"}}}
        if required:
            cond["required"] = ["type"]
        chain.append({"if": cond, "then": {"properties": {f"v{i % 3}": {"type": "integer"}}}})
    return {
        "type": "object",
        "properties": {"type": {"type": "string"}, "v0": {}, "v1": {}, "v2": {}},
        "additionalProperties": False,
        "allOf": chain,
    }


def _instances() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for t in [None, "t0", "t1", "t5", "t11", "zz"]:
        for vals in itertools.product([None, 1, "s"], repeat=3):
            doc: dict[str, object] = {} if t is None else {"type": t}
            for j, v in enumerate(vals):
                if v is not None:
                    doc[f"v{j}"] = v
            out.append(doc)
    return out


def test_if_then_chain_on_one_member_compiles_exactly() -> None:
    for required in (False, True):
        schema = _schema(required)
        grammar, _ = schema_to_grammar(schema)
        rr = ReferenceRecognizer(grammar)
        validator = jsonschema.Draft7Validator(schema)
        for doc in _instances():
            text = json.dumps(doc, separators=(",", ":"))
            assert rr.matches(text) == validator.is_valid(doc), (required, text)
