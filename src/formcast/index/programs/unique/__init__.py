"""Run-time ``uniqueItems``: the programs a matcher runs when a grammar carries marks.

* :mod:`.lexer` -- JSON's lexical modes of tokens, per-vocabulary tables, string decoding;
* :mod:`.strings` -- :class:`UniqueItemsProgram`, the exact program for string items;
* :mod:`.values` -- :class:`ValueUniqueProgram`, the general program for items of any type;
* :mod:`.keys` -- :class:`DistinctKeysProgram`, ``minProperties`` over distinct keys.

Which program wraps a grammar is decided by
:func:`formcast.index.programs.dispatch.unique_items_program`.
"""

from __future__ import annotations

from .keys import DistinctKeysProgram
from .strings import UniqueItemsProgram
from .values import ValueUniqueProgram

__all__ = ["DistinctKeysProgram", "UniqueItemsProgram", "ValueUniqueProgram"]
