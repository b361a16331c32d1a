"""Think, then constrain: :class:`ReasoningProgram` and :func:`reasoning_grammar`.

A reasoning model writes its thinking, then an end-of-thinking marker (``</think>``), then the
answer.  Only the answer is constrained: the thinking is any text in which the marker does not
occur, the marker's first occurrence ends it, and from there on the inner grammar (a schema, a
regex, a structural tag...) applies.  Optional budgets bound the thinking in tokens and/or
bytes (the marker not counted); once a budget is spent, only the rest of the marker may follow.

The program wraps the inner grammar's program; a state is ``("think", tail, tokens, text)``
during the thinking (``tail``: how much of the marker the text ends with, a KMP state;
``tokens``: thinking tokens accepted; ``text``: thinking bytes, the pending tail excluded) or
``("answer", inner_state)`` after it.  Because the counts are *in the state*, a matcher's
``rollback``, ``fork`` and ``validate_tokens`` keep them exact with no bookkeeping of their own.

Masks during the thinking need no vocabulary walk: every text token is allowed except the few
that complete the marker and continue with bytes the inner grammar refuses.  Those *marker
candidates* (tokens holding the marker's first byte, or continuing a partial marker) are found
once per (vocabulary, marker) and simulated exactly per tail state; the mask of a tail state is
cached, so a thinking step costs a dict lookup (a budget close to its end adds one vectorized
length comparison).

Lifetime: per (inner grammar, marker, budgets); built in O(1), filled lazily, thread-safe.
A reasoning grammar is not serializable (``serialize`` raises
:class:`~formcast.errors.SerializationError`): serialize its inner grammar instead.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..bitmask import bool_to_bitmask
from ..cache import LruCache
from ..errors import ConfigurationError
from ..vocab.vocabulary import Vocabulary
from .compiled import CompiledGrammar
from .context import ContextSlot
from .program import GrammarProgram, LimitStop, mask_weight

__all__ = ["ReasoningProgram", "reasoning_grammar"]

_THINK = "think"
_ANSWER = "answer"


def _failure(marker: bytes) -> list[int]:
    """KMP failure function of ``marker``."""
    fail = [0] * len(marker)
    k = 0
    for i in range(1, len(marker)):
        while k and marker[i] != marker[k]:
            k = fail[k - 1]
        if marker[i] == marker[k]:
            k += 1
        fail[i] = k
    return fail


@dataclass(frozen=True)
class _VocabFacts:
    """What every reasoning grammar of one (vocabulary, marker) shares."""

    text: np.ndarray  # bool[vocab_size]: text tokens (not special, not stop, non-empty)
    lengths: np.ndarray  # int64[vocab_size]: byte length of each token (0 for non-text)
    candidates: np.ndarray  # int64 ids of the tokens that may touch the marker
    candidate_set: frozenset[int]
    max_len: int


def _vocab_facts(vocab: Vocabulary, marker: bytes) -> _VocabFacts:
    return REASONING_FACTS.of(vocab, marker)


def _build_facts(vocab: Vocabulary, marker: bytes) -> _VocabFacts:
    """The :class:`_VocabFacts` of ``marker`` in ``vocab``.  O(V log V) once per pair."""
    tokens = vocab.tokens
    n = vocab.vocab_size
    text = np.zeros(n, dtype=bool)
    lengths = np.zeros(n, dtype=np.int64)
    special = set(vocab.special_token_ids) | set(vocab.stop_token_ids)
    first = marker[:1]
    cand: set[int] = set()
    for i, t in enumerate(tokens):
        if t and i not in special:
            text[i] = True
            lengths[i] = len(t)
            if first in t:
                cand.add(i)
    # tokens without the marker's first byte touch it only by continuing a partial marker:
    # a prefix of marker[o:] or a token starting with marker[o:] (o >= 1); by binary search
    order = sorted((i for i in range(len(tokens)) if text[i]), key=tokens.__getitem__)
    keys = [tokens[i] for i in order]
    for o in range(1, len(marker)):
        suffix = marker[o:]
        for ln in range(1, len(suffix) + 1):
            piece = suffix[:ln]
            j = bisect.bisect_left(keys, piece)
            while j < len(keys) and keys[j] == piece:
                cand.add(order[j])
                j += 1
        j = bisect.bisect_left(keys, suffix)
        while j < len(keys) and keys[j].startswith(suffix):
            cand.add(order[j])
            j += 1
    facts = _VocabFacts(
        text=text,
        lengths=lengths,
        candidates=np.array(sorted(cand), dtype=np.int64),
        candidate_set=frozenset(cand),
        max_len=int(lengths.max()) if n else 0,
    )
    return facts


#: per vocabulary context, by marker (a few markers per vocabulary)
REASONING_FACTS: ContextSlot[bytes, _VocabFacts] = ContextSlot(
    "reasoning_facts", _build_facts, max_entries=8
)


class ReasoningProgram:
    """The program of "thinking, ``marker``, then ``inner``" (see the module docs)."""

    def __init__(
        self,
        inner: GrammarProgram,
        vocab: Vocabulary,
        marker: bytes,
        *,
        max_tokens: int | None = None,
        max_bytes: int | None = None,
        mask_cache_entries: int = 4096,
    ) -> None:
        self.inner = inner
        self.vocab = vocab
        self.marker = marker
        self.max_tokens = max_tokens
        self.max_bytes = max_bytes
        self._fail = _failure(marker)
        self._facts = _vocab_facts(vocab, marker)
        self._inner_start = inner.initial_state()
        # per tail state: {candidate id: (completed, tail or inner state, text growth)}
        self._rows: dict[int, dict[int, tuple[bool, Any, int]]] = {}
        self._rests: dict[bytes, Any] = {}
        self._masks: LruCache[tuple[int, int | None], np.ndarray] = LruCache(
            mask_cache_entries, weight=mask_weight
        )
        self._lock = threading.Lock()
        self._mask_computations = 0

    # -- the marker automaton ---------------------------------------------------------------
    def _scan(self, tail: int, data: bytes) -> tuple[bool, int, int]:
        """Feed ``data`` from KMP state ``tail``: ``(completed, k, new_tail)``; when the
        marker completes, ``k`` is the index in ``data`` right after it."""
        m, fail = self.marker, self._fail
        k = tail
        for i, b in enumerate(data):
            while k and m[k] != b:
                k = fail[k - 1]
            if m[k] == b:
                k += 1
            if k == len(m):
                return True, i + 1, 0
        return False, len(data), k

    def _after_marker(self, rest: bytes) -> Any:
        """The inner state after the bytes that follow the marker (None: refused)."""
        if not rest:
            return self._inner_start
        hit = self._rests.get(rest, _MISSING)
        if hit is _MISSING:
            hit = self.inner.advance_bytes(self._inner_start, rest)
            if isinstance(hit, LimitStop):
                hit = None
            self._rests[rest] = hit
        return hit

    def _step(self, tail: int, data: bytes) -> tuple[bool, Any, int] | None:
        """``(completed, new tail or inner state, text growth)``; None when refused."""
        done, k, new_tail = self._scan(tail, data)
        if not done:
            return False, new_tail, tail + len(data) - new_tail
        inner = self._after_marker(data[k:])
        if inner is None:
            return None
        return True, inner, tail + k - len(self.marker)

    def _row(self, tail: int) -> dict[int, tuple[bool, Any, int]]:
        row = self._rows.get(tail)
        if row is None:
            tokens = self.vocab.tokens
            row = {}
            for i in self._facts.candidates.tolist():
                got = self._step(tail, tokens[i])
                if got is not None:
                    row[i] = got
            self._rows[tail] = row
        return row

    def _remaining(self, state: tuple[Any, ...]) -> int | None:
        """Text bytes the thinking may still grow by (None: unbounded)."""
        _, _, ntok, text = state
        caps = []
        if self.max_tokens is not None and ntok >= self.max_tokens:
            caps.append(0)
        if self.max_bytes is not None:
            caps.append(max(0, self.max_bytes - text))
        return min(caps) if caps else None

    # -- the program protocol ---------------------------------------------------------------
    def initial_state(self) -> Any:
        return (_THINK, 0, 0, 0)

    def advance(self, state: Any, token_id: int) -> Any:
        if state[0] == _ANSWER:
            nxt = self.inner.advance(state[1], token_id)
            if nxt is None or isinstance(nxt, LimitStop):
                return nxt
            return (_ANSWER, nxt)
        if not (0 <= token_id < len(self._facts.text)) or not self._facts.text[token_id]:
            return None
        tail, ntok = state[1], state[2]
        row = self._row(tail)
        if token_id in row:
            done, got, growth = row[token_id]
        elif token_id in self._facts.candidate_set:
            return None  # a candidate the inner grammar refuses after the marker
        else:
            done, got, growth = False, 0, tail + int(self._facts.lengths[token_id])
        left = self._remaining(state)
        if left is not None and growth > left:
            return None
        if done:
            return (_ANSWER, got)
        return (_THINK, got, ntok + 1, state[3] + growth)

    def advance_bytes(self, state: Any, data: bytes) -> Any:
        if state[0] == _ANSWER:
            nxt = self.inner.advance_bytes(state[1], data)
            return None if nxt is None or isinstance(nxt, LimitStop) else (_ANSWER, nxt)
        got = self._step(state[1], data)
        if got is None:
            return None
        done, nxt, growth = got
        left = self._remaining(state)
        if left is not None and growth > left:
            return None
        if done:
            return (_ANSWER, nxt)
        return (_THINK, nxt, state[2], state[3] + growth)

    def is_accepting(self, state: Any) -> bool:
        return state[0] == _ANSWER and self.inner.is_accepting(state[1])

    def token_mask(self, state: Any) -> np.ndarray:
        if state[0] == _ANSWER:
            return self.inner.token_mask(state[1])
        tail = state[1]
        left = self._remaining(state)
        if left is not None and left >= tail + self._facts.max_len:
            left = None  # every token fits: the unbounded mask
        key = (tail, left)
        found, mask = self._masks.get(key)
        if found and mask is not None:
            return mask
        facts = self._facts
        allowed = facts.text.copy()
        if left is not None:
            allowed &= facts.lengths + tail <= left
        allowed[facts.candidates] = False
        for i, (_, _, growth) in self._row(tail).items():
            if left is None or growth <= left:
                allowed[i] = True
        mask = bool_to_bitmask(allowed, self.vocab.vocab_size)
        with self._lock:
            self._mask_computations += 1
        self._masks.put(key, mask)
        return mask

    def expected(self, state: Any) -> tuple[str, tuple[int, ...]]:
        if state[0] == _ANSWER:
            return self.inner.expected(state[1])
        tail = state[1]
        rest = self.marker[tail:]
        if self._remaining(state) == 0:
            return f"the rest of the end-of-thinking marker {rest!r} (budget spent)", (rest[0],)
        return f"thinking text, or the end-of-thinking marker {self.marker!r}", tuple(range(256))

    def forced_bytes(self, state: Any) -> bytes:
        if state[0] == _ANSWER:
            return self.inner.forced_bytes(state[1])
        if self._remaining(state) == 0:
            return self.marker[state[1] :]
        return b""

    def cache_info(self) -> dict[str, int]:
        info = dict(self.inner.cache_info())
        info["reasoning_masks_cached"] = len(self._masks)
        info["reasoning_mask_computations"] = self._mask_computations
        info["reasoning_marker_candidates"] = int(self._facts.candidates.size)
        return info

    def nbytes(self) -> int:
        measure = getattr(self.inner, "nbytes", None)
        own = self._masks.total_weight + 64 * sum(len(r) for r in self._rows.values())
        return own + (int(measure()) if callable(measure) else 0)

    def warm_up(self, should_stop: Callable[[], bool]) -> int:
        """The first thinking mask, then the inner grammar's warm-up."""
        self.token_mask(self.initial_state())
        return 1 + self.inner.warm_up(should_stop)


