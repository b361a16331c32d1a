"""``CompiledGrammar.deserialize`` refuses what it cannot trust to be the grammar written, with
a typed ``SerializationError`` (what, where, what to do) — and never executes code from the
data.

* another format version, another code layout, another vocabulary (its fingerprint);
* truncated data (every cut of a file) and corrupt data (a flipped byte anywhere: checksum);
* a corrupt lazy section (checked on first use): a typed error at its first use, never a
  wrong mask;
* crafted files with a *valid* checksum: a class outside the allow-list (``subprocess.Popen``),
  a dunder attribute (``__class__``), an object dtype, an array outside the data, a function
  outside the allow-list: refused, nothing run;
* serializing an object that is not plain data names the attribute.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from formcast import CompiledGrammar, GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.errors import FormcastError, SerializationError
from formcast.index import compiled as compiled_module
from formcast.index import serialize
from serialize_helpers import compile_named, small_vocab

HEAD = struct.Struct("<8sIIQQQII")


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return small_vocab()


@pytest.fixture(scope="module")
def data(vocab: Vocabulary) -> bytes:
    grammar = compile_named(GrammarCompiler(vocab), "json_schema")
    grammar.program.token_mask(grammar.program.initial_state())
    return grammar.serialize()


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    _, _, _, meta_len, _, _, _, _ = HEAD.unpack_from(data)
    return json.loads(data[HEAD.size : HEAD.size + meta_len]), data[HEAD.size + meta_len :]


def main_length(data: bytes) -> int:
    """Bytes of the blob's main region (checked at load; the lazy sections follow it)."""
    return int(HEAD.unpack_from(data)[5])


def rebuild(meta: dict[str, Any], blob: bytes, main: int) -> bytes:
    """A well-formed file (valid lengths and checksum) around ``meta`` and ``blob``."""
    m = json.dumps(meta).encode()
    crc = zlib.crc32(blob[:main], zlib.crc32(m))
    version = serialize.FORMAT_VERSION
    return HEAD.pack(b"FCGRAMMR", version, 0, len(m), len(blob), main, crc, 0) + m + blob


def test_the_error_is_typed(data: bytes, vocab: Vocabulary) -> None:
    assert issubclass(SerializationError, FormcastError)
    assert issubclass(SerializationError, ValueError)
    assert CompiledGrammar.deserialize(data, vocab).kind == "json_schema"


def test_another_format_version(data: bytes, vocab: Vocabulary) -> None:
    bad = data[:8] + struct.pack("<I", serialize.FORMAT_VERSION + 1) + data[12:]
    with pytest.raises(SerializationError, match="format version") as e:
        CompiledGrammar.deserialize(bad, vocab)
    assert e.value.reason == "version"
    assert "recompile" in str(e.value)


def test_another_code_layout(
    data: bytes, vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compiled_module, "_LAYOUT", ["0" * 32])
    with pytest.raises(SerializationError, match="other formcast code") as e:
        CompiledGrammar.deserialize(data, vocab)
    assert e.value.reason == "layout"


def test_another_vocabulary(data: bytes, vocab: Vocabulary) -> None:
    other = Vocabulary.from_tokens(
        [*vocab.tokens[:-1], b"extra", b"</s>"], stop_token_ids=[len(vocab.tokens)]
    )
    with pytest.raises(SerializationError, match="compiled for vocabulary") as e:
        CompiledGrammar.deserialize(data, other)
    assert e.value.reason == "vocabulary"
    assert other.fingerprint[:16] in str(e.value)
    with pytest.raises(SerializationError):
        CompiledGrammar.deserialize(data, "not a vocabulary")  # type: ignore[arg-type]


