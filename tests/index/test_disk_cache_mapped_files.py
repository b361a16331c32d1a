"""The disk cache reads a large file as a read-only memory map (``DiskCache.get(mapped=True)``):
the loaded grammar's arrays are views into the map, nothing copied.

* every file is mapped here (``MAP_MIN_BYTES`` lowered to 0): a grammar loads with
  bit-identical masks, its lazy sections decode from the map;
* a truncated, bit-flipped, empty or garbage file is still a miss and is replaced, and a
  corrupt lazy section still raises on first use and removes the file;
* the map is private to the grammar: the file replaced (a writer's ``os.replace``) or removed
  (eviction) while the grammar lives leaves its masks unchanged;
* ``DiskCache.get``: ``mapped=True`` returns an ``mmap`` only for files of at least
  ``MAP_MIN_BYTES`` (bytes otherwise), read-only, and the same bytes as ``mapped=False``;
  where a map holds a file descriptor (Python < 3.13), at most ``MAX_LIVE_MAPS`` live at once.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast import cache as cache_module
from formcast.cache import DiskCache
from formcast.errors import SerializationError
from serialize_helpers import compile_named, random_walks, replay_masks, small_vocab

pytestmark = pytest.mark.skipif(os.name != "posix", reason="files are mapped on POSIX only")


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return small_vocab()


@pytest.fixture(autouse=True)
def map_every_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "MAP_MIN_BYTES", 0)


def files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.suffix == ".fcg")


def test_a_mapped_file_loads_with_identical_masks(vocab: Vocabulary, tmp_path: Path) -> None:
    first = GrammarCompiler(vocab, cache_dir=tmp_path)
    grammar = compile_named(first, "json_schema")
    walks = random_walks(grammar, seed=3)
    assert first.save(grammar)
    (path,) = files(tmp_path)
    assert isinstance(
        DiskCache(tmp_path, 1 << 30, suffix=".fcg").get(path.stem, mapped=True), mmap.mmap
    )
    second = GrammarCompiler(vocab, cache_dir=tmp_path)
    loaded = compile_named(second, "json_schema")
    assert second.disk_hits == 1
    assert np.array_equal(replay_masks(loaded, walks), replay_masks(grammar, walks))
    # a cold walk too: the lazy sections decode from the map
    third = compile_named(GrammarCompiler(vocab, cache_dir=tmp_path), "json_schema")
    third.load_sections()
    other = random_walks(grammar, seed=11)
    assert np.array_equal(replay_masks(third, other), replay_masks(grammar, other))


@pytest.mark.parametrize("damage", ["truncate", "flip", "flip_main", "empty", "garbage"])
def test_a_corrupt_mapped_file_is_a_miss_and_is_replaced(
    vocab: Vocabulary, tmp_path: Path, damage: str
) -> None:
    grammar = compile_named(GrammarCompiler(vocab, cache_dir=tmp_path), "json_schema")
    (path,) = files(tmp_path)
    good = path.read_bytes()
    mid = len(good) // 2
    bad = {
        "truncate": good[: len(good) // 3],
        "flip": good[:100] + bytes([good[100] ^ 1]) + good[101:],  # in the metadata
        "flip_main": good[:mid] + bytes([good[mid] ^ 4]) + good[mid + 1 :],
        "empty": b"",
        "garbage": os.urandom(len(good)),
    }[damage]
    path.write_bytes(bad)
    again = GrammarCompiler(vocab, cache_dir=tmp_path)
    fresh = compile_named(again, "json_schema")
    if damage == "flip_main" and again.disk_hits:  # the byte fell in a lazy section
        with pytest.raises(SerializationError, match="checksum of section"):
            fresh.load_sections()
        assert not files(tmp_path)
        return
    assert (again.disk_hits, again.disk_writes) == (0, 1)
    walks = random_walks(grammar, walks=2, steps=8)
    assert np.array_equal(replay_masks(fresh, walks), replay_masks(grammar, walks))
    CompiledGrammar.deserialize(path.read_bytes(), vocab).load_sections()  # replaced


def test_a_corrupt_lazy_section_of_a_mapped_file_removes_it(
    vocab: Vocabulary, tmp_path: Path
) -> None:
    compile_named(GrammarCompiler(vocab, cache_dir=tmp_path), "json_schema")
    (path,) = files(tmp_path)
    good = path.read_bytes()
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # the last section's last array
    reader = GrammarCompiler(vocab, cache_dir=tmp_path)
    loaded = compile_named(reader, "json_schema")
    assert reader.disk_hits == 1
    with pytest.raises(SerializationError, match="checksum of section"):
        loaded.load_sections()
    assert not files(tmp_path)


def test_the_file_replaced_or_removed_under_a_live_grammar(
    vocab: Vocabulary, tmp_path: Path
) -> None:
    grammar = compile_named(GrammarCompiler(vocab, cache_dir=tmp_path), "json_schema")
    walks = random_walks(grammar, seed=7)
    expected = replay_masks(grammar, walks)
    (path,) = files(tmp_path)
    loaded = compile_named(GrammarCompiler(vocab, cache_dir=tmp_path), "json_schema")
    # another writer replaces the file (temporary file renamed over it), then it is evicted
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(os.urandom(path.stat().st_size))
    os.replace(tmp, path)
    path.unlink()
    assert np.array_equal(replay_masks(loaded, walks), expected)  # lazy sections included


def test_disk_cache_get_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = DiskCache(tmp_path, 1 << 20)
    key = "ab" * 16
    assert cache.get(key, mapped=True) is None
    assert cache.put(key, b"x" * 5000)
    got = cache.get(key, mapped=True)
    assert isinstance(got, mmap.mmap)
    assert got[:] == cache.get(key) == b"x" * 5000
    assert memoryview(got).readonly
    with pytest.raises(TypeError):
        got[0] = 1
    monkeypatch.setattr(cache_module, "MAP_MIN_BYTES", 10_000)
    assert type(cache.get(key, mapped=True)) is bytes  # small files are copied
    assert cache.put(key, b"")  # an empty file cannot be mapped: bytes
    monkeypatch.setattr(cache_module, "MAP_MIN_BYTES", 0)
    assert cache.get(key, mapped=True) == b""


def test_live_maps_holding_a_descriptor_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "_HOLDS_FD", True)
    monkeypatch.setattr(cache_module, "_LIVE_MAPS", set())
    monkeypatch.setattr(cache_module, "MAX_LIVE_MAPS", 2)
    cache = DiskCache(tmp_path, 1 << 20)
    key = "cd" * 16
    assert cache.put(key, b"y" * 100)
    first, second = cache.get(key, mapped=True), cache.get(key, mapped=True)
    assert isinstance(first, mmap.mmap)
    assert isinstance(second, mmap.mmap)
    third = cache.get(key, mapped=True)
    assert type(third) is bytes
    assert third == b"y" * 100
    del first
    assert isinstance(cache.get(key, mapped=True), mmap.mmap)  # one freed: mapped again
