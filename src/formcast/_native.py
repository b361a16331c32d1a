"""The optional compiled build: which modules it compiles, and which are compiled here.

formcast is pure Python; the modules in :data:`NATIVE_MODULES` (the hot per-state loops of the
automata layer, chosen by measurement: docs/native.md) can also be compiled to C extensions
with mypyc from the very same source, and the C kernels of :data:`NATIVE_KERNELS` (the
vocabulary-trie walk of first visits, whose numpy version is the fallback) are built beside
them.  The compiled build is opt-in at install time::

    FORMCAST_MYPYC=1 pip install --no-build-isolation .   # needs mypy (mypyc) and a C compiler

``setup.py`` and ``scripts/build_native.sh`` read :data:`NATIVE_MODULES` and
:data:`NATIVE_KERNELS` from this file (with
``runpy``, so it must import nothing outside the standard library); without ``FORMCAST_MYPYC``
the install is the pure-Python package, which is also what every compiled module falls back to
when its extension is absent.

Lifetime: constants, and a report computed on each call (cheap: one spec look-up per module,
no module is imported or executed by it beyond the packages above them).
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["NATIVE_KERNELS", "NATIVE_MODULES", "compiled_modules", "native_summary"]

#: the modules the compiled build compiles with mypyc, as dotted names (one place: setup.py,
#: scripts/build_native.sh and the tests read it)
NATIVE_MODULES: tuple[str, ...] = (
    "formcast.automata.dfa",
    "formcast.automata.nfa",
    "formcast.automata.lexer",
    "formcast.automata.equivalence",
)

#: the C kernels of the compiled build (``<name>.c`` beside the module that imports it, which
#: falls back to numpy without it), as dotted names
NATIVE_KERNELS: tuple[str, ...] = ("formcast.vocab._trie_walk",)

_EXTENSION_SUFFIXES = (".so", ".pyd")


def compiled_modules() -> dict[str, bool]:
    """For each of :data:`NATIVE_MODULES` and :data:`NATIVE_KERNELS`: is it loaded from a
    compiled extension here (a kernel that is absent counts as not compiled)?

    Looks at where the import system finds the module (``spec.origin``: a ``.so``/``.pyd``
    for a mypyc build, a ``.py`` for the pure-Python package) without executing it; a module
    that is already imported reports the file it was loaded from.
    """
    out: dict[str, bool] = {}
    for name in (*NATIVE_MODULES, *NATIVE_KERNELS):
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) if module is not None else None
        if origin is None:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec is not None else None
        out[name] = bool(origin) and str(origin).endswith(_EXTENSION_SUFFIXES)
    return out


def native_summary() -> str:
    """One line for reports: ``"pure Python"``, or which modules are compiled with mypyc and
    which C kernels are built."""
    flags = compiled_modules()
    mods = [name.removeprefix("formcast.") for name in NATIVE_MODULES if flags[name]]
    kernels = [name.removeprefix("formcast.") for name in NATIVE_KERNELS if flags[name]]
    if not mods and not kernels:
        return "pure Python (no module compiled with mypyc, no C kernel)"
    return (
        f"mypyc-compiled {len(mods)}/{len(NATIVE_MODULES)}: {', '.join(mods) or '-'}; "
        f"C kernels {len(kernels)}/{len(NATIVE_KERNELS)}: {', '.join(kernels) or '-'}"
    )
