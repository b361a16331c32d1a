"""Build script: the pure-Python package by default, mypyc-compiled hot modules on request.

Everything about the package (name, dependencies, entry points) is in ``pyproject.toml``; this
file only adds the optional compiled build.  With ``FORMCAST_MYPYC=1`` set at build time the
modules listed in ``src/formcast/_native.py`` (``NATIVE_MODULES``) are compiled with mypyc from
the same source (the ``.py`` files are shipped too, as the fallback)::

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
    names = runpy.run_path(str(HERE / "src" / "formcast" / "_native.py"))["NATIVE_MODULES"]
    paths = [str(Path("src", *name.split(".")).with_suffix(".py")) for name in names]
    return list(mypycify(["--ignore-missing-imports", *paths], opt_level="3", debug_level="1"))


setup(ext_modules=_ext_modules())
