"""The logits processor chain: the one place where a grammar mask meets the sampler.

The order is fixed, documented and tested::

    logits -> grammar mask -> temperature -> top-k -> top-p -> softmax -> sample

1. **Grammar mask.** Every token whose bit is clear in the bitmask row gets ``-inf`` (never
   ``0``: a zero is an ordinary logit and keeps most of the mass on illegal tokens).  NaN
   logits coming from the model are treated as ``-inf`` as well.
2. **Temperature.** Allowed logits are divided by ``temperature``.  ``temperature == 0``
   means greedy decoding: only the arg-max of the *allowed* logits survives (the lowest token
   id among ties).
3. **Top-k.** Keeps the ``max(top_k, min_tokens_to_keep)`` largest allowed logits (every
   token tied with the k-th value is kept, so the result does not depend on token order).
4. **Top-p.** Keeps the smallest set of the remaining tokens, most probable first, whose
   probability reaches ``top_p`` (at least ``min_tokens_to_keep``; ties with the last kept
   logit are kept).
5. **Softmax** over what is left: masked tokens get probability exactly ``0.0`` and the rest
   sums to 1 (to float64 rounding).
6. **Sample** by inverting the cumulative distribution with one ``rng.random()`` draw
   (the same draw :meth:`numpy.random.Generator.choice` makes with ``p=``).

Truncation (top-k, top-p) runs *after* the mask, so it only ever chooses among legal tokens
and can never delete all of them: the dead end "top-k removed every legal token" cannot
happen by construction.  An empty mask is reported with :class:`~formcast.errors.FormcastError`
(the matcher's ``diagnose()`` says why its state allows nothing); it is never retried here.

Bitmask layout: ``int32`` words, bit ``j % 32`` of word ``j // 32`` set means token ``j`` is
allowed (the layout of :func:`formcast.bitmask.allocate_token_bitmask`).  The logits may
be narrower than ``32 * words`` (bits past the logits' width are ignored) or wider (padded model
logits: the columns past the bitmask's capacity are never allowed).

Complexity per row of ``V`` logits with ``m`` allowed tokens: the mask, temperature, softmax
and sampling are ``O(V)`` vectorized passes; top-k is an ``O(V)`` introselect
(:func:`numpy.argpartition`), never a full sort; top-p sorts only the surviving candidates,
``O(m' log m')`` with ``m' <= m`` (``m' <= k`` plus ties when top-k is on).

This module uses numpy only; torch tensors on the CPU are accepted through ``numpy.asarray``.

Lifetime: stateless functions plus the immutable :class:`SamplingParams`; thread-safe (each call
allocates its own output; the caller owns the :class:`numpy.random.Generator`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..bitmask import bitmask_to_bool
from ..errors import ConfigurationError, FormcastError

__all__ = [
    "EMPTY_MASK_MESSAGE",
    "SamplingParams",
    "apply_mask",
    "processed_logits",
    "sample_token",
    "token_probabilities",
]

EMPTY_MASK_MESSAGE = "no token is allowed by the mask; ask the matcher for diagnose()"

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings applied, in this order, after the grammar mask.

    Attributes:
        temperature: divides the allowed logits; ``0`` = greedy (arg-max over allowed tokens).
            Finite and ``>= 0``.
        top_k: keep the k most likely allowed tokens; ``0`` turns it off.  ``>= 0``.
        top_p: nucleus sampling threshold in ``(0, 1]``; ``1.0`` turns it off.
        min_tokens_to_keep: top-k and top-p never keep fewer than this many allowed tokens
            (fewer only when fewer are allowed).  ``>= 1``.  The grammar mask is never relaxed.

    Raises:
        ConfigurationError: a value of the wrong type or out of range.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_tokens_to_keep: int = 1

    def __post_init__(self) -> None:
        t = _real(self.temperature, "temperature")
        if not math.isfinite(t) or t < 0.0:
            raise ConfigurationError(
                f"SamplingParams.temperature must be finite and >= 0 (0 = greedy), got {t!r}"
            )
        k = _integer(self.top_k, "top_k")
        if k < 0:
            raise ConfigurationError(f"SamplingParams.top_k must be >= 0 (0 = off), got {k}")
        p = _real(self.top_p, "top_p")
        if not (0.0 < p <= 1.0):
            raise ConfigurationError(
                f"SamplingParams.top_p must be in (0, 1] (1.0 = off), got {p!r}"
            )
        keep = _integer(self.min_tokens_to_keep, "min_tokens_to_keep")
        if keep < 1:
            raise ConfigurationError(f"SamplingParams.min_tokens_to_keep must be >= 1, got {keep}")
        # Normalise numpy scalars to plain Python numbers (hashing, repr, comparisons).
        object.__setattr__(self, "temperature", t)
        object.__setattr__(self, "top_k", k)
        object.__setattr__(self, "top_p", p)
        object.__setattr__(self, "min_tokens_to_keep", keep)

    @classmethod
    def greedy(cls) -> SamplingParams:
        """Arg-max over the allowed tokens (``temperature=0``)."""
        return cls(temperature=0.0)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigurationError(
            f"SamplingParams.{name} must be a real number, got {type(value).__name__}"
        )
    return float(value)


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigurationError(
            f"SamplingParams.{name} must be an int, got {type(value).__name__}"
        )
    return int(value)


_DEFAULT_PARAMS = SamplingParams()


# -- the mask -----------------------------------------------------------------------------------
def _as_logits(logits: Any) -> FloatArray:
    """A float64 copy of ``logits`` (1-D or 2-D), NaN replaced by ``-inf``."""
    try:
        arr = np.array(logits, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"logits must be a real-valued array: {exc}") from None
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ConfigurationError(
            f"logits must have shape (vocab,) or (batch, vocab) with vocab > 0, got {arr.shape}"
        )
    np.copyto(arr, -np.inf, where=np.isnan(arr))
    return arr


def _unpack_bitmask(bitmask: Any, width: int) -> npt.NDArray[np.bool_]:
    """Allowed flags, shape ``bitmask.shape[:-1] + (width,)``, from int32 bitmask words.

    Bit ``j % 32`` of word ``j // 32`` is token ``j`` (little-endian bit and byte order).
    Columns past the bitmask's ``32 * words`` capacity are not allowed (fail closed, as in
    :func:`formcast.bitmask.apply_token_bitmask_inplace`).
    """
    words = np.asarray(bitmask)
    if words.dtype.kind not in "iu" or words.dtype.itemsize != 4 or words.ndim == 0:
        raise ConfigurationError(
            "a token bitmask is an array of 32-bit integer words, "
            f"got dtype {words.dtype} with shape {words.shape}"
        )
    return bitmask_to_bool(words, width)


def _mask(logits: Any, bitmask_row: Any | None) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Masked float64 logits and, per row, whether the mask allows any token in range."""
    out = _as_logits(logits)
    if bitmask_row is None:
        return out, np.ones(out.shape[:-1], dtype=bool)
    allowed = _unpack_bitmask(bitmask_row, out.shape[-1])
    if allowed.ndim > 2 or (out.ndim == 1 and allowed.ndim != 1):
        raise ConfigurationError(
            f"bitmask of shape {np.shape(bitmask_row)} does not fit logits of shape {out.shape}:"
            " use (W,) words for 1-D logits and (B, W) or (W,) for (B, V) logits"
        )
    if out.ndim == 2 and allowed.ndim == 2 and allowed.shape[0] != out.shape[0]:
        raise ConfigurationError(
            f"batch mismatch: logits have {out.shape[0]} rows, the bitmask {allowed.shape[0]}"
        )
    allowed = np.broadcast_to(allowed, out.shape)
    np.copyto(out, -np.inf, where=~allowed)
    return out, np.asarray(allowed.any(axis=-1), dtype=bool)


