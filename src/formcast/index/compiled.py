"""The compiled artifact: a grammar bound to a vocabulary, with its memoized token index.

:class:`CompiledGrammar` is what a :class:`~formcast.index.compiler.GrammarCompiler` returns.  It
holds a *program* — an object implementing :class:`GrammarProgram` — which knows the grammar's
states and computes, once per state, the bitmask of allowed tokens.

:class:`RegexProgram` is the program of a regular constraint: a byte DFA whose states are the
matcher's states.  The allowed set of a state is computed on first visit by walking the whole
vocabulary trie through the DFA (vectorized, pruned), then cached: a seen state costs one dict
lookup and a 4·ceil(V/32)-byte copy, independent of the vocabulary walk.

Lifetime: per (grammar, vocabulary).  Logically immutable; its caches fill lazily and are safe to
share between threads and requests (each entry is computed fully before it is published).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..automata.dfa import DEAD, ByteDFA, bounded_equivalence, describe_bytes
from ..bitmask import bool_to_bitmask
from ..cache import LruCache
from ..limits import CACHE_ENTRY_BYTES, CacheLimits, WorkBudget
from ..vocab.vocabulary import Vocabulary

__all__ = ["CompiledGrammar", "GrammarProgram", "LimitStop", "RegexProgram"]


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


class RegexProgram:
    """Matcher program of a regular language given as a :class:`ByteDFA`.

    ``token_mask`` is O(live trie nodes) on the first visit of a state, O(1) lookups after.
    ``advance`` is O(token length), memoized per (state, token).
    """

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
            weight=lambda m: m.nbytes + CACHE_ENTRY_BYTES,
        )
        self._mask_class: np.ndarray | None = None
        self._steps: dict[tuple[int, int], int] = {}
        self._max_steps = limits.step_cache_bytes // CACHE_ENTRY_BYTES
        self._lock = threading.Lock()
        self._stop_words = bool_to_bitmask(
            ids_to_bool(vocab.stop_token_ids, vocab.vocab_size), vocab.vocab_size
        )
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
            if len(self._steps) >= self._max_steps:
                self._steps.clear()
            if self._max_steps:
                self._steps[key] = nxt
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
        words = bool_to_bitmask(trie.token_mask_of(alive, vocab.vocab_size), vocab.vocab_size)
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

    def precompute(self, max_states: int | None = None) -> int:
        """Compute the masks of all (or the first ``max_states``) states now; returns count."""
        n = self.dfa.num_states
        limit = n if max_states is None else min(n, max_states)
        for s in range(1, limit + 1):
            self.token_mask(s)
        return limit

    @property
    def num_mask_classes(self) -> int:
        return int(np.unique(self._classes()).size)


def ids_to_bool(ids: frozenset[int], size: int) -> np.ndarray:
    out = np.zeros(size, dtype=bool)
    if ids:
        out[np.fromiter(ids, dtype=np.int64)] = True
    return out


@dataclass(frozen=True, eq=False)
class CompiledGrammar:
    """An immutable grammar compiled against one vocabulary.

    Attributes:
        kind: ``"regex"``, ``"grammar"``, ``"json_schema"``...
        source: the constraint as given (pattern text, grammar text, canonical schema JSON).
        vocab: the vocabulary it was compiled for.
        program: the state machine and token index (see :class:`GrammarProgram`).
        compile_seconds: wall time spent compiling.
        warnings: what a lenient compile ignored (empty when strict).
        compile_work: the fuel the compile used (units of ``CompileLimits.max_compile_work``):
            deterministic, the same on any machine and whatever was compiled before.
    """

    kind: str
    source: str
    vocab: Vocabulary
    program: GrammarProgram
    compile_seconds: float = 0.0
    warnings: tuple[str, ...] = ()
    options: str = ""
    compile_work: int = 0
    _fingerprint: list[str] = field(default_factory=list, repr=False)

    @property
    def vocab_size(self) -> int:
        return self.vocab.vocab_size

    @property
    def dfa(self) -> ByteDFA:
        """The byte DFA of a regular grammar (``AttributeError`` for context-free ones)."""
        dfa = getattr(self.program, "dfa", None)
        if dfa is None:
            raise AttributeError(f"a {self.kind} grammar has no single DFA")
        return dfa  # type: ignore[no-any-return]

    @property
    def fingerprint(self) -> str:
        """Hash of (kind, source, options, vocabulary fingerprint): the cache key."""
        if not self._fingerprint:
            self._fingerprint.append(grammar_key(self.kind, self.source, self.options, self.vocab))
        return self._fingerprint[0]

    def cache_info(self) -> dict[str, int]:
        return self.program.cache_info()

    def nbytes(self) -> int:
        """Bytes held by this grammar (its program's tables and caches), by formcast's own
        accounting; what the compiler's ``CacheLimits.grammar_cache_bytes`` counts."""
        measure = getattr(self.program, "nbytes", None)
        return int(measure()) if callable(measure) else 0

    def warm_up(self, max_seconds: float = 0.5, stop: threading.Event | None = None) -> int:
        """Precompute token classifications for up to ``max_seconds`` (or until ``stop`` is set).

        Masks are otherwise computed lazily on a state's first visit (milliseconds each); warming
        up moves that cost off the decoding path.  Safe to call from a background thread, e.g.
        while the model processes the prompt (``formcast.generate`` does).  Returns the number
        of states or positions prepared.
        """
        import time

        deadline = time.perf_counter() + max_seconds

        def should_stop() -> bool:
            return time.perf_counter() > deadline or (stop is not None and stop.is_set())

        return self.program.warm_up(should_stop)


def grammar_key(kind: str, source: str, options: str, vocab: Vocabulary) -> str:
    """Cache key of a compiled grammar: the constraint *and* the tokenizer fingerprint."""
    h = hashlib.sha256()
    for part in (kind, source, options, vocab.fingerprint):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()
