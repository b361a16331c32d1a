"""Build a :class:`~formcast.vocab.vocabulary.Vocabulary` from real tokenizers.

Each adapter recovers the *exact bytes* of every token id, the way the tokenizer itself maps text
to ids, and never goes through ``str`` with ``errors="replace"`` (a byte-level token such as
``b"\\xe2\\x80"`` is half a character and has no ``str`` form).

Supported sources:

* :func:`from_huggingface` -- a ``tokenizers.Tokenizer`` or a transformers tokenizer: byte-level
  BPE (GPT-2, Llama-3, Qwen, DeepSeek...: the GPT-2 byte-to-unicode map is inverted) and
  SentencePiece-style tokenizers (Llama-2, Mistral, Gemma...: ``▁`` is a space and ``<0xNN>``
  byte-fallback pieces are single bytes).  WordPiece/WordLevel tokenizers are rejected: their
  decoders insert spaces *between* tokens, so a token has no context-free bytes.
* :func:`from_tiktoken` -- a ``tiktoken.Encoding`` (public API only).
* :func:`from_sentencepiece` -- a ``sentencepiece.SentencePieceProcessor`` or a ``.model`` file.
* :func:`from_gguf` -- the ``tokenizer.ggml.*`` arrays of a GGUF file (llama.cpp), read by a small
  metadata-only reader here (no dependency): the tensor data is never touched, so a multi-GB
  model file costs the same as a vocab-only one.  ``gguf.GGUFReader`` builds a numpy view per
  string and per merge: measured on llama.cpp's Llama-3 (128k) and Gemma-4 (262k) vocab files,
  28 s and 59 s against 0.5 s and 1.4 s here (2 shared cores).

Special tokens (BOS, PAD, chat markers, control tokens) go to ``special_token_ids``: their text
is kept in ``tokens`` for messages but is never matched.  Ids without a token (holes in the id
space) get ``b""`` and are special too.  When ``stop_token_ids`` is not given it is inferred from
the EOS id the tokenizer declares plus the well-known end-of-sequence / end-of-turn tokens
(:data:`KNOWN_STOP_TOKENS`) among its special tokens; if nothing is found a
:class:`~formcast.errors.VocabularyError` says to pass ``stop_token_ids``.

No tokenizer library is imported by this module: the adapters work on the objects they are
given (duck-typed), and only :func:`from_sentencepiece` imports ``sentencepiece``, when it has
to load a ``.model`` file itself.

Complexity: every adapter is O(V + B) time and memory for V token ids with B bytes of token
text in total (plus the cost of the library call that serializes the tokenizer, e.g.
``Tokenizer.to_str()``, which is O(size of tokenizer.json)).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import operator
import os
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..errors import VocabularyError
from .vocabulary import Vocabulary

__all__ = [
    "KNOWN_STOP_TOKENS",
    "from_gguf",
    "from_huggingface",
    "from_sentencepiece",
    "from_tiktoken",
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

_SPM_SPACE: Final = "\u2581"  # "▁"
_SPM_SPACE_BYTES: Final = _SPM_SPACE.encode()
_BYTE_PIECE: Final = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_BYTE_PIECE_BYTES: Final = re.compile(rb"<0x([0-9A-Fa-f]{2})>")


def _byte_level_bytes(piece: str) -> bytes:
    """Bytes of a byte-level BPE piece, exactly as the tokenizers ``ByteLevel`` decoder does it.

    Every character of a byte-level piece stands for one byte.  A piece with a character outside
    the map (an added token such as ``"<|im_start|> "``) is its own UTF-8, as in tokenizers.
    O(len(piece)).
    """
    if _UNICODE_CHARS.issuperset(piece):
        return piece.translate(_UNICODE_TO_LATIN1).encode("latin-1")
    return piece.encode("utf-8")


def _byte_piece_value(piece: str) -> int | None:
    """The byte of a ``<0xNN>`` byte-fallback piece, or None for any other piece."""
    m = _BYTE_PIECE.fullmatch(piece)
    return int(m.group(1), 16) if m else None


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates from a malformed tokenizer.json
        raise VocabularyError(f"{what} {text!r} is not encodable as UTF-8: {exc}") from exc


@dataclass
class _Built:
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


def _infer_stop_ids(built: _Built, source: str) -> list[int]:
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


def _finish(
    built: _Built,
    *,
    stop_token_ids: int | Iterable[int] | None,
    vocab_size: int | None,
    name: str,
    source: str,
) -> Vocabulary:
    """Fill holes, resolve stop ids and construct the Vocabulary.  O(V)."""
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
    return Vocabulary(
        tokens,
        stop_token_ids=stops,
        special_token_ids=special,
        vocab_size=vocab_size,
        name=name,
    )


# --------------------------------------------------------------------------------------------
# Hugging Face (tokenizers / transformers)
# --------------------------------------------------------------------------------------------
_OK_DECODERS: Final = frozenset(
    {"ByteLevel", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace"}
)


def _flatten(component: Any, key: str) -> list[dict[str, Any]]:
    """The components of a (possibly nested) tokenizers ``Sequence`` in order."""
    if not isinstance(component, dict):
        return []
    if component.get("type") == "Sequence":
        out: list[dict[str, Any]] = []
        for sub in component.get(key) or []:
            out.extend(_flatten(sub, key))
        return out
    return [component]


def _string_pattern(replace: dict[str, Any]) -> str | None:
    pattern = replace.get("pattern")
    if isinstance(pattern, dict) and isinstance(pattern.get("String"), str):
        return str(pattern["String"])
    return None


@dataclass(frozen=True)
class _HFKind:
    """How a Hugging Face tokenizer's pieces become bytes."""

    byte_level: bool
    # SentencePiece style: (pattern, replacement) pairs applied in order, e.g. ("▁", " ")
    replacements: tuple[tuple[str, str], ...] = ()
    byte_fallback: bool = False
    byte_level_normalizer: bool = False


