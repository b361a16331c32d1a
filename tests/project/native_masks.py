"""Run by tests/project/test_native_build.py in a subprocess, once per build (pure / compiled).

``python native_masks.py SHARED_DATA OUT_DIR [LOAD_DIR]`` compiles a fixed set of constraints
(MaskBench schemas, the builtin JSON grammar, llama.cpp's c.gbnf, a regex, a Lark grammar)
against the Llama-3 vocabulary, walks seeded random paths through each and writes to
``OUT_DIR/report.json``: which formcast modules are compiled here, and per constraint the
SHA-256 of every mask met (one digest per step), plus each grammar's ``serialize()`` bytes
(``OUT_DIR/<name>.bin``, written after the walks, so they carry the walks' masks).  With
``LOAD_DIR`` (the other build's ``OUT_DIR``) it also loads each ``<name>.bin`` written there
and replays the same walks on the loaded grammar.  The walks are a function of the masks
only, so two builds give the same report exactly when every mask is bit-identical.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from formcast import CompiledGrammar, GrammarCompiler
from formcast._native import compiled_modules
from formcast.vocab.loaders import load_vocabulary

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from serialize_helpers import LARK, random_walks, replay_masks

MASKBENCH = ("JSONSchemaBench", "maskbench", "data")
#: a few MaskBench schemas of different shapes (sorted names: the same on every machine)
N_SCHEMAS = 4
REGEX = r"[a-z]{2,6}(-[0-9]+)?@(foo|bar)\.(com|org)( [A-Z][a-z]{0,20}){0,3}"


def constraints(data: Path) -> dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]]:
    out: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
        "regex": ("compile_regex", (REGEX,), {}),
        "lark": ("compile_grammar", (LARK,), {"syntax": "lark"}),
        "builtin_json": ("compile_builtin_json_grammar", (), {}),
        "c_gbnf": (
            "compile_grammar",
            ((data / "llama.cpp-grammars" / "grammars" / "c.gbnf").read_text("utf-8"),),
            {},
        ),
    }
    files = sorted(data.joinpath(*MASKBENCH).glob("*.json"))
    step = max(1, len(files) // N_SCHEMAS)
    for f in files[::step][:N_SCHEMAS]:
        d = json.loads(f.read_text("utf-8"))
        out[f"maskbench_{f.stem}"] = ("compile_json_schema", (d.get("schema", d),), {})
    return out


def walk(compiled: CompiledGrammar, seed: int, walks: int = 3, steps: int = 30) -> list[str]:
    """The digest of every mask met on seeded walks (the next token drawn from the mask)."""
    rows = replay_masks(compiled, random_walks(compiled, walks=walks, steps=steps, seed=seed))
    return [hashlib.sha256(row.tobytes()).hexdigest()[:16] for row in rows]


def main() -> None:
    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    load = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    out.mkdir(parents=True, exist_ok=True)
    vocab = load_vocabulary("llama3")
    report: dict[str, Any] = {"compiled": compiled_modules(), "masks": {}, "loaded": {}}
    for i, (name, (method, args, kwargs)) in enumerate(sorted(constraints(data).items())):
        compiled = getattr(GrammarCompiler(vocab, cache_size=0), method)(*args, **kwargs)
        report["masks"][name] = walk(compiled, seed=i)
        (out / f"{name}.bin").write_bytes(compiled.serialize())
        if load is not None:
            other = CompiledGrammar.deserialize((load / f"{name}.bin").read_bytes(), vocab)
            report["loaded"][name] = walk(other, seed=i)
    (out / "report.json").write_text(json.dumps(report, indent=1), "utf-8")


if __name__ == "__main__":
    main()
