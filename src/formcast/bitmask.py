"""Token bitmasks in the ecosystem's layout.

A bitmask is ``int32[batch, ceil(vocab_size / 32)]``; bit ``j % 32`` of word ``j // 32`` is set
when token ``j`` is allowed.  ``vocab_size`` is the width of the model's logits.  Freshly
allocated masks are all ones (everything allowed).

The dtype is ``int32`` only, as in xgrammar and llguidance: a ``uint32``, ``int8``, ``bool`` or
``int64`` array is refused with :class:`~formcast.errors.ConfigurationError` (pass
``mask.view(np.int32)`` to use a ``uint32`` buffer: same bits).  Every argument (shapes, dtypes,
row indices) is checked before anything is written.

:func:`apply_token_bitmask_inplace` works on numpy arrays, and on torch tensors when torch is
installed (torch is imported only if a tensor is passed).

Lifetime: stateless functions; a bitmask belongs to the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .errors import ConfigurationError

__all__ = [
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_has",
    "bitmask_has_many",
    "bitmask_set_many",
    "bitmask_to_bool",
    "bitmask_to_ids",
    "bitmask_words",
    "bool_to_bitmask",
    "get_bitmask_shape",
    "ids_to_bitmask",
    "reset_token_bitmask",
    "writable_bitmask_row",
]


_INT32 = np.dtype(np.int32)


def _is_index(value: object) -> bool:
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, np.integer))


def _check_int32(bitmask: np.ndarray, what: str = "bitmask") -> None:
    if bitmask.dtype != np.int32:
        raise ConfigurationError(
            f"{what} must be int32 (the xgrammar/llguidance layout), got {bitmask.dtype}: "
            "allocate it with allocate_token_bitmask(batch, vocab_size)"
            + (" or pass bitmask.view(np.int32)" if bitmask.dtype == np.uint32 else "")
        )
    if bitmask.ndim not in (1, 2):
        raise ConfigurationError(
            f"{what} must be int32[words] or int32[batch, words], got shape {bitmask.shape}"
        )


def _as_numpy(array: Any, what: str) -> np.ndarray:
    """A numpy view of a numpy array or a CPU torch tensor (memory shared, no copy)."""
    if type(array).__module__.startswith("torch"):
        if str(array.device) != "cpu":
            raise ConfigurationError(
                f"{what} is a torch tensor on {array.device}: fill a CPU bitmask, then move it"
            )
        if str(array.dtype) != "torch.int32":
            raise ConfigurationError(f"{what} must be torch.int32, got {array.dtype}")
        return array.numpy()  # type: ignore[no-any-return]
    if not isinstance(array, np.ndarray):
        raise ConfigurationError(
            f"{what} must be a numpy array (or torch tensor), got {type(array).__name__}"
        )
    return array


def writable_bitmask_row(bitmask: Any, index: Any, words: int) -> np.ndarray:
    """Row ``index`` of ``bitmask`` as a writable ``int32`` view of at least ``words`` words.

    ``bitmask``: ``int32[words]`` (then ``index`` must be 0) or ``int32[batch, words]``, numpy
    or a CPU torch tensor.  Raises :class:`ConfigurationError` for anything else (dtype, shape,
    a negative, too large or non-integer row index, a read-only array).  O(1), no copy."""
    if (  # the common case, settled in a few attribute reads
        type(bitmask) is np.ndarray
        and bitmask.dtype is _INT32
        and type(index) is int
        and bitmask.flags.writeable
    ):
        if bitmask.ndim == 2 and 0 <= index < bitmask.shape[0] and bitmask.shape[1] >= words:
            return bitmask[index]  # type: ignore[no-any-return]
        if bitmask.ndim == 1 and index == 0 and bitmask.shape[0] >= words:
            return bitmask
    arr = _as_numpy(bitmask, "bitmask")
    _check_int32(arr)
    if not _is_index(index):
        raise ConfigurationError(f"bitmask row index must be an int, got {index!r}")
    rows = arr.shape[0] if arr.ndim == 2 else 1
    if not 0 <= int(index) < rows:
        raise ConfigurationError(
            f"bitmask row index {int(index)} is out of range for a bitmask of {rows} row(s)"
        )
    row = arr[int(index)] if arr.ndim == 2 else arr
    if row.shape[0] < words:
        raise ConfigurationError(
            f"bitmask has {row.shape[0]} words per row, the vocabulary needs {words}: "
            "allocate it with allocate_token_bitmask(batch, vocab.vocab_size)"
        )
    if not row.flags.writeable:
        raise ConfigurationError("bitmask is read-only")
    return row


def get_bitmask_shape(batch_size: int, vocab_size: int) -> tuple[int, int]:
    """``(batch_size, ceil(vocab_size / 32))``."""
    if batch_size <= 0 or vocab_size <= 0:
        raise ConfigurationError(
            f"batch_size and vocab_size must be positive, got {batch_size}, {vocab_size}"
        )
    return batch_size, bitmask_words(vocab_size)


def bitmask_words(vocab_size: int) -> int:
    """Words of one bitmask row for ``vocab_size`` tokens: ``ceil(vocab_size / 32)``."""
    return (vocab_size + 31) // 32


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> np.ndarray:
    """A new all-ones (everything allowed) ``int32`` bitmask."""
    return np.full(get_bitmask_shape(batch_size, vocab_size), -1, dtype=np.int32)


def reset_token_bitmask(bitmask: np.ndarray) -> None:
    """Set every bit (allow everything) in place."""
    bitmask.fill(-1)


def bool_to_bitmask(allowed: np.ndarray, vocab_size: int | None = None) -> np.ndarray:
    """Pack a boolean vector into ``int32`` words (bits past ``len(allowed)`` are zero)."""
    n = allowed.shape[-1] if vocab_size is None else vocab_size
    padded = np.zeros(bitmask_words(n) * 32, dtype=bool)
    padded[: allowed.shape[-1]] = allowed
    return np.packbits(padded, bitorder="little").view("<i4").astype(np.int32, copy=False)


def ids_to_bitmask(ids: Iterable[int], vocab_size: int) -> np.ndarray:
    """``int32`` words with exactly the bits of ``ids`` set (the stop tokens, say).  O(V)."""
    allowed = np.zeros(vocab_size, dtype=bool)
    idx = np.fromiter(ids, dtype=np.int64)
    if idx.size:
        allowed[idx] = True
    return bool_to_bitmask(allowed, vocab_size)


def bitmask_to_bool(bitmask: Any, vocab_size: int) -> np.ndarray:
    """Unpack bitmask words (one row ``[words]`` or rows ``[..., words]``; any 32-bit integer
    words, a ``uint32`` buffer included) into ``bool[..., vocab_size]``; tokens past the
    rows' ``32 * words`` capacity are False (fail closed).  One vectorized pass."""
    octets = np.ascontiguousarray(bitmask, dtype="<i4").view(np.uint8)
    bits: np.ndarray = np.unpackbits(octets, axis=-1, count=vocab_size, bitorder="little")
    return bits.view(np.bool_)


