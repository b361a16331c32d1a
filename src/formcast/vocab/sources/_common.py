"""What every tokenizer source shares: the raw tables it returns and how they are finished.

A source (:mod:`.huggingface`, :mod:`.tiktoken`, :mod:`.sentencepiece`, :mod:`.gguf`) fills a
:class:`Built` (token bytes by id, ``None`` for holes, special ids, stop-id candidates) and
:func:`finish` turns it into a :class:`RawVocabulary`: holes become ``b""`` and special, the stop
ids are resolved (given, or inferred from the declared EOS ids and :data:`KNOWN_STOP_TOKENS`)
and ``vocab_size`` is checked.  :class:`~formcast.vocab.vocabulary.Vocabulary` is built from the
raw tables by its ``from_*`` constructors; nothing here imports it.

Also here: the GPT-2 byte-to-unicode map (byte-level BPE pieces -> bytes) and the SentencePiece
spellings (``▁`` is a space, ``<0xNN>`` is one byte) that several sources decode.

Lifetime: the tables are module constants, built once at import (O(256)); a
:class:`RawVocabulary` lives until its Vocabulary is built.  :func:`finish` is O(V) for V ids.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from ...errors import VocabularyError

__all__ = [
    "BYTE_PIECE_BYTES",
    "KNOWN_STOP_TOKENS",
    "SPM_SPACE",
    "SPM_SPACE_BYTES",
    "Built",
    "RawVocabulary",
    "byte_level_bytes",
    "byte_piece_value",
    "finish",
    "utf8",
]


#: Texts of special tokens that end generation in the common model families.  Used only to
#: *infer* stop ids when none are given, and only among tokens that are special (never among
#: ordinary text tokens: ``"</s>"`` is also a plain HTML token in some code vocabularies).
KNOWN_STOP_TOKENS: Final[frozenset[str]] = frozenset(
    {
        "</s>",  # Llama-2, Mistral, T5...
        "<eos>",  # Gemma
        "<end_of_turn>",  # Gemma chat
        "<turn|>",  # Gemma-4 chat
        "<|tool_response>",  # Gemma-4: hands over to the tool (llama.cpp ends generation)
        "<|endoftext|>",  # GPT-2, cl100k/o200k, Qwen, Phi, StarCoder, SmolLM
        "<|end_of_text|>",  # Llama-3, Granite
        "<|eot_id|>",  # Llama-3 chat
        "<|eom_id|>",  # Llama-3.1 tool call
        "<|eot|>",  # Llama-4 chat
        "<|im_end|>",  # ChatML (Qwen, SmolLM, ...)
        "<|end|>",  # Phi-3 chat (not a stop in harmony: see _HARMONY_RETURN)
        "<|return|>",  # gpt-oss (harmony)
        "<|call|>",  # gpt-oss (harmony)
        "<｜end▁of▁sentence｜>",  # DeepSeek (full-width bars)
        "<|end▁of▁sentence|>",  # DeepSeek, ASCII bars
        "<|END_OF_TURN_TOKEN|>",  # Command-R
        "<EOT>",  # CodeLlama infill
        "<end_of_utterance>",  # SmolVLM / SmolDocling
    }
)

# In the harmony format (gpt-oss) "<|end|>" ends a *message*, not the generation; llama.cpp makes
# the same exception.
_HARMONY_RETURN: Final = "<|return|>"
_HARMONY_END: Final = "<|end|>"


# --------------------------------------------------------------------------------------------
# byte-level (GPT-2) and SentencePiece piece decoding
# --------------------------------------------------------------------------------------------
def _gpt2_byte_to_unicode() -> dict[int, str]:
    """The GPT-2 map from each byte to the printable character that stands for it."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


_BYTE_TO_UNICODE: Final[dict[int, str]] = _gpt2_byte_to_unicode()
_UNICODE_CHARS: Final[frozenset[str]] = frozenset(_BYTE_TO_UNICODE.values())
# str.translate table: byte-level character -> the latin-1 character of its byte.
_UNICODE_TO_LATIN1: Final[dict[int, str]] = {ord(c): chr(b) for b, c in _BYTE_TO_UNICODE.items()}

SPM_SPACE: Final = "\u2581"  # "▁"
SPM_SPACE_BYTES: Final = SPM_SPACE.encode()
_BYTE_PIECE: Final = re.compile(r"<0x([0-9A-Fa-f]{2})>")
BYTE_PIECE_BYTES: Final = re.compile(rb"<0x([0-9A-Fa-f]{2})>")