def _hf_kind(spec: Mapping[str, Any], model: Mapping[str, Any], mtype: str) -> _HFKind:
    """Classify a tokenizer.json (byte-level BPE or SentencePiece style) or raise.  O(1)."""
    decoders = _flatten(spec.get("decoder"), "decoders")
    pretoks = _flatten(spec.get("pre_tokenizer"), "pretokenizers")
    norms = _flatten(spec.get("normalizer"), "normalizers")
    dtypes = [str(d.get("type")) for d in decoders]
    ptypes = [str(p.get("type")) for p in pretoks]
    described = f"model={mtype}, decoder={dtypes or None}, pre_tokenizer={ptypes or None}"

    def unsupported(why: str) -> VocabularyError:
        return VocabularyError(
            f"unsupported Hugging Face tokenizer kind ({described}): {why}. formcast derives "
            "exact token bytes for byte-level BPE (GPT-2 style) and SentencePiece-style "
            "(▁ and <0xNN> byte fallback) tokenizers; for another kind build the vocabulary "
            "yourself with Vocabulary(tokens=[...bytes per id...], stop_token_ids=[...])"
        )

    if mtype in ("WordPiece", "WordLevel"):
        raise unsupported(
            f"{mtype} decoders insert spaces between tokens, so a token has no bytes of its "
            "own independent of its neighbours"
        )
    if mtype not in ("BPE", "Unigram"):
        raise unsupported(f"unknown model type {mtype!r}")
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise unsupported(
            "BPE with continuing_subword_prefix/end_of_word_suffix marks word boundaries in "
            "the pieces, so a piece's bytes depend on its position"
        )
    bad = [t for t in dtypes if t not in _OK_DECODERS]
    if bad:
        raise unsupported(f"decoder {bad[0]!r} rewrites tokens in a context-dependent way")

    byte_level_normalizer = any(n.get("type") == "ByteLevel" for n in norms)

    if "ByteLevel" in dtypes or "ByteLevel" in ptypes or byte_level_normalizer:
        if any(t in ("Replace", "Metaspace", "ByteFallback") for t in dtypes):
            raise unsupported("it mixes byte-level and SentencePiece-style decoding")
        return _HFKind(byte_level=True, byte_level_normalizer=byte_level_normalizer)

    replacements: list[tuple[str, str]] = []
    for d in decoders:
        if d.get("type") == "Replace":
            pat = _string_pattern(d)
            if pat is None:
                raise unsupported("a regex Replace decoder cannot be inverted per token")
            replacements.append((pat, str(d.get("content", ""))))
        elif d.get("type") == "Metaspace":
            replacements.append((str(d.get("replacement", _SPM_SPACE)), " "))
    if not decoders:
        # No decoder: tokenizers would join pieces with spaces.  A Metaspace pre-tokenizer
        # still tells us what the pieces mean.
        for p in pretoks:
            if p.get("type") == "Metaspace":
                replacements.append((str(p.get("replacement", _SPM_SPACE)), " "))
    byte_fallback = bool(model.get("byte_fallback")) or "ByteFallback" in dtypes
    if not replacements and not byte_fallback:
        raise unsupported(
            "no byte-level or SentencePiece-style (Metaspace / Replace '▁') decoding was found"
        )
    return _HFKind(
        byte_level=False,
        replacements=tuple(replacements),
        byte_fallback=byte_fallback,
    )


