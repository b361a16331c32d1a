"""Tokenizer adapters → :class:`Vocabulary` (exact bytes per token id, stop and special ids).

Never imports :mod:`formcast.grammar` or :mod:`formcast.automata`.
"""

from .vocabulary import Vocabulary

__all__ = ["Vocabulary"]
