"""``formcast compile C --cache-dir DIR``: precompiles into the disk cache a server reads.

* for ``--schema``, ``--regex``, ``--grammar`` (GBNF, Lark, ``json``): the file is written,
  and ``GrammarCompiler(vocab, cache_dir=DIR)`` making the call ``formcast generate`` makes
  for the same flags loads it instead of compiling (same key);
* a second run reports a cache hit; ``--warm-up`` stores more masks;
* a directory that cannot be written is exit status 2 with a message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from formcast import GrammarCompiler, JsonSchemaOptions, Vocabulary
from formcast.cli import main as cli
from formcast.cli import precompile
from serialize_helpers import GBNF, LARK, SCHEMA, small_vocab


@pytest.fixture
def vocab(monkeypatch: pytest.MonkeyPatch) -> Vocabulary:
    v = small_vocab()
    monkeypatch.setattr(precompile, "load_vocab", lambda spec: v)
    return v


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


@pytest.mark.parametrize("kind", ["schema", "regex", "gbnf", "lark", "json"])
def test_precompiled_files_are_what_a_server_loads(
    kind: str, vocab: Vocabulary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "g.gbnf").write_text(GBNF)
    (tmp_path / "g.lark").write_text(LARK)
    flags = {
        "schema": ["--schema", str(tmp_path / "s.json")],
        "regex": ["--regex", "[a-z]+@[a-z]+"],
        "gbnf": ["--grammar", str(tmp_path / "g.gbnf")],
        "lark": ["--grammar", str(tmp_path / "g.lark")],
        "json": ["--grammar", "json"],
    }[kind]
    cache = tmp_path / "cache"
    code, info, err = run(["compile", *flags, "--cache-dir", str(cache), "--json"], capsys)
    assert code == 0, err
    assert info["cache_hit"] is False
    assert Path(info["cache_file"]).is_file()
    assert info["bytes"] == Path(info["cache_file"]).stat().st_size
    server = GrammarCompiler(vocab, cache_dir=cache)
    if kind == "schema":
        server.compile_json_schema(SCHEMA, JsonSchemaOptions(lenient=False))
    elif kind == "regex":
        server.compile_regex("[a-z]+@[a-z]+", dialect="ecma")
    elif kind == "json":
        server.compile_builtin_json_grammar()
    else:
        server.compile_grammar(GBNF if kind == "gbnf" else LARK, syntax=kind)
    assert (server.disk_hits, server.misses) == (1, 0)
    code, again, _ = run(["compile", *flags, "--cache-dir", str(cache), "--json"], capsys)
    assert code == 0
    assert again["cache_hit"] is True
    assert again["cache_file"] == info["cache_file"]


def test_warm_up_stores_more_masks(
    vocab: Vocabulary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    base = ["compile", "--schema", str(tmp_path / "s.json"), "--json"]
    _, cold, _ = run([*base, "--cache-dir", str(tmp_path / "a")], capsys)
    _, warm, _ = run([*base, "--cache-dir", str(tmp_path / "b"), "--warm-up", "2"], capsys)
    assert warm["warmed_up"] > 1
    assert warm["bytes"] > cold["bytes"]
    code, _, err = run([*base, "--cache-dir", str(tmp_path / "b"), "--warm-up", "-1"], capsys)
    assert code == 2
    assert "--warm-up" in err


def test_an_unwritable_directory_is_exit_status_2(
    vocab: Vocabulary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = run(["compile", "--regex", "a+", "--cache-dir", str(blocker), "--json"], capsys)
    assert code == 2
    assert "could not write" in err


def test_a_schema_file_with_sibling_refs_precompiles_for_a_server_reading_the_file(
    vocab: Vocabulary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``formcast compile --schema FILE`` reads FILE's siblings (like ``generate``), and the
    entry it writes is the one ``compile_json_schema(Path(FILE))`` loads; editing a sibling
    is a different key."""
    (tmp_path / "root.json").write_text(json.dumps({"$ref": "digit.json"}))
    (tmp_path / "digit.json").write_text(json.dumps({"type": "integer", "maximum": 9}))
    cache = tmp_path / "cache"
    code, info, err = run(
        ["compile", "--schema", str(tmp_path / "root.json"), "--cache-dir", str(cache), "--json"],
        capsys,
    )
    assert code == 0, err
    assert info["cache_hit"] is False
    server = GrammarCompiler(vocab, cache_dir=cache)
    server.compile_json_schema(tmp_path / "root.json", JsonSchemaOptions(lenient=False))
    assert (server.disk_hits, server.misses) == (1, 0)
    (tmp_path / "digit.json").write_text(json.dumps({"type": "integer", "maximum": 5}))
    fresh = GrammarCompiler(vocab, cache_dir=cache)
    fresh.compile_json_schema(tmp_path / "root.json", JsonSchemaOptions(lenient=False))
    assert (fresh.disk_hits, fresh.misses) == (0, 1)
