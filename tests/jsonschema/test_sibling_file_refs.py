"""``$ref``s to sibling files: read from disk (never the network), confined, bounded, cached.

Every schema here is written to a temporary directory and compiled from its path (or with
``base_uri``); each grammar is checked against ``jsonschema`` (with a ``referencing``
registry of the same files) on valid and invalid instances, through the brute-force
:class:`~formcast.testing.reference.ReferenceRecognizer`.  The refusals (a missing file, one
outside the allowed directory, a remote URI, the limits) are checked for the ref, its JSON
pointer and the advice in the message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import formcast
from formcast.errors import ConfigurationError, LimitExceededError, UnsupportedFeatureError
from formcast.frontends.jsonschema.api import JsonSchemaOptions, schema_to_grammar
from formcast.frontends.jsonschema.files import file_uri
from formcast.index.compiler import GrammarCompiler
from formcast.testing.reference import ReferenceRecognizer
from formcast.vocab.vocabulary import Vocabulary

jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

SCHEMASTORE = Path(__file__).resolve().parents[3] / "shared" / "data" / "SchemaStore"


def _write(root: Path, files: dict[str, Any]) -> None:
    for name, doc in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc), encoding="utf-8")


def _oracle(root: Path, main: str) -> Any:
    """A ``jsonschema`` validator of ``root/main`` with every file of ``root`` registered by
    its ``file:`` URI and its ``$id``."""
    import referencing.jsonschema as rj

    resources = []
    for p in sorted(root.rglob("*.json")):
        doc = json.loads(p.read_text(encoding="utf-8"))
        res = referencing.Resource.from_contents(doc, default_specification=rj.DRAFT202012)
        resources.append((file_uri(p), res))
        if isinstance(doc, dict) and "$id" in doc:
            resources.append((doc["$id"], res))
    registry = referencing.Registry().with_resources(resources)
    schema = {"$ref": file_uri(root / main)}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _agree(root: Path, main: str, instances: list[Any], **opts: Any) -> None:
    grammar, _ = schema_to_grammar(root / main, JsonSchemaOptions(**opts))
    rr = ReferenceRecognizer(grammar)
    oracle = _oracle(root, main)
    verdicts = []
    for x in instances:
        text = json.dumps(x, separators=(",", ":"))
        assert rr.matches(text) == oracle.is_valid(x), (main, x)
        verdicts.append(oracle.is_valid(x))
    assert any(verdicts), "the instances must test both ways"
    assert not all(verdicts), "the instances must test both ways"


def test_relative_paths_and_fragments_in_the_other_file(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "main.json": {
                "type": "object",
                "properties": {
                    "id": {"$ref": "defs.json#/definitions/id"},
                    "tag": {"$ref": "defs.json#/$defs/tag"},
                    "whole": {"$ref": "./whole.json"},
                },
                "required": ["id"],
                "additionalProperties": False,
            },
            "defs.json": {
                "definitions": {"id": {"type": "integer", "minimum": 1}},
                "$defs": {"tag": {"enum": ["a", "b"]}},
            },
            "whole.json": {"type": "boolean"},
        },
    )
    _agree(
        tmp_path,
        "main.json",
        [
            {"id": 1},
            {"id": 0},
            {"id": 2, "tag": "a", "whole": True},
            {"id": 2, "tag": "c"},
            {"id": 2, "whole": 1},
            {"tag": "a"},
            {"id": 1, "x": 1},
        ],
    )


def test_nested_directories(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "main.json": {"type": "array", "items": {"$ref": "sub/dir/item.json"}},
            "sub/dir/item.json": {"anyOf": [{"$ref": "../../leaf.json"}, {"$ref": "../s.json"}]},
            "leaf.json": {"type": "integer", "maximum": 9},
            "sub/s.json": {"type": "string", "maxLength": 2},
        },
    )
    _agree(tmp_path, "main.json", [[], [1, "ab"], [10], ["abc"], [None], [9, 0, "x"]])


def test_id_based_resolution_maps_the_id_directory_to_the_file_directory(tmp_path: Path) -> None:
    """A file whose ``$id`` is ``https://example.com/s/main.json``: ``other.json`` resolves to
    ``https://example.com/s/other.json``, read from the file next to it (never fetched)."""
    _write(
        tmp_path,
        {
            "main.json": {
                "$id": "https://example.com/s/main.json",
                "properties": {
                    "a": {"$ref": "other.json"},
                    "b": {"$ref": "https://example.com/s/other.json#/$defs/n"},
                },
            },
            "other.json": {
                "$id": "https://example.com/s/other.json",
                "type": "string",
                "$defs": {"n": {"type": "null"}},
            },
        },
    )
    _agree(tmp_path, "main.json", [{}, {"a": "x"}, {"a": 1}, {"b": None}, {"b": "x"}])


