"""Run-time ``uniqueItems`` through every door, not only ``compile_json_schema`` (#28).

The check is carried by the grammar IR (``Grammar.marks``) and the compiler builds it into the
compiled grammar's program, so ``compile(constraints.json(schema))``, a structural tag and a
tool call (which lower their schemas through ``constraints.json``) enforce it too.  Before,
they raised ``UnsupportedFeatureError('uniqueItems')``.  Each case checks both sides: distinct
items are accepted, a repeated item is refused (at the token that repeats it).
"""

from __future__ import annotations

from typing import Any

import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary, constraints
from formcast.errors import UnsupportedFeatureError
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.index.spec import CombinatorSpec, JsonSchemaSpec, StructuralTagSpec
from formcast.tools import HERMES, tool_call_structural_tag

TAGS = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
    "required": ["tags"],
}
#: items of any type (the general program)
NUMBERS = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )


def _accepts(compiled: Any, text: str) -> bool:
    m = GrammarMatcher(compiled)
    return bool(m.accept_bytes(text.encode()) and m.is_accepting())


def _refuses_at(compiled: Any, text: str, at: str) -> bool:
    """``text`` is accepted up to its last occurrence of ``at`` and refused there."""
    cut = text.rindex(at)
    m = GrammarMatcher(compiled)
    return bool(m.accept_bytes(text[:cut].encode()) and not m.accept_bytes(at.encode()))


def test_constraints_json_with_unique_items_compiles_and_checks(vocab: Vocabulary) -> None:
    compiled = GrammarCompiler(vocab).compile(constraints.json(TAGS))  # raised before #28
    assert compiled.unique_items
    assert _accepts(compiled, '{"tags":["a","b"]}')
    assert _refuses_at(compiled, '{"tags":["a","a"]}', '"]}')
    numbers = GrammarCompiler(vocab).compile(constraints.json(NUMBERS))
    assert type(numbers.program).__name__ == "ValueUniqueProgram"
    assert _accepts(numbers, "[1,2,3]")
    assert _refuses_at(numbers, "[1,2,1]", "]")


def test_a_json_part_inside_a_larger_constraint_keeps_its_check(vocab: Vocabulary) -> None:
    c = constraints.seq("tags: ", constraints.json(TAGS), "\n")
    compiled = GrammarCompiler(vocab).compile(c)
    assert _accepts(compiled, 'tags: {"tags":["x","y"]}\n')
    assert _refuses_at(compiled, 'tags: {"tags":["x","x"]}\n', '"]}')
    # two json parts: each keeps its own (renamed) mark
    two = constraints.seq(constraints.json(TAGS), " ", constraints.json(NUMBERS))
    both = GrammarCompiler(vocab).compile(two)
    assert len(both.unique_items) == 2
    assert _accepts(both, '{"tags":["a"]} [1,2]')
    assert _refuses_at(both, '{"tags":["a"]} [2,2]', "]")


def test_a_tool_whose_arguments_have_unique_items(vocab: Vocabulary) -> None:
    tools = [{"type": "function", "function": {"name": "tag", "parameters": TAGS}}]
    tag = tool_call_structural_tag(tools, "required", parallel_tool_calls=False, format=HERMES)
    compiled = GrammarCompiler(vocab).compile(StructuralTagSpec.of(tag))  # raised before #28
    ok = '<tool_call>\n{"name": "tag", "arguments": {"tags": ["a", "b"]}}\n</tool_call>'
    bad = '<tool_call>\n{"name": "tag", "arguments": {"tags": ["a", "a"]}}\n</tool_call>'
    assert _accepts(compiled, ok), "the tool call format changed: update this test's texts"
    assert _refuses_at(compiled, bad, '"]}}')


def test_a_structural_tag_with_a_unique_items_schema(vocab: Vocabulary) -> None:
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<f>"],
            "tags": [{"begin": "<f>", "content": {"type": "json_schema", "json_schema": TAGS},
                      "end": "</f>"}],
        },
    }
    compiled = GrammarCompiler(vocab).compile_structural_tag(tag)  # raised before #28
    assert _accepts(compiled, 'hi <f>{"tags":["a","b"]}</f> bye')
    assert _refuses_at(compiled, 'hi <f>{"tags":["a","a"]}</f>', '"]}')


def test_the_two_ways_to_compile_a_schema_build_the_same_program(vocab: Vocabulary) -> None:
    a = GrammarCompiler(vocab).compile(JsonSchemaSpec.of(TAGS))
    b = GrammarCompiler(vocab).compile(CombinatorSpec(constraints.json(TAGS)))
    assert type(a.program) is type(b.program)
    assert a.fingerprint == GrammarCompiler(vocab).compile_json_schema(TAGS).fingerprint


def test_a_grammar_alone_still_refuses_unique_items_and_says_how_to_compile() -> None:
    with pytest.raises(UnsupportedFeatureError, match="uniqueItems") as err:
        schema_to_grammar(TAGS)  # no marks: the grammar must say everything
    assert "formcast.compile_json_schema" not in str(err.value)  # no such function
    assert "compile_json_schema(schema)" in str(err.value)
    with pytest.raises(UnsupportedFeatureError, match="uniqueItems"):
        constraints.json(TAGS).to_gbnf()  # printed text cannot carry the run-time check
    with pytest.raises(UnsupportedFeatureError, match="uniqueItems"):
        constraints.json(TAGS).to_lark()
