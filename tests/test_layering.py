"""Architecture rules: lower layers never import higher ones; the core imports numpy only.

Every import statement in the package is checked, including the lazy ones inside functions.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1] / "src" / "formcast"

# layer -> layers it may import (besides itself and the shared top-level modules)
ALLOWED: dict[str, set[str]] = {
    "grammar": set(),
    "automata": {"grammar"},
    "vocab": set(),
    "index": {"grammar", "automata", "vocab"},
    "runtime": {"grammar", "automata", "vocab", "index"},
    "sampling": set(),
    "generation": {"grammar", "automata", "vocab", "index", "runtime", "sampling", "integrations"},
    "integrations": {"grammar", "automata", "vocab", "index", "runtime", "sampling", "generation"},
    "cli": {
        "grammar", "automata", "vocab", "index", "runtime", "sampling", "generation",
        "integrations",
    },
}
SHARED = {"errors", "config", "_types", "_lru", "_gc", "__init__", "models"}
HEAVY = (
    "torch", "tokenizers", "transformers", "llama_cpp", "tiktoken", "jsonschema", "referencing",
    "gguf",
)


def _modules() -> list[pathlib.Path]:
    return sorted(PKG.rglob("*.py"))


def _layer(path: pathlib.Path) -> str | None:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else None


def _imported_layers(path: pathlib.Path) -> set[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(PKG)
    pkg_parts = list(rel.parts[:-1])
    out: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        targets: list[list[str]] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - (node.level - 1)]
                mod = base + (node.module.split(".") if node.module else [])
                if node.module is None:
                    targets.extend([*mod, a.name] for a in node.names)
                else:
                    targets.append(mod)
            elif node.module and node.module.startswith("formcast."):
                targets.append(node.module.split(".")[1:])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("formcast."):
                    targets.append(a.name.split(".")[1:])
        for t in targets:
            if t:
                out.add((t[0], node.lineno))
    return out


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_layers_only_import_downwards(path: pathlib.Path) -> None:
    layer = _layer(path)
    if layer is None:
        return  # top-level modules (errors, config, __init__, __main__) may import anything
    allowed = ALLOWED[layer] | {layer} | SHARED
    bad = [
        f"line {line}: imports formcast.{target}"
        for target, line in _imported_layers(path)
        if target.removesuffix(".py") not in allowed
    ]
    assert not bad, f"{path.relative_to(PKG)} ({layer}) breaks the layering: {bad}"


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