def apply_mask(logits: Any, bitmask_row: Any | None) -> FloatArray:
    """Step 1 of the chain: a float64 copy of ``logits`` with ``-inf`` on every disallowed token.

    Args:
        logits: shape ``(V,)`` or ``(B, V)``, any real dtype (float16/32/64 ...).  NaN entries
            become ``-inf``.
        bitmask_row: ``int32`` words, shape ``(W,)`` for 1-D logits or ``(B, W)`` (or ``(W,)``,
            broadcast) for 2-D logits; ``None`` applies no grammar mask.  Bits past ``V`` are
            ignored; logits past ``32 * W`` are disallowed.

    Returns:
        A new float64 array of the logits' shape; allowed entries are unchanged (up to the
        float64 conversion), disallowed ones are ``-inf``.  ``O(V)``.

    Raises:
        ConfigurationError: bad shapes or a bitmask that is not 32-bit integer words.
    """
    return _mask(logits, bitmask_row)[0]


# -- truncation (in place, one row) -------------------------------------------------------------
def _greedy_row(row: FloatArray) -> None:
    """Keep only the first arg-max of ``row`` (already masked)."""
    best = int(np.argmax(row))
    keep = row[best]
    row.fill(-np.inf)
    row[best] = keep


def _top_k_row(row: FloatArray, k: int) -> None:
    """Keep the ``k`` largest finite-or-+inf entries (plus ties with the k-th); ``O(V)``."""
    n_candidates = int(np.count_nonzero(row > -np.inf))
    if k >= n_candidates:
        return
    kth = int(np.argpartition(row, row.size - k)[row.size - k])
    threshold = row[kth]  # > -inf because k < n_candidates
    row[row < threshold] = -np.inf


def _softmax_1d(x: FloatArray) -> FloatArray:
    """Softmax of a 1-D array whose maximum is not ``-inf``; ``+inf`` entries share all mass."""
    top = x.max()
    if top == np.inf:
        hot = (x == np.inf).astype(np.float64)
        out: FloatArray = hot / hot.sum()
        return out
    e = np.exp(x - top)
    out = e / e.sum()
    return out


