"""Hugging Face transformers models in formcast's loop: :class:`TransformersModel`.

``TransformersModel(model, tokenizer)`` wraps a loaded causal LM;
``TransformersModel.from_gguf(path)`` loads a GGUF through
``AutoModelForCausalLM.from_pretrained(dir, gguf_file=name,
dtype=torch.float32)`` (needs ``pip install torch==2.13.0 transformers accelerate``).  For your
own ``model.generate()`` call use
:class:`formcast.integrations.transformers.FormcastLogitsProcessor`.

torch and transformers are imported when a model is wrapped, never when this module is imported.

Lifetime: a wrapper per loaded model, one sequence at a time.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from .._optional import require
from ..errors import ConfigurationError, ModelFileError, VocabularyError
from ..vocab.vocabulary import Vocabulary
from .base import ModelBase
from .chat import ChatTemplate
from .chat_jinja import JinjaChatTemplate
from .protocol import Logits

__all__ = ["TransformersModel", "check_hf_vocabulary"]


def check_hf_vocabulary(
    tokenizer: Any, vocab: Vocabulary, *, sample: int = 2048, seed: int = 0
) -> None:
    """Check ``vocab`` against a transformers tokenizer: size, EOS, that the tokenizer's special
    ids are not text tokens for formcast, and the text of a sample of formcast's text tokens
    (tokens whose bytes are not whole UTF-8 are skipped: a tokenizer decodes them lossily).

    Raises:
        VocabularyError: naming the first mismatches and the fix.
    """
    fix = (
        "build the Vocabulary from the model's own tokenizer (Vocabulary.from_huggingface) "
        "or GGUF file (Vocabulary.from_gguf)"
    )
    n = len(tokenizer)
    if n > vocab.vocab_size:
        raise VocabularyError(
            f"the tokenizer has {n} tokens but vocabulary {vocab.name!r} only "
            f"{vocab.vocab_size}: {fix}"
        )
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int) and eos not in vocab.stop_token_ids:
        raise VocabularyError(
            f"the tokenizer's EOS {eos} is not a stop token of vocabulary {vocab.name!r}: {fix}"
        )
    specials = {int(i) for i in getattr(tokenizer, "all_special_ids", []) if 0 <= int(i) < n}
    rng = np.random.default_rng(seed)
    ids = {int(i) for i in rng.choice(n, size=min(sample, n), replace=False)} - specials
    bad: list[str] = []
    for i in sorted(specials):
        if vocab.is_text_token(i):
            bad.append(f"id {i}: special in the tokenizer, text {vocab.tokens[i]!r} in formcast")
    for i in sorted(ids - vocab.special_token_ids):  # formcast never emits its specials
        data = vocab.token_bytes(i)
        try:
            expected = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        got = tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if got != expected:
            bad.append(f"id {i}: vocabulary {expected!r} vs tokenizer {got!r}")
    if bad:
        raise VocabularyError(
            f"the vocabulary {vocab.name!r} does not match the tokenizer: {len(bad)} ids differ "
            f"({'; '.join(bad[:5])}): {fix}"
        )


class TransformersModel(ModelBase):
    """A transformers causal LM as a :class:`~formcast.model.protocol.LanguageModel`.

    Args:
        model: a loaded ``PreTrainedModel`` (causal LM), on any device.
        tokenizer: its tokenizer (for text prompts and the vocabulary check); may be ``None``
            when ``vocab`` is given and prompts are token ids.
        vocab: the exact vocabulary (default: ``Vocabulary.from_huggingface(tokenizer)``).
        chat_template: ``"auto"`` (the tokenizer's own ``chat_template``, rendered with jinja2
            like ``apply_chat_template``; ``None`` when it has none), a :class:`ChatTemplate`,
            or ``None``.
        verify_vocab: check ``vocab`` against ``tokenizer`` and the logits width.
        n_threads: if given, ``torch.set_num_threads(n_threads)`` (process-wide).
        name: a label.

    Raises:
        MissingDependencyError: torch or transformers missing.
        VocabularyError: the vocabulary does not fit the model or tokenizer.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        vocab: Vocabulary | None = None,
        chat_template: ChatTemplate | Literal["auto"] | None = "auto",
        verify_vocab: bool = True,
        n_threads: int | None = None,
        name: str | None = None,
    ) -> None:
        torch = require("torch")
        if n_threads is not None:
            torch.set_num_threads(int(n_threads))
        if vocab is None:
            if tokenizer is None:
                raise ConfigurationError("give a tokenizer or a vocab to TransformersModel")
            vocab = Vocabulary.from_huggingface(tokenizer)
        self._torch = torch
        self.model = model.eval()
        self.tokenizer = tokenizer
        self._vocab = vocab
        self._name = name or str(getattr(model, "name_or_path", "") or vocab.name)
        width = self._logits_width()
        if width != vocab.vocab_size:
            raise VocabularyError(
                f"the model's logits have {width} entries but vocabulary {vocab.name!r} has "
                f"vocab_size={vocab.vocab_size}: build it with vocab_size={width}"
            )
        if verify_vocab and tokenizer is not None:
            check_hf_vocabulary(tokenizer, vocab)
        if chat_template == "auto":
            self._chat = (
                JinjaChatTemplate.from_tokenizer(tokenizer, name=self._name)
                if tokenizer is not None
                else None
            )
        else:
            self._chat = chat_template
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keep_arg = "logits_to_keep" in params
        self._cache: Any = None
        config = getattr(model, "config", None)
        limit = getattr(config, "max_position_embeddings", None)
        self._max_context = int(limit) if isinstance(limit, int) else None

    def _logits_width(self) -> int:
        head = (
            self.model.get_output_embeddings()
            if hasattr(self.model, "get_output_embeddings")
            else None
        )
        if head is not None and hasattr(head, "weight"):
            return int(head.weight.shape[0])
        return int(self.model.config.vocab_size)

    @classmethod
    def from_gguf(
        cls,
        path: str | os.PathLike[str],
        *,
        n_threads: int | None = 1,
        chat_template: ChatTemplate | Literal["auto"] | None = "auto",
        verify_vocab: bool = True,
        name: str | None = None,
    ) -> TransformersModel:
        """Load a GGUF file with transformers (dequantized to float32), offline.

        The vocabulary is read from the same file (:meth:`Vocabulary.from_gguf`) and checked
        against the tokenizer transformers builds from it.
        """
        p = os.fspath(path)
        if not os.path.isfile(p):
            raise ModelFileError(f"model file {p!r} does not exist: give an existing .gguf path")
        torch = require("torch")
        transformers = require("transformers")
        require("accelerate")
        directory, filename = os.path.split(os.path.abspath(p))
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                directory, gguf_file=filename, dtype=torch.float32
            )
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory, gguf_file=filename)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ModelFileError(
                f"transformers cannot load {p!r} ({exc}): check the file (its sha256) and that "
                "this transformers version supports the architecture"
            ) from exc
        vocab = Vocabulary.from_gguf(p, name=name or filename)
        return cls(
            model,
            tokenizer,
            vocab=vocab,
            chat_template=chat_template,
            verify_vocab=verify_vocab,
            n_threads=n_threads,
            name=name or filename,
        )

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike[str],
        *,
        n_threads: int | None = 1,
        chat_template: ChatTemplate | Literal["auto"] | None = "auto",
        verify_vocab: bool = True,
        name: str | None = None,
    ) -> TransformersModel:
        """Load a local transformers model directory (``config.json``, safetensors or
        ``pytorch_model.bin`` weights, tokenizer files), offline, in float32.

        The vocabulary is read from the directory's tokenizer with the model's logits width
        (ids past the tokenizer are never allowed); its stop tokens are the tokenizer's EOS
        plus the ids in ``generation_config.eos_token_id``.  Cost: reading the weights, and
        every token once (about 1 s for 128k tokens).

        Raises:
            ModelFileError: transformers cannot load the directory (message says why).
            MissingDependencyError: torch or transformers missing.
        """
        p = os.fspath(directory)
        torch = require("torch")
        transformers = require("transformers")
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                p, dtype=torch.float32, local_files_only=True
            )
            tokenizer = transformers.AutoTokenizer.from_pretrained(p, local_files_only=True)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise ModelFileError(
                f"transformers cannot load the model directory {p!r} ({exc}): it needs "
                "config.json, the weights (model.safetensors or pytorch_model.bin) and the "
                "tokenizer files (tokenizer.json or tokenizer.model with tokenizer_config.json)"
            ) from exc
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        width = (
            int(head.weight.shape[0])
            if head is not None and hasattr(head, "weight")
            else int(model.config.vocab_size)
        )
        stops: set[int] = set()
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            stops.add(eos)
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if isinstance(gen_eos, int):
            stops.add(gen_eos)
        elif isinstance(gen_eos, (list, tuple)):
            stops.update(int(i) for i in gen_eos)
        label = name or os.path.basename(os.path.normpath(p))
        vocab = Vocabulary.from_huggingface(
            tokenizer,
            stop_token_ids=sorted(i for i in stops if 0 <= i < width) or None,
            vocab_size=width,
            name=label,
        )
        return cls(
            model,
            tokenizer,
            vocab=vocab,
            chat_template=chat_template,
            verify_vocab=verify_vocab,
            n_threads=n_threads,
            name=label,
        )

    # -- LanguageModel -------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ConfigurationError(
                "this TransformersModel has no tokenizer: give the prompt as token ids"
            )
        ids = [int(t) for t in self.tokenizer(text)["input_ids"]]
        bos = getattr(self.tokenizer, "bos_token_id", None)
        if bos is not None and len(ids) >= 2 and ids[0] == ids[1] == bos and self._adds_bos():
            del ids[0]  # the text (a chat template's {{ bos_token }}) already starts with BOS
        return ids

    def _adds_bos(self) -> bool:
        """Does the tokenizer put a BOS before any text (checked once, on the empty text)?"""
        adds = getattr(self, "_adds_bos_cache", None)
        if adds is None:
            bos = getattr(self.tokenizer, "bos_token_id", None)
            first = list(self.tokenizer("")["input_ids"])[:1]
            adds = self._adds_bos_cache = bos is not None and first == [bos]
        return bool(adds)

    def encode_bytes(self, data: bytes) -> list[int] | None:
        """Raw token ids of ``data`` (``add_special_tokens=False``, special markers split as
        text); ``None`` when ``data`` is not UTF-8 (the tokenizer takes text) or there is no
        tokenizer."""
        if self.tokenizer is None:
            return None
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            return None
        if not text:
            return []
        ids = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)
        return [int(t) for t in ids["input_ids"]]

    def _forward(self, ids: Sequence[int]) -> Logits:
        torch = self._torch
        device = getattr(self.model, "device", None)
        x = torch.tensor([list(ids)], dtype=torch.long, device=device)
        kwargs: dict[str, Any] = {"use_cache": True, self._cache_arg: self._cache}
        if self._keep_arg:
            kwargs["logits_to_keep"] = 1
        with torch.inference_mode():
            out = self.model(input_ids=x, **kwargs)
        self._cache = out.cache if self._cache_arg == "cache" else out.past_key_values
        logits: Logits = out.logits[0, -1].float().cpu().numpy()
        return logits

    def start(self, prompt_ids: Sequence[int]) -> Logits:
        if not prompt_ids:
            raise ConfigurationError("the prompt is empty")
        self._cache = None
        return self._forward(prompt_ids)

    def step(self, token_ids: Sequence[int]) -> Logits:
        if self._cache is None:
            raise ConfigurationError("step() before start(): evaluate a prompt first")
        return self._forward(token_ids)
