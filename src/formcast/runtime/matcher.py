"""``GrammarMatcher``: the per-request cursor over a compiled grammar.

Verbs follow the ecosystem: :meth:`~GrammarMatcher.accept_token`,
:meth:`~GrammarMatcher.accept_tokens`, :meth:`~GrammarMatcher.validate_tokens` (speculative
decoding), :meth:`~GrammarMatcher.fill_next_token_bitmask` (does not change state),
:meth:`~GrammarMatcher.rollback`, :meth:`~GrammarMatcher.fork`, :meth:`~GrammarMatcher.reset`,
:meth:`~GrammarMatcher.is_accepting`, :meth:`~GrammarMatcher.is_terminated`.

Lifetime: per request; cheap to create (no compilation).  Not thread-safe: one matcher per
sequence (many matchers, in many threads, may share one compiled grammar).  Nothing here raises
on model output: a rejected token -- not allowed, out of range, negative, or not an integer at
all (``True``, ``1.0``, ``None``) -- returns ``False`` and leaves the state unchanged; an empty
allowed set is reported by :meth:`~GrammarMatcher.diagnose`.  Caller mistakes (a bitmask of the
wrong shape or dtype, a bad row index, an impossible rollback) raise ``ConfigurationError``
before any state or memory is written.

Costs: ``accept_token`` O(token bytes) (memoized per state and token); ``fill_next_token_bitmask``
O(1) dict lookup plus a copy of ``ceil(V/32)`` words once the state has been seen, and one
vectorized vocabulary walk the first time any request reaches that state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..bitmask import bitmask_has, bitmask_to_bool, bitmask_words, writable_bitmask_row
from ..errors import ConfigurationError, DeadEndDiagnostic
from ..index.compiled import CompiledGrammar
from ..index.program import LimitStop

__all__ = ["GrammarMatcher"]

_STOP = object()  # history marker for an accepted stop token


def _token_index(token_id: object, vocab_size: int) -> int | None:
    """``token_id`` as an ``int`` in ``[0, vocab_size)``, or None for anything else (a bool,
    a float, None, a negative or too large id).  numpy integers are ids like ``int``."""
    if type(token_id) is int:  # the per-token common case (bool is a subclass, not this type)
        return token_id if 0 <= token_id < vocab_size else None
    if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
        return None
    value = int(token_id)
    return value if 0 <= value < vocab_size else None


class GrammarMatcher:
    """Tracks one generation against a :class:`CompiledGrammar`.

    Args:
        compiled: the grammar compiled for the model's vocabulary.
        max_rollback_tokens: how many tokens :meth:`rollback` can undo (``None``: unlimited;
            a bound keeps memory O(bound) on very long generations).
    """

    __slots__ = (
        "_chunks",
        "_dropped_head",
        "_dropped_tail",
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
        # the compiled grammar's program (a run-time uniqueItems check already wraps it when
        # the grammar has marks: the compiler built it from the IR)
        self._program = compiled.program
        self._max_rollback = max_rollback_tokens
        # one entry per undoable step (deques: forgetting the oldest step is O(1))
        self._history: deque[Any] = deque([self._program.initial_state()])
        self._tokens: deque[int] = deque()
        self._chunks: deque[bytes] = deque()  # text of each step (b"" for a stop token)
        # text older than max_rollback_tokens: a joined head plus the chunks forgotten since it
        # was last joined (appending a chunk is O(1); the head is rebuilt only when the text is
        # read or the matcher forked, never per step)
        self._dropped_head = b""
        self._dropped_tail: list[bytes] = []
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
        """The ids that :meth:`rollback` can undo, oldest first (-1 for an accept_bytes step)."""
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

        A stop token is accepted only in an accepting state, and terminates the matcher.  An id
        that is not a token (negative, ``>= vocab_size``, a bool, a float, None) is refused
        like a disallowed token; numpy integers are accepted as ids.
        """
        if self._terminated or self._stop_reason is not None:
            return False
        vocab = self.compiled.vocab
        index = _token_index(token_id, vocab.vocab_size)
        if index is None:
            return False
        token_id = index
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
        """Forget history beyond ``max_rollback_tokens`` (its text is kept as a prefix).

        O(steps forgotten): each forgotten step leaves the deques from the left and its text is
        appended to ``_dropped_tail`` (no copy of the text accepted so far)."""
        limit = self._max_rollback
        if limit is None:
            return
        history, tokens, chunks = self._history, self._tokens, self._chunks
        tail = self._dropped_tail
        while len(tokens) > limit:
            history.popleft()
            tokens.popleft()
            chunk = chunks.popleft()
            if chunk:
                tail.append(chunk)

    def _dropped_text(self) -> bytes:
        """The forgotten text as one ``bytes`` (joins the chunks forgotten since last time)."""
        if self._dropped_tail:
            self._dropped_head = b"".join([self._dropped_head, *self._dropped_tail])
            self._dropped_tail = []
        return self._dropped_head

    def _undo(self, num_tokens: int) -> None:
        """Pop the last ``num_tokens`` steps (``num_tokens`` already checked)."""
        for _ in range(num_tokens):
            self._history.pop()
            self._tokens.pop()
            self._chunks.pop()

    def accept_tokens(self, token_ids: Iterable[int]) -> bool:
        """Accept all tokens or none: on the first rejection the state is restored.

        All or nothing also when iterating ``token_ids`` raises: the tokens accepted so far are
        undone and the exception propagates.  One token (a decoding step without drafts) costs
        one :meth:`accept_token`."""
        if type(token_ids) is list and len(token_ids) == 1:  # the per-step common case
            stop_reason = self._stop_reason
            if self.accept_token(token_ids[0]):
                return True
            self._stop_reason = stop_reason  # a refusal by a run-time limit: state unchanged
            return False
        flags = self._terminated, self._stop_reason
        limit, self._max_rollback = self._max_rollback, None  # keep every step undoable
        done = 0
        ok = False
        try:
            for t in token_ids:
                if not self.accept_token(t):
                    return False
                done += 1
            ok = True
            return True
        finally:
            if not ok:
                self._undo(done)
                self._terminated, self._stop_reason = flags
            self._max_rollback = limit
            self._trim()

    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        """Length of the longest prefix of ``token_ids`` that would be accepted (no state change).

        For speculative decoding: accept that many draft tokens, reject the rest.  The state is
        unchanged also when iterating ``token_ids`` raises (the exception propagates).
        """
        flags = self._terminated, self._stop_reason
        limit, self._max_rollback = self._max_rollback, None  # keep every step undoable
        n = 0
        try:
            for t in token_ids:
                if not self.accept_token(t):
                    break
                n += 1
        finally:
            self._undo(n)
            self._terminated, self._stop_reason = flags
            self._max_rollback = limit
        return n

    def accept_bytes(self, data: bytes | str) -> bool:
        """Advance by raw text (e.g. forced bytes); counts as one step for :meth:`rollback`."""
        if isinstance(data, str):
            raw = data.encode("utf-8", "surrogatepass")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            raw = bytes(data)
        else:  # bytes(5) would be five NUL bytes, bytes([..]) a guess: refuse
            raise ConfigurationError(f"accept_bytes needs bytes or str, got {type(data).__name__}")
        if self._terminated or self._stop_reason is not None:
            return False
        nxt = self._program.advance_bytes(self._history[-1], raw)
        if nxt is None:
            return False
        if isinstance(nxt, LimitStop):
            self._stop_reason = nxt.reason
            return False
        self._push(nxt, -1, raw)
        return True

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens (a stop token included).  O(num_tokens).

        Raises ``ConfigurationError`` (state unchanged) unless ``0 <= num_tokens <=``
        :attr:`num_accepted_tokens` (with ``max_rollback_tokens``, older steps are gone)."""
        if (
            isinstance(num_tokens, bool)
            or not isinstance(num_tokens, (int, np.integer))
            or not 0 <= num_tokens <= len(self._tokens)
        ):
            raise ConfigurationError(
                f"cannot roll back {num_tokens!r} tokens: {len(self._tokens)} can be undone"
            )
        self._stop_reason = None
        if num_tokens == 0:
            return
        self._undo(int(num_tokens))
        self._terminated = False

    def reset(self) -> None:
        """Back to the initial state (a new request on the same grammar)."""
        self._history = deque([self._program.initial_state()])
        self._tokens = deque()
        self._chunks = deque()
        self._dropped_head = b""
        self._dropped_tail = []
        self._terminated = False
        self._stop_reason = None

    def fork(self) -> GrammarMatcher:
        """An independent copy at the same point (beam search, parallel sampling)."""
        twin = GrammarMatcher.__new__(GrammarMatcher)
        twin.compiled = self.compiled
        twin._program = self._program
        twin._max_rollback = self._max_rollback
        twin._history = self._history.copy()
        twin._tokens = self._tokens.copy()
        twin._chunks = self._chunks.copy()
        twin._dropped_head = self._dropped_text()  # shared, immutable
        twin._dropped_tail = []
        twin._terminated = self._terminated
        twin._stop_reason = self._stop_reason
        return twin

    # -- masks -----------------------------------------------------------------------------------
    def _words(self) -> np.ndarray:
        if self._terminated or self._stop_reason is not None:
            return np.zeros_like(self._program.token_mask(self._history[-1]))
        return self._program.token_mask(self._history[-1])

    def next_token_words(self) -> np.ndarray:
        """The allowed tokens of the current state as ``ceil(V/32)`` bitmask words (``int32``,
        the layout of :meth:`fill_next_token_bitmask`'s rows; all zeros once terminated or
        stopped by a limit).  Read-only and shared with the compiled grammar's cache: copy it,
        never write it.  O(1) once the state's mask is cached (a first visit computes it)."""
        return self._words()

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> bool:
        """Write the allowed tokens of the current state into row ``index`` of ``bitmask``.

        Does not change state.  Returns ``False`` when nothing at all is allowed (a dead end:
        see :meth:`diagnose`); the row is then all zeros.  ``bitmask`` must be ``int32``
        (``int32[words]`` with ``index`` 0, or ``int32[batch, words]``) with at least
        ``ceil(vocab_size / 32)`` words per row: a numpy array or a CPU ``torch.int32`` tensor
        (written through a numpy view of its memory, no copy).  Anything else (another dtype,
        a bad shape, a row index out of range or not an int, a CUDA tensor: fill a CPU one and
        copy it with ``non_blocking=True``) raises ``ConfigurationError`` before anything is
        written.  Words past the vocabulary's are zeroed.  For many matchers at once see
        :func:`formcast.runtime.batch.batch_fill_next_token_bitmask`.
        """
        n = bitmask_words(self.compiled.vocab.vocab_size)
        row = writable_bitmask_row(bitmask, index, n)
        words = self._words()
        row[:n] = words
        if row.shape[0] > n:
            row[n:] = 0
        return bool(np.count_nonzero(words))  # 3x faster than words.any() on 4k words

    def allowed_token_ids(self) -> np.ndarray:
        """Ids of the tokens allowed now (sorted).  O(V): for tests and debugging."""
        return np.flatnonzero(bitmask_to_bool(self._words(), self.compiled.vocab.vocab_size))

    def is_token_allowed(self, token_id: int) -> bool:
        """Whether ``token_id`` would be accepted now.  O(1) after the mask is cached.

        ``False`` for anything :meth:`accept_token` refuses without looking (not an integer id,
        negative, ``>= vocab_size``)."""
        index = _token_index(token_id, self.compiled.vocab.vocab_size)
        if index is None:
            return False
        token_id = index
        words = self._words()
        return bitmask_has(words, token_id)

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
        Returns an empty list when nothing is forced.  ``backoff`` must be an int ``>= 0``
        (``ConfigurationError``); ids the encoder returns that are not tokens end the list.
        """
        if isinstance(backoff, bool) or not isinstance(backoff, (int, np.integer)) or backoff < 0:
            raise ConfigurationError(f"backoff must be an int >= 0, got {backoff!r}")
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
        return b"".join([self._dropped_text(), *self._chunks])

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
