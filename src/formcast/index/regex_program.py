"""The matcher program of a regular constraint: :class:`RegexProgram`.

A byte DFA whose states are the matcher's states.  The allowed set of a state is computed on
first visit by walking the whole vocabulary trie through the DFA (vectorized, pruned), then
cached per mask class (states equivalent for every string up to the longest token): a seen
state costs one dict lookup and a 4·ceil(V/32)-byte copy, independent of the vocabulary walk.

Lifetime: per (grammar, vocabulary).  Logically immutable; its caches fill lazily and are safe to
share between threads and requests (each entry is computed fully before it is published).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..automata.dfa import DEAD, ByteDFA, describe_bytes
from ..automata.equivalence import bounded_equivalence
from ..bitmask import ids_to_bitmask
from ..cache import LruCache, StepMemo
from ..limits import CACHE_ENTRY_BYTES, CacheLimits, WorkBudget
from ..vocab.vocabulary import Vocabulary
from .program import mask_weight

__all__ = ["RegexProgram"]


class RegexProgram:
    """Matcher program of a regular language given as a :class:`ByteDFA`.

    ``token_mask`` is O(live trie nodes) on the first visit of a state, O(1) lookups after.
    ``advance`` is O(token length), memoized per (state, token).
    """

    #: what a serialized grammar holds of it (formcast.index.persist)
    _persist_fields: ClassVar[tuple[str, ...]] = (
        "dfa", "vocab", "_lock", "_mask_class", "_mask_computations", "_masks", "_steps",
        "_stop_words",
    )  # fmt: skip

    def __init__(
        self,
        dfa: ByteDFA,
        vocab: Vocabulary,
        *,
        budget: WorkBudget | None = None,
        cache_limits: CacheLimits | None = None,
    ) -> None:
        self.dfa = dfa
        self.vocab = vocab
        limits = cache_limits or CacheLimits()
        # by mask class (see _mask_class), within CacheLimits.mask_cache_bytes
        self._masks: LruCache[int, np.ndarray] = LruCache(
            1 << 62,
            max_weight=limits.mask_cache_bytes,
            weight=mask_weight,
        )
        self._mask_class: np.ndarray | None = None
        self._steps: StepMemo[tuple[int, int], int] = StepMemo(
            limits.step_cache_bytes // CACHE_ENTRY_BYTES
        )
        self._lock = threading.Lock()
        self._stop_words = ids_to_bitmask(vocab.stop_token_ids, vocab.vocab_size)
        self._mask_computations = 0
        # part of compiling (charged to its fuel): cheap next to the first vocabulary walk
        self._classes(budget)

    def initial_state(self) -> int:
        return self.dfa.start

    def advance(self, state: int, token_id: int) -> int | None:
        key = (state, token_id)
        nxt = self._steps.get(key)
        if nxt is None:
            data = self.vocab.token_bytes(token_id)
            if not data:
                return None
            nxt = self.dfa.step(state, data)
            self._steps.remember(key, nxt)
        return nxt if nxt != DEAD else None

    def advance_bytes(self, state: int, data: bytes) -> int | None:
        nxt = self.dfa.step(state, data)
        return nxt if nxt != DEAD else None

    def is_accepting(self, state: int) -> bool:
        return bool(self.dfa.accepting[state])

    def _classes(self, budget: WorkBudget | None = None) -> np.ndarray:
        """Mask classes: states equivalent for every string up to the longest token."""
        if self._mask_class is None:
            labels = self.dfa.accepting.astype(np.int64)
            labels[DEAD] = 2
            depth = max(self.vocab.trie.max_len, 1)
            self._mask_class = bounded_equivalence(
                self.dfa.table, labels, depth, budget=40_000_000, work=budget
            )
        return self._mask_class

    def token_mask(self, state: int) -> np.ndarray:
        cls = int(self._classes()[state])
        _, mask = self._masks.get(cls)
        if mask is None:
            mask = self._compute_mask(state)
            self._masks.put(cls, mask)
        return mask

    def _compute_mask(self, state: int) -> np.ndarray:
        vocab = self.vocab
        trie = vocab.trie
        if state == DEAD:
            return np.zeros_like(self._stop_words)
        alive, _ = trie.walk_pairs(self.dfa.table, state)
        words = trie.token_words(alive, vocab.vocab_size)
        if self.dfa.accepting[state]:
            words |= self._stop_words
        words.setflags(write=False)
        self._mask_computations += 1
        return words

    def expected(self, state: int) -> tuple[str, tuple[int, ...]]:
        nb = self.dfa.next_bytes(state) if state != DEAD else np.zeros(0, dtype=np.int64)
        desc = describe_bytes(nb)
        if self.dfa.accepting[state]:
            desc += " or the end of output"
        return desc, tuple(int(b) for b in nb)

    def forced_bytes(self, state: int) -> bytes:
        out = bytearray()
        table = self.dfa.table
        seen = set()
        while state != DEAD and state not in seen and not self.dfa.accepting[state]:
            seen.add(state)
            nxt = np.flatnonzero(table[state] != DEAD)
            if nxt.size != 1:
                break
            b = int(nxt[0])
            out.append(b)
            state = int(table[state, b])
        return bytes(out)

    def cache_info(self) -> dict[str, int]:
        return {
            "dfa_states": self.dfa.num_states,
            "mask_classes": self.num_mask_classes,
            "masks_cached": len(self._masks),
            "mask_cache_bytes": self._masks.total_weight,
            "cache_bytes": self.cache_bytes(),
            "mask_computations": self._mask_computations,
            "steps_cached": len(self._steps),
        }

    def cache_bytes(self) -> int:
        """Bytes held by the run-time caches (masks, token steps), by formcast's accounting."""
        return self._masks.total_weight + len(self._steps) * CACHE_ENTRY_BYTES

    def nbytes(self) -> int:
        """Bytes of the program: the DFA's tables plus :meth:`cache_bytes`."""
        return self.dfa.table.nbytes + self.cache_bytes()

    def warm_up(self, should_stop: Callable[[], bool]) -> int:
        """Masks of the states nearest the start first (BFS), until ``should_stop()``."""
        done = 0
        seen = {self.dfa.start}
        queue = [self.dfa.start]
        table = self.dfa.table
        while queue and not should_stop():
            state = queue.pop(0)
            self.token_mask(state)
            done += 1
            for nxt in np.unique(table[state]).tolist():
                if nxt != DEAD and nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return done

    @property
    def num_mask_classes(self) -> int:
        return int(np.unique(self._classes()).size)
