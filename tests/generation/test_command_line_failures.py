"""The command line's failure paths, as a new user meets them (issue #28, "the first hour"):
Ctrl-C, truncated samples, ``--lenient`` warnings, unsupported features, regexes in messages,
the context length, ``-h`` text.

Every test calls :func:`formcast.cli.main.main` in-process; the tokenizer and model loaders are
replaced by small stand-ins, so nothing is downloaded or loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import run
from formcast.cli import common as cli_common
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

TOKENS = [bytes([b]) for b in range(0x20, 0x7F)]
EOS = len(TOKENS)


def small_vocab() -> Vocabulary:
    return Vocabulary.from_tokens([*TOKENS, b"</s>"], stop_token_ids=[EOS], name="cli-fail")


def errors(err: str) -> list[str]:
    """The stderr lines that are not progress lines (``[formcast] ...``) nor blank."""
    return [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[formcast]")]


def write(tmp: Path, name: str, obj: Any) -> str:
    path = tmp / name
    path.write_text(json.dumps(obj), encoding="utf-8")
    return str(path)


@pytest.fixture
def vocab(monkeypatch: pytest.MonkeyPatch) -> Vocabulary:
    v = small_vocab()
    monkeypatch.setattr(cli_common, "load_vocab", lambda spec: v)
    return v


def use_model(monkeypatch: pytest.MonkeyPatch, model: Any) -> None:
    import formcast.model.loading

    monkeypatch.setattr(formcast.model.loading, "load_model", lambda *a, **k: model)


# -- Ctrl-C ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("streamed", [False, True])
def test_ctrl_c_in_generate_prints_one_line_and_exits_130(
    streamed: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    v = small_vocab()
    calls: list[int] = []

    def fn(seq: list[int]) -> np.ndarray:
        calls.append(len(seq))
        if len(calls) == 4:
            raise KeyboardInterrupt  # the user presses Ctrl-C during the fourth model call
        return np.zeros(v.vocab_size)

    use_model(monkeypatch, CallableModel(fn, v, tokenize=lambda s: [0]))
    argv = ["generate", "--prompt", "x", "--no-chat", "--regex", "[a-z]{40}"]
    code, out, err = run([*argv, "--stream"] if streamed else argv, capsys)
    assert code == 130
    assert errors(err) == ["formcast: interrupted"], err
    assert "Traceback" not in err
    if streamed:  # the partial line is ended
        assert out.endswith("\n")
        assert len(out.strip()) == 3


# -- sample: a truncated prefix is not a success ------------------------------------------------
def test_sample_that_runs_out_of_tokens_exits_1_and_says_so(
    vocab: Vocabulary, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["sample", "--regex", "[a-z]{30}", "--max-tokens", "5", "--n", "2"],
                         capsys)
    assert code == 1
    assert [len(line) for line in out.splitlines()] == [5, 5]
    assert "truncated" in err
    assert "NOT complete" in err
    code, out, err = run(["sample", "--regex", "[a-z]{3}", "--max-tokens", "5", "--json"], capsys)
    assert code == 0
    assert all(json.loads(line)["finish_reason"] == "completed" for line in out.splitlines())
    assert "truncated" not in err
    code, out, _ = run(["sample", "--regex", "[a-z]{30}", "--max-tokens", "5", "--json"], capsys)
    assert code == 1
    assert {json.loads(line)["finish_reason"] for line in out.splitlines()} == {"max_tokens"}


# -- --lenient and unsupported features ---------------------------------------------------------
@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        ({"type": "string", "format": "no-such-format"}, "format"),
        ({"type": "integer", "minimun": 3}, "minimun"),  # misspelt: "did you mean"
        ({"type": "integer", "divisibleBy": 3}, "divisibleBy"),
    ],
)
def test_the_lenient_warning_does_not_claim_to_fail_closed(
    schema: Any, keyword: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "s.json", schema)
    code, _, err = run(["check", "--schema", path, "--lenient", '"x"'], capsys)
    assert code in (0, 1)  # it compiled: the keyword was ignored
    warnings = [ln for ln in err.splitlines() if ln.startswith("[formcast] warning:")]
    assert any(keyword in w for w in warnings), err
    assert "fails closed" not in err
    assert "fail closed" not in err


def test_an_unsupported_keyword_error_names_the_way_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "d3.json", {"type": "integer", "divisibleBy": 3})
    code, out, err = run(["check", "--schema", path, "12"], capsys)
    assert code == 2
    assert out == ""
    (line,) = errors(err)
    assert "UnsupportedFeatureError" in line
    assert "divisibleBy" in line
    assert "--lenient" in line
    assert "docs/json_schema.md" in line


def test_an_unsupported_regex_feature_names_the_docs_not_lenient(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(["check", "--regex", "(?=a)a", "a"], capsys)
    assert code == 2
    (line,) = errors(err)
    assert "lookahead" in line
    assert "docs/regex.md" in line
    assert "--lenient" not in line  # it applies to --schema only


# -- regexes as typed -----------------------------------------------------------------------------
def test_a_regex_is_echoed_with_its_backslashes_as_typed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(["check", "--regex", r"\d+\b", "1"], capsys)
    assert code == 2
    (line,) = errors(err)
    assert r"of regex '\d+\b'" in line, line
    assert r"'word boundary \b'" in line, line
    assert "\\\\" not in line, line


# -- the context length ---------------------------------------------------------------------------
def test_the_context_length_error_names_n_ctx(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    v = small_vocab()
    model = CallableModel(
        lambda seq: np.zeros(v.vocab_size), v, tokenize=lambda s: [0] * len(s), max_context=64
    )
    use_model(monkeypatch, model)
    code, out, err = run(
        ["generate", "--prompt", "x" * 40, "--no-chat", "--max-tokens", "50", "--n-ctx", "64"],
        capsys,
    )
    assert code == 2
    assert out == ""
    (line,) = errors(err)
    assert "--n-ctx" in line
    assert "--max-tokens" in line
    assert "40 tokens" in line
    assert "64" in line


# -- -h text -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command", [[], ["demo"], ["compile"], ["mask"], ["check"], ["sample"], ["generate"],
                ["eval"], ["serve"]],
    ids=lambda c: " ".join(c) or "formcast",
)
def test_help_has_no_rest_markup(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([*command, "-h"], capsys)
    assert code == 0
    assert "usage:" in out
    for markup in ("``", ":func:", ":class:", ":mod:", ":meth:"):
        assert markup not in out, (markup, out)
