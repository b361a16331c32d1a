"""Reading structural tags: xgrammar's JSON formats (as vLLM and SGLang send them) into the
typed values, their errors (named by path), and the formats that fail closed."""

from __future__ import annotations

import json

import pytest

from formcast import GrammarCompiler, GrammarMatcher
from formcast.errors import ConstraintError, UnsupportedFeatureError
from formcast.index.structural_tag import (
    AnyText,
    Choice,
    ConstString,
    GrammarFormat,
    JsonSchema,
    OptionalFormat,
    Plus,
    RegexFormat,
    RepeatFormat,
    Sequence,
    Star,
    StructuralTag,
    Tag,
    TagsWithSeparator,
    TriggeredTags,
    parse_structural_tag,
)
from formcast.vocab.vocabulary import Vocabulary

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    tokens = [bytes([b]) for b in range(256)] + [b""]
    return GrammarCompiler(Vocabulary(tokens, stop_token_ids=[256]), cache_dir=False)


def _accepts(compiled: object, text: str) -> bool:
    m = GrammarMatcher(compiled)  # type: ignore[arg-type]
    return m.accept_bytes(text.encode()) and m.is_accepting()


def test_every_format_type_reads_into_its_value() -> None:
    fmt = {
        "type": "sequence",
        "elements": [
            {"type": "const_string", "value": "A"},
            {"type": "or", "elements": [{"type": "regex", "pattern": "[0-9]+"},
                                         {"type": "json_schema", "json_schema": SCHEMA}]},
            {"type": "tag", "begin": "<t>", "content": {"type": "any_text"},
             "end": ["</t>", "</u>"]},
            {"type": "optional", "content": {"type": "const_string", "value": "?"}},
            {"type": "star", "content": {"type": "const_string", "value": "*"}},
            {"type": "plus", "content": {"type": "const_string", "value": "+"}},
            {"type": "repeat", "min": 1, "max": -1, "content": {"type": "const_string",
                                                               "value": "r"}},
            {"type": "grammar", "grammar": 'root ::= "g"'},
            {"type": "tags_with_separator", "separator": ",", "tags": [
                {"type": "tag", "begin": "[", "content": {"type": "const_string",
                                                          "value": "x"}, "end": "]"}]},
            {"type": "triggered_tags", "triggers": ["<f"], "excludes": ["zz"],
             "at_least_one": True, "stop_after_first": True, "tags": [
                 {"begin": "<f>", "content": {"type": "json_schema", "json_schema": True},
                  "end": "</f>"}]},
        ],
    }
    st = parse_structural_tag({"type": "structural_tag", "format": fmt})
    assert isinstance(st.format, Sequence)
    kinds = [type(e) for e in st.format.elements]
    assert kinds == [ConstString, Choice, Tag, OptionalFormat, Star, Plus, RepeatFormat,
                     GrammarFormat, TagsWithSeparator, TriggeredTags]
    choice = st.format.elements[1]
    assert isinstance(choice, Choice)
    assert isinstance(choice.elements[0], RegexFormat)
    assert isinstance(choice.elements[1], JsonSchema)
    tag = st.format.elements[2]
    assert isinstance(tag, Tag)
    assert tag.ends == ("</t>", "</u>")
    assert isinstance(tag.content, AnyText)
    rep = st.format.elements[6]
    assert isinstance(rep, RepeatFormat)
    assert rep.max is None
    trig = st.format.elements[9]
    assert isinstance(trig, TriggeredTags)
    assert trig.at_least_one
    assert trig.stop_after_first
    assert trig.excludes == ("zz",)
    # the text form and a bare format read the same
    assert parse_structural_tag(json.dumps({"type": "structural_tag", "format": fmt})) == st
    assert parse_structural_tag(fmt) == st


