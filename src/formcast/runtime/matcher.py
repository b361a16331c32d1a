"""``GrammarMatcher``: the per-request cursor over a compiled grammar.

Verbs follow the ecosystem: :meth:`~GrammarMatcher.accept_token`,
:meth:`~GrammarMatcher.accept_tokens`, :meth:`~GrammarMatcher.validate_tokens` (speculative
decoding), :meth:`~GrammarMatcher.fill_next_token_bitmask` (does not change state),
:meth:`~GrammarMatcher.rollback`, :meth:`~GrammarMatcher.fork`, :meth:`~GrammarMatcher.reset`,
:meth:`~GrammarMatcher.is_accepting`, :meth:`~GrammarMatcher.is_terminated`.

Lifetime: per request; cheap to create (no compilation).  Not thread-safe: one matcher per
sequence.  Nothing here raises on model output: a rejected token returns ``False`` and leaves the
state unchanged; an empty allowed set is reported by :meth:`~GrammarMatcher.diagnose`.

Costs: ``accept_token`` O(token bytes) (memoized per state and token); ``fill_next_token_bitmask``
O(1) dict lookup plus a copy of ``ceil(V/32)`` words once the state has been seen, and one
vectorized vocabulary walk the first time any request reaches that state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigurationError, DeadEndDiagnostic
from ..index.bitmask import bitmask_to_bool
from ..index.compiled import CompiledGrammar, LimitStop

__all__ = ["GrammarMatcher"]

_STOP = object()  # history marker for an accepted stop token


class GrammarMatcher:
    """Tracks one generation against a :class:`CompiledGrammar`.

    Args:
        compiled: the grammar compiled for the model's vocabulary.
        max_rollback_tokens: how many tokens :meth:`rollback` can undo (``None``: unlimited;
            a bound keeps memory O(bound) on very long generations).
    """

    __slots__ = (
        "_chunks",
        "_dropped_prefix",
        "_history",
        "_max_rollback",
        "_program",
        "_stop_reason",
        "_terminated",
        "_tokens",
        "compiled",
    )

    def __init__(
        self, compiled: CompiledGrammar, *, max_rollback_tokens: int | None = None
    ) -> None:
        if not isinstance(compiled, CompiledGrammar):
            raise ConfigurationError(
                f"GrammarMatcher needs a CompiledGrammar, got {type(compiled).__name__}"
            )
        if max_rollback_tokens is not None and max_rollback_tokens < 0:
            raise ConfigurationError("max_rollback_tokens must be >= 0 or None")
        self.compiled = compiled
        self._program = compiled.program
        self._max_rollback = max_rollback_tokens
        self._history: list[Any] = [self._program.initial_state()]
        self._tokens: list[int] = []
        self._chunks: list[bytes] = []  # text of each step (b"" for a stop token)
        self._dropped_prefix = b""  # text older than max_rollback_tokens
        self._terminated = False
        self._stop_reason: str | None = None  # set when a run-time limit stopped the parser

    # -- state queries ---------------------------------------------------------------------------
    @property
    def state(self) -> Any:
        """The current grammar state (opaque, hashable)."""
        return self._history[-1]

    @property
    def num_accepted_tokens(self) -> int:
        return len(self._tokens)

    @property
    def accepted_token_ids(self) -> list[int]:
        return list(self._tokens)

    def is_accepting(self) -> bool:
        """True when the output so far is a complete sentence of the language."""
        return self._terminated or self._program.is_accepting(self._history[-1])

    def is_terminated(self) -> bool:
        """True once a stop token has been accepted."""
        return self._terminated

    @property
    def stop_reason(self) -> str | None:
        """Why a run-time parser limit stopped this matcher (None while it runs).

        A stopped matcher allows no token; :meth:`diagnose` reports the limit, and
        :meth:`rollback` or :meth:`reset` resume it.
        """
        return self._stop_reason

    # -- advancing -------------------------------------------------------------------------------
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; ``False`` (state unchanged) if it is not allowed.

        A stop token is accepted only in an accepting state, and terminates the matcher.
        """
        if self._terminated or self._stop_reason is not None:
            return False
        vocab = self.compiled.vocab
        if not isinstance(token_id, (int, np.integer)) or not 0 <= token_id < vocab.vocab_size:
            return False
        token_id = int(token_id)
        if token_id in vocab.stop_token_ids:
            if not self._program.is_accepting(self._history[-1]):
                return False
            self._push(_STOP, token_id, b"")
            self._terminated = True
            return True
        nxt = self._program.advance(self._history[-1], token_id)
        if nxt is None:
            return False
        if isinstance(nxt, LimitStop):
            self._stop_reason = nxt.reason
            return False
        self._push(nxt, token_id, vocab.tokens[token_id])
        return True

    def _push(self, state: Any, token_id: int, text: bytes) -> None:
        if state is _STOP:
            state = self._history[-1]
        self._history.append(state)
        self._tokens.append(token_id)
        self._chunks.append(text)
        self._trim()

    def _trim(self) -> None:
        """Forget history beyond ``max_rollback_tokens`` (its text is kept as a prefix)."""
        limit = self._max_rollback
        if limit is not None and len(self._tokens) > limit:
            # keep the dropped text: fold it into a prefix chunk that cannot be rolled back
            drop = len(self._tokens) - limit
            self._dropped_prefix = self._dropped_prefix + b"".join(self._chunks[:drop])
            del self._history[:drop]
            del self._tokens[:drop]
            del self._chunks[:drop]

    def accept_tokens(self, token_ids: Iterable[int]) -> bool:
        """Accept all tokens or none: on the first rejection the state is restored."""
        limit, self._max_rollback = self._max_rollback, None  # keep every step undoable
        try:
            for done, t in enumerate(token_ids):
                if not self.accept_token(t):
                    self.rollback(done)
                    return False
            return True
        finally:
            self._max_rollback = limit
            self._trim()

    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        """Length of the longest prefix of ``token_ids`` that would be accepted (no state change).

        For speculative decoding: accept that many draft tokens, reject the rest.
        """
        limit, self._max_rollback = self._max_rollback, None  # keep every step undoable
        n = 0
        try:
            for t in token_ids:
                if not self.accept_token(t):
                    break
                n += 1
            self.rollback(n)
        finally:
            self._max_rollback = limit
        return n

    def accept_bytes(self, data: bytes | str) -> bool:
        """Advance by raw text (e.g. forced bytes); counts as one step for :meth:`rollback`."""
        if self._terminated or self._stop_reason is not None:
            return False
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        nxt = self._program.advance_bytes(self._history[-1], raw)
        if nxt is None:
            return False
        if isinstance(nxt, LimitStop):
            self._stop_reason = nxt.reason
            return False
        self._push(nxt, -1, raw)
        return True

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens (a stop token included)."""
        if num_tokens < 0 or num_tokens > len(self._tokens):
            raise ConfigurationError(
                f"cannot roll back {num_tokens} tokens: {len(self._tokens)} can be undone"
            )
        self._stop_reason = None
        if num_tokens == 0:
            return
        del self._history[-num_tokens:]
        del self._tokens[-num_tokens:]
        del self._chunks[-num_tokens:]
        self._terminated = False

    def reset(self) -> None:
        """Back to the initial state (a new request on the same grammar)."""
        self._history = [self._program.initial_state()]
        self._tokens = []
        self._chunks = []
        self._dropped_prefix = b""
        self._terminated = False
        self._stop_reason = None

    def fork(self) -> GrammarMatcher:
        """An independent copy at the same point (beam search, parallel sampling)."""
        twin = GrammarMatcher.__new__(GrammarMatcher)
        twin.compiled = self.compiled
        twin._program = self._program
        twin._max_rollback = self._max_rollback
        twin._history = list(self._history)
        twin._tokens = list(self._tokens)
        twin._chunks = list(self._chunks)
        twin._dropped_prefix = self._dropped_prefix
        twin._terminated = self._terminated
        twin._stop_reason = self._stop_reason
        return twin

    # -- masks -----------------------------------------------------------------------------------
    def _words(self) -> np.ndarray:
        if self._terminated or self._stop_reason is not None:
            return np.zeros_like(self._program.token_mask(self._history[-1]))
        return self._program.token_mask(self._history[-1])

    def fill_next_token_bitmask(self, bitmask: np.ndarray, index: int = 0) -> bool:
        """Write the allowed tokens of the current state into row ``index`` of ``bitmask``.

        Does not change state.  Returns ``False`` when nothing at all is allowed (a dead end:
        see :meth:`diagnose`); the row is then all zeros.
        """
        words = self._words()
        row = bitmask[index] if bitmask.ndim == 2 else bitmask
        n = words.shape[0]
        if row.shape[0] < n:
            raise ConfigurationError(
                f"bitmask has {row.shape[0]} words per row, the vocabulary needs {n}: "
                "allocate it with allocate_token_bitmask(batch, vocab.vocab_size)"
            )
        row[:n] = words
        if row.shape[0] > n:
            row[n:] = 0
        return bool(words.any())

    def allowed_token_ids(self) -> np.ndarray:
        """Ids of the tokens allowed now (sorted).  O(V): for tests and debugging."""
        return np.flatnonzero(bitmask_to_bool(self._words(), self.compiled.vocab.vocab_size))

    def is_token_allowed(self, token_id: int) -> bool:
        """Whether ``token_id`` would be accepted now.  O(1) after the mask is cached."""
        if not 0 <= token_id < self.compiled.vocab.vocab_size:
            return False
        words = self._words()
        return bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)

    def find_jump_forward_bytes(self) -> bytes:
        """Bytes the grammar forces next (may be empty): emit them without sampling."""
        if self._terminated or self._stop_reason is not None:
            return b""
        return self._program.forced_bytes(self._history[-1])

    def jump_forward_tokens(
        self, encode: Callable[[bytes], Sequence[int]], *, backoff: int = 1
    ) -> list[int]:
        """Tokens for the forced bytes, in the tokenizer's own (canonical) spelling.

        ``encode`` is the model tokenizer's encoding of raw bytes (no special tokens).  The
        forced text is encoded and the last ``backoff`` tokens are dropped: a final token could
        merge with text that follows, so it is left for the model to sample.  Tokens are
        returned only as far as the matcher accepts them (its state is not changed).
        Returns an empty list when nothing is forced.
        """
        forced = self.find_jump_forward_bytes()
        if not forced:
            return []
        ids = list(encode(forced))
        if backoff > 0:
            ids = ids[:-backoff] if len(ids) > backoff else []
        n = self.validate_tokens(ids)
        return ids[:n]

    def accepted_bytes(self) -> bytes:
        """All text accepted so far, forced bytes included (stop tokens contribute nothing)."""
        return self._dropped_prefix + b"".join(self._chunks)

    # -- diagnostics -----------------------------------------------------------------------------
    def diagnose(self) -> DeadEndDiagnostic | None:
        """``None`` if some token is allowed, else a structured explanation of the dead end."""
        words = self._words()
        if words.any():
            return None
        state = self._history[-1]
        vocab = self.compiled.vocab
        desc, nxt = self._program.expected(state)
        accepting = self._program.is_accepting(state)
        if self._stop_reason is not None:
            reason = (
                f"a run-time parser limit stopped the matcher: {self._stop_reason}; "
                "raise it in ParserLimits if the input is trusted"
            )
            desc = f"{desc} (stopped: {self._stop_reason})"
        elif self._terminated:
            reason = "the matcher is terminated (a stop token was accepted); reset() to reuse it"
        elif accepting and not nxt:
            reason = "the output is complete but no stop token is allowed"
        elif nxt:
            reason = (
                f"the grammar needs {desc} next, but no token of vocabulary {vocab.name!r} "
                "starts with bytes that continue the language"
            )
        else:
            reason = "the grammar accepts nothing from this state"
        return DeadEndDiagnostic(
            state=state,
            prefix=self.accepted_bytes(),
            expected=desc,
            expected_bytes=nxt,
            accepting=accepting,
            vocabulary_fingerprint=vocab.fingerprint,
            reason=reason,
            extra={"grammar_kind": self.compiled.kind, "grammar_source": self.compiled.source},
        )

    def __repr__(self) -> str:
        return (
            f"GrammarMatcher(kind={self.compiled.kind!r}, tokens={len(self._tokens)}, "
            f"accepting={self.is_accepting()}, terminated={self._terminated})"
        )
