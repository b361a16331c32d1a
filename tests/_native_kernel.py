"""The C kernels' test files: a kernel, or a skip (a failure where it must be there).

In the pure-Python package the kernels are absent and their tests skip;
``tests/project/test_native_build.py`` runs those files against the compiled copy with
``FORMCAST_EXPECT_NATIVE=1``, where a kernel that did not import is an error instead.
"""

from __future__ import annotations

import os
from typing import Any

import pytest


def kernel_or_skip(kernel: Any, name: str) -> Any:
    """``kernel`` (the module's ``_KERNEL``: the extension, or None where it is absent);
    skips the calling test module when it is None, or raises under ``FORMCAST_EXPECT_NATIVE=1``.
    """
    if kernel is None:
        if os.environ.get("FORMCAST_EXPECT_NATIVE") == "1":
            raise RuntimeError(f"the compiled build's {name} did not import")
        pytest.skip(
            f"{name} is not built (the pure-Python package); "
            "tests/project/test_native_build.py runs this file against the compiled copy",
            allow_module_level=True,
        )
    return kernel


#: a JSON schema whose compile on Llama-3 meets the kernels' real inputs: lexers with string,
#: enum, bounded-integer, date and e-mail positions, counted windows, cut tables
REAL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}},
        "n": {"type": "integer", "minimum": 3, "maximum": 250},
        "when": {"type": "string", "format": "date"},
        "mail": {"type": "string", "format": "email"},
    },
    "required": ["name"],
}


def compile_real_inputs() -> None:
    """Compile :data:`REAL_SCHEMA` and the builtin JSON grammar on Llama-3 with a fresh
    compiler (no caches), so that a patched kernel entry point records what they meet."""
    from formcast import GrammarCompiler
    from formcast.vocab.loaders import load_vocabulary

    compiler = GrammarCompiler(load_vocabulary("llama3"), cache_dir=False)
    compiler.compile_json_schema(REAL_SCHEMA)
    compiler.compile_builtin_json_grammar()
