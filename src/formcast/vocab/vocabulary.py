"""The exact byte vocabulary of a tokenizer.

A :class:`Vocabulary` is ``tuple[bytes, ...]`` by token id, plus the ids of stop tokens and of
special tokens.  Special tokens (BOS, PAD, chat markers, stop tokens) are *never* matched by their
text: a grammar can only allow a stop token, and only in an accepting state.

Lifetime: per model.  Immutable; derived tables (the token trie used for vectorized automaton
walks) are built lazily, once, and cached on the instance.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import VocabularyError

if TYPE_CHECKING:  # pragma: no cover
    from .sources import RawVocabulary
    from .trie import TokenTrie

__all__ = ["Vocabulary"]


class Vocabulary:
    """Exact bytes of every token id, stop ids and special ids.

    Args:
        tokens: the bytes of each token, indexed by id.  Special tokens may have any bytes
            (their text is never matched); give ``b""`` for ids without a text form.
        stop_token_ids: ids that end generation (EOS, ``<|im_end|>``, ...).  At least one.
        special_token_ids: ids never produced by text (BOS, PAD, control tokens).  Stop ids are
            added automatically.
        vocab_size: the width of the model's logits; may exceed ``len(tokens)`` (the extra ids
            are never allowed).  Defaults to ``len(tokens)``.
        name: a label for messages (e.g. ``"llama3"``).

    Raises:
        VocabularyError: empty vocabulary, a token that is not ``bytes``, stop/special ids out of
            range, no stop id, or ``vocab_size < len(tokens)``.
    """

    __slots__ = (
        "_fingerprint",
        "_lock",
        "_trie",
        "name",
        "special_token_ids",
        "stop_token_ids",
        "tokens",
        "vocab_size",
    )

    def __init__(
        self,
        tokens: Sequence[bytes],
        *,
        stop_token_ids: Iterable[int],
        special_token_ids: Iterable[int] = (),
        vocab_size: int | None = None,
        name: str = "vocabulary",
    ) -> None:
        toks = tuple(tokens)
        if not toks:
            raise VocabularyError("the vocabulary is empty: pass at least one token")
        for i, t in enumerate(toks):
            if not isinstance(t, (bytes, bytearray)):
                raise VocabularyError(
                    f"token {i} is {type(t).__name__}, not bytes: decode tokens to their exact "
                    "bytes (never via str with errors='replace')"
                )
        toks = tuple(bytes(t) for t in toks)
        size = len(toks) if vocab_size is None else int(vocab_size)
        if size < len(toks):
            raise VocabularyError(
                f"vocab_size={size} is smaller than the tokenizer's {len(toks)} tokens; "
                "vocab_size is the width of the model's logits"
            )
        stops = frozenset(int(i) for i in stop_token_ids)
        if not stops:
            raise VocabularyError(
                "no stop token id given: pass stop_token_ids (e.g. the EOS id), otherwise "
                "generation could never finish"
            )
        specials = frozenset(int(i) for i in special_token_ids) | stops
        for kind, ids in (("stop", stops), ("special", specials)):
            bad = sorted(i for i in ids if not 0 <= i < size)
            if bad:
                raise VocabularyError(
                    f"{kind} token id(s) {bad[:5]} out of range for vocab_size={size}"
                )
        self.tokens: tuple[bytes, ...] = toks
        self.vocab_size: int = size
        self.stop_token_ids: frozenset[int] = stops
        self.special_token_ids: frozenset[int] = specials
        self.name = name
        self._fingerprint: str | None = None
        self._trie: TokenTrie | None = None
        self._lock = threading.Lock()

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def from_tokens(
        cls,
        tokens: Sequence[bytes],
        *,
        stop_token_ids: Iterable[int],
        special_token_ids: Iterable[int] = (),
        vocab_size: int | None = None,
        name: str = "vocabulary",
    ) -> Vocabulary:
        """Build from a list of byte strings (see the class docstring)."""
        return cls(
            tokens,
            stop_token_ids=stop_token_ids,
            special_token_ids=special_token_ids,
            vocab_size=vocab_size,
            name=name,
        )

    @classmethod
    def from_raw(cls, raw: RawVocabulary) -> Vocabulary:
        """Build from the tables a source read (:mod:`formcast.vocab.sources`)."""
        return cls(
            raw.tokens,
            stop_token_ids=raw.stop_token_ids,
            special_token_ids=raw.special_token_ids,
            vocab_size=raw.vocab_size,
            name=raw.name,
        )

    @classmethod
    def from_huggingface(
        cls,
        tokenizer: Any,
        *,
        stop_token_ids: int | Iterable[int] | None = None,
        vocab_size: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """From a ``tokenizers.Tokenizer`` or a transformers tokenizer (see
        :func:`formcast.vocab.sources.huggingface.read_huggingface`)."""
        from .sources.huggingface import read_huggingface

        return cls.from_raw(
            read_huggingface(
                tokenizer, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=name
            )
        )

    @classmethod
    def from_tiktoken(
        cls,
        encoding: Any,
        *,
        stop_token_ids: int | Iterable[int] | None = None,
        vocab_size: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """From a ``tiktoken.Encoding`` (see
        :func:`formcast.vocab.sources.tiktoken.read_tiktoken`)."""
        from .sources.tiktoken import read_tiktoken

        return cls.from_raw(
            read_tiktoken(encoding, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=name)
        )

    @classmethod
    def from_gguf(
        cls,
        path: str | os.PathLike[str],
        *,
        stop_token_ids: int | Iterable[int] | None = None,
        vocab_size: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """From the tokenizer arrays of a GGUF file (see
        :func:`formcast.vocab.sources.gguf.read_gguf`)."""
        from .sources.gguf import read_gguf

        return cls.from_raw(
            read_gguf(path, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=name)
        )

    @classmethod
    def from_sentencepiece(
        cls,
        processor_or_model_path: Any,
        *,
        stop_token_ids: int | Iterable[int] | None = None,
        vocab_size: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """From a ``sentencepiece.SentencePieceProcessor``, a ``.model`` path or its bytes (see
        :func:`formcast.vocab.sources.sentencepiece.read_sentencepiece`)."""
        from .sources.sentencepiece import read_sentencepiece

        return cls.from_raw(
            read_sentencepiece(
                processor_or_model_path,
                stop_token_ids=stop_token_ids,
                vocab_size=vocab_size,
                name=name,
            )
        )

    # -- queries ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return (
            f"Vocabulary(name={self.name!r}, tokens={len(self.tokens)}, "
            f"vocab_size={self.vocab_size}, stop={sorted(self.stop_token_ids)[:4]})"
        )

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of ``token_id`` (``b""`` for special tokens and ids past the tokenizer)."""
        if token_id in self.special_token_ids or not 0 <= token_id < len(self.tokens):
            return b""
        return self.tokens[token_id]

    def decode(self, token_ids: Iterable[int]) -> bytes:
        """Concatenate the text bytes of ``token_ids`` (special tokens contribute nothing)."""
        return b"".join(self.token_bytes(t) for t in token_ids)

    def is_text_token(self, token_id: int) -> bool:
        """True for a non-special token with non-empty bytes."""
        return (
            0 <= token_id < len(self.tokens)
            and token_id not in self.special_token_ids
            and bool(self.tokens[token_id])
        )

    @property
    def fingerprint(self) -> str:
        """SHA-256 over every token's bytes, the stop and special ids and ``vocab_size``.

        Any change to any of them changes the fingerprint; caches key on it.
        """
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(b"formcast-vocab-v1\0")
            h.update(str(self.vocab_size).encode())
            lengths = array("I", map(len, self.tokens))
            if sys.byteorder != "little":
                lengths.byteswap()
            h.update(lengths.tobytes())
            h.update(b"".join(self.tokens))
            h.update(b"\0stop:" + ",".join(map(str, sorted(self.stop_token_ids))).encode())
            h.update(b"\0special:" + ",".join(map(str, sorted(self.special_token_ids))).encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    @property
    def trie(self) -> TokenTrie:
        """The token trie (built once, on first use; O(total token bytes))."""
        if self._trie is None:
            with self._lock:
                if self._trie is None:
                    from .trie import TokenTrie

                    self._trie = TokenTrie(
                        self.tokens,
                        special_token_ids=self.special_token_ids,
                        vocab_size=self.vocab_size,
                    )
        return self._trie
