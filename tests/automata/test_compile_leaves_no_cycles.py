"""A schema's lowering and its grammar's rule automata make no reference cycles.

A compile runs with the cyclic collector paused (``formcast._gc.gc_paused``): what it frees by
reference counting is gone at once, but a reference cycle it leaves (a recursive closure: the
function holds its cell, the cell the function; closures over one another, whose shared
environment holds them all; an exception kept in a local of a frame its traceback holds) stays
in the young generation, with everything it holds, until a collection after the compile finds
it -- the collections that ran right after ``gc_paused`` resumed, inside TTFM
(docs/notes/ttfm37.md).  Checked here: with the collector off, ``gc.collect()`` finds nothing
unreachable after lowering schemas that take each such path (a prefix array, ``uniqueItems``
of finite values, a key set excluded through its trie, an encoded string pattern, a ``oneOf``
retried with run-time checks) and after compiling their grammars' rule automata
(``inline_single_use``, ``outline_repeats``, the rule cache's canonical bodies).  Fresh
property names per run keep the process-wide caches from answering instead.
"""

from __future__ import annotations

import gc
import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from formcast.automata.rules import compile_grammar_automaton
from formcast.frontends.jsonschema.api import schema_to_grammar

_RUN = itertools.count()


def _garbage_of(work: Callable[[], Any]) -> Counter[str]:
    """The types of the objects that ``work`` left unreachable (cyclic garbage), by name."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    flags = gc.get_debug()
    try:
        result = work()
        del result
        gc.set_debug(flags | gc.DEBUG_SAVEALL)
        gc.collect()
        found = Counter(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
        if was:
            gc.enable()
    return found


def _schemas(tag: str) -> list[dict[str, Any]]:
    """Schemas that take the front-end's recursive paths, with names unique to this call."""
    k = f"{tag}{next(_RUN)}"
    return [
        # a prefix array (Emitter._plain_array)
        {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"const": f"{k}a"}, {"type": "boolean"}],
            "items": {"type": "string", "maxLength": 3},
            "maxItems": 6,
        },
        # uniqueItems over finitely many values (Emitter._unique_array)
        {"type": "array", "items": {"enum": [f"{k}x", f"{k}y", f"{k}z"]}, "uniqueItems": True},
        # declared keys excluded from the extra ones (keys._not_in_sorted's trie)
        {
            "type": "object",
            "properties": {f"{k}alpha": {"type": "integer"}, f"{k}alps": {"type": "string"}},
            "additionalProperties": {"type": "number"},
            "required": [f"{k}alpha"],
        },
        # a string pattern whose characters are escaped in JSON (strings.encode_node)
        {"type": "string", "pattern": f'^{k}["\\\\/]+[a-c]{{2,40}}$'},
        # a counted repeat and single-use rules (outline_repeats, inline_single_use)
        {
            "type": "object",
            "properties": {
                f"{k}list": {"type": "array", "items": {"type": "integer"}, "maxItems": 40},
                f"{k}obj": {
                    "type": "object",
                    "properties": {f"{k}deep": {"type": "string", "minLength": 2}},
                    "required": [f"{k}deep"],
                },
            },
        },
    ]


#: a ``oneOf`` whose branches overlap, retried with run-time checks (algebra.one_of's
#: fallback; from MaskBench's Github_medium---o11667)
def _one_of_schema(k: str) -> dict[str, Any]:
    return {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "oneOf": [{"required": ["type"]}, {"required": ["$ref"]}],
        "properties": {
            "type": {"type": "string"},
            "$ref": {"type": "string"},
            "format": {"type": "string"},
            "defaultValue": {"not": {"type": ["array", "object", "null"]}},
            "enum": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "minimum": {"type": "string"},
            f"{k}maximum": {"type": "string"},
            "items": {"$ref": "#/definitions/itemsObject"},
        },
        "dependencies": {
            "format": {
                "oneOf": [
                    {
                        "properties": {
                            "type": {"enum": ["integer"]},
                            "format": {"enum": ["int32", "int64"]},
                        }
                    },
                    {
                        "properties": {
                            "type": {"enum": ["number"]},
                            "format": {"enum": ["float", "double"]},
                        }
                    },
                    {
                        "properties": {
                            "type": {"enum": ["string"]},
                            "format": {"enum": ["byte", "date", "date-time"]},
                        }
                    },
                ]
            }
        },
        "definitions": {
            "itemsObject": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["$ref"],
                        "properties": {"$ref": {"type": "string"}},
                        "additionalProperties": False,
                    },
                    {
                        "allOf": [
                            {"$ref": "#"},
                            {
                                "required": ["type"],
                                "properties": {"type": {}, "format": {}},
                                "additionalProperties": False,
                            },
                        ]
                    },
                ]
            }
        },
    }


@pytest.mark.parametrize("index", range(5))
def test_lowering_leaves_no_cycles(index: int) -> None:
    schema_to_grammar(_schemas("warm")[index])  # (first uses: imports, classes made)
    schema = _schemas("low")[index]
    found = _garbage_of(lambda: schema_to_grammar(schema))
    assert not found, f"lowering left cyclic garbage: {found.most_common(8)}"


@pytest.mark.parametrize("index", range(5))
def test_rule_automata_leave_no_cycles(index: int) -> None:
    compile_grammar_automaton(schema_to_grammar(_schemas("warm")[index])[0])
    schema = _schemas("rule")[index]
    grammar, _ = schema_to_grammar(schema)
    found = _garbage_of(lambda: compile_grammar_automaton(grammar))
    assert not found, f"the rule automata left cyclic garbage: {found.most_common(8)}"


def test_one_of_retry_keeps_no_exception_and_no_groups() -> None:
    """The retried ``oneOf``'s first failure is not kept (with its traceback's frames), and
    its run-time groups hold their normalizer weakly (which holds them)."""
    schema_to_grammar(_one_of_schema(f"warm{next(_RUN)}"))
    schema = _one_of_schema(f"one{next(_RUN)}")
    found = _garbage_of(lambda: schema_to_grammar(schema))
    assert not found, f"the lowering left cyclic garbage: {found.most_common(8)}"


def test_one_of_group_holds_its_algebra_weakly() -> None:
    """A run-time ``oneOf`` group's check reaches the algebra (the normalizer, which holds the
    group through its tagged nodes) through a weak reference: no cycle; checks work while the
    algebra lives, and raise ReferenceError after (none is made then: the matcher's check is
    data, oneof_check.py)."""
    from formcast.frontends.jsonschema.nodes import SAny, SNull
    from formcast.frontends.jsonschema.oneof import OneOfGroup, _accepts_of

    class _Algebra:
        def __init__(self) -> None:
            self.held: list[OneOfGroup] = []

        def accepts(self, s: Any, v: Any, ctx: Any, depth: int = 0) -> bool:
            return isinstance(s, SAny) or v is None

    def make() -> tuple[bool, bool]:
        alg = _Algebra()
        group = OneOfGroup("#", (SAny(), SNull()), _accepts_of(alg))
        alg.held.append(group)  # (as the normalizer holds its tagged nodes)
        return group.exactly_one(1), group.exactly_one(None)

    got: list[tuple[bool, bool]] = []
    found = _garbage_of(lambda: got.append(make()))
    assert got == [(True, False)]
    assert not found, f"a group and its algebra made a cycle: {found.most_common(8)}"
    alg = _Algebra()
    group = OneOfGroup("#", (SAny(),), _accepts_of(alg))
    assert group.exactly_one(0)
    del alg
    with pytest.raises(ReferenceError):
        group.exactly_one(0)
