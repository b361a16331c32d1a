"""``GrammarCompiler(cache_dir=...)`` / ``$FORMCAST_CACHE_DIR``: a disk cache of serialized
grammars shared by processes.

* a second compiler (another process, or this one) loads what the first wrote, with
  bit-identical masks; ``save`` rewrites it warm;
* the key: another vocabulary, other options or other limits are other files; a file of
  another code layout is never read;
* a corrupt or truncated file is a miss and is replaced by a good one; a corrupt lazy
  section (checked on first use) raises SerializationError there and removes the file, so
  the next load misses and rewrites it;
* concurrent writers (several processes compiling the same and different constraints into
  one directory at once) leave only whole, loadable files and no temporary files;
* the directory stays within ``CacheLimits.disk_cache_bytes`` (oldest first);
* :class:`formcast.cache.DiskCache` itself: keys are hex digests (no path tricks), a failed
  write leaves nothing behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from formcast import CacheLimits, CompiledGrammar, GrammarCompiler, JsonSchemaOptions, Vocabulary
from formcast.cache import DiskCache
from formcast.errors import SerializationError
from formcast.index import compiled as compiled_module
from serialize_helpers import (
    REPO,
    compile_named,
    random_walks,
    replay_masks,
    small_vocab,
)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return small_vocab()


def files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.suffix == ".fcg")


def test_a_second_compiler_loads_what_the_first_wrote(vocab: Vocabulary, tmp_path: Path) -> None:
    first = GrammarCompiler(vocab, cache_dir=tmp_path)
    grammar = compile_named(first, "json_schema")
    assert first.disk_writes == 1
    assert len(files(tmp_path)) == 1
    assert first.cache_path(grammar) == str(files(tmp_path)[0])
    walks = random_walks(grammar, seed=5)
    assert first.save(grammar)  # now warm on disk
    second = GrammarCompiler(vocab, cache_dir=tmp_path)
    loaded = compile_named(second, "json_schema")
    assert (second.disk_hits, second.misses) == (1, 0)  # misses count compiles
    before = loaded.cache_info()["mask_computations"]
    assert np.array_equal(replay_masks(loaded, walks), replay_masks(grammar, walks))
    assert loaded.cache_info()["mask_computations"] == before  # every mask came from the file
    # in memory afterwards: no second read
    assert compile_named(second, "json_schema") is loaded
    assert second.disk_hits == 1


def test_environment_variable_and_opt_out(
    vocab: Vocabulary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORMCAST_CACHE_DIR", str(tmp_path))
    comp = GrammarCompiler(vocab)
    assert comp.cache_dir == str(tmp_path)
    compile_named(comp, "regex")
    assert len(files(tmp_path)) == 1
    off = GrammarCompiler(vocab, cache_dir=False)
    assert off.cache_dir is None
    compile_named(off, "gbnf")
    assert len(files(tmp_path)) == 1
    assert off.cache_path(compile_named(off, "gbnf")) is None
    monkeypatch.setenv("FORMCAST_CACHE_DIR", "")
    assert GrammarCompiler(vocab).cache_dir is None


def test_the_key_covers_vocabulary_options_limits_and_layout(
    vocab: Vocabulary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    comp = GrammarCompiler(vocab, cache_dir=tmp_path)
    comp.compile_json_schema(schema)
    comp.compile_json_schema(schema, JsonSchemaOptions(item_sep=", "))
    assert len(files(tmp_path)) == 2
    other_vocab = Vocabulary.from_tokens(
        [*vocab.tokens[:-1], b"zz", b"</s>"], stop_token_ids=[len(vocab.tokens)]
    )
    other = GrammarCompiler(other_vocab, cache_dir=tmp_path)
    other.compile_json_schema(schema)
    assert other.disk_hits == 0
    assert len(files(tmp_path)) == 3
    tight = GrammarCompiler(
        vocab, cache_dir=tmp_path, cache_limits=CacheLimits(mask_cache_bytes=1 << 20)
    )
    tight.compile_json_schema(schema)
    assert tight.disk_hits == 0
    assert len(files(tmp_path)) == 4
    monkeypatch.setattr(compiled_module, "_LAYOUT", ["f" * 32])  # other code: other keys
    newer = GrammarCompiler(vocab, cache_dir=tmp_path)
    newer.compile_json_schema(schema)
    assert newer.disk_hits == 0
    assert len(files(tmp_path)) == 5


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_a_corrupt_file_is_a_miss_and_is_replaced(
    vocab: Vocabulary, tmp_path: Path, damage: str
) -> None:
    grammar = compile_named(GrammarCompiler(vocab, cache_dir=tmp_path), "lark")
    (path,) = files(tmp_path)
    good = path.read_bytes()
    bad = {
        "truncate": good[: len(good) // 3],
        "flip": good[:100] + bytes([good[100] ^ 1]) + good[101:],  # in the metadata
        "empty": b"",
        "garbage": os.urandom(len(good)),
    }[damage]
    path.write_bytes(bad)
    again = GrammarCompiler(vocab, cache_dir=tmp_path)
    fresh = compile_named(again, "lark")
    assert again.disk_hits == 0
    assert again.disk_writes == 1
    walks = random_walks(grammar, walks=2, steps=8)
    assert np.array_equal(replay_masks(fresh, walks), replay_masks(grammar, walks))
    assert CompiledGrammar.deserialize(path.read_bytes(), vocab).kind == "lark"  # replaced


def test_a_corrupt_lazy_section_removes_the_file(vocab: Vocabulary, tmp_path: Path) -> None:
    grammar = compile_named(GrammarCompiler(vocab, cache_dir=tmp_path), "json_schema")
    (path,) = files(tmp_path)
    good = path.read_bytes()
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # the last section's last array
    reader = GrammarCompiler(vocab, cache_dir=tmp_path)
    loaded = compile_named(reader, "json_schema")
    assert reader.disk_hits == 1  # the header, metadata and main region are whole
    with pytest.raises(SerializationError, match="checksum of section"):
        loaded.load_sections()
    assert not files(tmp_path)  # removed: the next load is a miss and rewrites it
    again = GrammarCompiler(vocab, cache_dir=tmp_path)
    fresh = compile_named(again, "json_schema")
    assert (again.disk_hits, again.disk_writes) == (0, 1)
    walks = random_walks(grammar, walks=2, steps=8)
    assert np.array_equal(replay_masks(fresh, walks), replay_masks(grammar, walks))
    CompiledGrammar.deserialize(path.read_bytes(), vocab).load_sections()


def test_the_directory_stays_within_its_byte_bound(vocab: Vocabulary, tmp_path: Path) -> None:
    one = GrammarCompiler(vocab).compile_regex("[a-z]{6}x")
    one.program.token_mask(one.program.initial_state())  # as written: with its first mask
    bound = int(2.5 * len(one.serialize()))  # two or three of the files below
    comp = GrammarCompiler(
        vocab, cache_dir=tmp_path, cache_limits=CacheLimits(disk_cache_bytes=bound)
    )
    names = []
    for i in range(6):
        pattern = f"[a-z]{{{i + 1}}}x"
        comp.compile_regex(pattern)
        names.append(comp.cache_path(comp.compile_regex(pattern)))
        total = sum(p.stat().st_size for p in files(tmp_path))
        assert total <= bound
    assert names[-1] is not None
    assert Path(names[-1]).exists()
    assert not Path(names[0] or "").exists()  # the oldest went first
    assert 2 <= len(files(tmp_path)) < 6


_WRITER = """
import sys
from serialize_helpers import small_vocab, compile_named
from formcast import GrammarCompiler
comp = GrammarCompiler(small_vocab(), cache_dir=sys.argv[1])
for round_ in range(3):
    for name in ("regex", "gbnf", "json_schema"):
        g = compile_named(comp, name)
        comp.save(g)  # rewrites the shared files again and again
    comp.clear_cache()
