"""What every model wrapper shares: :class:`ModelBase`.

The four read-only properties of :class:`~formcast.model.protocol.LanguageModel` that are plain
stored values (``vocab``, ``name``, ``chat_template``, ``max_context``) and the ``__repr__``
shape, for :class:`~formcast.model.llama_cpp.LlamaCppModel`,
:class:`~formcast.model.transformers.TransformersModel` and
:class:`~formcast.model.callable.CallableModel`.  A subclass sets the slots in its constructor
(or overrides a property: llama.cpp reads ``max_context`` from its context), may override
:meth:`ModelBase._describe` for ``__repr__``, and implements ``tokenize``, ``start`` and
``step``.

Lifetime: one per wrapped model (the subclass's).  Every property is one attribute read.
"""

from __future__ import annotations

from ..vocab.vocabulary import Vocabulary
from .chat import ChatTemplate

__all__ = ["ModelBase"]


class ModelBase:
    """The stored half of a :class:`~formcast.model.protocol.LanguageModel` (see the module
    docstring); not a model on its own."""

    __slots__ = ("_chat", "_max_context", "_name", "_vocab")

    _vocab: Vocabulary
    _name: str
    _chat: ChatTemplate | None
    _max_context: int | None

    @property
    def vocab(self) -> Vocabulary:
        return self._vocab

    @property
    def name(self) -> str:
        return self._name

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self._chat

    @property
    def max_context(self) -> int | None:
        return self._max_context

    def _describe(self) -> str:
        """The fields ``__repr__`` shows after the name."""
        return f"vocab_size={self._vocab.vocab_size}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._name!r}, {self._describe()})"
