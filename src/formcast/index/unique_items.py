"""Run-time ``uniqueItems`` (kept import path): the programs now live in
:mod:`formcast.index.programs.unique` (lexer, string items, items of any type) and the
dispatcher in :mod:`formcast.index.programs.dispatch`; this module re-exports their public
names so ``from formcast.index.unique_items import ...`` keeps working."""

from __future__ import annotations

from .programs.dispatch import unique_items_program
from .programs.unique.strings import UniqueItemsProgram
from .programs.unique.values import ValueUniqueProgram

__all__ = ["UniqueItemsProgram", "ValueUniqueProgram", "unique_items_program"]
