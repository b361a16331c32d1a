"""Tokenizer sources: one small module per tokenizer library, each returning raw tables.

* :mod:`.huggingface` -- ``tokenizers.Tokenizer`` and transformers tokenizers (byte-level BPE
  and SentencePiece style);
* :mod:`.tiktoken` -- a ``tiktoken.Encoding`` (public API only);
* :mod:`.sentencepiece` -- a ``SentencePieceProcessor`` or a ``.model`` file;
* :mod:`.gguf` -- the ``tokenizer.ggml.*`` arrays of a GGUF file (no dependency).

Each ``read_*`` function recovers the *exact bytes* of every token id, the way the tokenizer
itself maps text to ids, and returns a :class:`RawVocabulary` (token bytes, stop ids, special
ids, ``vocab_size``, name); :class:`~formcast.vocab.vocabulary.Vocabulary`'s ``from_*``
constructors build the Vocabulary from it.  Special tokens (BOS, PAD, chat markers, control
tokens) are special ids: their text is kept for messages but never matched.  Ids without a
token (holes in the id space) get ``b""`` and are special too.  Stop ids, when not given, are
the EOS id the tokenizer declares plus the well-known end-of-sequence / end-of-turn tokens
(:data:`KNOWN_STOP_TOKENS`) among its special tokens.

No tokenizer library is imported by these modules: they work on the objects they are given
(duck-typed); only :mod:`.sentencepiece` imports ``sentencepiece``, when it has to load a
``.model`` file itself.

Lifetime: stateless functions; a read is O(V + B) for V token ids with B bytes of token text
(plus the tokenizer library's own serialization, e.g. ``Tokenizer.to_str()``).
"""

from ._common import KNOWN_STOP_TOKENS, RawVocabulary

__all__ = ["KNOWN_STOP_TOKENS", "RawVocabulary"]
