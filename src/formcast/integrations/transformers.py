"""Hugging Face transformers: :class:`FormcastLogitsProcessor` for your own ``model.generate()``.

Two ways in:

1. **Your own** ``model.generate()`` call, with formcast's mask as a logits processor::

       from transformers import LogitsProcessorList
       from formcast.index.spec import RegexSpec
       from formcast.integrations.transformers import FormcastLogitsProcessor

       proc = FormcastLogitsProcessor(compiler.compile(RegexSpec(r"\\d{4}-\\d{2}-\\d{2}")))
       out = model.generate(**inputs, logits_processor=LogitsProcessorList([proc]),
                            max_new_tokens=20, eos_token_id=vocab_eos_ids)

   transformers (5.x) runs custom processors *before* its temperature / top-k / top-p
   warpers, so truncation never removes every legal token.  Batches are supported (one matcher
   per row; each row may have its own grammar), and so is beam search: rows are tracked by
   position -- a row continues the row at its own position or, when a beam moved, a row of its
   own example (same grammar), never another example's row even with identical content.
   ``proc.finish_reasons(output)`` says which rows ended with a stop token (``"completed"``)
   and which ``max_new_tokens`` cut (``"max_tokens"``): transformers itself does not.  The
   processor resets itself when it sees a new sequence: ``input_ids`` did not grow by exactly
   one token, or a row does not continue a previous row (as above).  Call
   :meth:`FormcastLogitsProcessor.reset` between ``generate()`` calls to be explicit (needed
   only if a new prompt could be the previous output plus one token).

2. **formcast's loop** (:func:`formcast.generation.generate`) over a transformers model:
   :class:`TransformersModel` (``TransformersModel.from_gguf(path)`` loads a GGUF through
   ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=name, dtype=torch.float32)``; needs
   ``pip install torch==2.13.0 transformers accelerate``).

torch and transformers are imported when a processor is first called or a model is wrapped,
never when this module is imported.

Lifetime: a processor per ``generate()`` call site (it keeps one matcher per row); a model
wrapper per loaded model, one sequence at a time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..bitmask import allocate_token_bitmask, apply_token_bitmask_inplace, ids_to_bitmask
from ..errors import ConfigurationError, DeadEndError, FormcastError
from ..index.compiled import CompiledGrammar
from ..runtime.batch import batch_fill_next_token_bitmask
from ..runtime.matcher import GrammarMatcher

__all__ = ["FormcastLogitsProcessor"]


class FormcastLogitsProcessor:
    """A transformers ``LogitsProcessor``: disallowed tokens get ``-inf``.

    Args:
        compiled: one :class:`CompiledGrammar` for every row, or a sequence of them, one per
            batch example (with ``num_beams > 1`` or ``num_return_sequences > 1`` each
            example's rows are contiguous, as transformers lays them out).

    Behaviour per call ``(input_ids[B, L], scores[B, V]) -> scores``:

    * a new sequence (see the module docstring) starts fresh matchers, taking the current
      ``input_ids`` as the prompt;
    * otherwise the newest token of each row is accepted by the matcher of the row it extends:
      the previous row at the same position, else (beam search moved it) a row of the same
      example -- rows are tracked by position, never matched across examples by content;
    * a finished row (its matcher accepted a stop token) allows only stop tokens, so it can
      only repeat a stop token until transformers stops it: pass
      ``eos_token_id=sorted(vocab.stop_token_ids)`` to ``generate()`` so that every stop
      token of the vocabulary ends a row;
    * a row whose grammar allows nothing raises :class:`~formcast.errors.DeadEndError` with
      the diagnostic; a token the grammar did not allow (another processor changed the scores
      after formcast's) raises :class:`~formcast.errors.FormcastError` -- never a silent skip.

    Each call fills the whole batch with one
    :func:`~formcast.runtime.batch.batch_fill_next_token_bitmask` (rows in the same state share
    one mask copy) and masks the scores with one vectorized operation: no Python loop over
    rows for the mask.  CPU scores are masked in place through numpy (no copy); for CUDA scores
    the bitmask is a pinned CPU tensor copied with ``non_blocking=True``.  (The accepted
    tokens themselves are read on the host: one small device-to-host copy of ``input_ids``
    per step, as every grammar engine does.)

    ``mask_seconds`` collects the time of each call (matcher work and masking).
    """

    def __init__(self, compiled: CompiledGrammar | Sequence[CompiledGrammar]) -> None:
        grammars = [compiled] if isinstance(compiled, CompiledGrammar) else list(compiled)
        if not grammars or not all(isinstance(g, CompiledGrammar) for g in grammars):
            raise ConfigurationError(
                "FormcastLogitsProcessor needs a CompiledGrammar or a non-empty sequence of them"
            )
        sizes = {g.vocab.vocab_size for g in grammars}
        if len(sizes) != 1:
            raise ConfigurationError(
                f"the grammars were compiled for different vocabularies {sizes}"
            )
        self._grammars = grammars
        self.vocab_size = sizes.pop()
        self._stop_words = ids_to_bitmask(grammars[0].vocab.stop_token_ids, self.vocab_size)
        self.mask_seconds: list[float] = []
        self.reset()

    def reset(self) -> None:
        """Forget the current sequences; the next call starts fresh matchers."""
        self._matchers: list[GrammarMatcher] = []
        self._prev: np.ndarray | None = None
        self._prompt_len = 0
        self._bitmask: Any = None  # numpy array, or a pinned torch tensor for CUDA scores
        self._bitmask_on_device = False

    @property
    def matchers(self) -> list[GrammarMatcher]:
        """The matcher of each row (after the latest call)."""
        return list(self._matchers)

    @property
    def prompt_length(self) -> int:
        """Length of the prompt the current sequences started from."""
        return self._prompt_len

    def _grammar_index(self, row: int, rows: int) -> int:
        """Which grammar row ``row`` of a ``rows``-row batch uses (examples are contiguous)."""
        n = len(self._grammars)
        if n == 1:
            return 0
        if rows % n:
            raise ConfigurationError(
                f"{n} grammars for a batch of {rows} rows: give one grammar, or one per example "
                "(rows per example = num_beams * num_return_sequences)"
            )
        return row // (rows // n)

    def _grammar_for(self, row: int, rows: int) -> CompiledGrammar:
        return self._grammars[self._grammar_index(row, rows)]

    def _start(self, ids: np.ndarray) -> None:
        rows = ids.shape[0]
        self._matchers = [GrammarMatcher(self._grammar_for(b, rows)) for b in range(rows)]
        self._prompt_len = ids.shape[1]

    def _parents(self, ids: np.ndarray, prev: np.ndarray) -> list[int] | None:
        """The previous row each row of ``ids`` extends, or None if one extends none.

        Rows are tracked by *position*: a row extends the previous row at its own position
        when that row is its prefix; otherwise (beam search moved a beam) it extends a row of
        its own example, i.e. one with the same grammar -- never a row of another example,
        even with identical content (two identical prompts may have different grammars).
        Among equal candidates of one example any will do: the same grammar fed the same
        tokens is in the same state.
        """
        rows, prev_rows = ids.shape[0], prev.shape[0]
        if len(self._grammars) > 1 and rows != prev_rows:
            return None
        candidates: dict[tuple[int, bytes], int] = {}
        for r in range(prev_rows):
            candidates.setdefault((self._grammar_index(r, prev_rows), prev[r].tobytes()), r)
        chosen: list[int] = []
        for b in range(rows):
            prefix = ids[b, :-1]
            if b < prev_rows and np.array_equal(prev[b], prefix):
                chosen.append(b)
                continue
            parent = candidates.get((self._grammar_index(b, rows), prefix.tobytes()))
            if parent is None:
                return None
            chosen.append(parent)
        return chosen

    def _advance(self, ids: np.ndarray) -> bool:
        """Accept each row's newest token; False when ``ids`` is not a continuation."""
        prev = self._prev
        if prev is None or ids.shape[1] != prev.shape[1] + 1 or not self._matchers:
            return False
        chosen = self._parents(ids, prev)
        if chosen is None:
            return False
        used: dict[int, int] = {}
        for r in chosen:
            used[r] = used.get(r, 0) + 1
        new: list[GrammarMatcher] = []
        for b, r in enumerate(chosen):
            parent = self._matchers[r]
            used[r] -= 1
            m = parent if used[r] == 0 else parent.fork()
            if not m.is_terminated():
                tok = int(ids[b, -1])
                if not m.accept_token(tok):
                    raise FormcastError(
                        f"row {b}: token {tok} was not allowed by the grammar but was appended; "
                        "a logits processor after formcast's changed the scores, or the "
                        "sequence was edited (call reset() before reusing the processor)"
                    )
            new.append(m)
        self._matchers = new
        return True

    def finish_reasons(
        self, sequences: Any, *, prompt_length: int | None = None
    ) -> list[Literal["completed", "max_tokens"]]:
        """How each row of ``generate()``'s output ended: ``"completed"`` or ``"max_tokens"``.

        transformers stops a row at ``max_new_tokens`` without saying so, and the processor
        never sees the last token it appends; this replays each row of ``sequences`` (the
        output ids, ``[rows, length]``, prompt included; torch or numpy) through a fresh
        matcher of the row's grammar.  ``"completed"``: the row has a stop token that the
        grammar accepted (or it ends where the grammar allows only a stop token);
        ``"max_tokens"``: anything else -- the row's text is a truncated prefix and must not
        be used as a finished document.  Padding after the stop token is ignored.

        Args:
            sequences: ``generate()``'s output (``num_return_sequences`` rows per example are
                contiguous, as transformers returns them).
            prompt_length: where the generated tokens start (default: the prompt length the
                processor saw in its latest sequence).

        Raises:
            FormcastError: a row holds a token its grammar does not allow (it was not
                generated under this processor).
        """
        ids = _as_numpy(sequences)
        if ids.ndim != 2:
            raise ConfigurationError(f"sequences must be (rows, length), got {ids.shape}")
        start = self._prompt_len if prompt_length is None else int(prompt_length)
        if start <= 0 and prompt_length is None:
            raise ConfigurationError(
                "the processor has not run yet: pass prompt_length= (the prompt's token count)"
            )
        rows = ids.shape[0]
        out: list[Literal["completed", "max_tokens"]] = []
        stops = self._grammars[0].vocab.stop_token_ids
        for b in range(rows):
            m = GrammarMatcher(self._grammar_for(b, rows))
            for pos in range(start, ids.shape[1]):
                tok = int(ids[b, pos])
                if not m.accept_token(tok):
                    raise FormcastError(
                        f"row {b}: token {tok} at position {pos} is not allowed by the row's "
                        "grammar: these sequences were not generated under this processor"
                    )
                if m.is_terminated():
                    break
            if not m.is_terminated() and m.is_accepting():
                allowed = m.allowed_token_ids().tolist()
                if allowed and all(t in stops for t in allowed):  # nothing but a stop left
                    out.append("completed")
                    continue
            out.append("completed" if m.is_terminated() else "max_tokens")
        return out

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        t0 = time.perf_counter()
        ids = _as_numpy(input_ids)
        if ids.ndim != 2:
            raise ConfigurationError(f"input_ids must be (batch, length), got {ids.shape}")
        if not self._advance(ids):
            self._start(ids)
        self._prev = ids
        rows = ids.shape[0]
        words = self._bitmask_for(rows, scores)
        # one call fills every row: one mask lookup and one copy per distinct state
        filled = batch_fill_next_token_bitmask(self._matchers, words)
        if filled.terminated.any():  # finished: only stop tokens (transformers pads such rows)
            words[filled.terminated] = self._stop_words
        dead = filled.dead_ends()
        if dead:
            diagnostic = self._matchers[dead[0]].diagnose()
            if diagnostic is not None:
                raise DeadEndError(diagnostic)
        # one masking operation for the whole batch (a pinned CPU bitmask is copied to the
        # logits' device without blocking the host)
        apply_token_bitmask_inplace(scores, self._bitmask)
        self.mask_seconds.append(time.perf_counter() - t0)
        return scores

    def _bitmask_for(self, rows: int, scores: Any) -> np.ndarray:
        """The reused bitmask for ``rows`` rows (allocated when the batch size changes) as a
        numpy view: a numpy array for CPU scores, a pinned CPU torch tensor for CUDA scores.

        The pinned buffer is refilled only after the ids of the next step were read to the
        host (``_as_numpy(input_ids)``, a stream-ordered device-to-host copy), so the
        non-blocking host-to-device copy of the previous step has finished by then."""
        on_device = type(scores).__module__.startswith("torch") and scores.device.type != "cpu"
        current = self._bitmask
        if current is None or current.shape[0] != rows or self._bitmask_on_device != on_device:
            if on_device:
                current = allocate_token_bitmask(rows, self.vocab_size, framework="torch")
            else:
                current = allocate_token_bitmask(rows, self.vocab_size)
            self._bitmask = current
            self._bitmask_on_device = on_device
        return current.numpy() if on_device else current  # type: ignore[no-any-return]


def _as_numpy(ids: Any) -> np.ndarray:
    """Token ids (a torch tensor on any device, or an array-like) as contiguous int64."""
    if hasattr(ids, "detach"):
        ids = ids.detach().cpu().numpy()
    return np.ascontiguousarray(ids, dtype=np.int64)