def test_every_truncation_is_refused(data: bytes, vocab: Vocabulary) -> None:
    for cut in [0, 1, 8, HEAD.size - 1, HEAD.size, HEAD.size + 10, len(data) // 2, len(data) - 1]:
        with pytest.raises(SerializationError) as e:
            CompiledGrammar.deserialize(data[:cut], vocab)
        assert e.value.reason == "truncated", cut
    with pytest.raises(SerializationError, match="truncated or padded"):
        CompiledGrammar.deserialize(data + b"\0", vocab)


def test_a_flipped_byte_anywhere_is_refused(data: bytes, vocab: Vocabulary) -> None:
    """In the header, the metadata or the main region: at load; in a lazy section: when the
    section is first used, before any of its data is."""
    step = max(len(data) // 97, 1)
    lazy_start = len(data) - (len(split(data)[1]) - main_length(data))
    assert lazy_start < len(data)  # the file has a lazy section
    for pos in [*range(HEAD.size, len(data), step), lazy_start, len(data) - 1]:
        bad = bytearray(data)
        bad[pos] ^= 0x10
        with pytest.raises(SerializationError) as e:
            CompiledGrammar.deserialize(bytes(bad), vocab).load_sections()
        assert e.value.reason == "corrupt", pos
    with pytest.raises(SerializationError, match="magic"):
        CompiledGrammar.deserialize(b"PICKLE!!" + data[8:], vocab)


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


def test_crafted_files_execute_nothing(
    data: bytes, vocab: Vocabulary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    calls: list[Any] = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: calls.append(a))
    meta, blob = split(data)
    cases = []
    m = json.loads(json.dumps(meta))
    m["program"][1] = "Popen"  # ["o", class name, n, attrs]
    cases.append((m, blob, "not allow-listed"))
    m = json.loads(json.dumps(meta))
    m["program"][3]["__class__"] = "x"
    cases.append((m, blob, "attribute name"))
    m = json.loads(json.dumps(meta))
    m["arrays"][0][0] = "|O"
    cases.append((m, blob, "dtype"))
    m = json.loads(json.dumps(meta))
    m["arrays"][0][2] = len(blob)
    cases.append((m, blob, "outside the data"))
    m = json.loads(json.dumps(meta))
    m["arrays"][0] = [*m["arrays"][0][:4], "zip"]
    cases.append((m, blob, "array packing"))
    m = json.loads(json.dumps(meta))
    _find(m["program"], "fn")[0][1] = "system"
    cases.append((m, blob, "unknown function"))
    m = json.loads(json.dumps(meta))
    m["program"] = ["o", "ByteDFA", 0, {"table": {"not": "a tagged value"}}]
    cases.append((m, blob, "unexpected JSON value"))
    m = json.loads(json.dumps(meta))
    tree = json.loads(m["sections"][0][3])  # a section's tree: a JSON string
    tree["lexer"] = ["o", "Popen", 99, {}]
    m["sections"][0][3] = json.dumps(tree)
    cases.append((m, blob, "not allow-listed"))
    m = json.loads(json.dumps(meta))
    m["program"][3]["_positions"] = ["a", len(meta["arrays"]) - 1]  # a section's array
    cases.append((m, blob, "outside the checked data"))
    m = json.loads(json.dumps(meta))
    m["program"][3]["auto"] = ["z", 0, "auto"]
    cases.append((m, blob, "lazy attribute"))
    m = json.loads(json.dumps(meta))
    m["sections"][0][1] = len(blob)
    cases.append((m, blob, "outside the data"))
    main = main_length(data)
    for meta_bad, blob_bad, message in cases:
        with pytest.raises(SerializationError, match=message) as e:
            CompiledGrammar.deserialize(rebuild(meta_bad, blob_bad, main), vocab).load_sections()
        assert e.value.reason == "corrupt"
    assert calls == []
    # the untouched file rebuilt the same way still loads (the cases above are the only change)
    assert CompiledGrammar.deserialize(rebuild(meta, blob, main), vocab).kind == "json_schema"


def test_a_corrupt_lazy_section_fails_typed_before_its_data_is_used(
    data: bytes, vocab: Vocabulary
) -> None:
    """A damaged lexer section loads (its checksum is checked on first use), serves the
    masks the file carries, and raises SerializationError (``on_corrupt`` told first) at
    the first mask that needs it: never a wrong mask or an error deep in a computation."""
    bad = bytearray(data)
    bad[-1] ^= 0x01  # the last array of the last section
    told: list[SerializationError] = []
    loaded = CompiledGrammar.deserialize(bytes(bad), vocab, on_corrupt=told.append)
    matcher = GrammarMatcher(loaded)
    assert matcher.allowed_token_ids().size  # the first mask was written with the file
    assert matcher.accept_token(vocab.tokens.index(b'{"'))
    with pytest.raises(SerializationError, match="checksum of section") as e:
        matcher.allowed_token_ids()  # a state the file does not carry: needs the lexer
    assert e.value.reason == "corrupt"
    assert len(told) == 1
    assert told[0] is e.value
    with pytest.raises(SerializationError):  # and again: never half-loaded
        loaded.load_sections()


def test_what_is_not_plain_data_is_named(vocab: Vocabulary) -> None:
    grammar = compile_named(GrammarCompiler(vocab), "regex")
    object.__setattr__(grammar, "warnings", ("fine", object()))
    with pytest.raises(SerializationError, match=r"builtins\.object") as e:
        grammar.serialize()
    assert e.value.reason == "unsupported"
    assert e.value.where == "warnings[1]"
    assert "PLAIN_CLASSES" in str(e.value)
