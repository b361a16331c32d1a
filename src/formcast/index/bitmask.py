"""Token bitmasks in the ecosystem's layout.

A bitmask is ``int32[batch, ceil(vocab_size / 32)]``; bit ``j % 32`` of word ``j // 32`` is set
when token ``j`` is allowed.  ``vocab_size`` is the width of the model's logits.  Freshly
allocated masks are all ones (everything allowed).

:func:`apply_token_bitmask_inplace` works on numpy arrays, and on torch tensors when torch is
installed (torch is imported only if a tensor is passed).

Lifetime: stateless functions; a bitmask belongs to the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigurationError

__all__ = [
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_to_bool",
    "bool_to_bitmask",
    "get_bitmask_shape",
    "reset_token_bitmask",
]


def get_bitmask_shape(batch_size: int, vocab_size: int) -> tuple[int, int]:
    """``(batch_size, ceil(vocab_size / 32))``."""
    if batch_size <= 0 or vocab_size <= 0:
        raise ConfigurationError(
            f"batch_size and vocab_size must be positive, got {batch_size}, {vocab_size}"
        )
    return batch_size, (vocab_size + 31) // 32


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> np.ndarray:
    """A new all-ones (everything allowed) ``int32`` bitmask."""
    return np.full(get_bitmask_shape(batch_size, vocab_size), -1, dtype=np.int32)


def reset_token_bitmask(bitmask: np.ndarray) -> None:
    """Set every bit (allow everything) in place."""
    bitmask.fill(-1)


def bool_to_bitmask(allowed: np.ndarray, vocab_size: int | None = None) -> np.ndarray:
    """Pack a boolean vector into ``int32`` words (bits past ``len(allowed)`` are zero)."""
    n = allowed.shape[-1] if vocab_size is None else vocab_size
    words = (n + 31) // 32
    padded = np.zeros(words * 32, dtype=bool)
    padded[: allowed.shape[-1]] = allowed
    return np.packbits(padded, bitorder="little").view("<i4").astype(np.int32, copy=False)


def bitmask_to_bool(row: np.ndarray, vocab_size: int) -> np.ndarray:
    """Unpack one bitmask row into ``bool[vocab_size]``."""
    u8 = np.ascontiguousarray(row, dtype="<i4").view(np.uint8)
    return np.unpackbits(u8, bitorder="little")[:vocab_size].astype(bool)


def apply_token_bitmask_inplace(
    logits: Any,
    bitmask: Any,
    *,
    vocab_size: int | None = None,
    indices: Sequence[int] | None = None,
) -> None:
    """Set disallowed logits to ``-inf`` in place.

    Args:
        logits: ``float[vocab]`` or ``float[batch, vocab]`` (numpy array or torch tensor).
        bitmask: ``int32[words]`` or ``int32[batch, words]`` in the same library as ``logits``
            (a numpy bitmask is accepted for torch logits and converted).
        vocab_size: apply to the first ``vocab_size`` columns only (default: logits width,
            capped at the bitmask's capacity; columns past the bitmask are masked).
        indices: rows of ``logits`` to mask (row ``i`` of ``logits`` uses row ``i`` of the
            bitmask); default all rows.
    """
    if type(logits).__module__.startswith("torch"):
        _apply_torch(logits, bitmask, vocab_size=vocab_size, indices=indices)
        return
    if not isinstance(logits, np.ndarray):
        raise ConfigurationError(
            f"logits must be a numpy array or torch tensor, got {type(logits).__name__}"
        )
    lg = logits if logits.ndim == 2 else logits[None, :]
    bm = np.asarray(bitmask)
    bm = bm if bm.ndim == 2 else bm[None, :]
    width = lg.shape[1] if vocab_size is None else vocab_size
    rows = range(lg.shape[0]) if indices is None else indices
    cap = bm.shape[1] * 32
    for r in rows:
        allowed = bitmask_to_bool(bm[r], min(width, cap))
        view = lg[r, : min(width, cap)]
        view[~allowed] = -np.inf
        if width > cap:
            lg[r, cap:width] = -np.inf


def _apply_torch(
    logits: Any, bitmask: Any, *, vocab_size: int | None, indices: Sequence[int] | None
) -> None:
    import torch

    lg = logits if logits.dim() == 2 else logits.unsqueeze(0)
    if isinstance(bitmask, np.ndarray):
        bitmask = torch.from_numpy(np.ascontiguousarray(bitmask))
    bm = bitmask if bitmask.dim() == 2 else bitmask.unsqueeze(0)
    bm = bm.to(lg.device)
    width = lg.shape[1] if vocab_size is None else vocab_size
    cap = bm.shape[1] * 32
    use = min(width, cap)
    shifts = torch.arange(32, device=lg.device, dtype=torch.int32)
    rows = list(range(lg.shape[0])) if indices is None else list(indices)
    for r in rows:
        bits = ((bm[r].unsqueeze(-1) >> shifts) & 1).reshape(-1)[:use].bool()
        lg[r, :use].masked_fill_(~bits, float("-inf"))
        if width > cap:
            lg[r, cap:width] = float("-inf")
