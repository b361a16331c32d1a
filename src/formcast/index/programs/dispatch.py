"""The matcher's program dispatcher: which run-time program wraps a grammar's pushdown program.

A grammar IR may carry *marks* (:mod:`formcast.ir.marks`): facts its rules cannot express, checked
at run time.  :func:`unique_items_program` picks the program that checks them; the compiler calls
it when it compiles a grammar with marks, and :mod:`formcast.index.compiled` when it loads one.
"""

from __future__ import annotations

from ...errors import UnsupportedFeatureError
from ...ir.marks import UniqueItemsMark
from ..cfg_program import CfgProgram
from .oneof import OneOfProgram
from .residue import ResidueProgram
from .unique.keys import DistinctKeysProgram
from .unique.strings import UniqueItemsProgram
from .unique.values import ValueUniqueProgram

__all__ = ["MARKED_PROGRAMS", "unique_items_program"]

#: the program classes :func:`unique_items_program` returns (each wraps ``.cfg``)
MARKED_PROGRAMS = (
    UniqueItemsProgram,
    ValueUniqueProgram,
    DistinctKeysProgram,
    ResidueProgram,
    OneOfProgram,
)


def unique_items_program(
    cfg: CfgProgram, marks: tuple[UniqueItemsMark, ...]
) -> UniqueItemsProgram | ValueUniqueProgram | DistinctKeysProgram | ResidueProgram | OneOfProgram:
    """The program of a grammar whose IR carries marks: ``cfg`` wrapped in the run-time
    check -- :class:`DistinctKeysProgram` for ``kind="keys"`` marks (``minProperties`` over
    distinct keys), else :class:`ValueUniqueProgram` when some mark's items are of any type
    (``kind="value"``), else the exact string program :class:`UniqueItemsProgram`.  Built by
    the compiler (and when a serialized grammar is loaded), once per compiled grammar, and
    shared by its matchers.  Cost: the per-vocabulary lexical tables on the first call in a
    process (about 0.3 s for 50k tokens), then O(marks).

    Raises UnsupportedFeatureError (``minProperties``) for a grammar that needs both the
    distinct-keys count and a run-time ``uniqueItems`` check: one program runs per grammar
    (``multipleOf``, likewise, for ``kind="residue"`` marks beside others:
    :class:`ResidueProgram` runs alone; so does :class:`OneOfProgram` for ``kind="oneof"``)."""
    oneof = [m for m in marks if m.kind == "oneof"]
    if oneof:  # (run-time exactly-one oneOf, programs/oneof.py)
        if len(oneof) != len(marks):
            raise UnsupportedFeatureError(
                "oneOf",
                oneof[0].pointer,
                "a oneOf told apart at run time cannot share a schema with another run-time "
                "check (uniqueItems, minProperties over undeclared keys, a large multipleOf)",
            )
        return OneOfProgram(cfg, tuple(marks))
    residue = [m for m in marks if m.kind == "residue"]
    if residue:
        if len(residue) != len(marks):
            raise UnsupportedFeatureError(
                "multipleOf",
                residue[0].pointer,
                "an integer whose large multipleOf is checked at run time cannot share a "
                "schema with uniqueItems or minProperties checked at run time",
            )
        return ResidueProgram(cfg, tuple(marks))
    keys = [m for m in marks if m.kind == "keys"]
    if keys:
        if len(keys) != len(marks):
            raise UnsupportedFeatureError(
                "minProperties",
                keys[0].pointer,
                "an object whose minProperties counts distinct undeclared keys at run time "
                "cannot share a schema with uniqueItems checked at run time: drop one of them, "
                "or declare the properties minProperties counts",
            )
        return DistinctKeysProgram(cfg, tuple(marks))
    if any(m.kind == "value" for m in marks):
        return ValueUniqueProgram(cfg, tuple(marks))
    return UniqueItemsProgram(cfg, tuple(marks))
