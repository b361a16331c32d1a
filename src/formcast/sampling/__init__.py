"""Sampling under a grammar mask: one processor chain, in one fixed order.

``logits -> grammar mask (-inf) -> temperature -> top-k -> top-p -> softmax -> sample``

See :mod:`formcast.sampling.chain` for the semantics of each step.  numpy only.
"""

from __future__ import annotations

from .chain import (
    EMPTY_MASK_MESSAGE,
    SamplingParams,
    apply_mask,
    processed_logits,
    sample_token,
    token_probabilities,
)

__all__ = [
    "EMPTY_MASK_MESSAGE",
    "SamplingParams",
    "apply_mask",
    "processed_logits",
    "sample_token",
    "token_probabilities",
]
