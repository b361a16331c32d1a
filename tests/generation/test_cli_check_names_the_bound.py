"""``formcast check`` on a valid document the output shape rejects says where and which bound it
crossed, and names the option that lifts it (#29 item 9).  The oracle: the document is valid
(jsonschema), and compiling with the named option accepts it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jsonschema
from formcast import GrammarCompiler, GrammarMatcher
from formcast.cli import main as cli
from formcast.frontends.jsonschema.options import JsonSchemaOptions
from formcast.vocab.vocabulary import Vocabulary

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}}}


def _check(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _accepts(options: JsonSchemaOptions, text: str) -> bool:
    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )
    m = GrammarMatcher(GrammarCompiler(vocab).compile_json_schema(SCHEMA, options))
    return m.accept_bytes(text.encode()) and m.is_accepting()


@pytest.mark.parametrize(
    ("text", "where", "bound", "lifted"),
    [
        ('{\n  "a": 1\n}', "line 1, column 2", "compact", {"whitespace": "flexible",
                                                          "max_whitespace": 3}),
        ('{"a": 1}', "line 1, column 6", "compact", {"whitespace": "flexible",
                                                     "max_whitespace": 1}),
        ('{"a":' + "1" * 25 + "}", "column 26", "max_integer_digits=20",
         {"max_integer_digits": None}),
        ('{"b":0.' + "1" * 25 + "}", "column 28", "max_fraction_digits=20",
         {"max_fraction_digits": None}),
    ],
)  # fmt: skip
def test_check_names_the_bound(
    text: str,
    where: str,
    bound: str,
    lifted: dict[str, object],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    jsonschema.validate(json.loads(text), SCHEMA)  # valid: only the output shape rejects it
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    code, out, err = _check(["check", "--schema", str(path), text], capsys)
    assert (code, out) == (1, "no match\n")
    assert where in err
    assert bound in err
    assert "the document is valid otherwise" in err
    for key, value in lifted.items():
        assert f"{key}={value!r}" in err or f"{key}={value}" in err
    assert not _accepts(JsonSchemaOptions(), text)
    assert _accepts(JsonSchemaOptions(**lifted), text)  # type: ignore[arg-type]
    code, out, _ = _check(["check", "--json", "--schema", str(path), text], capsys)
    assert json.loads(out)["reason"].startswith("rejected at line")


def test_check_says_when_the_schema_itself_is_broken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    code, _, err = _check(["check", "--schema", str(path), '{"a":"x"}'], capsys)
    assert code == 1
    assert "line 1, column 6" in err
    assert "does not match the schema" in err
    code, _, err = _check(["check", "--schema", str(path), '{"a":1'], capsys)
    assert "incomplete" in err


def test_builtin_json_names_its_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _check(["check", "--grammar", "json", "[1," + " " * 21 + "2]"], capsys)
    assert code == 1
    assert "bound of 20" in err
    assert "json_grammar()" in err
