"""Tokenizers → :class:`Vocabulary` (exact bytes per token id, stop and special ids).

:mod:`.sources` reads each tokenizer library into raw tables, :class:`Vocabulary` is built from
them, :mod:`.trie` arranges its text tokens for vectorized automaton walks, :mod:`.loaders`
names a few vocabularies for the CLI.  Never imports the grammar side (:mod:`formcast.ir`,
:mod:`formcast.frontends`, :mod:`formcast.automata`).
"""

from .vocabulary import Vocabulary

__all__ = ["Vocabulary"]
