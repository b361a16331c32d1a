"""SentencePiece models -> raw vocabulary tables: :func:`read_sentencepiece`.

Normal and user-defined pieces have ``▁`` replaced by a space; byte pieces (``<0xNN>``) are that
single byte; control, unknown and unused pieces are special.  ``sentencepiece`` is imported only
when a ``.model`` file (or its bytes) has to be loaded here.
:meth:`formcast.vocab.vocabulary.Vocabulary.from_sentencepiece` builds the Vocabulary.

Lifetime: stateless.  Cost: O(V + B), a few native calls per id.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...errors import VocabularyError
from ._common import SPM_SPACE, Built, RawVocabulary, byte_piece_value, finish, utf8

__all__ = ["build_sentencepiece", "read_sentencepiece"]


def build_sentencepiece(sp: Any) -> Built:
    """Tokens of a SentencePieceProcessor: ``▁`` -> space, byte pieces -> one byte.  O(V + B)."""
    n = int(sp.get_piece_size())
    built = Built(tokens=[None] * n)
    is_byte = getattr(sp, "is_byte", None)
    for tid in range(n):
        piece = str(sp.id_to_piece(tid))
        if sp.is_control(tid) or sp.is_unknown(tid) or sp.is_unused(tid):
            built.tokens[tid] = utf8(piece, "special piece")
            built.special.add(tid)
            built.special_texts[piece] = tid
            continue
        if is_byte is not None and is_byte(tid):
            value = byte_piece_value(piece)
            if value is None:
                raise VocabularyError(f"SentencePiece byte piece {tid} is {piece!r}, not <0xNN>")
            built.tokens[tid] = bytes((value,))
            continue
        built.tokens[tid] = utf8(piece.replace(SPM_SPACE, " "), "piece")
    eos = int(sp.eos_id())
    if eos >= 0:
        built.declared_eos.append(eos)
    return built


def read_sentencepiece(
    processor_or_model_path: Any,
    *,
    stop_token_ids: int | Iterable[int] | None = None,
    vocab_size: int | None = None,
    name: str | None = None,
) -> RawVocabulary:
    """The raw tables of a SentencePiece model.

    Normal and user-defined pieces have ``▁`` replaced by a space; byte pieces (``<0xNN>``) are
    that single byte; control, unknown and unused pieces are special.  Note the *dummy prefix*:
    SentencePiece adds ``▁`` before the first word of an input, so the first token of an encoded
    text usually starts with a space that the text lacks.

    Args:
        processor_or_model_path: a ``sentencepiece.SentencePieceProcessor``, a path to a
            ``.model`` file, or the serialized model (``bytes``).
        stop_token_ids: default: the model's ``eos_id()`` plus control pieces in
            :data:`~._common.KNOWN_STOP_TOKENS`.
        vocab_size: the width of the model's logits if larger than the piece count.
        name: a label; default the file name or ``"sentencepiece"``.

    Raises:
        VocabularyError: missing/unreadable file, sentencepiece not installed, no stop id,
            ``vocab_size`` too small.

    Complexity: O(V + B), a few native calls per id.
    """
    obj = processor_or_model_path
    label = name
    if hasattr(obj, "id_to_piece") and hasattr(obj, "get_piece_size"):
        sp = obj
    else:
        try:
            import sentencepiece
        except ImportError as exc:
            raise VocabularyError(
                "reading a SentencePiece model needs the sentencepiece package: "
                "pip install sentencepiece"
            ) from exc
        sp = sentencepiece.SentencePieceProcessor()
        try:
            if isinstance(obj, (bytes, bytearray)):
                sp.LoadFromSerializedProto(bytes(obj))
            elif isinstance(obj, (str, os.PathLike)):
                path = Path(obj)
                if not path.is_file():
                    raise VocabularyError(
                        f"SentencePiece model file not found: {str(path)!r}; pass the path of "
                        "the tokenizer's .model file or a SentencePieceProcessor"
                    )
                label = label or path.name
                sp.Load(str(path))
            else:
                raise VocabularyError(
                    f"from_sentencepiece needs a SentencePieceProcessor, a .model path or the "
                    f"model bytes, got {type(obj).__name__}"
                )
        except (OSError, RuntimeError) as exc:
            raise VocabularyError(f"cannot load the SentencePiece model: {exc}") from exc
    label = label or "sentencepiece"
    built = build_sentencepiece(sp)
    return finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=label, source=label
    )