_BIT_OFFSETS = np.arange(32, dtype=np.int32)


def bitmask_to_ids(row: np.ndarray) -> np.ndarray:
    """Sorted ids (``int32``) of the tokens allowed by one ``int32`` bitmask row.

    One pass over the ``ceil(V/32)`` words; a narrow allowed set (a digit, a key, a literal)
    only unpacks its non-zero words.
    """
    nz = np.flatnonzero(row)
    if nz.size * 8 >= row.size:  # dense: unpack everything
        octets = np.ascontiguousarray(row, dtype="<i4").view(np.uint8)
        dense: np.ndarray = np.flatnonzero(np.unpackbits(octets, bitorder="little"))
        return dense.astype(np.int32)
    octets = np.ascontiguousarray(row[nz], dtype="<i4").view(np.uint8)
    bits = np.unpackbits(octets, bitorder="little").reshape(nz.size, 32).astype(bool)
    ids: np.ndarray = (nz[:, None].astype(np.int32) * 32 + _BIT_OFFSETS)[bits]
    return ids


def bitmask_has(words: np.ndarray, token_id: int) -> bool:
    """Whether bit ``token_id`` of the bitmask row ``words`` is set.  O(1)."""
    return bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)


def bitmask_has_many(words: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The bits of ``ids`` (an integer array) in the bitmask row ``words``: 1 where set, else
    0, one per id.  O(len(ids))."""
    return (np.take(words, ids >> 5) >> (ids & 31).astype(np.int32)) & 1  # type: ignore[no-any-return]


def bitmask_set_many(words: np.ndarray, ids: np.ndarray) -> None:
    """Set the bits of ``ids`` (an ``int64`` array, repeats allowed) in the writable bitmask
    row ``words``, in place.  O(len(ids))."""
    np.bitwise_or.at(words, ids >> 5, np.left_shift(1, ids & 31).astype(np.int64).astype(np.int32))


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
    if not np.issubdtype(logits.dtype, np.floating):
        raise ConfigurationError(
            f"logits must be floating point (they get -inf), got {logits.dtype}"
        )
    if not isinstance(bitmask, np.ndarray):
        raise ConfigurationError(
            f"bitmask for numpy logits must be a numpy array, got {type(bitmask).__name__}"
        )
    _check_int32(bitmask)
    if not logits.flags.writeable:
        raise ConfigurationError("logits are read-only")
    if logits.ndim not in (1, 2):
        raise ConfigurationError(
            f"logits must be float[vocab] or float[batch, vocab], got shape {logits.shape}"
        )
    lg = logits if logits.ndim == 2 else logits[None, :]
    bm = bitmask if bitmask.ndim == 2 else bitmask[None, :]
    width, rows = _check_apply(logits.ndim, lg.shape, bm.shape, vocab_size, indices)
    cap = bm.shape[1] * 32
    for r in rows:
        allowed = bitmask_to_bool(bm[r], min(width, cap))
        view = lg[r, : min(width, cap)]
        view[~allowed] = -np.inf
        if width > cap:
            lg[r, cap:width] = -np.inf


def _check_apply(
    ndim: int,
    lg_shape: tuple[int, ...],
    bm_shape: tuple[int, ...],
    vocab_size: int | None,
    indices: Sequence[int] | None,
) -> tuple[int, list[int]]:
    """(width, rows) of an apply call, after checking every argument (nothing written yet)."""
    if ndim not in (1, 2):
        raise ConfigurationError(
            f"logits must be float[vocab] or float[batch, vocab], got shape {tuple(lg_shape)}"
        )
    if vocab_size is None:
        width = int(lg_shape[1])
    elif not _is_index(vocab_size) or not 0 < int(vocab_size) <= lg_shape[1]:
        raise ConfigurationError(
            f"vocab_size must be an int in 1..{lg_shape[1]} (the logits width), got {vocab_size!r}"
        )
    else:
        width = int(vocab_size)
    if indices is None:
        rows = list(range(int(lg_shape[0])))
    else:
        try:
            rows = list(indices)
        except TypeError:
            raise ConfigurationError(
                f"indices must be a sequence of ints, got {indices!r}"
            ) from None
        for r in rows:
            if not _is_index(r) or not 0 <= int(r) < lg_shape[0]:
                raise ConfigurationError(
                    f"row index {r!r} is out of range for logits with {lg_shape[0]} row(s)"
                )
        rows = [int(r) for r in rows]
    if rows and max(rows) >= bm_shape[0]:
        raise ConfigurationError(
            f"logits row {max(rows)} has no bitmask row: the bitmask has {bm_shape[0]} row(s)"
        )
    return width, rows


def _apply_torch(
    logits: Any, bitmask: Any, *, vocab_size: int | None, indices: Sequence[int] | None
) -> None:
    import torch

    if not logits.is_floating_point():
        raise ConfigurationError(
            f"logits must be floating point (they get -inf), got {logits.dtype}"
        )
    if isinstance(bitmask, np.ndarray):
        _check_int32(bitmask)
        bitmask = torch.from_numpy(np.ascontiguousarray(bitmask))
    elif not type(bitmask).__module__.startswith("torch"):
        raise ConfigurationError(
            f"bitmask must be a torch tensor or numpy array, got {type(bitmask).__name__}"
        )
    if bitmask.dtype != torch.int32 or bitmask.dim() not in (1, 2):
        raise ConfigurationError(
            f"bitmask must be int32[words] or int32[batch, words], got {bitmask.dtype} "
            f"{tuple(bitmask.shape)}: allocate it with allocate_token_bitmask(batch, vocab_size)"
        )
    if logits.dim() not in (1, 2):
        raise ConfigurationError(
            f"logits must be float[vocab] or float[batch, vocab], got shape {tuple(logits.shape)}"
        )
    lg = logits if logits.dim() == 2 else logits.unsqueeze(0)
    bm = bitmask if bitmask.dim() == 2 else bitmask.unsqueeze(0)
    width, rows = _check_apply(logits.dim(), tuple(lg.shape), tuple(bm.shape), vocab_size, indices)
    bm = bm.to(lg.device)
    cap = bm.shape[1] * 32
    use = min(width, cap)
    shifts = torch.arange(32, device=lg.device, dtype=torch.int32)
    for r in rows:
        bits = ((bm[r].unsqueeze(-1) >> shifts) & 1).reshape(-1)[:use].bool()
        lg[r, :use].masked_fill_(~bits, float("-inf"))
        if width > cap:
            lg[r, cap:width] = float("-inf")
