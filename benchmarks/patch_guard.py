"""Refuse, saying why, to patch methods of ``formcast.index.cfg_program``'s classes in a build
that compiles that module (mypyc39, #31).

Benchmarks that time or swap methods of the classifiers (``_LazyExitSplitClassifier``,
``_LazyWalkTables``, ``_CountedClassifier``, ...) by setting them on the class measure
nothing in the compiled build: mypyc's native classes call their methods through a vtable
(compiled callers never see a patched attribute) and their types refuse new attributes.
Such a benchmark calls :func:`require_patchable` before patching and exits with a message
naming the way out (the pure source, ``PYTHONPATH=src``, or a build without that module).

Lifetime: no state; one look-up of where the module is loaded from.
"""

from __future__ import annotations

import sys

MODULE = "formcast.index.cfg_program"


def compiled(module: str = MODULE) -> bool:
    """Whether ``module`` is loaded from (or would load from) a mypyc extension here."""
    from formcast._native import compiled_modules

    return bool(compiled_modules().get(module))


def require_patchable(script: str, what: str, module: str = MODULE) -> None:
    """Exit (status 2) where ``module`` (default :data:`MODULE`) is compiled: ``script`` (its
    name) would patch ``what`` (e.g. ``"--parts (wraps _LazyExitSplitClassifier methods)"``)."""
    if compiled(module):
        print(
            f"{script}: {what} patches methods of {module}'s classes, which this build "
            f"compiles with mypyc (a native class's methods cannot be patched: compiled callers "
            f"call them directly); run it on the pure source (PYTHONPATH=src) or on a build "
            f"without {module} in formcast._native.NATIVE_MODULES",
            file=sys.stderr,
        )
        raise SystemExit(2)
