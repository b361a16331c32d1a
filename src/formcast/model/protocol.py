"""What the generation loop needs from a language model: :class:`LanguageModel`.

A model wrapper (:class:`formcast.model.llama_cpp.LlamaCppModel`,
:class:`formcast.model.transformers.TransformersModel`,
:class:`formcast.model.callable.CallableModel`) exposes its exact byte
:class:`~formcast.vocab.vocabulary.Vocabulary`, a tokenizer for prompts, an optional chat
template and two calls that return next-token logits:

* ``start(prompt_ids)`` forgets any previous sequence, evaluates the prompt and returns the
  logits of the next token;
* ``step(token_ids)`` appends one or more tokens and returns the logits after the last one
  (several tokens when the grammar forced some: they are evaluated in one batch).

The returned logits are a 1-D float array of width ``vocab.vocab_size``.  They may be a view
into the model's buffer, valid until the next ``start``/``step`` call: the loop consumes them
immediately.

An optional capability, :class:`SupportsEncodeBytes`: ``encode_bytes(data)``, the tokenizer's
*raw* encoding of bytes (no BOS, no special tokens, special markers not parsed), which
``canonical=True`` (:mod:`formcast.vocab.canonical`) and the non-canonical measurements need.
Every wrapper of formcast has it (:class:`~formcast.model.callable.CallableModel` when given
``encode_bytes=``); a model without it still generates, only ``canonical=True`` is refused
(:func:`raw_encoder` says what to do).

Lifetime: per model; a wrapper runs one sequence at a time (not thread-safe).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..errors import ConfigurationError
from ..vocab.vocabulary import Vocabulary
from .chat import ChatTemplate

__all__ = ["LanguageModel", "Logits", "SupportsEncodeBytes", "raw_encoder"]

Logits = npt.NDArray[np.floating]
"""A 1-D float array of next-token logits, width ``vocab.vocab_size``."""


@runtime_checkable
class LanguageModel(Protocol):
    """A causal language model driven token by token (see the module docstring)."""

    @property
    def vocab(self) -> Vocabulary:
        """The exact byte vocabulary of the model's tokenizer (width of the logits included)."""
        ...

    @property
    def name(self) -> str:
        """A label for messages and reports."""
        ...

    @property
    def chat_template(self) -> ChatTemplate | None:
        """The model's chat format, or ``None`` for a base model."""
        ...

    @property
    def max_context(self) -> int | None:
        """Tokens the model can hold (prompt + output), ``None`` if unbounded."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Prompt text to token ids; special markers (``<|im_start|>``) become their ids and
        the model's BOS is added when its tokenizer adds one."""
        ...

    def start(self, prompt_ids: Sequence[int]) -> Logits:
        """Forget the previous sequence, evaluate ``prompt_ids`` (non-empty), return the logits
        of the next token."""
        ...

    def step(self, token_ids: Sequence[int]) -> Logits:
        """Append ``token_ids`` (non-empty) and return the logits after the last one."""
        ...


@runtime_checkable
class SupportsEncodeBytes(Protocol):
    """The optional raw-encode capability of a model wrapper (see the module docstring)."""

    def encode_bytes(self, data: bytes) -> list[int] | None:
        """``data`` to token ids as the tokenizer encodes plain text: no BOS/EOS, no special
        tokens, special markers in the text not parsed; ``None`` when the bytes cannot be
        encoded exactly (a text-only tokenizer given bytes that are not UTF-8)."""
        ...


def raw_encoder(model: object, what: str = "canonical=True") -> Callable[[bytes], list[int] | None]:
    """``model.encode_bytes``, or a :class:`~formcast.errors.ConfigurationError` naming the fix
    (``what`` is the option that needs it, for the message)."""
    fn = getattr(model, "encode_bytes", None)
    if not callable(fn):
        raise ConfigurationError(
            f"{what} needs the model's raw tokenizer (an encode_bytes(data) -> token ids "
            f"method, no BOS/specials); {type(model).__name__} has none: use LlamaCppModel or "
            "TransformersModel (with a tokenizer), pass encode_bytes= to CallableModel, or add "
            "encode_bytes to your wrapper"
        )
    encode: Callable[[bytes], list[int] | None] = fn
    return encode
