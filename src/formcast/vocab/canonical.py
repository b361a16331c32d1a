"""Canonical tokenization: which token pairs a tokenizer can ever produce
(:class:`CanonicalPairs`), and whether a whole token sequence is the tokenizer's own encoding
of its text (:func:`is_canonical`).

A token sequence is *canonical* when the tokenizer would encode its text to exactly those ids.
Masked and conditioned sampling can emit non-canonical sequences (``"yes"`` as ``ye`` + ``s``
where the tokenizer writes ``yes``): the text is valid, but the model was never trained on that
spelling, and the model's probability of the text is spread over spellings it never saw.

The local test (Vieira et al., "Language Models over Canonical Byte-Pair Encodings",
arXiv 2506.07956): for byte-pair encoding, a pair ``(a, b)`` is canonical when
``encode(bytes(a) + bytes(b)) == [a, b]``; for BPE *without pre-tokenization* a sequence is
canonical if and only if every adjacent pair is (their Proposition: the merges that would
rewrite a sequence are visible in some bigram).  Masking, after token ``a``, every ``b`` whose
pair is not canonical therefore removes exactly the non-canonical sequences there.

What it does **not** guarantee:

* **Pre-tokenization.** Byte-level BPE tokenizers (GPT-2, Llama 3, SmolLM2) first split the text
  with a regex (words, spaces, digit groups) and merge inside each piece.  The pair test then
  sees a pair out of its context: a sequence whose pairs are all canonical can still be
  non-canonical as a whole (the split in context differs from the split of the pair alone), and
  in rare cases a pair that is non-canonical alone is canonical in context.  The mask removes
  most non-canonical outputs, not provably all; :func:`is_canonical` measures the rest.
* **SentencePiece / unigram** tokenizers choose the most probable segmentation, not merges: the
  bigram condition is neither necessary nor sufficient there.  The mask is still a heuristic
  filter of spellings the tokenizer would not produce in isolation; nothing more.
* **Bytes that are not UTF-8.** ``encode`` functions that take text (transformers, tokenizers)
  cannot encode a pair whose joint bytes are an incomplete character; such a pair is *not
  checked* (it stays allowed): an encoder signals it by returning ``None``.
* **Non-text tokens** (stop and special tokens) are never masked by this test, and a stop
  token ends a sequence, so no pair is formed with it.

Lifetime and cost: one :class:`CanonicalPairs` per model (its encoder), mutable only by filling
its cache: rows are computed lazily, per previous token, and only for the candidate tokens a
caller asks about (usually the grammar's allowed tokens): one ``encode`` call per (previous,
candidate) pair never checked before, i.e. up to ``V`` calls for the first fully permissive
state after a token (SmolLM2 on llama.cpp: ~49k calls of ~45-70 us, 2-3 s, once per previous
token; a short constraint's few allowed tokens cost microseconds), then a cached bit test.  A
row is two packed bitmask rows (``2 * ceil(V/32) * 4`` bytes: 12 KiB for 49k tokens); at most
``max_rows`` rows are kept (:class:`~formcast.cache.LruCache`, least recently used first).
Thread-safety: a row is filled under a lock; two threads may both check the same pair (harmless).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from ..bitmask import bitmask_has_many, bitmask_set_many, bitmask_words, bool_to_bitmask
from ..cache import LruCache
from ..errors import ConfigurationError
from .vocabulary import Vocabulary

__all__ = ["CanonicalPairs", "EncodeBytes", "is_canonical"]

EncodeBytes = Callable[[bytes], "Sequence[int] | None"]
"""A raw encoder: bytes -> token ids, **without** BOS or any special token, and without parsing
special markers in the text; ``None`` when the bytes cannot be encoded exactly (a text-only
tokenizer given bytes that are not UTF-8)."""


def is_canonical(vocab: Vocabulary, encode: EncodeBytes, token_ids: Sequence[int]) -> bool | None:
    """Whether ``token_ids`` (text tokens; stop/special ids are ignored) is the tokenizer's own
    encoding of their bytes: ``encode(bytes) == ids``.  ``None`` when ``encode`` cannot encode
    the bytes (see :data:`EncodeBytes`).  One ``encode`` call."""
    ids = [int(t) for t in token_ids if vocab.is_text_token(int(t))]
    if not ids:
        return True
    got = encode(vocab.decode(ids))
    if got is None:
        return None
    return [int(t) for t in got] == ids


class _Row:
    """The pairs known after one previous token: ``checked`` and ``ok`` bits (packed words)."""

    __slots__ = ("checked", "ok")

    def __init__(self, checked: np.ndarray, ok: np.ndarray) -> None:
        self.checked = checked
        self.ok = ok


class CanonicalPairs:
    """The canonical-pair test of one tokenizer, cached by previous token (module docstring).

    Args:
        vocab: the model's vocabulary (the bytes of every id).
        encode: the raw encoder (:data:`EncodeBytes`), e.g. ``model.encode_bytes``.
        max_rows: previous tokens whose rows are kept (least recently used dropped first).

    Counters: ``encode_calls`` (pairs checked), ``rows`` (rows created, evictions included).

    Raises:
        ConfigurationError: ``encode`` not callable, ``max_rows < 1``.
    """

    def __init__(self, vocab: Vocabulary, encode: EncodeBytes, *, max_rows: int = 512) -> None:
        if not callable(encode):
            raise ConfigurationError("encode must be callable: bytes -> token ids (or None)")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ConfigurationError(f"max_rows must be an int >= 1, got {max_rows!r}")
        self.vocab = vocab
        self.encode = encode
        n = vocab.vocab_size
        text = np.array([vocab.is_text_token(i) for i in range(n)], dtype=bool)
        self._text = text
        # non-text ids are "checked and allowed" from the start: the test never masks them
        self._base = bool_to_bitmask(~text, n)
        self._words = bitmask_words(n)
        row_bytes = 2 * self._words * 4
        self._rows: LruCache[int, _Row] = LruCache(
            max_rows, max_weight=max_rows * row_bytes, weight=lambda _row: row_bytes
        )
        self._lock = threading.Lock()
        self.encode_calls = 0
        self.rows = 0

    def pair_is_canonical(self, a: int, b: int) -> bool:
        """``encode(bytes(a) + bytes(b)) == [a, b]`` (``True`` when ``a`` or ``b`` is not a
        text token, or the bytes cannot be encoded exactly).  One ``encode`` call, uncached."""
        vocab = self.vocab
        if not (vocab.is_text_token(a) and vocab.is_text_token(b)):
            return True
        self.encode_calls += 1
        got = self.encode(vocab.tokens[a] + vocab.tokens[b])
        if got is None:
            return True
        return len(got) == 2 and int(got[0]) == a and int(got[1]) == b

    def _row(self, prev: int) -> _Row:
        found, row = self._rows.get(prev)
        if row is None or not found:
            row = _Row(self._base.copy(), self._base.copy())
            self._rows.put(prev, row)
            self.rows += 1
        return row

    def _checked_row(self, prev: int, ids: np.ndarray) -> _Row:
        """``prev``'s row with every pair ``(prev, id)`` of ``ids`` checked."""
        row = self._row(prev)
        known = bitmask_has_many(row.checked, ids).astype(bool)
        if not known.all():
            with self._lock:
                todo = ids[~known]
                good = [t for t in todo.tolist() if self.pair_is_canonical(prev, int(t))]
                bitmask_set_many(row.ok, np.asarray(good, dtype=np.int64))
                bitmask_set_many(row.checked, todo)
        return row

    def allowed_after(self, prev: int, ids: np.ndarray) -> np.ndarray:
        """A bool per id of ``ids``: may it follow ``prev``?  Checks the pairs not seen before
        (one ``encode`` each) and caches them.  A non-text ``prev`` (or ``prev < 0``: no
        previous output token) allows everything."""
        ids = np.asarray(ids, dtype=np.int64)
        if prev < 0 or not self.vocab.is_text_token(prev) or ids.size == 0:
            return np.ones(ids.size, dtype=bool)
        row = self._checked_row(prev, ids)
        return bitmask_has_many(row.ok, ids).astype(bool)

    def restrict_ids(self, prev: int, ids: np.ndarray) -> np.ndarray:
        """The ids of ``ids`` that may follow ``prev`` (order kept)."""
        ids = np.asarray(ids)
        kept: np.ndarray = ids[self.allowed_after(prev, ids)]
        return kept

    def restrict_bitmask(self, prev: int, row: np.ndarray, ids: np.ndarray) -> None:
        """AND the bitmask ``row`` (int32 words, in place) with the pairs allowed after
        ``prev``; ``ids`` are the ids set in ``row`` (the pairs checked)."""
        if prev < 0 or not self.vocab.is_text_token(prev):
            return
        checked = self._checked_row(prev, np.asarray(ids, dtype=np.int64))
        row &= checked.ok
