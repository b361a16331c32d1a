"""Several sequences decoded together, one model call per step: :class:`BatchedDecoder`.

A continuous batcher (:mod:`formcast.generation.batching`) keeps up to ``n_slots`` requests
running on one model.  Every step it calls ``decode`` once with the tokens each slot needs
evaluated (a joining request's whole prompt, one sampled token, or several forced tokens) and
gets one row of next-token logits per slot back; a request that finishes gives its slot back
with ``release``::

    decoder = LlamaCppBatchedDecoder(LlamaCppModel(path), n_slots=8)
    rows = decoder.decode([(0, prompt_a), (1, prompt_b)])   # two sequences join
    rows = decoder.decode([(0, [tok_a]), (1, [tok_b])])      # one step for both
    decoder.release(0)                                       # request 0 leaves

A slot holds one sequence: the tokens fed to it since it was last released (or since the
decoder was made).  Feeding a free slot starts a sequence there; feeding a held one appends to
it.  The two wrappers: :class:`~formcast.model.llama_cpp_batched.LlamaCppBatchedDecoder`
(llama.cpp's batch API, one sequence id per slot, its own context on the loaded model) and
:class:`~formcast.model.transformers_batched.TransformersBatchedDecoder` (a padded batch and a
cache per slot).  :class:`SlotTable` is the bookkeeping both share (slot lengths and the
checks of a ``decode`` call).

Lifetime: a decoder per loaded model, used by one thread at a time (the batcher's); the slots'
sequences live until ``release``/``reset``.  Cost: ``decode`` is one model call (llama.cpp may
split a call holding more than ``n_batch`` tokens into several) plus a copy of the returned
rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..errors import ConfigurationError
from ..vocab.vocabulary import Vocabulary
from .protocol import LanguageModel

__all__ = [
    "BatchedDecoder",
    "Feed",
    "SlotDecoderBase",
    "SlotTable",
    "SupportsCopyPrefix",
    "default_threads",
]

Feed = tuple[int, Sequence[int]]
"""``(slot, token ids)``: the tokens to append to the sequence in ``slot``."""


def default_threads() -> int:
    """The cores this process may run on (``os.sched_getaffinity``, else ``os.cpu_count()``)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@runtime_checkable
class BatchedDecoder(Protocol):
    """Up to ``n_slots`` sequences of one model, advanced together (see the module docstring)."""

    @property
    def model(self) -> LanguageModel:
        """The single-sequence wrapper of the same model: its tokenizer, chat template and
        vocabulary serve the batched requests (its own sequence is left alone)."""
        ...

    @property
    def vocab(self) -> Vocabulary:
        """The model's exact byte vocabulary (the logits' width is ``vocab.vocab_size``)."""
        ...

    @property
    def name(self) -> str:
        """A label for messages and reports."""
        ...

    @property
    def n_slots(self) -> int:
        """How many sequences can be held at once (slots ``0 .. n_slots - 1``)."""
        ...

    @property
    def max_context(self) -> int | None:
        """Tokens one slot can hold (prompt + output), ``None`` if unbounded."""
        ...

    def length(self, slot: int) -> int:
        """Tokens the sequence in ``slot`` holds (0: the slot is free)."""
        ...

    def decode(self, feeds: Sequence[Feed]) -> npt.NDArray[np.floating]:
        """Append each feed's tokens to its slot's sequence, all in one model call.

        ``feeds``: ``(slot, token ids)`` pairs, each slot at most once, each token list
        non-empty.  Returns a new float array (``float32`` from the native models) of shape
        ``(len(feeds), vocab_size)`` owned by the caller: row ``i`` is the next-token
        logits after the last token of ``feeds[i]``.  Slots not named are untouched.

        Raises:
            ConfigurationError: a bad slot, an empty or repeated feed, or a sequence that
                would outgrow ``max_context`` (checked before the model runs; nothing
                changes).
        """
        ...

    def release(self, slot: int) -> None:
        """Forget the sequence in ``slot`` (its cache is freed); the slot becomes free."""
        ...

    def reset(self) -> None:
        """Release every slot."""
        ...


@runtime_checkable
class SupportsCopyPrefix(Protocol):
    """The optional prefix-sharing capability of a batched decoder (all of formcast's have it).

    ``copy_prefix(src, dst, n)``: the free slot ``dst`` starts with the first ``n`` tokens of
    the sequence in ``src`` without evaluating them again (their cache entries are copied);
    feed ``dst`` the rest.  Requests whose prompts share a long start (a system prompt, tool
    definitions) then pay for it once.  Cost: a copy of at most one slot's cache.

    Raises:
        ConfigurationError: ``dst`` is not free, ``n`` is not in ``1 .. length(src)``, or the
            model cannot share (a recurrent model): nothing changed, prefill instead.
    """

    def copy_prefix(self, src: int, dst: int, n: int) -> None: ...


