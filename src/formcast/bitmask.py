"""Token bitmasks in the ecosystem's layout.

A bitmask is ``int32[batch, ceil(vocab_size / 32)]``; bit ``j % 32`` of word ``j // 32`` is set
when token ``j`` is allowed.  ``vocab_size`` is the width of the model's logits.  Freshly
allocated masks are all ones (everything allowed).

The dtype is ``int32`` only, as in xgrammar and llguidance: a ``uint32``, ``int8``, ``bool`` or
``int64`` array is refused with :class:`~formcast.errors.ConfigurationError` (pass
``mask.view(np.int32)`` to use a ``uint32`` buffer: same bits).  Every argument (shapes, dtypes,
row indices) is checked before anything is written.

:func:`apply_token_bitmask_inplace` works on numpy arrays, and on torch tensors when torch is
installed (torch is imported only if a tensor is passed or ``framework="torch"`` is asked for).

Torch: :func:`allocate_token_bitmask` with ``framework="torch"`` gives a CPU ``torch.int32``
tensor (pinned when CUDA is available); matchers fill a CPU tensor through a numpy view of its
memory (no copy).  A CUDA tensor cannot be filled from the CPU side: fill the CPU (pinned)
tensor, then copy it with ``gpu_bitmask.copy_(cpu_bitmask, non_blocking=True)`` (or pass the
CPU bitmask to :func:`apply_token_bitmask_inplace` with CUDA logits, which does that copy), as
xgrammar and llguidance do.  A pinned buffer copied with ``non_blocking=True`` must not be
refilled before the copy ran: the next step's device-to-host read of the sampled ids (a
stream-ordered sync) guarantees it in a decoding loop.

Lifetime: stateless functions; a bitmask belongs to the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, overload

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
    "writable_bitmask_rows",
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


def _is_torch(value: object) -> bool:
    return type(value).__module__.startswith("torch")


def _as_numpy(array: Any, what: str) -> np.ndarray:
    """A numpy view of a numpy array or a CPU torch tensor (memory shared, no copy)."""
    if _is_torch(array):
        if array.device.type != "cpu":
            raise ConfigurationError(
                f"{what} is a torch tensor on {array.device}: formcast fills masks on the CPU; "
                "fill a CPU tensor (allocate_token_bitmask(batch, vocab_size, "
                "framework='torch') is pinned when CUDA is available), then copy it with "
                "gpu_bitmask.copy_(cpu_bitmask, non_blocking=True) or pass the CPU bitmask to "
                "apply_token_bitmask_inplace with the CUDA logits"
            )
        if str(array.dtype) != "torch.int32":
            raise ConfigurationError(
                f"{what} must be torch.int32 (the xgrammar/llguidance layout), got "
                f"{array.dtype}: allocate it with allocate_token_bitmask(batch, vocab_size, "
                "framework='torch')"
            )
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


def writable_bitmask_rows(bitmask: Any, words: int) -> np.ndarray:
    """``bitmask`` as a writable 2-D ``int32`` numpy view ``[rows, >= words]`` (a 1-D bitmask
    is one row), numpy or a CPU torch tensor.  Raises :class:`ConfigurationError` for another
    dtype or shape, too few words per row, a read-only array or a CUDA tensor.  O(1), no
    copy."""
    arr = _as_numpy(bitmask, "bitmask")
    _check_int32(arr)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.shape[1] < words:
        raise ConfigurationError(
            f"bitmask has {arr.shape[1]} words per row, the vocabulary needs {words}: "
            "allocate it with allocate_token_bitmask(batch, vocab.vocab_size)"
        )
    if not arr.flags.writeable:
        raise ConfigurationError("bitmask is read-only")
    return arr


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


@overload
def allocate_token_bitmask(
    batch_size: int,
    vocab_size: int,
    *,
    framework: Literal["numpy"] = ...,
    pin_memory: bool | None = ...,
) -> np.ndarray: ...


@overload
def allocate_token_bitmask(
    batch_size: int,
    vocab_size: int,
    *,
    framework: Literal["torch"],
    pin_memory: bool | None = ...,
) -> Any: ...


def allocate_token_bitmask(
    batch_size: int,
    vocab_size: int,
    *,
    framework: Literal["numpy", "torch"] = "numpy",
    pin_memory: bool | None = None,
) -> Any:
    """A new all-ones (everything allowed) ``int32[batch_size, ceil(vocab_size / 32)]`` bitmask.

    Args:
        framework: ``"numpy"`` (default): an ``np.ndarray``; ``"torch"``: a CPU
            ``torch.int32`` tensor (xgrammar's and ``llguidance.torch``'s
            ``allocate_token_bitmask``), which matchers fill in place through a numpy view.
        pin_memory: torch only: page-locked memory, so that ``.to("cuda", non_blocking=True)``
            is asynchronous.  ``None`` (default): pinned when ``torch.cuda.is_available()``.

    Cost: one allocation of ``4 * batch_size * ceil(vocab_size / 32)`` bytes.  Raises
    :class:`ConfigurationError` for a non-positive size, an unknown framework, or
    ``pin_memory`` with numpy; :class:`~formcast.errors.MissingDependencyError` when torch is
    asked for and not installed."""
    shape = get_bitmask_shape(batch_size, vocab_size)
    if framework == "numpy":
        if pin_memory:
            raise ConfigurationError("pin_memory applies to framework='torch' only")
        return np.full(shape, -1, dtype=np.int32)
    if framework != "torch":
        raise ConfigurationError(f"framework must be 'numpy' or 'torch', got {framework!r}")
    from ._optional import require

    torch = require("torch")
    pin = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
    if pin and not torch.cuda.is_available():
        raise ConfigurationError(
            "pin_memory=True needs CUDA (torch.cuda.is_available() is False): pass "
            "pin_memory=None or False"
        )
    return torch.full(shape, -1, dtype=torch.int32, pin_memory=pin)


def reset_token_bitmask(bitmask: Any) -> None:
    """Set every bit (allow everything) in place (numpy array or torch tensor)."""
    if _is_torch(bitmask):
        bitmask.fill_(-1)
    else:
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
    return (np.take(words, ids >> 5) >> (ids & 31).astype(np.int32)) & 1


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
    if _is_torch(logits):
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
    if _is_torch(bitmask):
        bitmask = _as_numpy(bitmask, "bitmask")
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
    _apply_numpy(lg, bm, width, rows)


def _apply_numpy(lg: np.ndarray, bm: np.ndarray, width: int, rows: list[int] | None) -> None:
    """Mask ``lg[rows, :width]`` with ``bm[rows]`` (all rows when ``rows`` is None): one
    vectorized unpack and one masked write for the whole batch."""
    cap = bm.shape[1] * 32
    use = min(width, cap)
    if rows is None:
        allowed = bitmask_to_bool(bm[: lg.shape[0]], use)
        np.copyto(lg[:, :use], -np.inf, where=~allowed)
        if width > cap:
            lg[:, cap:width] = -np.inf
        return
    if not rows:
        return
    idx = np.asarray(rows, dtype=np.intp)
    allowed = bitmask_to_bool(bm[idx], use)
    part = lg[idx, :width]  # a copy (fancy rows): masked, then written back in one assignment
    np.copyto(part[:, :use], -np.inf, where=~allowed)
    if width > cap:
        part[:, cap:] = -np.inf
    lg[idx, :width] = part


def _check_apply(
    ndim: int,
    lg_shape: tuple[int, ...],
    bm_shape: tuple[int, ...],
    vocab_size: int | None,
    indices: Sequence[int] | None,
) -> tuple[int, list[int] | None]:
    """(width, rows) of an apply call, after checking every argument (nothing written yet);
    ``rows`` is None for every row of the logits (each has a bitmask row)."""
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
        if lg_shape[0] > bm_shape[0]:
            raise ConfigurationError(
                f"logits row {bm_shape[0]} has no bitmask row: the bitmask has {bm_shape[0]} "
                f"row(s) for {lg_shape[0]} logits rows"
            )
        return width, None
    try:
        rows = list(indices)
    except TypeError:
        raise ConfigurationError(f"indices must be a sequence of ints, got {indices!r}") from None
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


_BIT_VALUES: dict[str, Any] = {}  # device -> uint8 tensor [1, 2, 4, ..., 128]


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
    elif not _is_torch(bitmask):
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
    if (
        lg.device.type == "cpu"
        and bm.device.type == "cpu"
        and lg.dtype in (torch.float16, torch.float32, torch.float64)
    ):  # numpy's unpack and masked write work on the tensors' own memory
        _apply_numpy(lg.detach().numpy(), bm.numpy(), width, rows)
        return
    if rows is not None and not rows:
        return
    # CUDA (or bfloat16): one unpack and one masked_fill on the logits' device; a pinned CPU
    # bitmask is copied without blocking the host
    bm = bm.to(lg.device, non_blocking=True)
    key = str(lg.device)
    bit_values = _BIT_VALUES.get(key)
    if bit_values is None:
        bit_values = torch.tensor([1 << i for i in range(8)], dtype=torch.uint8, device=lg.device)
        _BIT_VALUES[key] = bit_values
    cap = bm.shape[1] * 32
    use = min(width, cap)
    idx = None if rows is None else torch.tensor(rows, dtype=torch.long, device=lg.device)
    sel = bm[: lg.shape[0]] if idx is None else bm.index_select(0, idx)
    octets = sel.contiguous().view(torch.uint8)  # little-endian words: bit j in octet j // 8
    refused = ((octets.unsqueeze(-1) & bit_values) == 0).reshape(sel.shape[0], -1)[:, :use]
    if idx is None:
        lg[:, :use].masked_fill_(refused, float("-inf"))
        if width > cap:
            lg[:, cap:width] = float("-inf")
        return
    part = lg.index_select(0, idx)[:, :width]
    part[:, :use].masked_fill_(refused, float("-inf"))
    if width > cap:
        part[:, cap:] = float("-inf")
    lg[:, :width].index_copy_(0, idx, part)