def test_the_whole_mixed_format_compiles_and_accepts(compiler: GrammarCompiler) -> None:
    fmt = {"type": "sequence", "elements": [
        {"type": "const_string", "value": "A"},
        {"type": "or", "elements": [{"type": "regex", "pattern": "[0-9]+"},
                                     {"type": "json_schema", "json_schema": SCHEMA}]},
        {"type": "tag", "begin": "<t>", "content": {"type": "any_text"}, "end": ["</t>", "</u>"]},
        {"type": "grammar", "grammar": 'root ::= "g" "h"*'},
    ]}
    g = compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    assert _accepts(g, 'A{"q":"x"}<t>any </t text</u>ghh')
    assert _accepts(g, "A12<t></t>g")
    assert not _accepts(g, "A12<t>a</t>b</t>g")  # the text ends at the first end string
    assert not _accepts(g, "A12<t>a</t>")


def test_legacy_form_with_schema_text(compiler: GrammarCompiler) -> None:
    legacy = {"type": "structural_tag", "triggers": ["<fn="],
              "structures": [{"begin": "<fn=s>", "schema": json.dumps(SCHEMA), "end": "</fn>"}]}
    st = parse_structural_tag(legacy)
    assert st == StructuralTag.from_structures(legacy["structures"], ["<fn="])  # type: ignore[arg-type]
    g = compiler.compile_structural_tag(json.dumps(legacy))
    assert _accepts(g, 'hello <fn=s>{"q":"x"}</fn> bye')
    assert not _accepts(g, "hello <fn=t>1</fn>")


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"type": "structural_tag"}, "format"),
        ({"type": "structural_tag", "format": {"type": "tag", "begin": 3, "content": {
            "type": "any_text"}, "end": "x"}}, "format.begin"),
        ({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<a"],
          "tags": [{"begin": "<b>", "content": {"type": "any_text"}, "end": "</b>"}]}},
         "format.tags[0].begin"),
        ({"type": "structural_tag", "format": {"type": "triggered_tags",
          "triggers": ["<a", "<ab"], "tags": [{"begin": "<ab>", "content": {
              "type": "any_text"}, "end": "</a>"}]}}, "format.triggers[0]"),
        ({"type": "structural_tag", "format": {"type": "sequence", "elements": [
            {"type": "const_string"}]}}, "format.elements[0].value"),
        ({"type": "structural_tag", "format": {"type": "nope"}}, "format.type"),
        ({"structures": [{"begin": "<a>", "end": "</a>"}], "triggers": ["<a"]},
         "structures[0].schema"),
        ("{not json", ""),
    ],
)
def test_malformed_tags_name_the_path(
    compiler: GrammarCompiler, value: object, path: str
) -> None:
    with pytest.raises(ConstraintError) as info:
        compiler.compile_structural_tag(value)
    assert info.value.path == path, str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("fmt", "feature"),
    [
        ({"type": "token", "token": 5}, "token"),
        ({"type": "any_tokens"}, "any_tokens"),
        ({"type": "token_triggered_tags", "trigger_tokens": [1], "tags": []},
         "token_triggered_tags"),
        ({"type": "json_schema", "json_schema": {}, "style": "qwen_xml"}, "qwen_xml"),
        ({"type": "any_text", "max_tokens": 10}, "max_tokens"),
        ({"type": "tag", "begin": {"type": "token", "token": 1},
          "content": {"type": "any_text"}, "end": "x"}, "begin as a token"),
    ],
)
def test_token_level_formats_fail_closed(fmt: dict[str, object], feature: str) -> None:
    with pytest.raises(UnsupportedFeatureError) as info:
        parse_structural_tag({"type": "structural_tag", "format": fmt})
    assert feature in info.value.feature


def test_typed_and_json_tags_share_one_compiled_grammar(compiler: GrammarCompiler) -> None:
    typed = TriggeredTags(("<x",), (Tag("<x>", JsonSchema(SCHEMA), "</x>"),), max_tags=1)
    spec = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<x"],
            "max_tags": 1, "tags": [{"type": "tag", "begin": "<x>", "content": {
                "type": "json_schema", "json_schema": SCHEMA}, "end": "</x>"}]}}
    a = compiler.compile_structural_tag(typed)
    assert compiler.compile_structural_tag(spec) is a
    assert _accepts(a, 'a<x>{"q":""}</x>b')
    assert not _accepts(a, 'a<x>{"q":""}</x>b<x>{"q":""}</x>')  # max_tags=1
    assert not _accepts(a, 'a<x>{"q":""}</x>b<x')  # ... and the trigger is then excluded
