"""Tokenizer adapters → :class:`Vocabulary` (exact bytes per token id, stop and special ids).

Never imports the grammar side (:mod:`formcast.ir`, :mod:`formcast.frontends`, :mod:`formcast.automata`).
"""

from .vocabulary import Vocabulary

__all__ = ["Vocabulary"]