comp.compile_regex("[0-9]{%s}z" % sys.argv[2])
print(comp.disk_hits, comp.disk_writes)
"""


@pytest.mark.slow
def test_concurrent_writers_leave_only_whole_files(vocab: Vocabulary, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src"), str(REPO / "tests"), env.get("PYTHONPATH", "")]
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), str(i + 1)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    for p in procs:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    names = [p.name for p in tmp_path.iterdir()]
    assert not [n for n in names if n.startswith(".tmp-")], names
    assert len(files(tmp_path)) == 3 + 4
    reader = GrammarCompiler(vocab, cache_dir=tmp_path)
    for path in files(tmp_path):
        CompiledGrammar.deserialize(path.read_bytes(), vocab)  # every file whole and valid
    fresh = GrammarCompiler(vocab, cache_size=0)
    for name in ("regex", "gbnf", "json_schema"):
        loaded = compile_named(reader, name)
        walks = random_walks(loaded, walks=2, steps=10, seed=1)
        assert np.array_equal(
            replay_masks(loaded, walks), replay_masks(compile_named(fresh, name), walks)
        )
    assert reader.disk_hits == 3
    assert reader.disk_writes == 0


def test_disk_cache_keys_and_failed_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = DiskCache(tmp_path / "d", 1 << 20, suffix=".fcg")
    for bad in ["../../etc/passwd", "ABCDEF0123456789", "x" * 20, "", "0" * 8]:
        with pytest.raises(ValueError, match="hex digest"):
            cache.path(bad)
    key = "ab" * 16
    assert cache.get(key) is None
    assert cache.misses == 1
    assert cache.put(key, b"hello")
    assert cache.get(key) == b"hello"
    assert cache.hits == 1
    assert not cache.put("cd" * 16, b"x" * (2 << 20))  # larger than the bound: not written

    # a write goes to a whole temporary file first; the entry changes in one rename
    real_replace = os.replace
    seen: list[tuple[bytes, bytes]] = []

    def watching_replace(src: str, dst: str) -> None:
        seen.append((Path(src).read_bytes(), Path(dst).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", watching_replace)
    assert cache.put(key, b"hello again")
    assert seen == [(b"hello again", b"hello")]  # readers saw the old bytes until the rename
    assert cache.get(key) == b"hello again"

    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    assert not cache.put("ef" * 16, b"data")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [key + ".fcg"]
    monkeypatch.undo()
    cache.discard(key)
    cache.discard(key)  # missing is fine
    assert cache.get(key) is None
