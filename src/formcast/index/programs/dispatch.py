"""The matcher's program dispatcher: which run-time program wraps a grammar's pushdown program.

A grammar IR may carry *marks* (:mod:`formcast.ir.marks`): facts its rules cannot express, checked
at run time.  :func:`unique_items_program` picks the program that checks them; the compiler calls
it when it compiles a grammar with marks, and :mod:`formcast.index.compiled` when it loads one.
"""

from __future__ import annotations

from ...ir.marks import UniqueItemsMark
from ..cfg_program import CfgProgram
from .unique.strings import UniqueItemsProgram
from .unique.values import ValueUniqueProgram

__all__ = ["unique_items_program"]


def unique_items_program(
    cfg: CfgProgram, marks: tuple[UniqueItemsMark, ...]
) -> UniqueItemsProgram | ValueUniqueProgram:
    """The program of a grammar whose IR carries ``uniqueItems`` marks: ``cfg`` wrapped in
    the run-time check -- :class:`ValueUniqueProgram` when some mark's items are of any type
    (``kind="value"``), else the exact string program :class:`UniqueItemsProgram`.  Built by
    the compiler (and when a serialized grammar is loaded), once per compiled grammar, and
    shared by its matchers.  Cost: the per-vocabulary lexical tables on the first call in a
    process (about 0.3 s for 50k tokens), then O(marks)."""
    if any(m.kind == "value" for m in marks):
        return ValueUniqueProgram(cfg, tuple(marks))
    return UniqueItemsProgram(cfg, tuple(marks))