def test_cycles_across_files_are_recursion(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "tree.json": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "forest.json#/$defs/node"}},
                },
                "required": ["v"],
                "additionalProperties": False,
            },
            "forest.json": {"$defs": {"node": {"$ref": "tree.json"}}},
        },
    )
    deep: Any = {"v": 0}
    for i in range(1, 12):
        deep = {"v": i, "kids": [deep, {"v": -i}]}
    bad = {"v": 0, "kids": [{"v": 1, "kids": [{"w": 2}]}]}
    _agree(tmp_path, "tree.json", [deep, bad, {"v": 1, "kids": []}, {"kids": []}])


def test_a_dict_schema_with_base_uri(tmp_path: Path) -> None:
    _write(tmp_path, {"n.json": {"type": "number", "exclusiveMinimum": 0}})
    schema = {"type": "array", "items": {"$ref": "n.json"}}
    for base in (tmp_path, str(tmp_path), file_uri(tmp_path, directory=True)):
        grammar, _ = schema_to_grammar(schema, base_uri=base)
        rr = ReferenceRecognizer(grammar)
        assert rr.matches("[1,2.5]")
        assert not rr.matches("[0]")
        assert not rr.matches('["a"]')
    with pytest.raises(UnsupportedFeatureError, match="base_uri"):
        schema_to_grammar(schema)  # no base: a relative ref cannot be resolved


def _refusal(tmp_path: Path, files: dict[str, Any], **opts: Any) -> str:
    _write(tmp_path, files)
    with pytest.raises(UnsupportedFeatureError) as info:
        schema_to_grammar(tmp_path / "main.json", JsonSchemaOptions(**opts))
    assert info.value.feature == "$ref"
    return str(info.value)


def test_a_missing_file_names_the_ref_the_pointer_and_the_path(tmp_path: Path) -> None:
    msg = _refusal(tmp_path, {"main.json": {"properties": {"a": {"$ref": "gone.json#/x"}}}})
    assert "'gone.json#/x'" in msg
    assert "#/properties/a" in msg
    assert f"no such file: {tmp_path / 'gone.json'}" in msg


def test_a_missing_extension_is_pointed_out(tmp_path: Path) -> None:
    msg = _refusal(tmp_path, {"main.json": {"$ref": "x"}, "x.json": {}})
    assert "x.json exists: write the reference with its extension" in msg


def test_a_missing_fragment_in_the_other_file(tmp_path: Path) -> None:
    msg = _refusal(
        tmp_path, {"main.json": {"$ref": "d.json#/definitions/nope"}, "d.json": {"definitions": {}}}
    )
    assert "'d.json#/definitions/nope'" in msg
    assert "has no '#/definitions/nope'" in msg


def test_a_file_outside_the_allowed_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.json").write_text('{"type": "string"}', encoding="utf-8")
    inner = tmp_path / "a" / "b"
    msg = _refusal(inner, {"main.json": {"$ref": "../../secret.json"}})
    assert "outside the directory" in msg
    assert "local_ref_root" in msg
    # a symbolic link out of the directory is refused the same way
    (inner / "link.json").symlink_to(tmp_path / "secret.json")
    msg = _refusal(inner, {"main.json": {"$ref": "link.json"}})
    assert "outside the directory" in msg
    # widening the root allows it
    grammar, _ = schema_to_grammar(
        inner / "main.json", JsonSchemaOptions(local_ref_root=str(tmp_path))
    )
    assert ReferenceRecognizer(grammar).matches('"x"')


def test_remote_references_are_never_fetched(tmp_path: Path) -> None:
    msg = _refusal(tmp_path, {"main.json": {"$ref": "https://example.org/x.json"}})
    assert "never fetches" in msg
    assert "json_schema_registry" in msg


