"""Every constraint the server compiles goes through ONE function,
``formcast.server.constraints.compile_plan`` (#28: one constraint value from every door): no
other server module calls the engine's ``compile`` or a compiler's ``compile*`` method.

Oracle: the modules' syntax trees (a call found by name, wherever it is written)."""

from __future__ import annotations

import ast
from pathlib import Path

import formcast.server

SERVER = Path(formcast.server.__file__).parent
#: module -> the compile calls it may make
ALLOWED = {"constraints.py": {"compile"}, "engine.py": {"compile_async"}}


def compile_calls(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name == "compile" or name.startswith("compile_"):
                found.add(name)
    return found


def test_only_the_plan_compiler_compiles() -> None:
    seen = {p.name: compile_calls(p) for p in sorted(SERVER.glob("*.py"))}
    assert seen["constraints.py"] == {"compile"}  # the test sees calls (not vacuous)
    for name, calls in seen.items():
        assert calls <= ALLOWED.get(name, set()), (name, calls)
