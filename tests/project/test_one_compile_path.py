"""One compile path (#28): every door builds a ``ConstraintSpec`` and calls
``GrammarCompiler.compile(spec)`` or ``compile_async(spec)``.

The doors are the packages that take a constraint from a user or an engine: ``generation``,
``cli``, ``server``, ``integrations``, ``tools``, ``actions``.  This scans every call in them
(the AST, so docstrings and comments do not count) and fails on

* a use (a call, or passing the bound method) of a ``compile_*`` convenience of the compiler
  (``compile_regex``, ``compile_grammar``, ``compile_json_schema``,
  ``compile_builtin_json_grammar``, ``compile_structural_tag``, ``compile_grammar_ir``):
  they exist for library users, doors build specs;
* a compile method named by a string (``getattr(c, "compile_regex")``, a plan carrying
  ``"compile_json_schema"``, ``compile_async("compile", ...)``) — the old method-name protocol;
* ``compile(...)``/``compile_async(...)`` with more than the spec (``*args``, a second
  positional argument) — the method-name form of ``compile_async``.

``compile_reasoning`` is not a constraint compile (it wraps a compiled grammar) and is allowed.
"""

from __future__ import annotations

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parents[2] / "src" / "formcast"
DOORS = ("generation", "cli", "server", "integrations", "tools", "actions")
CONVENIENCES = frozenset(
    {
        "compile_regex",
        "compile_grammar",
        "compile_json_schema",
        "compile_builtin_json_grammar",
        "compile_structural_tag",
        "compile_grammar_ir",
    }
)
def _name_of(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _violations(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in CONVENIENCES:  # called or passed
            found.append((node.lineno, f"uses {node.attr}: build a spec and call compile(spec)"))
        if not isinstance(node, ast.Call):
            continue
        name = _name_of(node.func)
        is_method = isinstance(node.func, ast.Attribute)
        strings = [
            a.value
            for a in [*node.args, *(k.value for k in node.keywords)]
            if isinstance(a, ast.Constant) and isinstance(a.value, str)
        ]
        for text in strings:
            if text in CONVENIENCES or (name == "getattr" and text.startswith("compile")):
                found.append((node.lineno, f"names the compile method {text!r} by string"))
        on_re = (
            isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("re", "_re", "regex")
        )
        if name in ("compile", "compile_async") and is_method and not on_re:
            starred = any(isinstance(a, ast.Starred) for a in node.args)
            first = node.args[0] if node.args else None
            first_is_name = isinstance(first, ast.Constant) and isinstance(first.value, str)
            if starred or len(node.args) > 1 or first_is_name:
                found.append((node.lineno, f"{name}(...) with more than a spec"))
    return found


def _door_modules() -> list[pathlib.Path]:
    return sorted(p for door in DOORS for p in (PKG / door).rglob("*.py"))


def test_no_door_calls_a_compile_convenience_or_names_a_method() -> None:
    problems: list[str] = []
    for path in _door_modules():
        rel = path.relative_to(PKG).as_posix()
        found = _violations(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        problems += [f"formcast/{rel}:{line}: {why}" for line, why in found]
    assert not problems, "a door bypasses the one compile path:\n" + "\n".join(problems)


def test_the_scan_finds_what_it_looks_for() -> None:
    """The scanner itself, on code that does each forbidden thing (and on what is allowed)."""
    bad = ast.parse(
        "c.compile_regex('x')\n"
        "run(c.compile_builtin_json_grammar)\n"
        "getattr(c, 'compile_json_schema')\n"
        "Plan('compile_json_schema', (s, o))\n"
        "c.compile_async(method, *args)\n"
        "e.compile('compile', x, param='tools')\n"
    )
    assert sorted(line for line, _ in _violations(bad)) == [1, 2, 3, 4, 5, 6]
    good = ast.parse(
        "c.compile(RegexSpec('x'))\n"
        "await c.compile_async(spec)\n"
        "c.compile_reasoning(inner)\n"
        "re.compile('x')\n"
        "sub.add_parser('compile', help='compile a constraint')\n"
    )
    assert _violations(good) == []