def test_json_schema_registry_resolves_http_refs_by_id(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "lib/x.json": {"$id": "https://example.org/x.json", "type": "integer"},
            "lib/y.json": {"$id": "https://elsewhere.net/y", "$ref": "https://example.org/x.json"},
        },
    )
    # a document referencing cannot crawl (a list where its draft has a subschema) is kept,
    # opaque, instead of breaking every lookup
    broken = {"$schema": "https://json-schema.org/draft/2020-12/schema", "properties": {"a": [1]}}
    _write(tmp_path, {"lib/broken.json": broken})
    registry = formcast.json_schema_registry(tmp_path / "lib")
    opts = JsonSchemaOptions(registry=registry)
    grammar, _ = schema_to_grammar({"items": {"$ref": "https://elsewhere.net/y"}}, opts)
    rr = ReferenceRecognizer(grammar)
    assert rr.matches("[1,2]")
    assert not rr.matches('["a"]')
    with pytest.raises(LimitExceededError, match="max_ref_files"):
        formcast.json_schema_registry(tmp_path / "lib", max_files=2)
    with pytest.raises(LimitExceededError, match="max_ref_bytes"):
        formcast.json_schema_registry(tmp_path / "lib", max_bytes=10)
    (tmp_path / "lib" / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"bad\.json"):
        formcast.json_schema_registry(tmp_path / "lib")


def test_limits_on_files_and_bytes(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "main.json": {"anyOf": [{"$ref": "a.json"}, {"$ref": "b.json"}]},
            "a.json": {"type": "string"},
            "b.json": {"type": "integer", "description": "x" * 500},
        },
    )
    schema_to_grammar(tmp_path / "main.json", JsonSchemaOptions(max_ref_files=2))
    with pytest.raises(LimitExceededError) as info:
        schema_to_grammar(tmp_path / "main.json", JsonSchemaOptions(max_ref_files=1))
    assert info.value.limit == "max_ref_files"
    with pytest.raises(LimitExceededError) as info:
        schema_to_grammar(tmp_path / "main.json", JsonSchemaOptions(max_ref_bytes=400))
    assert info.value.limit == "max_ref_bytes"


def test_a_changed_sibling_file_is_a_new_compile(tmp_path: Path) -> None:
    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )
    comp = GrammarCompiler(vocab)
    _write(tmp_path, {"main.json": {"$ref": "v.json"}, "v.json": {"const": 1}})
    first = comp.compile_json_schema(tmp_path / "main.json")
    assert comp.compile_json_schema(tmp_path / "main.json") is first  # cached
    _write(tmp_path, {"v.json": {"const": 2}})
    second = comp.compile_json_schema(tmp_path / "main.json")
    assert second is not first
    m = formcast.GrammarMatcher(second)
    assert m.accept_bytes(b"2")
    assert m.is_accepting()


def test_the_command_line_resolves_refs_next_to_the_schema_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from formcast.cli import main as cli

    _write(tmp_path / "s", {"main.json": {"$ref": "sub/t.json"}, "sub/t.json": {"enum": ["ok"]}})
    monkeypatch.chdir(tmp_path)  # a relative --schema path: refs still resolve next to the file
    assert cli.main(["check", "--schema", "s/main.json", '"ok"']) == 0
    assert cli.main(["check", "--schema", "s/main.json", '"no"']) == 1
    _write(tmp_path / "s", {"up.json": {"$ref": "../outside.json"}})
    _write(tmp_path, {"outside.json": {"const": 1}})
    assert cli.main(["check", "--schema", "s/up.json", "1"]) != 0
    assert "outside the directory" in capsys.readouterr().err
    assert cli.main(["check", "--schema", "s/up.json", "--ref-root", ".", "1"]) == 0


#: SchemaStore schemas whose ``$ref``s name sibling files (refused as remote before)
SCHEMASTORE_SIBLINGS = [
    "schema-org-place.json",  # -> schema-org-thing.json -> jsonld.json
    "cibuildwheel.json",  # -> partial-cibuildwheel.json
    "poetry.json",  # -> partial-poetry.json
    "azure-iot-edge-deployment-template-4.0.json",  # -> ...-deployment-4.0.json#/definitions
    "rc3-collection-0.0.3.json",  # -> rc3-auth-0.0.3.json
]


@pytest.mark.parametrize("name", SCHEMASTORE_SIBLINGS)
def test_schemastore_schemas_with_sibling_refs_compile(name: str) -> None:
    folder = SCHEMASTORE / "src" / "schemas" / "json"
    if not folder.is_dir():
        pytest.skip(f"SchemaStore not found at {folder} (<repo>/../shared/data/SchemaStore)")
    grammar, _ = schema_to_grammar(folder / name)
    assert grammar.rules
    with pytest.raises(UnsupportedFeatureError, match=r"\$ref"):
        schema_to_grammar((folder / name).read_text(encoding="utf-8"))  # no base: refused
