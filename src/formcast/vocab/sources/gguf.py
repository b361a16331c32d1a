"""GGUF files (llama.cpp) -> raw vocabulary tables: :func:`read_gguf`.

The ``tokenizer.ggml.*`` arrays are read by a small metadata-only reader here (no dependency):
the tensor data is never touched, so a multi-GB model file costs the same as a vocab-only one.
``gguf.GGUFReader`` builds a numpy view per string and per merge: measured on llama.cpp's
Llama-3 (128k) and Gemma-4 (262k) vocab files, 28 s and 59 s against 0.5 s and 1.4 s here (2
shared cores).  :meth:`formcast.vocab.vocabulary.Vocabulary.from_gguf` builds the Vocabulary.

Lifetime: stateless; the file is memory-mapped for the duration of one read.  Cost: O(M + V + B)
for a metadata section of M bytes (merges are skipped, not parsed).
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from ...errors import VocabularyError
from ._common import (
    BYTE_PIECE_BYTES,
    KNOWN_STOP_TOKENS,
    SPM_SPACE_BYTES,
    Built,
    RawVocabulary,
    byte_level_bytes,
    finish,
)

__all__ = ["read_gguf"]

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


def read_gguf(
    path: str | os.PathLike[str],
    *,
    stop_token_ids: int | Iterable[int] | None = None,
    vocab_size: int | None = None,
    name: str | None = None,
) -> RawVocabulary:
    """The raw tables in the ``tokenizer.ggml.*`` metadata of a GGUF file (llama.cpp).

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
            ``eom_token_id`` plus the non-normal tokens in :data:`~._common.KNOWN_STOP_TOKENS` (as
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
    built = Built(tokens=[None] * n)
    toks = built.tokens
    for tid, (raw, ttype) in enumerate(zip(raw_tokens, types, strict=True)):
        if ttype == _TT_NORMAL:
            if escaped:
                toks[tid] = raw.replace(SPM_SPACE_BYTES, b" ")
            else:
                try:
                    toks[tid] = byte_level_bytes(raw.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    raise VocabularyError(
                        f"{str(path)!r}: token {tid} is not valid UTF-8 ({exc})"
                    ) from exc
        elif ttype == _TT_BYTE:
            m = BYTE_PIECE_BYTES.fullmatch(raw)
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
    return finish(
        built, stop_token_ids=stop_token_ids, vocab_size=vocab_size, name=label, source=label
    )
