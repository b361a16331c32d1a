"""The compiled build: which modules it compiles, and which are compiled here.

formcast's source is pure Python; the modules in :data:`NATIVE_MODULES` (the hot per-state loops
of the automata and IR layers and the token index's first visits, chosen by measurement:
docs/native.md) are also compiled to C
extensions with mypyc from the very same source, and the C kernels of :data:`NATIVE_KERNELS`
(the vocabulary-trie walk of first visits, the Moore refinement of the token index's state
equivalence, the column classes, and the subset construction and minimization of the byte
DFAs, whose numpy or Python versions are the fallbacks) are built beside them.  ``pip install
.`` builds both wherever a C compiler is present, each falling back to the pure Python source
when it cannot be built; ``FORMCAST_NATIVE=0`` at build time installs the
pure-Python package, and an editable install is always pure (``setup.py``)::

    pip install .                      # compiled where it can be
    FORMCAST_NATIVE=0 pip install .    # pure Python

``setup.py`` and ``scripts/build_native.sh`` read :data:`NATIVE_MODULES` and
:data:`NATIVE_KERNELS` from this file (with ``runpy``, so it must import nothing outside the
standard library); every compiled module falls back to its ``.py`` file when its extension is
absent.  ``formcast --version`` prints :func:`native_summary`.

Lifetime: constants, and a report computed on each call (cheap: one spec look-up per module,
no module is imported or executed by it beyond the packages above them).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

__all__ = [
    "NATIVE_KERNELS",
    "NATIVE_MODULES",
    "compiled_modules",
    "interpreted_class",
    "mypyc_attr",
    "native_summary",
]

#: the modules the compiled build compiles with mypyc, as dotted names (one place: setup.py,
#: scripts/build_native.sh and the tests read it)
NATIVE_MODULES: tuple[str, ...] = (
    "formcast.automata.dfa",
    "formcast.automata.nfa",
    "formcast.automata.lexer",
    "formcast.automata.equivalence",
    # the grammar IR, its passes, the compile's fuel counter and the rule-automaton builder:
    # what a JSON schema's compile spends its Python time on after the four above (docs/native.md)
    "formcast.ir.nodes",
    "formcast.ir.passes",
    "formcast.limits",
    "formcast.automata.rules",
    "formcast.automata.pda",
    # the CFG program's first visits (walk glue, stops, region search, digests, candidate
    # checks): ~0.85x TBM of the nine above (docs/native.md, session 25)
    "formcast.index.cfg_program",
)

#: the C kernels of the compiled build (``<name>.c`` beside the module that imports it, which
#: falls back to numpy or Python without it), as dotted names: the trie walk, the Moore
#: refinement, the column classes (formcast.columns) and the subset construction and Hopcroft
#: minimization of the byte DFAs (formcast.automata.dfa)
NATIVE_KERNELS: tuple[str, ...] = (
    "formcast.vocab._trie_walk",
    "formcast.automata._moore",
    "formcast._columns",
    "formcast.automata._subset",
)

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


_C = TypeVar("_C", bound=type)


def interpreted_class(cls: _C) -> _C:
    """Identity class decorator (``cls`` itself, unchanged): it keeps a class an ordinary Python
    class when its module is compiled with mypyc (:data:`NATIVE_MODULES`), which makes a class
    with any decorator other than ``dataclass`` a non-native class.  For the classes that rely
    on what mypyc's native classes lack (weak references, ``dataclass(slots=True)``, an
    instance ``__dict__``, pickling, ``dataclasses.replace``, subclasses in other modules);
    their methods are compiled all the same."""
    return cls


# ``@mypyc_attr(serializable=True)`` (from here) keeps a class native (compiled, attributes in C
# slots) when its module is compiled with mypyc, and makes its ``cls.__new__(cls)`` allocate
# only, as for an ordinary class: a native class's ``__new__`` otherwise runs ``__init__``
# (mypyc's "always defined attributes"), and formcast.index.persist re-creates the classes it
# loads with ``cls.__new__(cls)``, then sets their declared fields.  Cost: reading an attribute
# tests that it is set.  mypyc recognizes the decorator by its full name, which is
# mypy_extensions'; at run time it is an identity decorator (mypy_extensions, a dependency of
# mypy, is no run-time dependency of formcast).
if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_C], _C]:
        """Identity class decorator at run time (see the comment above)."""
        return lambda cls: cls