def _hf_piece_bytes(piece: str, kind: _HFKind) -> bytes:
    """Bytes of one model piece under ``kind``.  O(len(piece))."""
    if kind.byte_level:
        return _byte_level_bytes(piece)
    if kind.byte_fallback:
        b = _byte_piece_value(piece)
        if b is not None:
            return bytes((b,))
    for pat, rep in kind.replacements:
        piece = piece.replace(pat, rep)
    return _utf8(piece, "token")


def _hf_model_pieces(model: Mapping[str, Any]) -> tuple[str, dict[int, str]]:
    """The model type and its id -> piece map.  O(V)."""
    vocab = model.get("vocab")
    mtype = model.get("type")
    if not isinstance(mtype, str):
        # very old tokenizer.json files have no "type"
        if "merges" in model:
            mtype = "BPE"
        elif isinstance(vocab, list):
            mtype = "Unigram"
        elif "max_input_chars_per_word" in model:
            mtype = "WordPiece"
        else:
            mtype = "WordLevel"
    pieces: dict[int, str] = {}
    if isinstance(vocab, dict):
        for piece, tid in vocab.items():
            pieces[int(tid)] = str(piece)
    elif isinstance(vocab, list):
        for tid, entry in enumerate(vocab):
            pieces[tid] = str(entry[0] if isinstance(entry, (list, tuple)) else entry)
    else:
        raise VocabularyError(
            "the tokenizer's JSON has no model vocabulary; is this a tokenizers.Tokenizer?"
        )
    return mtype, pieces


def _hf_unk_id(model: Mapping[str, Any], mtype: str) -> int | None:
    if mtype == "Unigram":
        unk = model.get("unk_id")
        return int(unk) if isinstance(unk, int) else None
    unk_token, vocab = model.get("unk_token"), model.get("vocab")
    if isinstance(unk_token, str) and isinstance(vocab, dict) and unk_token in vocab:
        return int(vocab[unk_token])
    return None


def _build_hf(
    spec: Mapping[str, Any], id_to_token: Callable[[int], str | None] | None = None
) -> tuple[_Built, _HFKind]:
    """Tokens, specials and EOS candidates from a parsed tokenizer.json.  O(V + B).

    ``id_to_token`` (the live tokenizer's) gives the content of added tokens as the tokenizer
    stores it: a ``normalized`` added token is kept in normalized form (e.g. with a ``Prepend``
    normalizer, ``"▁▁"`` is stored, matched and decoded as ``"▁▁▁"``), unlike the JSON.
    """
    model = spec.get("model")
    if not isinstance(model, dict):
        raise VocabularyError("the tokenizer's JSON has no 'model' section")
    mtype, pieces = _hf_model_pieces(model)
    kind = _hf_kind(spec, model, mtype)
    added = [a for a in spec.get("added_tokens") or [] if isinstance(a, dict)]
    max_id = max([*pieces, *(int(a["id"]) for a in added), -1])
    if max_id < 0:
        raise VocabularyError("the tokenizer has no tokens")
    built = _Built(tokens=[None] * (max_id + 1))
    toks = built.tokens
    for tid, piece in pieces.items():
        if tid < 0:
            raise VocabularyError(f"negative token id {tid} for piece {piece!r}")
        toks[tid] = _hf_piece_bytes(piece, kind)
    unk = _hf_unk_id(model, mtype)
    if unk is not None and 0 <= unk <= max_id:
        built.special.add(unk)
        built.special_texts.setdefault(pieces.get(unk, ""), unk)
    for a in added:
        tid, content = int(a["id"]), str(a.get("content", ""))
        if a.get("special"):
            toks[tid] = _utf8(content, "special token")
            built.special.add(tid)
            built.special_texts[content] = tid
            continue
        # the content as the tokenizer stores, matches and decodes it (normalized if the
        # token is ``normalized``); the JSON has the content as declared
        stored = id_to_token(tid) if id_to_token is not None else None
        if pieces.get(tid) in (content, stored):
            continue  # the model's own piece, re-declared: its decoding stands
        if not kind.byte_level:
            # SentencePiece style: the decoder's rewrites ("▁" -> " ", byte fallback) apply to
            # added tokens too, and SentencePiece decodes user-defined pieces the same way
            toks[tid] = _hf_piece_bytes(stored or content, kind)
        elif stored is not None and kind.byte_level_normalizer and a.get("normalized", True):
            # stored in byte-level spelling; it matches the text whose bytes these are
            toks[tid] = _byte_level_bytes(stored)
        else:
            # Matched against the (normalized) input text, so the token stands for this text.
            # (The ByteLevel decoder would map an all-Latin-1 content such as DeepSeek's "ø"
            # to the single byte 0xF8; the tokenizer maps the text "ø" to it.)
            toks[tid] = _utf8(stored or content, "added token")
    return built, kind