def _top_p_row(row: FloatArray, top_p: float, min_keep: int) -> None:
    """Keep the smallest most-probable prefix reaching ``top_p`` mass; sorts candidates only."""
    idx = np.flatnonzero(row > -np.inf)
    if idx.size <= min_keep:
        return
    vals = row[idx]
    order = np.argsort(-vals, kind="stable")
    cum = np.cumsum(_softmax_1d(vals[order]))
    n_keep = int(np.searchsorted(cum, top_p, side="left")) + 1
    n_keep = min(max(n_keep, min_keep), idx.size)
    threshold = vals[order[n_keep - 1]]
    row[row < threshold] = -np.inf


def _check_row_not_empty(masked: FloatArray, allowed_any: bool, where: str) -> None:
    if not allowed_any:
        raise FormcastError(EMPTY_MASK_MESSAGE + where)
    if not np.any(masked > -np.inf):
        raise FormcastError(
            "every token allowed by the mask has logit -inf or NaN from the model"
            + where
            + "; a processor before formcast removed all legal tokens (check the order: "
            "the grammar mask must run before any truncation)"
        )


def _process_row(row: FloatArray, allowed_any: bool, params: SamplingParams, where: str) -> None:
    """Temperature -> top-k -> top-p, in place on one masked row."""
    _check_row_not_empty(row, allowed_any, where)
    if params.temperature == 0.0:
        _greedy_row(row)
        return
    if params.temperature != 1.0:
        row /= params.temperature
    if params.top_k > 0:
        _top_k_row(row, max(params.top_k, params.min_tokens_to_keep))
    if params.top_p < 1.0:
        _top_p_row(row, params.top_p, params.min_tokens_to_keep)


def processed_logits(
    logits: Any, bitmask_row: Any | None, params: SamplingParams = _DEFAULT_PARAMS
) -> FloatArray:
    """The whole chain up to (not including) the softmax: mask -> temperature -> top-k -> top-p.

    Args:
        logits: ``(V,)`` or ``(B, V)`` model logits, any real dtype.
        bitmask_row: the grammar's int32 bitmask words (see :func:`apply_mask`) or ``None``.
        params: the :class:`SamplingParams`.

    Returns:
        A new float64 array: ``-inf`` on every token that cannot be sampled, the (temperature
        scaled) logit on the rest.  With ``temperature == 0`` exactly one token per row is
        finite (the first arg-max of the allowed logits).

    Raises:
        FormcastError: a row whose mask allows no token (message: "no token is allowed by the
            mask; ask the matcher for diagnose()"), or whose allowed tokens all have logit
            ``-inf``/NaN.
        ConfigurationError: bad shapes.
    """
    masked, any_allowed = _mask(logits, bitmask_row)
    if masked.ndim == 1:
        _process_row(masked, bool(any_allowed), params, "")
    else:
        for b in range(masked.shape[0]):
            _process_row(masked[b], bool(any_allowed[b]), params, f" (batch row {b})")
    return masked


def token_probabilities(
    logits: Any, bitmask_row: Any | None, params: SamplingParams = _DEFAULT_PARAMS
) -> FloatArray:
    """The sampling distribution: :func:`processed_logits` followed by a softmax.

    Returns float64 probabilities of the logits' shape (``(V,)`` or ``(B, V)``): exactly ``0.0``
    on masked and truncated tokens, each row summing to 1 within ``1e-12``.  ``+inf`` logits
    share the whole mass equally.  ``O(V)`` per row plus the top-p sort (see the module doc).

    Raises:
        FormcastError: as :func:`processed_logits`.
    """
    x = processed_logits(logits, bitmask_row, params)
    if x.ndim == 1:
        return _softmax_1d(x)
    return np.stack([_softmax_1d(x[b]) for b in range(x.shape[0])])


def sample_token(
    logits: Any,
    bitmask_row: Any | None,
    params: SamplingParams,
    rng: np.random.Generator,
) -> int:
    """Sample one token id from 1-D ``logits`` under the grammar mask and ``params``.

    Greedy (``temperature == 0``) returns the first arg-max of the allowed logits and draws
    nothing from ``rng``.  Otherwise exactly one ``rng.random()`` value is drawn and the
    cumulative distribution of :func:`token_probabilities` is inverted, exactly as
    ``rng.choice(V, p=probs)`` does, so a seeded generator reproduces the same tokens.
    The returned id always has nonzero probability, hence is allowed by the mask.

    Raises:
        FormcastError: no token allowed (see :func:`processed_logits`).
        ConfigurationError: 2-D logits or ``rng`` not a :class:`numpy.random.Generator`.
    """
    if not isinstance(rng, np.random.Generator):
        raise ConfigurationError(
            f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )
    if np.ndim(logits) != 1:
        raise ConfigurationError(
            f"sample_token takes 1-D logits, got shape {np.shape(logits)}; sample each row"
        )
    if params.temperature == 0.0:
        return int(np.argmax(processed_logits(logits, bitmask_row, params)))
    probs = token_probabilities(logits, bitmask_row, params)
    cdf = np.cumsum(probs)
    cdf /= cdf[-1]
    tok = int(np.searchsorted(cdf, rng.random(), side="right"))
    if tok >= probs.size or probs[tok] == 0.0:  # pragma: no cover - float edge, defensive
        tok = int(np.flatnonzero(probs)[-1])
    return tok
