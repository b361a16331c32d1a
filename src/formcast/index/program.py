"""What a matcher needs from a compiled grammar: the :class:`GrammarProgram` protocol.

A *program* knows a grammar's states and computes, once per state, the bitmask of allowed
tokens: :class:`~formcast.index.regex_program.RegexProgram` for regular constraints,
:class:`~formcast.index.cfg_program.CfgProgram` for context-free ones.  :class:`LimitStop` is
what ``advance`` returns when a run-time limit, not the grammar, refused a step;

Lifetime: types only; a program (and its memo) lives as long as its compiled grammar.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..limits import CACHE_ENTRY_BYTES

__all__ = ["GrammarProgram", "LimitStop", "mask_weight"]


def mask_weight(mask: np.ndarray) -> int:
    """The bytes a cached mask counts for in a program's mask cache (its words plus the entry);
    a named function, not a lambda, so that a serialized grammar can name it."""
    return int(mask.nbytes) + CACHE_ENTRY_BYTES


@dataclass(frozen=True)
class LimitStop:
    """Returned by a program's ``advance`` when a run-time limit (not the grammar) refused the
    step: the matcher then stops with this reason instead of treating the token as invalid."""

    reason: str


class GrammarProgram(Protocol):
    """What a matcher needs from a compiled grammar.  States are immutable and hashable."""

    def initial_state(self) -> Any: ...

    def advance(self, state: Any, token_id: int) -> Any | None:
        """State after the text token ``token_id``; None if the grammar does not allow it;
        a :class:`LimitStop` if a run-time limit refused it."""
        ...

    def advance_bytes(self, state: Any, data: bytes) -> Any | None:
        """State after raw bytes, or None if they leave the language."""
        ...

    def is_accepting(self, state: Any) -> bool: ...

    def token_mask(self, state: Any) -> np.ndarray:
        """``int32`` words: allowed tokens in ``state``, stop tokens included when accepting."""
        ...

    def expected(self, state: Any) -> tuple[str, tuple[int, ...]]:
        """Human description and byte values of what may come next."""
        ...

    def forced_bytes(self, state: Any) -> bytes:
        """Bytes every continuation must start with (jump-forward); may be empty."""
        ...

    def cache_info(self) -> dict[str, int]: ...

    def warm_up(self, should_stop: Callable[[], bool]) -> int:
        """Precompute per-state token classifications, nearest states first, until
        ``should_stop()``; returns how many were computed.  Thread-safe."""
        ...
