"""Every class a serialized grammar holds declares its serialized fields beside itself
(``_persist_fields``, else its dataclass fields / ``__slots__``): the codec writes those and
nothing else, refuses to write an attribute a class does not declare (a field added without
its declaration fails loudly, never is dropped silently), refuses a file naming one, and a
file of an older format version is refused with a clear error before anything is read."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest

from formcast import CompiledGrammar, GrammarCompiler, GrammarMatcher
from formcast.errors import SerializationError
from formcast.index import persist
from formcast.index.persist import registry
from serialize_helpers import CONSTRAINTS, compile_named, small_vocab

HEAD = struct.Struct("<8sIIQQQII")


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    return GrammarCompiler(small_vocab(), cache_size=0)


def test_every_class_declares_fields_covering_its_slots() -> None:
    for name, cls in registry.PLAIN_CLASSES.items():
        fields = set(persist.declared_fields(cls))
        assert fields, name
        # the declarations are class attributes, never fields (a ClassVar annotation in a
        # dataclass of a mypyc-compiled module became one: the builds' layouts then differed)
        assert not fields & {"_persist_fields", "_persist_extra", "_persist_lazy"}, name
        for klass in cls.__mro__:
            slots = klass.__dict__.get("__slots__", ())
            slots = (slots,) if isinstance(slots, str) else slots
            missing = set(slots) - fields - {"__weakref__", "__dict__"}
            assert not missing, f"{name} does not declare its slots {sorted(missing)}"
        assert registry.OMIT[name] <= fields
        assert set(registry.LAZY_FIELDS.get(name, ())) <= fields


def test_class_level_declarations_are_class_attributes() -> None:
    """``_serialize_omit`` / ``_persist_fields`` / ``_persist_lazy`` read on the class are the
    declarations (in a mypyc-compiled module one without its ``ClassVar`` annotation became an
    instance attribute: the class then answered a descriptor, and omitted nothing)."""
    kinds = {"_serialize_omit": frozenset, "_persist_fields": tuple, "_persist_lazy": dict}
    for name, cls in registry.PLAIN_CLASSES.items():
        for attr, kind in kinds.items():
            if attr in vars(cls):
                assert isinstance(getattr(cls, attr), kind), f"{name}.{attr}"
    assert registry.OMIT["_LazyExitSplitClassifier"] >= {"_derived", "_region_of"}
    assert registry.OMIT["CfgProgram"] == {"_context", "_loops", "_orders"}


def test_every_class_is_made_without_running_its_init() -> None:
    """A load makes each object with ``cls.__new__(cls)`` and then sets its fields: no
    ``__init__`` may run there (a mypyc native class's ``__new__`` runs ``__init__`` unless it is
    declared ``@mypyc_attr(serializable=True)``, see formcast._native: the compiled token index
    refused every grammar with "__init__() missing required argument")."""
    for name, cls in registry.PLAIN_CLASSES.items():
        obj = cls.__new__(cls)
        assert type(obj) is cls, name


@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
def test_written_objects_hold_exactly_their_declared_fields(
    compiler: GrammarCompiler, name: str
) -> None:
    grammar = compile_named(compiler, name)
    GrammarMatcher(grammar).allowed_token_ids()
    data = grammar.serialize()
    _, _, _, meta_len, _, _, _, _ = HEAD.unpack_from(data)
    meta = json.loads(data[HEAD.size : HEAD.size + meta_len])
    sections = [json.loads(s[3]) for s in meta["sections"]]  # section trees: JSON strings
    objects = _find([meta["program"], meta["fields"], *sections], "o")
    assert objects
    for _, cls_name, _, attrs in objects:
        assert set(attrs) <= set(registry.FIELDS[cls_name]), cls_name
    loaded = CompiledGrammar.deserialize(data, compiler.vocab)
    loaded.load_sections()
    assert (
        GrammarMatcher(loaded).allowed_token_ids() == GrammarMatcher(grammar).allowed_token_ids()
    ).all()


def test_an_undeclared_attribute_is_not_written(compiler: GrammarCompiler) -> None:
    grammar = compile_named(compiler, "regex")
    # a field added without its declaration (on the program: an interpreted class in both
    # builds; a mypyc-compiled class cannot hold an undeclared attribute at all)
    program = grammar.program
    object.__setattr__(program, "extra_table", (1, 2))
    try:
        with pytest.raises(SerializationError, match="extra_table") as e:
            grammar.serialize()
        assert e.value.reason == "unsupported"
        assert "_persist_fields" in str(e.value)
        assert e.value.where == "program"
    finally:
        object.__delattr__(program, "extra_table")
    grammar.serialize()  # and without it, it is written


def _find(tree: Any, tag: str) -> list[Any]:
    out = []
    if isinstance(tree, list):
        if tree and tree[0] == tag:
            out.append(tree)
        for x in tree:
            out += _find(x, tag)
    elif isinstance(tree, dict):
        for x in tree.values():
            out += _find(x, tag)
    return out


def _rebuild(data: bytes, edit: Any, version: int | None = None) -> bytes:
    _, v, _, meta_len, _, main, _, _ = HEAD.unpack_from(data)
    meta = json.loads(data[HEAD.size : HEAD.size + meta_len])
    blob = data[HEAD.size + meta_len :]
    edit(meta)
    m = json.dumps(meta).encode()
    crc = zlib.crc32(blob[:main], zlib.crc32(m))
    return (
        HEAD.pack(
            b"FCGRAMMR", v if version is None else version, 0, len(m), len(blob), main, crc, 0
        )
        + m
        + blob
    )


def test_a_file_naming_an_undeclared_field_is_refused(compiler: GrammarCompiler) -> None:
    data = compile_named(compiler, "regex").serialize()

    def add_field(meta: dict[str, Any]) -> None:
        dfa = next(o for o in _find(meta["program"], "o") if o[1] == "ByteDFA")
        dfa[3]["shadow"] = 1

    with pytest.raises(SerializationError, match="not a declared field of ByteDFA") as e:
        CompiledGrammar.deserialize(_rebuild(data, add_field), compiler.vocab)
    assert e.value.reason == "corrupt"
    # the unedited file, rebuilt the same way, loads
    assert (
        CompiledGrammar.deserialize(_rebuild(data, lambda m: None), compiler.vocab).kind == "regex"
    )


def test_an_older_format_version_is_refused_not_misread(compiler: GrammarCompiler) -> None:
    data = compile_named(compiler, "json_schema").serialize()
    assert persist.FORMAT_VERSION >= 4
    for old in range(1, persist.FORMAT_VERSION):
        with pytest.raises(SerializationError, match=f"format version {old}") as e:
            CompiledGrammar.deserialize(_rebuild(data, lambda m: None, version=old), compiler.vocab)
        assert e.value.reason == "version"
        assert "recompile" in str(e.value)


def test_the_layout_digest_covers_the_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    before = persist.layout_digest()
    monkeypatch.setitem(registry.FIELDS, "ByteDFA", (*registry.FIELDS["ByteDFA"], "new"))
    assert persist.layout_digest() != before
