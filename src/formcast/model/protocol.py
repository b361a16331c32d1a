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

Lifetime: per model; a wrapper runs one sequence at a time (not thread-safe).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..vocab.vocabulary import Vocabulary
from .chat import ChatTemplate

__all__ = ["LanguageModel", "Logits"]

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