def _hf_backend(tokenizer: Any) -> tuple[Any, Any | None]:
    """(tokenizers.Tokenizer, transformers wrapper or None)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        return backend, tokenizer
    if hasattr(tokenizer, "to_str") and callable(tokenizer.to_str):
        return tokenizer, None
    return None, tokenizer


def _transformers_eos(wrapper: Any) -> list[int]:
    eos = getattr(wrapper, "eos_token_id", None)
    if eos is None:
        return []
    if isinstance(eos, int):
        return [eos]
    try:
        return [int(i) for i in eos]
    except TypeError:
        return []


def from_huggingface(
    tokenizer: Any,
    *,
    stop_token_ids: int | Iterable[int] | None = None,
    vocab_size: int | None = None,
    name: str | None = None,
) -> Vocabulary:
    """Vocabulary of a ``tokenizers.Tokenizer`` or a transformers tokenizer.

    The kind is read from the serialized tokenizer (``to_str()``): a ``ByteLevel`` decoder,
    pre-tokenizer or normalizer means byte-level BPE (the GPT-2 byte-to-unicode map is
    inverted); ``Metaspace`` / ``Replace("▁", " ")`` / ``ByteFallback`` mean SentencePiece style
    (``▁`` is a space, ``<0xNN>`` is one byte).  Added tokens flagged ``special`` (and the
    model's unknown token) are special ids; other added tokens are text tokens: in a byte-level
    tokenizer their bytes are the text they are matched against (their content, as the
    tokenizer stores it, in UTF-8 -- not what the ByteLevel decoder would make of it), in a
    SentencePiece-style one the decoder's rewrites apply as for any piece.  Ids with no token
    are ``b""`` and special.

    A transformers tokenizer without a Rust backend but with a SentencePiece model
    (``sp_model``) goes through :func:`from_sentencepiece` plus its added tokens.

    Args:
        tokenizer: ``tokenizers.Tokenizer``, a transformers fast tokenizer (anything with
            ``.backend_tokenizer``), or a transformers SentencePiece tokenizer (``.sp_model``).
        stop_token_ids: ids that end generation.  Default: the tokenizer's ``eos_token_id``
            (transformers) plus every special token in :data:`KNOWN_STOP_TOKENS`
            (e.g. Llama-3: ``<|end_of_text|>``, ``<|eom_id|>``, ``<|eot_id|>``).
        vocab_size: the width of the model's logits if larger than the tokenizer.
        name: a label; default the transformers ``name_or_path`` or ``"huggingface"``.

    Raises:
        VocabularyError: not a Hugging Face tokenizer, an unsupported kind (WordPiece,
            WordLevel, ...), no stop id found, or ``vocab_size`` too small.

    Complexity: O(J + V + B): J the size of tokenizer.json (serialized and parsed once), V ids,
    B bytes of token text.
    """
    backend, wrapper = _hf_backend(tokenizer)
    label = name or str(getattr(wrapper, "name_or_path", "") or "") or "huggingface"
    if backend is None:
        sp_model = getattr(wrapper, "sp_model", None)
        if sp_model is not None and hasattr(sp_model, "id_to_piece"):
            return _from_transformers_sentencepiece(
                wrapper, sp_model, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=label
            )
        raise VocabularyError(
            f"{type(tokenizer).__module__}.{type(tokenizer).__name__} is not a Hugging Face "
            "tokenizer: pass a tokenizers.Tokenizer or a transformers fast tokenizer (one with "
            ".backend_tokenizer, e.g. AutoTokenizer.from_pretrained(..., use_fast=True)); for a "
            "tiktoken encoding use from_tiktoken, for a .model file from_sentencepiece"
        )
    try:
        spec = json.loads(backend.to_str())
    except (ValueError, TypeError) as exc:
        raise VocabularyError(f"cannot serialize the tokenizer to JSON: {exc}") from exc
    id_to_token = getattr(backend, "id_to_token", None)
    built, _ = _build_hf(spec, id_to_token if callable(id_to_token) else None)
    if wrapper is not None:
        built.declared_eos = _transformers_eos(wrapper)
        for tid in getattr(wrapper, "all_special_ids", None) or ():
            if 0 <= int(tid) < len(built.tokens):
                built.special.add(int(tid))
    return _finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=label, source=label
    )


def _from_transformers_sentencepiece(
    wrapper: Any,
    sp_model: Any,
    *,
    stop_token_ids: int | Iterable[int] | None,
    vocab_size: int | None,
    name: str,
) -> Vocabulary:
    """A transformers SentencePiece tokenizer: its processor plus its added tokens."""
    built = _build_sentencepiece(sp_model)
    added = getattr(wrapper, "added_tokens_decoder", None) or {}
    for tid, tok in dict(added).items():
        tid = int(tid)
        content = str(getattr(tok, "content", tok))
        while len(built.tokens) <= tid:
            built.tokens.append(None)
        if getattr(tok, "special", False):
            built.tokens[tid] = _utf8(content, "special token")
            built.special.add(tid)
            built.special_texts[content] = tid
        elif built.tokens[tid] is None:  # decoded like a user-defined piece
            built.tokens[tid] = _utf8(content.replace(_SPM_SPACE, " "), "added token")
    built.declared_eos = _transformers_eos(wrapper) + built.declared_eos
    for tid in getattr(wrapper, "all_special_ids", None) or ():
        if 0 <= int(tid) < len(built.tokens):
            built.special.add(int(tid))
    return _finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=name, source=name
    )


# --------------------------------------------------------------------------------------------
# tiktoken
# --------------------------------------------------------------------------------------------
def from_tiktoken(
    encoding: Any,
    *,
    stop_token_ids: int | Iterable[int] | None = None,
    vocab_size: int | None = None,
    name: str | None = None,
) -> Vocabulary:
    """Vocabulary of a ``tiktoken.Encoding`` through its public API.

    Token bytes come from ``decode_single_token_bytes`` for every id below ``n_vocab``; ids it
    does not know (holes, e.g. 100256 in cl100k) are ``b""`` and special.  Special tokens are
    ``special_tokens_set`` mapped with ``encode_single_token``.

    Args:
        encoding: a ``tiktoken.Encoding``.
        stop_token_ids: default: the special tokens in :data:`KNOWN_STOP_TOKENS`
            (``<|endoftext|>`` for cl100k/o200k).
        vocab_size: the width of the model's logits if larger than ``n_vocab``.
        name: a label; default the encoding's name.

    Raises:
        VocabularyError: not a tiktoken encoding, no stop id found, ``vocab_size`` too small.

    Complexity: O(V + B), one native call per id.
    """
    decode = getattr(encoding, "decode_single_token_bytes", None)
    n_vocab = getattr(encoding, "n_vocab", None)
    if decode is None or not isinstance(n_vocab, int):
        raise VocabularyError(
            f"{type(encoding).__name__} is not a tiktoken.Encoding (it needs n_vocab and "
            "decode_single_token_bytes); for Hugging Face tokenizers use from_huggingface"
        )
    built = _Built(tokens=[None] * n_vocab)
    for tid in range(n_vocab):
        with contextlib.suppress(KeyError):  # KeyError: a hole in the id space
            built.tokens[tid] = bytes(decode(tid))
    for text in getattr(encoding, "special_tokens_set", ()) or ():
        tid = int(encoding.encode_single_token(text))
        if 0 <= tid < n_vocab:
            built.special.add(tid)
            built.special_texts[str(text)] = tid
    label = name or str(getattr(encoding, "name", "") or "tiktoken")
    return _finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=label, source=label
    )


# --------------------------------------------------------------------------------------------
# SentencePiece
# --------------------------------------------------------------------------------------------
def _build_sentencepiece(sp: Any) -> _Built:
    """Tokens of a SentencePieceProcessor: ``▁`` -> space, byte pieces -> one byte.  O(V + B)."""
    n = int(sp.get_piece_size())
    built = _Built(tokens=[None] * n)
    is_byte = getattr(sp, "is_byte", None)
    for tid in range(n):
        piece = str(sp.id_to_piece(tid))
        if sp.is_control(tid) or sp.is_unknown(tid) or sp.is_unused(tid):
            built.tokens[tid] = _utf8(piece, "special piece")
            built.special.add(tid)
            built.special_texts[piece] = tid
            continue
        if is_byte is not None and is_byte(tid):
            value = _byte_piece_value(piece)
            if value is None:
                raise VocabularyError(f"SentencePiece byte piece {tid} is {piece!r}, not <0xNN>")
            built.tokens[tid] = bytes((value,))
            continue
        built.tokens[tid] = _utf8(piece.replace(_SPM_SPACE, " "), "piece")
    eos = int(sp.eos_id())
    if eos >= 0:
        built.declared_eos.append(eos)
    return built


def from_sentencepiece(
    processor_or_model_path: Any,
    *,
    stop_token_ids: int | Iterable[int] | None = None,
    vocab_size: int | None = None,
    name: str | None = None,
) -> Vocabulary:
    """Vocabulary of a SentencePiece model.

    Normal and user-defined pieces have ``▁`` replaced by a space; byte pieces (``<0xNN>``) are
    that single byte; control, unknown and unused pieces are special.  Note the *dummy prefix*:
    SentencePiece adds ``▁`` before the first word of an input, so the first token of an encoded
    text usually starts with a space that the text lacks.

    Args:
        processor_or_model_path: a ``sentencepiece.SentencePieceProcessor``, a path to a
            ``.model`` file, or the serialized model (``bytes``).
        stop_token_ids: default: the model's ``eos_id()`` plus control pieces in
            :data:`KNOWN_STOP_TOKENS`.
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
    built = _build_sentencepiece(sp)
    return _finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=label, source=label
    )


