"""The vocabulary of a serving engine's tokenizer at the model's logits width.

vLLM and SGLang hand a backend a Hugging Face tokenizer and the width of the model's logits
(``vocab_size``), which often differs from the tokenizer's length: wider (padding ids the model
never produces: never allowed) or narrower (added tokens the model has no logits for: dropped).

Lifetime: a pure function; the :class:`Vocabulary` it returns is per model, immutable.
Cost: one read of the tokenizer's token bytes (``read_huggingface``), O(vocabulary).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import ConfigurationError, VocabularyError
from .vocabulary import Vocabulary

__all__ = ["engine_vocabulary"]


def engine_vocabulary(
    tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int] | int | None = None
) -> Vocabulary:
    """The :class:`Vocabulary` of ``tokenizer`` for a model whose logits have ``vocab_size``
    entries.

    ``stop_token_ids`` (the engine's EOS ids for the model) are the stop tokens; ``None``: the
    tokenizer's EOS.  Wider logits than the tokenizer: the padding ids are never allowed;
    narrower: the tokenizer's ids past ``vocab_size`` are dropped (the model cannot produce them).

    Raises:
        VocabularyError: a tokenizer formcast cannot read exact token bytes from (see
            :meth:`Vocabulary.from_huggingface`; a mistral-common tokenizer, for example), or no
            stop id below ``vocab_size``.
        ConfigurationError: a ``vocab_size`` that is not a positive int.
    """
    from .sources.huggingface import read_huggingface

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
        raise ConfigurationError(f"vocab_size must be a positive int, got {vocab_size!r}")
    if isinstance(stop_token_ids, int):
        stop_token_ids = [stop_token_ids]
    stops_in = sorted({int(i) for i in stop_token_ids}) if stop_token_ids else None
    raw = read_huggingface(tokenizer, stop_token_ids=stops_in)
    tokens = raw.tokens[:vocab_size]
    stops = [i for i in raw.stop_token_ids if i < vocab_size]
    if not stops:
        raise VocabularyError(
            f"none of the stop ids {list(raw.stop_token_ids)[:5]} is below the model's "
            f"vocab_size={vocab_size}: pass the model's EOS ids as stop_token_ids"
        )
    return Vocabulary(
        tokens,
        stop_token_ids=stops,
        special_token_ids=[i for i in raw.special_token_ids if i < vocab_size],
        vocab_size=max(vocab_size, len(tokens)),
        name=raw.name,
    )