def byte_level_bytes(piece: str) -> bytes:
    """Bytes of a byte-level BPE piece, exactly as the tokenizers ``ByteLevel`` decoder does it.

    Every character of a byte-level piece stands for one byte.  A piece with a character outside
    the map (an added token such as ``"<|im_start|> "``) is its own UTF-8, as in tokenizers.
    O(len(piece)).
    """
    if _UNICODE_CHARS.issuperset(piece):
        return piece.translate(_UNICODE_TO_LATIN1).encode("latin-1")
    return piece.encode("utf-8")


def byte_piece_value(piece: str) -> int | None:
    """The byte of a ``<0xNN>`` byte-fallback piece, or None for any other piece."""
    m = _BYTE_PIECE.fullmatch(piece)
    return int(m.group(1), 16) if m else None


def utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates from a malformed tokenizer.json
        raise VocabularyError(f"{what} {text!r} is not encodable as UTF-8: {exc}") from exc


@dataclass(frozen=True)
class RawVocabulary:
    """The tables a source read, ready for :class:`~formcast.vocab.vocabulary.Vocabulary`.

    Attributes:
        tokens: the bytes of each token id (``b""`` for holes).
        stop_token_ids: the ids that end generation, in the order found (at least one).
        special_token_ids: ids never matched by their text (holes included).
        vocab_size: the width of the model's logits, or ``None`` for ``len(tokens)``.
        name: a label for messages.
    """

    tokens: tuple[bytes, ...]
    stop_token_ids: tuple[int, ...]
    special_token_ids: frozenset[int]
    vocab_size: int | None
    name: str


@dataclass
class Built:
    """Tokens by id (None for holes), special ids, and stop-id candidates, before validation."""

    tokens: list[bytes | None]
    special: set[int] = field(default_factory=set)
    # special token text -> id, used to infer stop ids
    special_texts: dict[str, int] = field(default_factory=dict)
    declared_eos: list[int] = field(default_factory=list)


def _stop_ids_arg(stop_token_ids: int | Iterable[int]) -> list[int]:
    """The explicit stop ids as ints (any integer type, e.g. numpy's; never floats or str)."""
    if not isinstance(stop_token_ids, Iterable):
        stop_token_ids = [stop_token_ids]
    try:
        ids = [operator.index(i) for i in stop_token_ids]
    except TypeError as exc:
        raise VocabularyError(
            f"stop_token_ids must be an int or an iterable of ints, got {stop_token_ids!r}"
        ) from exc
    if not ids:
        raise VocabularyError("stop_token_ids is empty: give at least one id (e.g. the EOS id)")
    return ids


def _infer_stop_ids(built: Built, source: str) -> list[int]:
    """Declared EOS ids plus well-known stop tokens among the special tokens.  O(#specials)."""
    ids = list(dict.fromkeys(i for i in built.declared_eos if 0 <= i < len(built.tokens)))
    texts = built.special_texts
    for text in sorted(KNOWN_STOP_TOKENS):
        tid = texts.get(text)
        if tid is None or tid in ids:
            continue
        if text == _HARMONY_END and _HARMONY_RETURN in texts:
            continue
        ids.append(tid)
    if not ids:
        shown = ", ".join(repr(t) for t in sorted(texts)[:12]) or "none"
        raise VocabularyError(
            f"cannot infer the stop token(s) of {source}: it declares no EOS id and none of its "
            f"special tokens ({shown}) is a known end-of-sequence token; pass "
            "stop_token_ids=[...] with the ids that end generation for your model (its EOS and "
            "end-of-turn tokens)"
        )
    return ids


def finish(
    built: Built,
    *,
    stop_token_ids: int | Iterable[int] | None,
    vocab_size: int | None,
    name: str,
    source: str,
) -> RawVocabulary:
    """Fill holes, resolve stop ids and check ``vocab_size``.  O(V)."""
    tokens: list[bytes] = []
    special = set(built.special)
    for i, tok in enumerate(built.tokens):
        if tok is None:
            tokens.append(b"")
            special.add(i)
        else:
            tokens.append(tok)
    if stop_token_ids is None:
        stops = _infer_stop_ids(built, source)
    else:
        stops = _stop_ids_arg(stop_token_ids)
    if vocab_size is not None:
        try:
            vocab_size = operator.index(vocab_size)
        except TypeError as exc:
            raise VocabularyError(f"vocab_size must be an int, got {vocab_size!r}") from exc
        if vocab_size < len(tokens):
            raise VocabularyError(
                f"vocab_size={vocab_size} is smaller than the {len(tokens)} token ids of "
                f"{source}; vocab_size is the width of the model's logits (e.g. "
                "model.config.vocab_size), which is never smaller than the tokenizer"
            )
    return RawVocabulary(
        tokens=tuple(tokens),
        stop_token_ids=tuple(stops),
        special_token_ids=frozenset(special),
        vocab_size=vocab_size,
        name=name,
    )