# --------------------------------------------------------------------------------------------
# GGUF
# --------------------------------------------------------------------------------------------
_GGUF_MAGIC: Final = b"GGUF"
_GGUF_STRING: Final = 8
_GGUF_ARRAY: Final = 9
# value type -> struct format character
_GGUF_SCALARS: Final[dict[int, str]] = {
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d",
}  # fmt: skip
# tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
_TT_NORMAL, _TT_UNKNOWN, _TT_CONTROL, _TT_USER_DEFINED, _TT_UNUSED, _TT_BYTE = 1, 2, 3, 4, 5, 6
# keys whose (large) values are never needed
_GGUF_SKIP: Final = frozenset(
    {"tokenizer.ggml.merges", "tokenizer.ggml.scores", "tokenizer.ggml.precompiled_charsmap"}
)
# tokenizer.ggml.pre values whose BPE pieces use "▁" for spaces (llama.cpp escape_whitespaces)
_GGUF_ESCAPED_PRE: Final = frozenset({"gemma4", "granite-embed-multi-311m", "sarvam-moe"})
# llama.cpp's placeholder for ids the converter found no token for: "[PAD151646]"
_GGUF_PAD: Final = re.compile(rb"\[PAD\d+\]")


def _gguf_looks_special(text: bytes) -> bool:
    """llama.cpp's converter heuristic (``does_token_look_special``) for user-defined tokens that
    ought to be control tokens."""
    return (
        text in (b"<pad>", b"<mask>", b"<2mass>", b"[@BOS@]")
        or (text.startswith(b"<|") and text.endswith(b"|>"))
        or (text.startswith("<｜".encode()) and text.endswith("｜>".encode()))
        or (text.startswith(b"<unused") and text.endswith(b">"))
    )


