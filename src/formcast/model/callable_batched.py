"""A :class:`~formcast.model.batched.BatchedDecoder` over a logits function:
:class:`CallableBatchedDecoder` (numpy only).

It batches the bookkeeping, not the arithmetic: ``decode`` calls the
:class:`~formcast.model.callable.CallableModel`'s ``f(token_ids)`` once per fed slot, on that
slot's whole sequence.  Its use is testing a batcher without a model library (the logits of a
slot depend on its own tokens only, exactly as for one sequence alone) and toy worlds.

Lifetime: one per wrapped model; one thread at a time.  Cost per ``decode``: one ``f`` call per
feed plus the copies of the sequences.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..errors import ConfigurationError
from .batched import Feed, SlotDecoderBase, SlotTable
from .callable import CallableModel

__all__ = ["CallableBatchedDecoder"]


class CallableBatchedDecoder(SlotDecoderBase[CallableModel]):
    """``n_slots`` sequences of a :class:`CallableModel` (see the module docstring).

    ``calls`` counts ``decode`` calls and ``batch_sizes`` records the feeds of each: what a
    test checks to see that a batcher made one call per step."""

    def __init__(self, model: CallableModel, *, n_slots: int = 8) -> None:
        if not isinstance(model, CallableModel):
            raise ConfigurationError(
                f"CallableBatchedDecoder takes a CallableModel, got {type(model).__name__}"
            )
        self._model = model
        self._slots = SlotTable(n_slots, model.max_context, "CallableBatchedDecoder")
        self._seqs: list[list[int]] = [[] for _ in range(n_slots)]
        self.calls = 0
        self.batch_sizes: list[int] = []
        self.fed: list[int] = []  # tokens fed per call
        self.copies = 0

    def sequence(self, slot: int) -> list[int]:
        """The token ids held in ``slot`` (a copy)."""
        return list(self._seqs[self._slots.slot(slot)])

    def decode(self, feeds: Sequence[Feed]) -> npt.NDArray[np.floating]:
        """One ``f`` call per feed; float64 rows (as :class:`CallableModel` gives)."""
        slots, tokens, _ = self._slots.check(feeds)
        width = self._model.vocab.vocab_size
        out = np.empty((len(slots), width), dtype=np.float64)
        for row, (slot, ids) in enumerate(zip(slots, tokens)):
            logits = np.asarray(self._model._fn(self._seqs[slot] + ids))
            if logits.shape != (width,):
                raise ConfigurationError(
                    f"the logits function returned shape {logits.shape}, expected ({width},)"
                )
            out[row] = logits
        for slot, ids in zip(slots, tokens):
            self._seqs[slot].extend(ids)
        self._slots.advance(slots, tokens)
        self.calls += 1
        self.batch_sizes.append(len(slots))
        self.fed.append(sum(len(ids) for ids in tokens))
        return out

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """See :class:`~formcast.model.batched.SupportsCopyPrefix` (no ``f`` call)."""
        s, d = self._slots.check_copy(src, dst, n)
        self._seqs[d] = self._seqs[s][:n]
        self._slots.lengths[d] = n
        self.copies += 1

    def truncate(self, slot: int, n: int) -> None:
        """Keep the first ``n`` tokens of ``slot``'s sequence (``1 .. length``; no ``f`` call)."""
        s = self._slots.slot(slot)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self._slots.lengths[s]:
            raise ConfigurationError(
                f"CallableBatchedDecoder: cannot keep {n!r} tokens of slot {s} "
                f"(it holds {self._slots.lengths[s]})"
            )
        del self._seqs[s][n:]
        self._slots.lengths[s] = n

    def release(self, slot: int) -> None:
        s = self._slots.release(slot)
        self._seqs[s] = []

    def reset(self) -> None:
        for s in range(self.n_slots):
            self.release(s)
