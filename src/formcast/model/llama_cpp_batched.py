"""Several sequences on llama.cpp in one ``llama_decode`` per step: :class:`LlamaCppBatchedDecoder`.

::

    from formcast.model.llama_cpp import LlamaCppModel
    from formcast.model.llama_cpp_batched import LlamaCppBatchedDecoder

    model = LlamaCppModel("SmolLM2-135M-Instruct.Q4_1.gguf")
    decoder = LlamaCppBatchedDecoder(model, n_slots=8)     # the machine's cores by default
    rows = decoder.decode([(0, prompt_a), (3, [token_b])])  # (2, vocab_size) logits

How it drives llama.cpp (llama-cpp-python 0.3.36's low-level bindings): the decoder makes its
own context on the model that ``LlamaCppModel`` loaded (``llama_init_from_model`` with
``n_seq_max = n_slots`` and a KV cache of ``n_ctx_per_slot`` cells per sequence,
``kv_unified`` off: each sequence attends to its own cells only), so the model's weights are
shared with the single-sequence wrapper and its vocabulary check, chat template and tokenizer
are reused.  Slot ``s`` is llama.cpp sequence id ``s``.  A call fills one ``llama_batch``
(``llama_batch_init``): every fed token with its position in its own sequence and its
sequence id, the logits flag set on the last token of each feed only; ``llama_decode`` runs
the batch (split into several calls past ``n_batch`` tokens) and each feed's row is copied from
``llama_get_logits_ith``.  ``release(slot)`` removes the sequence's cells
(``llama_memory_seq_rm(mem, slot, -1, -1)``).

Numerics: a sequence's logits in a batch can differ from the same sequence decoded alone in the
last bits (llama.cpp's matrix kernels tile differently by batch size); greedy choices agree
unless two logits are that close.

Lifetime: one decoder per model wrapper, one thread at a time; it keeps the wrapper alive and
must be closed (``close()``, or at interpreter exit) before the wrapper's model is freed.
Memory: the KV cache, ``n_slots * n_ctx_per_slot`` cells (SmolLM2-135M: about 23 KB a cell
in f16, so 8 slots x 2048 cells = 0.4 GB).
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .._optional import require
from ..errors import ConfigurationError, FormcastError
from .batched import Feed, SlotDecoderBase, SlotTable, default_threads
from .llama_cpp import LlamaCppModel

__all__ = ["LlamaCppBatchedDecoder"]

_OPEN: weakref.WeakSet[LlamaCppBatchedDecoder] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # free the contexts before llama-cpp-python's own atexit/__del__ frees the models
    for decoder in list(_OPEN):
        decoder.close()


class LlamaCppBatchedDecoder(SlotDecoderBase[LlamaCppModel]):
    """A :class:`~formcast.model.batched.BatchedDecoder` on a loaded :class:`LlamaCppModel`.

    Args:
        model: the loaded wrapper (its vocabulary, chat template and tokenizer serve the
            batcher too; its own context is left alone).
        n_slots: sequences held at once (llama.cpp's ``n_seq_max``; at most
            ``llama_max_parallel_sequences()``).
        n_ctx_per_slot: KV cells per sequence, prompt + output (default: the model's
            ``n_ctx``).
        n_threads: CPU threads for decoding and prompts (default: the cores this process may
            use, :func:`~formcast.model.batched.default_threads`).  On a machine whose cores
            are busy with other work pass ``n_threads=1``: llama.cpp's threads wait for each
            other by spinning, and measured here with 8 helpers on 2 cores (load ~14) two
            threads did not finish what one thread did in 40 s within 5 minutes.
        n_batch: most tokens per ``llama_decode`` call (a larger call is split).

    Raises:
        ConfigurationError: a bad size, or llama.cpp refuses to make the context.
    """

    def __init__(
        self,
        model: LlamaCppModel,
        *,
        n_slots: int = 8,
        n_ctx_per_slot: int | None = None,
        n_threads: int | None = None,
        n_batch: int = 512,
    ) -> None:
        if not isinstance(model, LlamaCppModel):
            raise ConfigurationError(
                f"LlamaCppBatchedDecoder takes a LlamaCppModel, got {type(model).__name__}"
            )
        lc = require("llama_cpp")
        limit = int(lc.llama_max_parallel_sequences())
        if isinstance(n_slots, bool) or not isinstance(n_slots, int) or not 1 <= n_slots <= limit:
            raise ConfigurationError(
                f"LlamaCppBatchedDecoder: n_slots must be an int in 1 .. {limit} "
                f"(llama.cpp's most parallel sequences), got {n_slots!r}"
            )
        per_slot = model.max_context if n_ctx_per_slot is None else n_ctx_per_slot
        threads = default_threads() if n_threads is None else n_threads
        for label, value in (
            ("n_ctx_per_slot", per_slot),
            ("n_threads", threads),
            ("n_batch", n_batch),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"LlamaCppBatchedDecoder: {label} must be an int >= 1, got {value!r}"
                )
        self._lc = lc
        self._model = model
        params = lc.llama_context_params.from_buffer_copy(model.llm.context_params)
        params.n_ctx = n_slots * per_slot
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_slots
        params.n_threads = threads
        params.n_threads_batch = threads
        params.kv_unified = False
        params.embeddings = False
        self._ctx: Any = lc.llama_init_from_model(model.llm.model, params)
        if not self._ctx:
            raise ConfigurationError(
                f"llama.cpp could not make a context of {n_slots} x {per_slot} cells for "
                f"{model.name!r}: lower n_slots or n_ctx_per_slot"
            )
        self._mem = lc.llama_get_memory(self._ctx)
        self._batch: Any = lc.llama_batch_init(n_batch, 0, 1)
        self._n_batch = n_batch
        self._n_threads = threads
        self._n_vocab = int(model.llm.n_vocab())
        seq_ctx = int(lc.llama_n_ctx_seq(self._ctx))
        self._slots = SlotTable(n_slots, min(per_slot, seq_ctx), "LlamaCppBatchedDecoder")
        self._closed = False
        _OPEN.add(self)

    # -- properties --------------------------------------------------------------------------
    @property
    def n_threads(self) -> int:
        return self._n_threads

    def set_threads(self, n_threads: int) -> None:
        """Use ``n_threads`` CPU threads from the next call on (``llama_set_n_threads``)."""
        if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
            raise ConfigurationError(f"n_threads must be an int >= 1, got {n_threads!r}")
        self._check_open()
        self._lc.llama_set_n_threads(self._ctx, n_threads, n_threads)
        self._n_threads = n_threads

    # -- decoding ------------------------------------------------------------------------------
    def decode(self, feeds: Sequence[Feed]) -> npt.NDArray[np.floating]:
        """See :meth:`formcast.model.batched.BatchedDecoder.decode`.

        Raises:
            ConfigurationError: as the protocol says; also when llama.cpp finds no room in its
                KV cache (return code 1).
            FormcastError: llama.cpp failed otherwise; the sequences fed in this call are
                released (their cache may hold part of the call).
        """
        self._check_open()
        slots, tokens, starts = self._slots.check(feeds)
        out = np.empty((len(slots), self._n_vocab), dtype=np.float32)
        batch = self._batch
        n = 0
        wanted: list[tuple[int, int]] = []  # (batch index, output row) of this chunk
        try:
            for row, (slot, ids, start) in enumerate(zip(slots, tokens, starts)):
                last = len(ids) - 1
                for j, tok in enumerate(ids):
                    batch.token[n] = tok
                    batch.pos[n] = start + j
                    batch.n_seq_id[n] = 1
                    batch.seq_id[n][0] = slot
                    batch.logits[n] = j == last
                    if j == last:
                        wanted.append((n, row))
                    n += 1
                    if n == self._n_batch:
                        self._run(n, wanted, out)
                        n = 0
                        wanted = []
            if n:
                self._run(n, wanted, out)
        except FormcastError:
            raise
        except BaseException:  # pragma: no cover - e.g. KeyboardInterrupt mid-call
            for slot in slots:
                self.release(slot)
            raise
        self._slots.advance(slots, tokens)
        return out

    def _run(self, n: int, wanted: list[tuple[int, int]], out: npt.NDArray[np.float32]) -> None:
        """``llama_decode`` the first ``n`` batch entries; copy the wanted rows into ``out``."""
        batch = self._batch
        batch.n_tokens = n
        rc = int(self._lc.llama_decode(self._ctx, batch))
        if rc != 0:
            slots = sorted({int(batch.seq_id[i][0]) for i in range(n)})
            if rc == 1:
                raise ConfigurationError(
                    f"llama.cpp found no room in the KV cache for {n} tokens of slots {slots} "
                    "(llama_decode returned 1): release finished slots, or make the decoder "
                    "with a larger n_ctx_per_slot"
                )
            for slot in slots:  # fail closed: the cache may hold part of this call
                self.release(slot)
            raise FormcastError(
                f"llama_decode failed with code {rc} on {n} tokens of slots {slots}; those "
                "slots were released (start their sequences again)"
            )
        for index, row in wanted:
            ptr = self._lc.llama_get_logits_ith(self._ctx, index)
            if not ptr:  # pragma: no cover - llama.cpp returns NULL for an index without logits
                raise FormcastError(f"internal error: no logits for batch entry {index}")
            out[row] = np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """See :class:`~formcast.model.batched.SupportsCopyPrefix`: ``llama_memory_seq_cp``
        of the whole sequence (its cells are copied into ``dst``'s own stream at the next
        ``llama_decode``), then ``llama_memory_seq_rm`` of ``dst``'s positions from ``n``."""
        self._check_open()
        s, d = self._slots.check_copy(src, dst, n)
        if self._model._recurrent:
            raise ConfigurationError(
                f"{self.name!r} is a recurrent model: its state cannot be cut to a prefix"
            )
        lc = self._lc
        lc.llama_memory_seq_rm(self._mem, d, -1, -1)
        lc.llama_memory_seq_cp(self._mem, s, d, -1, -1)
        if not lc.llama_memory_seq_rm(self._mem, d, n, -1):  # pragma: no cover - not recurrent
            lc.llama_memory_seq_rm(self._mem, d, -1, -1)
            raise ConfigurationError(f"llama.cpp could not cut slot {d} to {n} tokens")
        self._slots.lengths[d] = n

    def truncate(self, slot: int, n: int) -> None:
        """Keep the first ``n`` tokens of the sequence in ``slot`` and forget the rest
        (``llama_memory_seq_rm`` from position ``n``): feeding the slot then continues after
        them.  The batcher's prompt cache reuses a finished request's slot this way.  Cost:
        O(cells removed).

        Raises:
            ConfigurationError: ``n`` is not in ``1 .. length(slot)``, or a recurrent model
                (its state cannot be cut): nothing changed, release the slot instead."""
        self._check_open()
        s = self._slots.slot(slot)
        held = self._slots.lengths[s]
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= held:
            raise ConfigurationError(
                f"{self.name!r}: cannot keep {n!r} tokens of slot {s} (it holds {held})"
            )
        if self._model._recurrent:
            raise ConfigurationError(
                f"{self.name!r} is a recurrent model: its state cannot be cut to a prefix"
            )
        if n < held and not self._lc.llama_memory_seq_rm(self._mem, s, n, -1):
            raise ConfigurationError(  # pragma: no cover - not recurrent
                f"llama.cpp could not cut slot {s} to {n} tokens"
            )
        self._slots.lengths[s] = n

    def release(self, slot: int) -> None:
        s = self._slots.release(slot)
        if not self._closed:
            self._lc.llama_memory_seq_rm(self._mem, s, -1, -1)

    def reset(self) -> None:
        for s in range(self.n_slots):
            self._slots.release(s)
        if not self._closed:
            self._lc.llama_memory_clear(self._mem, True)

    def close(self) -> None:
        """Free the context and the batch now (the decoder is unusable afterwards)."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        self._lc.llama_batch_free(self._batch)
        self._lc.llama_free(self._ctx)
        self._ctx = None

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("this LlamaCppBatchedDecoder is closed: make a new one")

    def __repr__(self) -> str:
        return (
            f"LlamaCppBatchedDecoder(name={self.name!r}, n_slots={self.n_slots}, "
            f"n_ctx_per_slot={self.max_context}, n_threads={self._n_threads})"
        )
