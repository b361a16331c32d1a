"""Several sequences of a transformers model in one forward pass per step:
:class:`TransformersBatchedDecoder`.

::

    from formcast.model.transformers import TransformersModel
    from formcast.model.transformers_batched import TransformersBatchedDecoder

    decoder = TransformersBatchedDecoder(TransformersModel(hf_model, tokenizer), n_slots=8)
    rows = decoder.decode([(0, prompt_a), (3, [token_b])])  # (2, vocab_size) logits

How: each slot keeps its own KV cache (per layer, keys and values of shape
``[1, heads, length, head_dim]``).  A ``decode`` call builds one padded batch: the fed slots'
caches left-padded with zeros to the longest (a ``DynamicCache``), the new tokens right-padded
to the longest feed, an attention mask that hides every pad column, explicit position ids
(each row continues its own sequence), and ``logits_to_keep`` naming each row's last real
token, so the vocabulary projection runs once per row.  After the forward pass each slot
appends its own new keys and values (the padding is dropped).  Every query sees at least one
real key (its own token), so no row is all masked.

Numerics: padded shapes change the order of floating-point sums; a row's logits match the
single-sequence wrapper to about 1e-5 in float32, and greedy choices agree unless two logits
are that close.  Supported: decoder-only models whose layers all use full attention (a sliding
window or a recurrent layer is refused when the decoder is made).

Lifetime: one decoder per model wrapper, one thread at a time.  Cost per call: the forward
pass plus copying the fed slots' caches into the padded batch and each slot's new entries out
(linear in the cached tokens, as attention itself is).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .._optional import require
from ..errors import ConfigurationError
from .batched import Feed, SlotDecoderBase, SlotTable
from .transformers import TransformersModel

__all__ = ["TransformersBatchedDecoder"]


class TransformersBatchedDecoder(SlotDecoderBase[TransformersModel]):
    """A :class:`~formcast.model.batched.BatchedDecoder` on a :class:`TransformersModel`.

    Args:
        model: the wrapper (its vocabulary, tokenizer and chat template serve the batcher; its
            own cache is left alone).
        n_slots: sequences held at once.
        max_context: tokens per slot (default: the model's ``max_position_embeddings``).
        n_threads: if given, ``torch.set_num_threads`` (process-wide; default: torch's own,
            the machine's cores).

    Raises:
        ConfigurationError: a bad size, or a model with sliding-window / non-attention layers.
    """

    def __init__(
        self,
        model: TransformersModel,
        *,
        n_slots: int = 8,
        max_context: int | None = None,
        n_threads: int | None = None,
    ) -> None:
        if not isinstance(model, TransformersModel):
            raise ConfigurationError(
                f"TransformersBatchedDecoder takes a TransformersModel, got {type(model).__name__}"
            )
        torch = require("torch")
        self._transformers = require("transformers")
        if n_threads is not None:
            if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
                raise ConfigurationError(f"n_threads must be an int >= 1, got {n_threads!r}")
            torch.set_num_threads(n_threads)
        config: Any = getattr(model.model, "config", None)
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        layer_types = getattr(text_config, "layer_types", None) or ()
        odd = sorted({str(t) for t in layer_types} - {"full_attention"})
        if odd or getattr(text_config, "sliding_window", None) not in (None, 0):
            raise ConfigurationError(
                f"TransformersBatchedDecoder supports full-attention layers only; "
                f"{model.name!r} has {odd or ['sliding_window']}: use TransformersModel with "
                "generate() one request at a time"
            )
        self._torch = torch
        self._model = model
        self._hf = model.model
        self._cache_arg = model._cache_arg
        self._keep_arg = model._keep_arg
        limit = model.max_context if max_context is None else max_context
        self._slots = SlotTable(n_slots, limit, "TransformersBatchedDecoder")
        self._kv: list[list[tuple[Any, Any]] | None] = [None] * n_slots

    def decode(self, feeds: Sequence[Feed]) -> npt.NDArray[np.floating]:
        """See :meth:`formcast.model.batched.BatchedDecoder.decode` (float32 rows)."""
        slots, tokens, starts = self._slots.check(feeds)
        torch = self._torch
        device = getattr(self._hf, "device", None)
        b = len(slots)
        past = max(starts)
        width = max(len(ids) for ids in tokens)
        input_ids = torch.zeros((b, width), dtype=torch.long)
        positions = torch.zeros((b, width), dtype=torch.long)
        mask = torch.zeros((b, past + width), dtype=torch.long)
        for row, (ids, start) in enumerate(zip(tokens, starts)):
            n = len(ids)
            input_ids[row, :n] = torch.tensor(ids, dtype=torch.long)
            positions[row] = torch.arange(start, start + width)
            mask[row, past - start : past] = 1
            mask[row, past : past + n] = 1
        cache = self._padded_cache(slots, starts, past)
        kwargs: dict[str, Any] = {"use_cache": True, self._cache_arg: cache}
        last = torch.tensor([[len(ids) - 1] for ids in tokens], dtype=torch.long)
        if self._keep_arg:
            kwargs["logits_to_keep"] = last.to(device)
        with torch.inference_mode():
            out = self._hf(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                **kwargs,
            )
        logits = out.logits  # (b, 1, V), or (b, width, V) without logits_to_keep
        wide = logits.shape[1] != 1
        logits = logits[torch.arange(b), last[:, 0]] if wide else logits[:, 0]
        rows: npt.NDArray[np.floating] = logits.float().cpu().numpy().copy()
        new_cache = out.cache if self._cache_arg == "cache" else out.past_key_values
        self._store(new_cache, slots, tokens, past)
        self._slots.advance(slots, tokens)
        return rows

    def _padded_cache(self, slots: list[int], starts: list[int], past: int) -> Any:
        """The fed slots' caches, left-padded with zeros to ``past`` columns, as a
        ``DynamicCache`` (an empty one when no slot holds anything yet)."""
        torch = self._torch
        dynamic = self._transformers.DynamicCache
        if past == 0:
            return dynamic()
        template = next(self._kv[s] for s, n in zip(slots, starts) if n)
        assert template is not None
        data = []
        for layer, (k0, v0) in enumerate(template):
            _, heads, _, dim = k0.shape
            keys = torch.zeros((len(slots), heads, past, dim), dtype=k0.dtype, device=k0.device)
            values = torch.zeros(
                (len(slots), v0.shape[1], past, v0.shape[3]), dtype=v0.dtype, device=v0.device
            )
            for row, (slot, n) in enumerate(zip(slots, starts)):
                kv = self._kv[slot]
                if n and kv is not None:
                    keys[row, :, past - n :] = kv[layer][0][0]
                    values[row, :, past - n :] = kv[layer][1][0]
            data.append((keys, values))
        return dynamic(ddp_cache_data=data)

    def _store(self, cache: Any, slots: list[int], tokens: list[list[int]], past: int) -> None:
        """Append each slot's new keys and values (its real columns only) to its own cache."""
        torch = self._torch
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        for row, (slot, ids) in enumerate(zip(slots, tokens)):
            n = len(ids)
            new = [
                (k[row : row + 1, :, past : past + n], v[row : row + 1, :, past : past + n])
                for k, v in layers
            ]
            old = self._kv[slot]
            if old is None:
                self._kv[slot] = [(k.clone(), v.clone()) for k, v in new]
            else:
                self._kv[slot] = [
                    (torch.cat([ko, kn], dim=2), torch.cat([vo, vn], dim=2))
                    for (ko, vo), (kn, vn) in zip(old, new)
                ]

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """See :class:`~formcast.model.batched.SupportsCopyPrefix`: ``dst`` gets copies of the
        first ``n`` cached positions of ``src``."""
        s, d = self._slots.check_copy(src, dst, n)
        kv = self._kv[s]
        assert kv is not None
        self._kv[d] = [(k[:, :, :n].clone(), v[:, :, :n].clone()) for k, v in kv]
        self._slots.lengths[d] = n

    def release(self, slot: int) -> None:
        s = self._slots.release(slot)
        self._kv[s] = None

    def reset(self) -> None:
        for s in range(self.n_slots):
            self.release(s)

    def __repr__(self) -> str:
        return (
            f"TransformersBatchedDecoder(name={self.name!r}, n_slots={self.n_slots}, "
            f"max_context={self.max_context})"
        )