class SlotTable:
    """The slots' lengths and the checks of a ``decode`` call, shared by the wrappers.

    ``check(feeds)`` validates a call and returns ``(slots, token lists, start positions)``
    without changing anything; ``advance`` records the tokens once the model has taken
    them.  Every method is O(number of feeds)."""

    __slots__ = ("lengths", "max_context", "n_slots", "owner")

    def __init__(self, n_slots: int, max_context: int | None, owner: str) -> None:
        if isinstance(n_slots, bool) or not isinstance(n_slots, int) or n_slots < 1:
            raise ConfigurationError(f"{owner}: n_slots must be an int >= 1, got {n_slots!r}")
        self.n_slots = n_slots
        self.max_context = max_context
        self.owner = owner
        self.lengths = [0] * n_slots

    def slot(self, slot: int) -> int:
        """``slot`` checked to be a valid slot number."""
        if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)):
            raise ConfigurationError(f"{self.owner}: a slot is an int, got {slot!r}")
        s = int(slot)
        if not 0 <= s < self.n_slots:
            raise ConfigurationError(
                f"{self.owner}: slot {s} is out of range: the decoder has slots 0 .. "
                f"{self.n_slots - 1} (n_slots={self.n_slots})"
            )
        return s

    def check(self, feeds: Sequence[Feed]) -> tuple[list[int], list[list[int]], list[int]]:
        """``(slots, tokens, start positions)`` of a valid call (see
        :meth:`BatchedDecoder.decode` for the rules)."""
        if not feeds:
            raise ConfigurationError(f"{self.owner}.decode: no feeds; give (slot, tokens) pairs")
        slots: list[int] = []
        tokens: list[list[int]] = []
        seen: set[int] = set()
        for feed in feeds:
            try:
                raw_slot, raw_ids = feed
            except (TypeError, ValueError):
                raise ConfigurationError(
                    f"{self.owner}.decode: a feed is a (slot, token ids) pair, got {feed!r}"
                ) from None
            s = self.slot(raw_slot)
            if s in seen:
                raise ConfigurationError(
                    f"{self.owner}.decode: slot {s} is fed twice in one call; give each slot "
                    "all its tokens in one feed"
                )
            seen.add(s)
            ids = [int(t) for t in raw_ids]
            if not ids:
                raise ConfigurationError(
                    f"{self.owner}.decode: the feed of slot {s} has no tokens (every feed "
                    "needs at least one, for its logits)"
                )
            if self.max_context is not None and self.lengths[s] + len(ids) > self.max_context:
                raise ConfigurationError(
                    f"{self.owner}: context full in slot {s}: {self.lengths[s]} + {len(ids)} "
                    f"tokens exceed the {self.max_context} a slot holds; release the slot, or "
                    "make the decoder with a larger context per slot"
                )
            slots.append(s)
            tokens.append(ids)
        return slots, tokens, [self.lengths[s] for s in slots]

    def advance(self, slots: Sequence[int], tokens: Sequence[Sequence[int]]) -> None:
        """Record that the model now holds ``tokens[i]`` after slot ``slots[i]``'s sequence."""
        for s, ids in zip(slots, tokens):
            self.lengths[s] += len(ids)

    def check_copy(self, src: int, dst: int, n: int) -> tuple[int, int]:
        """``(src, dst)`` checked for :meth:`SupportsCopyPrefix.copy_prefix` (nothing changes)."""
        s, d = self.slot(src), self.slot(dst)
        if self.lengths[d]:
            raise ConfigurationError(
                f"{self.owner}.copy_prefix: slot {d} holds {self.lengths[d]} tokens; release it "
                "first (a prefix is copied into a free slot)"
            )
        if s == d or isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.lengths[s]:
            raise ConfigurationError(
                f"{self.owner}.copy_prefix: cannot copy {n!r} tokens of slot {s} (it holds "
                f"{self.lengths[s]}) into slot {d}"
            )
        return s, d

    def release(self, slot: int) -> int:
        """Mark ``slot`` free; returns the checked slot number."""
        s = self.slot(slot)
        self.lengths[s] = 0
        return s


ModelT = TypeVar("ModelT", bound=LanguageModel)


class SlotDecoderBase(Generic[ModelT]):
    """What every decoder over one single-sequence model and a :class:`SlotTable` answers the
    same way: the model, its vocabulary and name, the slots, and each slot's length.
    Subclasses set ``_model`` and ``_slots`` in their constructor."""

    _model: ModelT
    _slots: SlotTable

    @property
    def model(self) -> ModelT:
        """The single-sequence wrapper this decoder shares the weights of."""
        return self._model

    @property
    def vocab(self) -> Vocabulary:
        return self._model.vocab

    @property
    def name(self) -> str:
        return self._model.name

    @property
    def n_slots(self) -> int:
        return self._slots.n_slots

    @property
    def max_context(self) -> int | None:
        return self._slots.max_context

    def length(self, slot: int) -> int:
        return self._slots.lengths[self._slots.slot(slot)]