class _GGUFMetadata:
    """A reader for the key/value section of a GGUF file (v2/v3, either byte order).

    Only the keys selected by ``keep`` are materialized; other values are skipped (numeric arrays
    in O(1), string arrays in O(count)).  Tensor info and data are never read.
    """

    def __init__(self, buf: mmap.mmap | bytes, path: str) -> None:
        self.buf = buf
        self.path = path
        self.pos = 0
        if len(buf) < 24 or buf[:4] != _GGUF_MAGIC:
            raise VocabularyError(f"{path!r} is not a GGUF file (no 'GGUF' magic)")
        version = struct.unpack_from("<I", buf, 4)[0]
        self.endian = "<"
        if version & 0xFFFF == 0 and version:
            self.endian = ">"
            version = struct.unpack_from(">I", buf, 4)[0]
        if version not in (2, 3):
            raise VocabularyError(
                f"{path!r} is GGUF version {version}; formcast reads versions 2 and 3 "
                "(re-convert old files with a current llama.cpp)"
            )
        self.u32 = struct.Struct(self.endian + "I")
        self.u64 = struct.Struct(self.endian + "Q")
        self.pos = 8
        self.n_tensors = self._read(self.u64)
        self.n_kv = self._read(self.u64)

    def _fail(self, what: str) -> VocabularyError:
        return VocabularyError(
            f"{self.path!r} is truncated or corrupt ({what} at byte {self.pos}); re-download or "
            "re-convert the GGUF file"
        )

    def _read(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.buf):
            raise self._fail("unexpected end of file")
        (v,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return int(v)

    def _string(self, keep: bool) -> bytes:
        n = self._read(self.u64)
        end = self.pos + n
        if end > len(self.buf):
            raise self._fail(f"string of {n} bytes")
        out = bytes(self.buf[self.pos : end]) if keep else b""
        self.pos = end
        return out

    def _value(self, vtype: int, keep: bool) -> Any:
        if vtype == _GGUF_STRING:
            return self._string(keep)
        if vtype in _GGUF_SCALARS:
            st = struct.Struct(self.endian + _GGUF_SCALARS[vtype])
            if self.pos + st.size > len(self.buf):
                raise self._fail("unexpected end of file")
            (v,) = st.unpack_from(self.buf, self.pos)
            self.pos += st.size
            return v
        if vtype == _GGUF_ARRAY:
            etype = self._read(self.u32)
            count = self._read(self.u64)
            if etype == _GGUF_STRING:
                if count > (len(self.buf) - self.pos) // 8:
                    raise self._fail(f"string array of {count} items")
                if keep:
                    return [self._string(True) for _ in range(count)]
                for _ in range(count):
                    self._string(False)
                return None
            if etype in _GGUF_SCALARS:
                size = struct.calcsize("<" + _GGUF_SCALARS[etype])
                end = self.pos + count * size
                if end > len(self.buf):
                    raise self._fail(f"array of {count} items")
                out = (
                    list(
                        struct.unpack_from(
                            f"{self.endian}{count}{_GGUF_SCALARS[etype]}", self.buf, self.pos
                        )
                    )
                    if keep
                    else None
                )
                self.pos = end
                return out
            if etype == _GGUF_ARRAY:
                vals = [self._value(_GGUF_ARRAY, keep) for _ in range(count)]
                return vals if keep else None
            raise self._fail(f"unknown array element type {etype}")
        raise self._fail(f"unknown value type {vtype}")

    def read(self, keep: Callable[[str], bool]) -> dict[str, Any]:
        """All kept key/values.  O(size of the metadata section)."""
        out: dict[str, Any] = {}
        for _ in range(self.n_kv):
            key = self._string(True).decode("utf-8", "replace")
            vtype = self._read(self.u32)
            wanted = keep(key)
            value = self._value(vtype, wanted)
            if wanted:
                out[key] = value
        return out


def _keep_gguf_key(key: str) -> bool:
    return key == "general.name" or (key.startswith("tokenizer.ggml.") and key not in _GGUF_SKIP)


def _read_gguf_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise VocabularyError(
            f"GGUF file not found: {str(p)!r}; pass the path of a .gguf model or vocab file"
        )
    try:
        with p.open("rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise VocabularyError(f"{str(p)!r} is empty, not a GGUF file")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _GGUFMetadata(mm, str(p)).read(_keep_gguf_key)
    except OSError as exc:
        raise VocabularyError(f"cannot read GGUF file {str(p)!r}: {exc}") from exc


def _gguf_int(meta: Mapping[str, Any], key: str) -> int | None:
    v = meta.get(key)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _gguf_str(meta: Mapping[str, Any], key: str) -> str | None:
    v = meta.get(key)
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else None


def from_gguf(
    path: str | os.PathLike[str],
    *,
    stop_token_ids: int | Iterable[int] | None = None,
    vocab_size: int | None = None,
    name: str | None = None,
) -> Vocabulary:
    """Vocabulary from the ``tokenizer.ggml.*`` metadata of a GGUF file (llama.cpp).

    Token bytes follow llama.cpp's ``token_to_piece`` for each ``tokenizer.ggml.token_type``:
    normal tokens of a ``gpt2`` (byte-level BPE) vocabulary invert the GPT-2 byte map; of a
    ``llama``/``t5`` (SentencePiece) or ``gemma4`` vocabulary have ``▁`` as a space; byte tokens
    (``<0xNN>``) are one byte; user-defined tokens are their raw text.  Control, unknown and
    unused tokens are special, and so are user-defined tokens that llama.cpp's converter
    considers special-looking (``<|...|>``, ``<unused..>``) and the converter's ``[PADn]``
    placeholders.

    Args:
        path: a ``.gguf`` file (a full model or a vocab-only file).
        stop_token_ids: default: ``tokenizer.ggml.eos_token_id``, ``eot_token_id`` and
            ``eom_token_id`` plus the non-normal tokens in :data:`KNOWN_STOP_TOKENS` (as
            llama.cpp's end-of-generation set does).
        vocab_size: the width of the model's logits if larger than the token count.
        name: a label; default ``general.name`` or the file name.

    Raises:
        VocabularyError: missing or corrupt file, no vocabulary, an unsupported tokenizer model
            (``bert``, ``rwkv``, ``plamo2``...), no stop id, ``vocab_size`` too small.

    Complexity: O(M + V + B): M the size of the metadata section (merges are skipped, not
    parsed); tensor data is memory-mapped and never read.
    """
    meta = _read_gguf_metadata(path)
    label = name or _gguf_str(meta, "general.name") or Path(path).name
    model = _gguf_str(meta, "tokenizer.ggml.model")
    raw_tokens = meta.get("tokenizer.ggml.tokens")
    if model is None or not isinstance(raw_tokens, list) or not raw_tokens:
        if model in ("none", "no_vocab") or model is None:
            raise VocabularyError(
                f"{str(path)!r} has no tokenizer vocabulary (tokenizer.ggml.model="
                f"{model!r}); use the tokenizer the model was converted from"
            )
        raise VocabularyError(f"{str(path)!r} has no tokenizer.ggml.tokens array")
    pre = _gguf_str(meta, "tokenizer.ggml.pre") or ""
    if model == "gpt2":
        escaped = pre in _GGUF_ESCAPED_PRE
    elif model in ("llama", "t5", "gemma4"):
        escaped = True
    else:
        hints = {
            "bert": "WordPiece decoding inserts spaces between tokens, so a token has no bytes "
            "of its own",
            "rwkv": "RWKV vocabularies store escaped byte strings that formcast does not decode",
        }
        raise VocabularyError(
            f"unsupported GGUF tokenizer model {model!r} in {str(path)!r}"
            + (f" ({hints[model]})" if model in hints else "")
            + "; formcast reads 'gpt2' (byte-level BPE), 'llama'/'t5' (SentencePiece) and "
            "'gemma4' vocabularies. Build the Vocabulary yourself from the model's tokenizer"
        )
    n = len(raw_tokens)
    types = meta.get("tokenizer.ggml.token_type")
    if types is None:
        types = [_TT_NORMAL] * n
    elif not isinstance(types, list) or len(types) != n:
        raise VocabularyError(
            f"{str(path)!r}: tokenizer.ggml.token_type has "
            f"{len(types) if isinstance(types, list) else '?'} entries for {n} tokens"
        )
    built = _Built(tokens=[None] * n)
    toks = built.tokens
    for tid, (raw, ttype) in enumerate(zip(raw_tokens, types, strict=True)):
        if ttype == _TT_NORMAL:
            if escaped:
                toks[tid] = raw.replace(_SPM_SPACE_BYTES, b" ")
            else:
                try:
                    toks[tid] = _byte_level_bytes(raw.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    raise VocabularyError(
                        f"{str(path)!r}: token {tid} is not valid UTF-8 ({exc})"
                    ) from exc
        elif ttype == _TT_BYTE:
            m = _BYTE_PIECE_BYTES.fullmatch(raw)
            if m is None:
                raise VocabularyError(f"{str(path)!r}: byte token {tid} is {raw!r}, not <0xNN>")
            toks[tid] = bytes((int(m.group(1), 16),))
        elif ttype == _TT_USER_DEFINED and not (
            _gguf_looks_special(raw) or _GGUF_PAD.fullmatch(raw)
        ):
            toks[tid] = raw  # matched against raw input text by llama.cpp
        elif ttype == _TT_UNUSED:
            toks[tid] = b""  # llama.cpp renders unused tokens as nothing
            built.special.add(tid)
        else:  # control, unknown, special-looking user-defined, or an unknown type
            toks[tid] = raw
            built.special.add(tid)
        if ttype != _TT_NORMAL:
            text = raw.decode("utf-8", "replace")
            if text in KNOWN_STOP_TOKENS:
                # llama.cpp makes these end-of-generation tokens and forces them to control
                built.special.add(tid)
                toks[tid] = raw
            if tid in built.special:
                built.special_texts.setdefault(text, tid)
    for key in ("eos_token_id", "eot_token_id", "eom_token_id"):
        declared = _gguf_int(meta, f"tokenizer.ggml.{key}")
        if declared is not None and 0 <= declared < n:
            built.declared_eos.append(declared)
    return _finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=label, source=label
    )
