"""The program-protocol methods every run-time check program shares (:class:`CheckedProgram`).

A run-time program (``residue``, ``keys``, ``oneof``, the ``uniqueItems`` ones) is the grammar's
:class:`~formcast.index.cfg_program.CfgProgram` plus a check that re-reads some tokens byte by
byte (``_run``).  Its states are tuples whose first item is the grammar's
:class:`~formcast.automata.pda.ParserState`; what it adds to the state (a lexical mode, a
track of numbers or braces) and how it steps and masks are its own.  What is left is the same
in every one: reading bytes, acceptance, forced bytes checked by a run, statistics, warm-up and
size, all delegated to the grammar's program.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from ...automata.pda import ParserState
from ...vocab.vocabulary import Vocabulary
from ..cfg_program import CfgProgram
from ..program import LimitStop

__all__ = ["CheckedProgram"]

_S = TypeVar("_S", bound=tuple[Any, ...])


class CheckedProgram(Generic[_S]):
    """The protocol methods of a program that wraps ``cfg`` with a byte-by-byte check.

    Subclasses set ``cfg``, ``vocab`` and ``simulated`` (tokens checked byte by byte, a
    statistic reported under ``_stat`` by :meth:`cache_info`) and define ``_run(state, data)``
    (the state after ``data``, a :class:`LimitStop`, or None when refused).  States are tuples
    whose first item is the grammar's :class:`ParserState`.  Stateless itself: lifetime and
    thread-safety are the subclass's."""

    _stat: ClassVar[str]
    cfg: CfgProgram
    vocab: Vocabulary
    simulated: int

    def _run(self, state: _S, data: bytes) -> _S | LimitStop | None:
        raise NotImplementedError

    @staticmethod
    def _bit(words: np.ndarray, t: int) -> bool:
        """Whether bit ``t`` of the packed bitmask ``words`` is set."""
        return bool((int(words[t >> 5]) >> (t & 31)) & 1)

    def advance_bytes(self, state: _S, data: bytes) -> _S | LimitStop | None:
        if not data:
            return state
        return self._run(state, data)

    def is_accepting(self, state: _S) -> bool:
        ps: ParserState = state[0]
        return ps.accepting

    def forced_bytes(self, state: _S) -> bytes:
        """The grammar's forced bytes, unless the check refuses them (then none)."""
        forced = self.cfg.forced_bytes(state[0])
        if forced and not isinstance(self._run(state, forced), tuple):
            return b""  # (never expected: the check leaves another way on)
        return forced

    def cache_info(self) -> dict[str, int]:
        info = dict(self.cfg.cache_info())
        info[self._stat] = self.simulated
        return info

    def warm_up(self, should_stop: Any) -> int:
        return self.cfg.warm_up(should_stop)

    def nbytes(self) -> int:
        return self.cfg.nbytes()
