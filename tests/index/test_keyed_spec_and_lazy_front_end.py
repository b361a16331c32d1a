"""A spec keyed once on the look-up-then-compile path, and a warm start that never imports the
JSON Schema front-end (session 19, disk33).

* ``GrammarCompiler.keyed(spec)`` keys a spec once: ``cached`` and ``compile`` /
  ``compile_async`` of the :class:`KeyedSpec` use its key and key nothing again; a
  ``KeyedSpec`` of another vocabulary is keyed again (its key is not trusted), so a grammar
  is never cached under another vocabulary's key.
* A new process that loads a JSON Schema grammar from the disk cache reads and keys the schema
  but never imports the front-end (``formcast.frontends.jsonschema.api``: 0.1-0.2 s of imports
  on the first request of a restarted server); a compile imports it, and its fuel
  (``compile_work``) is that of a compile in a process that imported it before.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.index.spec import JsonSchemaSpec, KeyedSpec
from serialize_helpers import run_in_new_process, small_vocab

SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
    "required": ["a"],
}


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return small_vocab()


def _count_keying(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    inner = JsonSchemaSpec.key_parts

    def counted(self: JsonSchemaSpec) -> Any:
        calls[0] += 1
        return inner(self)

    monkeypatch.setattr(JsonSchemaSpec, "key_parts", counted)
    return calls


def test_a_keyed_spec_is_keyed_once(vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = GrammarCompiler(vocab, cache_dir=False)
    plain = compiler.compile(JsonSchemaSpec.of(SCHEMA, None))  # (the reference grammar)
    compiler.clear_cache()
    calls = _count_keying(monkeypatch)
    keyed = compiler.keyed(JsonSchemaSpec.of(SCHEMA, None))
    assert calls[0] == 1
    assert keyed.key == plain.fingerprint
    assert compiler.keyed(keyed) is keyed  # this vocabulary's: as it is
    assert compiler.cached(keyed) is None  # a miss, keyed no more
    compiled = compiler.compile(keyed)
    assert calls[0] == 1
    assert compiler.cached(keyed) is compiled  # kept under that key
    assert compiler.compile(keyed) is compiled
    assert compiler.hits == 2
    async_compiled = asyncio.run(compiler.compile_async(keyed))
    assert async_compiled is compiled
    assert calls[0] == 1
    assert compiled.fingerprint == plain.fingerprint
    a, b = GrammarMatcher(compiled), GrammarMatcher(plain)
    assert a.allowed_token_ids().tolist() == b.allowed_token_ids().tolist()
    # a plain spec is keyed at each call, as before
    compiler.cached(JsonSchemaSpec.of(SCHEMA, None))
    assert calls[0] == 2


def test_a_keyed_spec_of_another_vocabulary_is_keyed_again(vocab: Vocabulary) -> None:
    compiler = GrammarCompiler(vocab, cache_dir=False)
    spec = JsonSchemaSpec.of(SCHEMA, None)
    foreign = KeyedSpec(spec, "0" * 64, "another vocabulary's fingerprint")
    assert compiler.cached(foreign) is None
    compiled = compiler.compile(foreign)
    assert compiled.fingerprint != "0" * 64
    assert compiler.cached(spec) is compiled  # under this vocabulary's key
    assert compiler.keyed(foreign).key == compiled.fingerprint
    assert compiler.cached(KeyedSpec(spec, "0" * 64, vocab.fingerprint)) is None


_CHILD = """
import json, sys
from serialize_helpers import small_vocab
from formcast import GrammarCompiler, GrammarMatcher
schema = json.loads(sys.argv[2])
compiler = GrammarCompiler(small_vocab(), cache_dir=sys.argv[1])
compiled = compiler.compile_json_schema(schema)
ids = GrammarMatcher(compiled).allowed_token_ids().tolist()
print(json.dumps({
    "disk_hits": compiler.disk_hits,
    "front_end": "formcast.frontends.jsonschema.api" in sys.modules,
    "ids": ids,
    "work": compiled.compile_work,
}))
"""


def test_a_warm_start_never_imports_the_front_end(vocab: Vocabulary, tmp_path: Path) -> None:
    text = json.dumps(SCHEMA)
    first = json.loads(run_in_new_process(_CHILD, str(tmp_path), text))
    assert first["disk_hits"] == 0  # compiled (and written)
    assert first["front_end"]
    again = json.loads(run_in_new_process(_CHILD, str(tmp_path), text))
    assert again["disk_hits"] == 1
    assert not again["front_end"]
    assert again["ids"] == first["ids"]
    # the compile's fuel does not count the front-end's import: the same as in a process
    # that imported it before (this one: the module's other tests compiled schemas)
    here = GrammarCompiler(vocab, cache_size=0, cache_dir=False).compile_json_schema(SCHEMA)
    assert first["work"] == here.compile_work