_MISSING = object()
_GRAMMARS: weakref.WeakKeyDictionary[CompiledGrammar, dict[tuple[Any, ...], CompiledGrammar]] = (
    weakref.WeakKeyDictionary()
)
_GRAMMARS_LOCK = threading.Lock()


def _check_budget(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{name} must be an int >= 0 or None, got {value!r}")


def reasoning_grammar(
    inner: CompiledGrammar,
    vocab: Vocabulary,
    *,
    end_marker: str = "</think>",
    max_thinking_tokens: int | None = None,
    max_thinking_bytes: int | None = None,
) -> CompiledGrammar:
    """The compiled grammar "thinking, ``end_marker``, then ``inner``" (see the module docs);
    one per (inner, marker, budgets), kept as long as ``inner`` lives.

    Raises:
        ConfigurationError: ``inner`` is not a CompiledGrammar of ``vocab``, an empty marker,
            a budget that is not an int >= 0.
    """
    if not isinstance(inner, CompiledGrammar):
        raise ConfigurationError(
            f"compile_reasoning takes the CompiledGrammar of the answer, got "
            f"{type(inner).__name__}: compile the schema / regex / structural tag first"
        )
    if inner.vocab.fingerprint != vocab.fingerprint:
        raise ConfigurationError(
            "compile_reasoning: the answer's grammar was compiled for another vocabulary"
        )
    if not isinstance(end_marker, str) or not end_marker:
        raise ConfigurationError(
            f"end_marker must be a non-empty str such as '</think>', got {end_marker!r}"
        )
    _check_budget("max_thinking_tokens", max_thinking_tokens)
    _check_budget("max_thinking_bytes", max_thinking_bytes)
    key = (end_marker, max_thinking_tokens, max_thinking_bytes)
    with _GRAMMARS_LOCK:
        got = _GRAMMARS.get(inner, {}).get(key)
    if got is not None:
        return got
    marker = end_marker.encode("utf-8")
    program = ReasoningProgram(
        inner.program,
        inner.vocab,
        marker,
        max_tokens=max_thinking_tokens,
        max_bytes=max_thinking_bytes,
    )
    compiled = CompiledGrammar(
        kind="reasoning",
        source=f"{inner.kind}:{inner.fingerprint}",
        vocab=inner.vocab,
        program=program,
        options=f"marker={end_marker!r} tokens={max_thinking_tokens} bytes={max_thinking_bytes}",
        warnings=inner.warnings,
    )
    with _GRAMMARS_LOCK:
        per = _GRAMMARS.setdefault(inner, {})
        compiled = per.setdefault(key, compiled)
    return compiled
