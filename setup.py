"""Build script: the compiled build by default, falling back to pure Python piece by piece.

Everything about the package (name, dependencies, entry points) is in ``pyproject.toml``; this
file only adds the native code (docs/native.md):

* the C kernels of ``NATIVE_KERNELS`` in ``src/formcast/_native.py`` (``<module>.c`` each: the
  vocabulary-trie walk, the Moore refinement, the column classes, the subset construction and
  minimization of the byte DFAs), each an *optional*
  extension: one that fails to build (no C compiler, a compiler error) is left out with a
  warning and its module's numpy code runs instead;
* the modules of ``NATIVE_MODULES``, compiled with mypyc from the same ``.py`` source (the
  ``.py`` files are shipped too, as the fallback).  mypyc builds them as one group that
  shares a C library, so they are all-or-nothing: if mypyc is missing or any of them fails
  to compile, every mypyc output is removed and the pure ``.py`` modules run.

``pip install .`` (and ``python -m build``) get mypyc from the build requirements in
pyproject.toml.  ``FORMCAST_NATIVE`` chooses at build time:

* unset, ``auto`` or ``1``: both, each falling back silently (a warning in pip's ``-v`` log);
* ``kernels``: the C kernels only (no mypyc);
* ``0`` (or ``pure``, ``false``, ``no``): nothing compiled, the pure-Python package;
* ``required``: both, and a build that cannot compile any of them FAILS (CI uses it, so that a
  broken kernel cannot hide behind its fallback).

An editable install (``pip install -e .``) is always the pure-Python package: compiled
modules built in place would shadow the ``.py`` files you edit (``scripts/build_native.sh``
builds a compiled copy beside the tree for benchmarks).  ``formcast --version`` says which
build runs.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
NATIVE = runpy.run_path(str(HERE / "src" / "formcast" / "_native.py"))
MODES = {"auto": "auto", "1": "auto", "true": "auto", "yes": "auto", "kernels": "kernels"}
MODES |= {"0": "pure", "pure": "pure", "false": "pure", "no": "pure", "required": "required"}


def _mode() -> str:
    raw = os.environ.get("FORMCAST_NATIVE", "").strip().lower() or "auto"
    if raw not in MODES:
        raise SystemExit(
            f"FORMCAST_NATIVE={raw!r} is not a build mode: use auto (the default), kernels, "
            "0 (pure Python) or required"
        )
    return MODES[raw]


def _note(msg: str) -> None:
    print(f"formcast build: {msg}", file=sys.stderr, flush=True)


def _kernels() -> list[Extension]:
    return [
        Extension(
            name,
            [str(Path("src", *name.split(".")).with_suffix(".c"))],
            # the headers they share: a change to one rebuilds them
            depends=[
                str(Path("src", "formcast", "_kernel_buffers.h")),
                str(Path("src", "formcast", "automata", "_kernel_args.h")),
            ],
            extra_compile_args=["-O3"],
            optional=_mode() != "required",  # a failed kernel is left out (numpy runs)
        )
        for name in NATIVE["NATIVE_KERNELS"]
    ]


class BuildExt(build_ext):
    """``build_ext`` with formcast's fallbacks: optional kernels, all-or-nothing mypyc."""

    def run(self) -> None:
        mode = _mode()
        if getattr(self, "editable_mode", False) or self.inplace or mode == "pure":
            _note("pure-Python build (editable install or FORMCAST_NATIVE=0): nothing compiled")
            self.extensions = []
            return
        self._mypyc: list[Any] = []
        if mode != "kernels":
            self._mypyc = self._mypycify(required=mode == "required")
            self.extensions = [*self.extensions, *self._mypyc]
        super().run()

    def _mypycify(self, required: bool) -> list[Any]:
        paths = [
            str(Path("src", *name.split(".")).with_suffix(".py"))
            for name in NATIVE["NATIVE_MODULES"]
        ]
        try:
            from mypyc.build import mypycify

            exts = mypycify(
                ["--ignore-missing-imports", *paths],
                opt_level="3",
                debug_level="1",
                target_dir=str(Path(self.build_temp) / "mypyc"),
            )
        except (ImportError, Exception, SystemExit) as e:  # mypyc missing or failing
            if required:
                raise
            _note(f"mypyc is not available or failed ({e!r}): the .py modules stay")
            return []
        for ext in exts:  # what setuptools' finalize_options does for ext_modules
            ext.optional = False  # handled in build_extensions, all together
            ext._full_name = self.get_ext_fullname(ext.name)  # type: ignore[attr-defined]
            ext._links_to_dynamic = False  # type: ignore[attr-defined]
            ext._needs_stub = False  # type: ignore[attr-defined]
            ext._file_name = self.get_ext_filename(ext._full_name)  # type: ignore[attr-defined]
            self.ext_map[ext._full_name] = ext  # type: ignore[attr-defined]
        return list(exts)

    def build_extensions(self) -> None:
        self.check_extensions_list(self.extensions)
        mypyc = {id(e) for e in getattr(self, "_mypyc", [])}
        try:
            for ext in self.extensions:
                if id(ext) in mypyc:
                    self.build_extension(ext)
        except Exception as e:
            if _mode() == "required":
                raise
            _note(f"the mypyc modules failed to build ({e!r}): the .py modules stay")
            for ext in self.extensions:
                if id(ext) in mypyc:
                    Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            self.extensions = [e for e in self.extensions if id(e) not in mypyc]
            shutil.rmtree(Path(self.build_temp) / "mypyc", ignore_errors=True)
        for ext in self.extensions:
            if id(ext) not in mypyc:
                self._build_kernel(ext)

    def _build_kernel(self, ext: Extension) -> None:
        try:
            self.build_extension(ext)
        except Exception as e:
            if not ext.optional:
                raise
            _note(f"the C kernel {ext.name} failed to build ({e!r}): its numpy code runs")
            Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            self.extensions = [x for x in self.extensions if x is not ext]


setup(ext_modules=_kernels(), cmdclass={"build_ext": BuildExt})
