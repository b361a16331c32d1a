"""Batch masks: :func:`batch_fill_next_token_bitmask` fills the rows of many matchers at once.

A serving engine keeps one matcher per running request and, every decoding step, one bitmask
row per request.  Requests that share a compiled grammar are very often in the same state (the
same key of the same schema, the inside of a string, a number): their rows are identical.  The
batch fill therefore looks each distinct ``(program, state)`` up once -- a dict lookup in the
program's mask cache once the state has been seen, one vocabulary walk the first time -- and
writes that one row to every bitmask row that needs it with one numpy assignment (fancy
indexing), instead of a lookup and a copy per request.

The argument order is xgrammar's ``BatchGrammarMatcher.batch_fill_next_token_bitmask(matchers,
bitmask, indices)``: matcher ``i`` fills row ``indices[i]`` (default ``i``).  The bitmask is a
numpy ``int32[batch, words]`` array or a CPU ``torch.int32`` tensor (filled through a numpy view
of its memory: no copy); for CUDA, fill a pinned CPU tensor and copy it with
``non_blocking=True`` (see :mod:`formcast.bitmask`).

There is no thread pool: the row of a seen state costs a lookup and a copy (no Python work
left to spread), and a new state's first vocabulary walk is mostly Python work under the GIL,
which threads would not overlap on CPython (llguidance and xgrammar, native, do use threads).

Lifetime: a stateless function; the result is a small immutable record.  Like
:meth:`GrammarMatcher.fill_next_token_bitmask`, it reads the matchers and changes none of them
(no matcher is shared between threads while this runs: matchers are not thread-safe).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..bitmask import bitmask_words, writable_bitmask_rows
from ..errors import ConfigurationError
from .matcher import GrammarMatcher

__all__ = ["BatchFillResult", "batch_fill_next_token_bitmask"]

_TERMINATED = object()  # the key of every terminated matcher (all-zero row)
_STOPPED = object()  # third item of the key of a limit-stopped matcher (all-zero row)


@dataclass(frozen=True)
class BatchFillResult:
    """What each matcher of a :func:`batch_fill_next_token_bitmask` call needs next.

    Every array has one entry per matcher, in the order the matchers were passed.

    Attributes:
        rows: ``int64``: the bitmask row each matcher filled.
        allowed: ``bool``: some token is allowed (the value
            :meth:`GrammarMatcher.fill_next_token_bitmask` returns).  False for a terminated
            matcher and for a dead end (see :meth:`dead_ends`).
        terminated: ``bool``: the matcher accepted a stop token (its row is all zeros).
        accepting: ``bool``: :meth:`GrammarMatcher.is_accepting` (a stop token may come).
        distinct: how many distinct rows were computed and copied (at most the number of
            matchers; 1 when every matcher is in the same state of the same grammar).
    """

    rows: np.ndarray
    allowed: np.ndarray
    terminated: np.ndarray
    accepting: np.ndarray
    distinct: int

    def dead_ends(self) -> list[int]:
        """Positions (in the matchers' order) of the matchers that allow nothing although not
        terminated: call :meth:`GrammarMatcher.diagnose` on them."""
        return [int(i) for i in np.flatnonzero(~self.allowed & ~self.terminated)]


def _check_rows(indices: Sequence[int] | None, count: int, capacity: int) -> np.ndarray:
    """The bitmask row of each matcher, after checking ``indices`` (nothing written yet)."""
    if indices is None:
        if count > capacity:
            raise ConfigurationError(
                f"{count} matchers for a bitmask of {capacity} row(s): allocate "
                f"allocate_token_bitmask({count}, vocab_size), or pass indices"
            )
        return np.arange(count, dtype=np.int64)
    if isinstance(indices, np.ndarray):
        if indices.ndim != 1 or not np.issubdtype(indices.dtype, np.integer):
            raise ConfigurationError(
                f"indices must be a 1-D integer array or a sequence of ints, got "
                f"{indices.dtype} of shape {indices.shape}"
            )
        rows = indices.astype(np.int64)
    else:
        try:
            values = list(indices)
        except TypeError:
            raise ConfigurationError(
                f"indices must be a sequence of ints, got {indices!r}"
            ) from None
        for value in values:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise ConfigurationError(
                    f"indices must be ints (one bitmask row per matcher), got {value!r}"
                )
        rows = np.asarray([int(v) for v in values], dtype=np.int64)
    if rows.shape[0] != count:
        raise ConfigurationError(
            f"{rows.shape[0]} indices for {count} matchers: give one bitmask row per matcher"
        )
    if count:
        low, high = int(rows.min()), int(rows.max())
        if low < 0 or high >= capacity:
            bad = low if low < 0 else high
            raise ConfigurationError(
                f"bitmask row index {bad} is out of range for a bitmask of {capacity} row(s)"
            )
        if np.unique(rows).shape[0] != count:
            raise ConfigurationError(
                "indices repeat a bitmask row: two matchers cannot fill the same row"
            )
    return rows


def batch_fill_next_token_bitmask(
    matchers: Sequence[GrammarMatcher],
    bitmask: Any,
    indices: Sequence[int] | None = None,
) -> BatchFillResult:
    """Fill row ``indices[i]`` (default ``i``) of ``bitmask`` for each ``matchers[i]``.

    Each row ends up exactly as ``matchers[i].fill_next_token_bitmask(bitmask, indices[i])``
    would leave it (allowed tokens; all zeros for a terminated or limit-stopped matcher; words
    past the vocabulary's zeroed); rows no matcher names are not touched.  Changes no matcher.

    Args:
        matchers: the matchers, any mix of compiled grammars (each row gets its own
            vocabulary's words, the rest of the row zeroed).
        bitmask: ``int32[batch, words]`` (or ``int32[words]`` for one matcher): a numpy array
            or a CPU ``torch.int32`` tensor, with at least ``ceil(vocab_size / 32)`` words per
            row for every matcher's vocabulary.
        indices: the row of each matcher (distinct, in range); default ``0 .. len - 1``.

    Returns:
        a :class:`BatchFillResult` (allowed / terminated / accepting per matcher).

    Raises:
        ConfigurationError: a non-matcher, a bitmask of another dtype or shape, too few rows
            or words, a read-only or CUDA bitmask, indices of the wrong length, out of range,
            repeated or not ints -- all checked before anything is written.

    Cost: one mask-cache lookup per distinct ``(grammar program, state)`` (a vocabulary walk
    the first time any request reaches the state), one row copy per filled row done by numpy
    in one assignment per distinct row, and O(1) Python work per matcher.
    """
    ms = matchers if isinstance(matchers, list) else list(matchers)
    words_needed = 0
    grammars: set[int] = set()  # ids of the compiled grammars seen
    for pos, m in enumerate(ms):
        if type(m) is not GrammarMatcher and not isinstance(m, GrammarMatcher):
            raise ConfigurationError(
                f"matchers[{pos}] is a {type(m).__name__}, not a GrammarMatcher"
            )
        compiled = m.compiled
        if id(compiled) not in grammars:
            grammars.add(id(compiled))
            words_needed = max(words_needed, bitmask_words(compiled.vocab.vocab_size))
    arr = writable_bitmask_rows(bitmask, words_needed)
    count = len(ms)
    rows = _check_rows(indices, count, arr.shape[0])
    # every argument is checked: from here on rows get written

    # one slot per distinct row: (program, state) keys whose masks are one cached array share it
    slot_of: dict[Any, tuple[int, bool]] = {}  # key -> (slot, accepting)
    slot_of_mask: dict[int, int] = {}  # id of a cached mask -> its slot
    masks: list[np.ndarray | None] = []  # None: an all-zero row
    groups: list[list[int]] = []  # the bitmask rows of each slot
    slots: list[int] = []
    accepting: list[bool] = []
    for m, row in zip(ms, rows.tolist()):
        # the matcher's own fields (same package): its state without a method call per row
        if m._terminated:
            key: Any = _TERMINATED
        elif m._stop_reason is None:
            key = (m._program, m._history[-1])
        else:
            key = (m._program, m._history[-1], _STOPPED)
        got = slot_of.get(key)
        if got is None:
            got = slot_of[key] = _new_slot(key, masks, groups, slot_of_mask)
        slot, acc = got
        groups[slot].append(row)
        slots.append(slot)
        accepting.append(acc)

    width = arr.shape[1]
    allowed = np.zeros(len(masks), dtype=bool)
    terminated = np.zeros(len(masks), dtype=bool)
    for slot, (mask, group) in enumerate(zip(masks, groups)):
        target: Any = group[0] if len(group) == 1 else np.asarray(group, dtype=np.intp)
        if mask is None:
            arr[target] = 0
            continue
        n = mask.shape[0]
        if n == width:
            arr[target] = mask
        else:
            arr[target, :n] = mask
            arr[target, n:] = 0
        allowed[slot] = _nonempty(mask)
    if _TERMINATED in slot_of:
        terminated[slot_of[_TERMINATED][0]] = True
    index = np.asarray(slots, dtype=np.intp)
    return BatchFillResult(
        rows=rows,
        allowed=allowed[index],
        terminated=terminated[index],
        accepting=np.asarray(accepting, dtype=bool),
        distinct=len(masks),
    )


def _new_slot(
    key: Any,
    masks: list[np.ndarray | None],
    groups: list[list[int]],
    slot_of_mask: dict[int, int],
) -> tuple[int, bool]:
    """The slot and accepting flag of a key seen for the first time in this call: the mask
    lookup (a vocabulary walk if no request has reached the state yet)."""
    if key is _TERMINATED:
        mask, accepting = None, True
    else:
        program, state = key[0], key[1]
        accepting = bool(program.is_accepting(state))
        mask = None if len(key) == 3 else program.token_mask(state)
    if mask is not None:
        shared = slot_of_mask.get(id(mask))
        if shared is not None:
            return shared, accepting
    slot = len(masks)
    masks.append(mask)
    groups.append([])
    if mask is not None:
        slot_of_mask[id(mask)] = slot
    return slot, accepting


# whether a cached mask allows anything, per mask array (masks are read-only and cached by the
# programs, so this is computed once per mask, not once per call); weak: an entry goes with its
# mask, and an id reused by another array is caught by the identity check
_NONEMPTY: dict[int, tuple[weakref.ref[np.ndarray], bool]] = {}


def _forget(ref: weakref.ref[np.ndarray], key: int) -> None:
    entry = _NONEMPTY.get(key)
    if entry is not None and entry[0] is ref:
        _NONEMPTY.pop(key, None)


def _nonempty(mask: np.ndarray) -> bool:
    key = id(mask)
    entry = _NONEMPTY.get(key)
    if entry is not None and entry[0]() is mask:
        return entry[1]
    value = bool(np.count_nonzero(mask))
    if not mask.flags.writeable:  # a cached, frozen mask: remember
        _NONEMPTY[key] = (weakref.ref(mask, partial(_forget, key=key)), value)
    return value
