"""tiktoken encodings -> raw vocabulary tables: :func:`read_tiktoken`.

Uses the public ``tiktoken.Encoding`` API only (``decode_single_token_bytes``,
``special_tokens_set``, ``encode_single_token``) on the encoding given; tiktoken itself is never
imported.  :meth:`formcast.vocab.vocabulary.Vocabulary.from_tiktoken` builds the Vocabulary.

Lifetime: stateless.  Cost: O(V + B), one native call per id.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from ...errors import VocabularyError
from ._common import Built, RawVocabulary, finish

__all__ = ["read_tiktoken"]


def read_tiktoken(
    encoding: Any,
    *,
    stop_token_ids: int | Iterable[int] | None = None,
    vocab_size: int | None = None,
    name: str | None = None,
) -> RawVocabulary:
    """The raw tables of a ``tiktoken.Encoding``, through its public API.

    Token bytes come from ``decode_single_token_bytes`` for every id below ``n_vocab``; ids it
    does not know (holes, e.g. 100256 in cl100k) are ``b""`` and special.  Special tokens are
    ``special_tokens_set`` mapped with ``encode_single_token``.

    Args:
        encoding: a ``tiktoken.Encoding``.
        stop_token_ids: default: the special tokens in :data:`~._common.KNOWN_STOP_TOKENS`
            (``<|endoftext|>`` for cl100k/o200k).
        vocab_size: the width of the model's logits if larger than ``n_vocab``.
        name: a label; default the encoding's name.

    Raises:
        VocabularyError: not a tiktoken encoding, no stop id found, ``vocab_size`` too small.

    Complexity: O(V + B), one native call per id.
    """
    decode = getattr(encoding, "decode_single_token_bytes", None)
    n_vocab = getattr(encoding, "n_vocab", None)
    if decode is None or not isinstance(n_vocab, int):
        raise VocabularyError(
            f"{type(encoding).__name__} is not a tiktoken.Encoding (it needs n_vocab and "
            "decode_single_token_bytes); for Hugging Face tokenizers use from_huggingface"
        )
    built = Built(tokens=[None] * n_vocab)
    for tid in range(n_vocab):
        with contextlib.suppress(KeyError):  # KeyError: a hole in the id space
            built.tokens[tid] = bytes(decode(tid))
    for text in getattr(encoding, "special_tokens_set", ()) or ():
        tid = int(encoding.encode_single_token(text))
        if 0 <= tid < n_vocab:
            built.special.add(tid)
            built.special_texts[str(text)] = tid
    label = name or str(getattr(encoding, "name", "") or "tiktoken")
    return finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=label, source=label
    )
