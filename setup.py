"""Build script: the pure-Python package by default, the compiled build on request.

Everything about the package (name, dependencies, entry points) is in ``pyproject.toml``; this
file only adds the optional compiled build.  With ``FORMCAST_MYPYC=1`` set at build time the
modules listed in ``src/formcast/_native.py`` (``NATIVE_MODULES``) are compiled with mypyc from
the same source (the ``.py`` files are shipped too, as the fallback), and the C kernels of
``NATIVE_KERNELS`` (``<module>.c`` each, e.g. ``src/formcast/vocab/_trie_walk.c``, the
vocabulary-trie walk; their numpy versions stay the fallbacks) are built beside them::

    FORMCAST_MYPYC=1 pip install --no-build-isolation .

(``--no-build-isolation``: the build uses this environment's mypy, which brings mypyc, and
needs a C compiler.)  Without the variable, or with it set to ``0``, nothing is compiled.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


def _wanted() -> bool:
    return os.environ.get("FORMCAST_MYPYC", "").strip().lower() not in ("", "0", "false", "no")


def _ext_modules() -> list[object]:
    if not _wanted():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as e:  # pragma: no cover - depends on the build environment
        raise SystemExit(
            "FORMCAST_MYPYC=1 needs mypyc (pip install mypy) in the build environment: "
            "use `FORMCAST_MYPYC=1 pip install --no-build-isolation .`"
        ) from e
    from setuptools import Extension

    native = runpy.run_path(str(HERE / "src" / "formcast" / "_native.py"))
    paths = [
        str(Path("src", *name.split(".")).with_suffix(".py")) for name in native["NATIVE_MODULES"]
    ]
    kernels = [
        Extension(
            name,
            [str(Path("src", *name.split(".")).with_suffix(".c"))],
            depends=[str(Path("src", "formcast", "_kernel_buffers.h"))],  # what the kernels share
            extra_compile_args=["-O3"],
        )
        for name in native["NATIVE_KERNELS"]
    ]
    compiled = mypycify(["--ignore-missing-imports", *paths], opt_level="3", debug_level="1")
    return [*compiled, *kernels]


setup(ext_modules=_ext_modules())
