"""Any ``logits = f(token_ids)`` callable as a model: :class:`CallableModel` (numpy only).

For models formcast has no wrapper for, for tests, and for toy worlds::

    from formcast.model.callable import CallableModel
    from formcast.generation import generate

    model = CallableModel(lambda ids: my_model_logits(ids), vocab, tokenize=my_encode)
    generate(model, "prompt", regex=r"yes|no").text

``f`` receives the *whole* sequence so far (prompt then output, as a ``list[int]``) and returns
the next-token logits (any 1-D real array-like of width ``vocab.vocab_size``).  Without a KV
cache that means re-reading the sequence at every step; a stateful model should implement
:class:`~formcast.model.protocol.LanguageModel` (``start``/``step``) directly.

Lifetime: one wrapper per model; one sequence at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from ..vocab.vocabulary import Vocabulary
from .base import ModelBase
from .chat import ChatTemplate
from .protocol import Logits

__all__ = ["CallableModel"]


def _raw_encoder(
    fn: Callable[[bytes], Sequence[int] | None],
) -> Callable[[bytes], list[int] | None]:
    def encode_bytes(data: bytes) -> list[int] | None:
        got = fn(bytes(data))
        return None if got is None else [int(t) for t in got]

    return encode_bytes


class CallableModel(ModelBase):
    """A :class:`~formcast.model.protocol.LanguageModel` around a logits function.

    Args:
        logits_fn: ``f(token_ids) -> logits`` over the whole sequence so far.
        vocab: the exact vocabulary of the token ids ``f`` understands (``vocab.vocab_size``
            is the width of its logits).
        tokenize: text -> token ids, for text prompts (without it, prompts must be token ids).
        encode_bytes: bytes -> token ids as the tokenizer encodes plain text (no BOS/specials;
            ``None`` for bytes it cannot encode exactly): the optional
            :class:`~formcast.model.protocol.SupportsEncodeBytes` capability, needed by
            ``canonical=True`` (without it that option raises ``ConfigurationError``).
        chat_template: the chat format, or ``None``.
        max_context: the longest sequence ``f`` accepts (``None``: unbounded).
        name: a label.

    Raises:
        ConfigurationError: ``logits_fn`` not callable, ``vocab`` not a Vocabulary, or (at run
            time) logits of the wrong shape.
    """

    def __init__(
        self,
        logits_fn: Callable[[list[int]], Any],
        vocab: Vocabulary,
        *,
        tokenize: Callable[[str], Sequence[int]] | None = None,
        encode_bytes: Callable[[bytes], Sequence[int] | None] | None = None,
        chat_template: ChatTemplate | None = None,
        max_context: int | None = None,
        name: str = "callable",
    ) -> None:
        if not callable(logits_fn):
            raise ConfigurationError("logits_fn must be callable: f(token_ids) -> logits")
        if not isinstance(vocab, Vocabulary):
            raise ConfigurationError(f"vocab must be a Vocabulary, got {type(vocab).__name__}")
        self._fn = logits_fn
        self._vocab = vocab
        self._tokenize = tokenize
        if encode_bytes is not None and not callable(encode_bytes):
            raise ConfigurationError("encode_bytes must be callable: bytes -> token ids")
        self.encode_bytes: Callable[[bytes], list[int] | None] | None = (
            None if encode_bytes is None else _raw_encoder(encode_bytes)
        )
        """The raw encoder when given (``None``: no such capability, see ``raw_encoder``)."""
        self._chat = chat_template
        self._max_context = max_context
        self._name = name
        self._seq: list[int] = []
        self.calls = 0

    @property
    def sequence(self) -> list[int]:
        """The token ids evaluated so far (prompt then output)."""
        return list(self._seq)

    def tokenize(self, text: str) -> list[int]:
        if self._tokenize is None:
            raise ConfigurationError(
                f"model {self._name!r} has no tokenizer: pass tokenize= to CallableModel, or "
                "give the prompt as token ids"
            )
        return [int(t) for t in self._tokenize(text)]

    def _call(self) -> Logits:
        self.calls += 1
        out = np.asarray(self._fn(list(self._seq)))
        if out.ndim != 1 or out.shape[0] != self._vocab.vocab_size:
            raise ConfigurationError(
                f"logits_fn returned shape {out.shape}; expected ({self._vocab.vocab_size},), "
                "the vocabulary's vocab_size"
            )
        if out.dtype.kind != "f":
            out = out.astype(np.float64)
        return out

    def start(self, prompt_ids: Sequence[int]) -> Logits:
        self._seq = [int(t) for t in prompt_ids]
        return self._call()

    def step(self, token_ids: Sequence[int]) -> Logits:
        self._seq.extend(int(t) for t in token_ids)
        return self._call()
