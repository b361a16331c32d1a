"""Architecture rules, checked on every import statement in the package (the lazy ones inside
functions and the ``TYPE_CHECKING`` ones included):

* each folder is a layer and imports only the layers below it (``LAYERS``);
* the shared top-level modules import no layer at all;
* there is no import cycle between any two modules, within a folder as much as across folders;
* ``import formcast`` loads numpy and nothing heavier.
"""

from __future__ import annotations

import ast
import pathlib
import runpy
import subprocess
import sys

import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / "src" / "formcast"

# layer -> the layers it may import (besides itself and the shared top-level modules).  The data
# flows down this list: IR -> automata -> front-ends -> vocabulary -> token index -> runtime ->
# sampling -> models -> generation -> actions -> integrations -> command line.
LAYERS: dict[str, frozenset[str]] = {
    "ir": frozenset(),
    "automata": frozenset({"ir"}),
    "frontends": frozenset({"ir", "automata"}),
    # constraints: Python combinators and state machines, lowered to IR through the front-ends
    "constraints": frozenset({"ir", "automata", "frontends"}),
    "vocab": frozenset(),
    "index": frozenset({"ir", "automata", "frontends", "constraints", "vocab"}),
    "runtime": frozenset({"index", "vocab"}),
    "sampling": frozenset(),
    "model": frozenset({"vocab"}),
    "generation": frozenset(
        {"ir", "automata", "frontends", "constraints", "vocab", "index", "runtime", "sampling",
         "model"}
    ),
    # actions: the commit boundary, validation layers, ledgers and metrics over generation
    "actions": frozenset(
        {"ir", "automata", "frontends", "constraints", "vocab", "index", "runtime", "sampling",
         "model", "generation"}
    ),
    # tools: tool-call formats, tool_choice constraints and parsing over actions and generation
    "tools": frozenset(
        {"ir", "automata", "frontends", "constraints", "vocab", "index", "runtime", "sampling",
         "model", "generation", "actions"}
    ),
    "integrations": frozenset(
        {"ir", "automata", "frontends", "constraints", "vocab", "index", "runtime", "sampling",
         "model", "generation", "actions", "tools"}
    ),
    # server: the OpenAI-compatible HTTP server (FastAPI + uvicorn, the `server` extra)
    "server": frozenset(
        {"ir", "automata", "frontends", "constraints", "vocab", "index", "runtime", "sampling",
         "model", "generation", "actions", "tools", "integrations"}
    ),
    "cli": frozenset(
        {"ir", "automata", "frontends", "constraints", "vocab", "index", "runtime", "sampling",
         "model", "generation", "actions", "tools", "integrations", "server"}
    ),
    # the reference oracle for tests: built on the IR alone, imported by nothing in the package
    "testing": frozenset({"ir", "frontends"}),
}
SHARED = frozenset(
    {"errors", "limits", "cache", "bitmask", "columns", "_gc", "_optional", "_version", "_native"}
)
HEAVY = (
    "torch", "tokenizers", "transformers", "llama_cpp", "tiktoken", "jsonschema", "referencing",
    "gguf", "jinja2", "fastapi", "uvicorn", "starlette", "vllm", "sglang", "openai",
)


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, pathlib.Path] = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
#: the compiled build's C kernels (no Python source): importing one imports no package module
KERNELS = frozenset(
    name.removeprefix("formcast.")
    for name in runpy.run_path(str(PKG / "_native.py"))["NATIVE_KERNELS"]
)


def _imports(name: str, modules: dict[str, pathlib.Path] = MODULES) -> list[tuple[str, int]]:
    """The package modules that module ``name`` imports, with line numbers."""
    path = modules[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if name == "":
        package = []
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = ".".join(base + (node.module.split(".") if node.module else []))
            elif node.module == "formcast" or (node.module or "").startswith("formcast."):
                mod = node.module.removeprefix("formcast").removeprefix(".")  # type: ignore[union-attr]
            else:
                continue
            for alias in node.names:
                sub = f"{mod}.{alias.name}" if mod else alias.name
                out.append((sub if sub in modules or sub in KERNELS else mod, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "formcast" or alias.name.startswith("formcast."):
                    out.append((alias.name.removeprefix("formcast").removeprefix("."), node.lineno))
    return [(m, line) for m, line in out if m != name and m in modules]


def _layer(name: str) -> str | None:
    """The layer (folder) of a module; ``None`` for top-level modules."""
    return name.split(".")[0] if "." in name or name in LAYERS else None


def test_every_folder_is_a_known_layer() -> None:
    folders = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS), f"folders {folders ^ set(LAYERS)} are not in LAYERS"
    tops = {n for n in MODULES if n and "." not in n and n not in LAYERS}
    assert tops == SHARED | {"__main__"}, f"unexpected top-level modules: {tops ^ SHARED}"


@pytest.mark.parametrize("name", sorted(MODULES), ids=lambda n: n or "formcast")
def test_layers_only_import_downwards(name: str) -> None:
    if name in ("", "__main__"):
        return  # the package facade and ``python -m formcast`` may import anything
    layer = _layer(name)
    if layer is None:
        bad = [f"line {ln}: imports formcast.{m}" for m, ln in _imports(name) if m.split(".")[0]
               not in SHARED]
        assert not bad, f"shared module {name} imports a layer: {bad}"
        return
    allowed = LAYERS[layer] | {layer} | SHARED
    bad = [
        f"line {ln}: imports formcast.{m}" for m, ln in _imports(name)
        if (m.split(".")[0] if m else "") not in allowed
    ]
    assert not bad, f"{name} ({layer}) breaks the layering: {bad}"


def _cycles(modules: dict[str, pathlib.Path] = MODULES) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    edges = {n: sorted({m for m, _ in _imports(n, modules)}) for n in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles() == [], f"import cycles: {_cycles()}"


def test_the_cycle_check_finds_a_lazy_cycle(tmp_path: pathlib.Path) -> None:
    """The cycle check can fail: a two-module cycle through a lazy import is found."""
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n")
    (tmp_path / "c.py").write_text("from .a import z\n")
    modules = {p.stem: p for p in sorted(tmp_path.glob("*.py"))}
    assert _cycles(modules) == [["a", "b"]]
    assert _imports("c", modules) == [("a", 1)]


def test_import_formcast_loads_numpy_only() -> None:
    code = (
        "import sys, formcast; "
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"import formcast imported heavy modules: {out}"
