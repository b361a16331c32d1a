"""Hugging Face tokenizers (``tokenizers`` / transformers) -> raw vocabulary tables.

:func:`read_huggingface` recovers the exact bytes of every token id from the serialized
tokenizer (``to_str()``): byte-level BPE (GPT-2, Llama-3, Qwen, DeepSeek...: the GPT-2
byte-to-unicode map is inverted) and SentencePiece-style tokenizers (Llama-2, Mistral, Gemma...:
``▁`` is a space and ``<0xNN>`` byte-fallback pieces are single bytes).  WordPiece/WordLevel
tokenizers are rejected: their decoders insert spaces *between* tokens, so a token has no
context-free bytes.  Never goes through ``str`` with ``errors="replace"``.

No tokenizer library is imported: the tokenizer given is duck-typed.
:meth:`formcast.vocab.vocabulary.Vocabulary.from_huggingface` builds the Vocabulary.

Lifetime: stateless functions.  Cost: O(J + V + B) for a tokenizer.json of size J (serialized
and parsed once), V ids and B bytes of token text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...errors import VocabularyError
from ._common import (
    SPM_SPACE,
    Built,
    RawVocabulary,
    byte_level_bytes,
    byte_piece_value,
    finish,
    utf8,
)
from .sentencepiece import build_sentencepiece

__all__ = ["read_huggingface"]

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
            replacements.append((str(d.get("replacement", SPM_SPACE)), " "))
    if not decoders:
        # No decoder: tokenizers would join pieces with spaces.  A Metaspace pre-tokenizer
        # still tells us what the pieces mean.
        for p in pretoks:
            if p.get("type") == "Metaspace":
                replacements.append((str(p.get("replacement", SPM_SPACE)), " "))
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
        return byte_level_bytes(piece)
    if kind.byte_fallback:
        b = byte_piece_value(piece)
        if b is not None:
            return bytes((b,))
    for pat, rep in kind.replacements:
        piece = piece.replace(pat, rep)
    return utf8(piece, "token")


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
) -> tuple[Built, _HFKind]:
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
    built = Built(tokens=[None] * (max_id + 1))
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
            toks[tid] = utf8(content, "special token")
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
            toks[tid] = byte_level_bytes(stored)
        else:
            # Matched against the (normalized) input text, so the token stands for this text.
            # (The ByteLevel decoder would map an all-Latin-1 content such as DeepSeek's "ø"
            # to the single byte 0xF8; the tokenizer maps the text "ø" to it.)
            toks[tid] = utf8(stored or content, "added token")
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


def _add_transformers_specials(built: Built, wrapper: Any) -> None:
    """Mark the transformers wrapper's ``all_special_ids`` (those in range) special."""
    for tid in getattr(wrapper, "all_special_ids", None) or ():
        if 0 <= int(tid) < len(built.tokens):
            built.special.add(int(tid))


def read_huggingface(
    tokenizer: Any,
    *,
    stop_token_ids: int | Iterable[int] | None = None,
    vocab_size: int | None = None,
    name: str | None = None,
) -> RawVocabulary:
    """The raw tables of a ``tokenizers.Tokenizer`` or a transformers tokenizer.

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
    (``sp_model``) is read like a SentencePiece model plus its added tokens.

    Args:
        tokenizer: ``tokenizers.Tokenizer``, a transformers fast tokenizer (anything with
            ``.backend_tokenizer``), or a transformers SentencePiece tokenizer (``.sp_model``).
        stop_token_ids: ids that end generation.  Default: the tokenizer's ``eos_token_id``
            (transformers) plus every special token in :data:`~._common.KNOWN_STOP_TOKENS`
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
        _add_transformers_specials(built, wrapper)
    return finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=label, source=label
    )


def _from_transformers_sentencepiece(
    wrapper: Any,
    sp_model: Any,
    *,
    stop_token_ids: int | Iterable[int] | None,
    vocab_size: int | None,
    name: str,
) -> RawVocabulary:
    """A transformers SentencePiece tokenizer: its processor plus its added tokens."""
    built = build_sentencepiece(sp_model)
    added = getattr(wrapper, "added_tokens_decoder", None) or {}
    for tid, tok in dict(added).items():
        tid = int(tid)
        content = str(getattr(tok, "content", tok))
        while len(built.tokens) <= tid:
            built.tokens.append(None)
        if getattr(tok, "special", False):
            built.tokens[tid] = utf8(content, "special token")
            built.special.add(tid)
            built.special_texts[content] = tid
        elif built.tokens[tid] is None:  # decoded like a user-defined piece
            built.tokens[tid] = utf8(content.replace(SPM_SPACE, " "), "added token")
    built.declared_eos = _transformers_eos(wrapper) + built.declared_eos
    _add_transformers_specials(built, wrapper)
    return finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=name, source=name
    )
