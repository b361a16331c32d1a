"""Hugging Face transformers: :class:`FormcastLogitsProcessor` and :class:`TransformersModel`.

Two ways in:

1. **Your own** ``model.generate()`` call, with formcast's mask as a logits processor::

       from transformers import LogitsProcessorList
       from formcast.integrations.transformers import FormcastLogitsProcessor

       proc = FormcastLogitsProcessor(compiler.compile_regex(r"\\d{4}-\\d{2}-\\d{2}"))
       out = model.generate(**inputs, logits_processor=LogitsProcessorList([proc]),
                            max_new_tokens=20, eos_token_id=vocab_eos_ids)

   transformers (5.x) runs custom processors *before* its temperature / top-k / top-p
   warpers, so truncation never removes every legal token.  Batches are supported (one matcher
   per row; each row may have its own grammar), and so is beam search: rows are tracked by
   position -- a row continues the row at its own position or, when a beam moved, a row of its
   own example (same grammar), never another example's row even with identical content.
   ``proc.finish_reasons(output)`` says which rows ended with a stop token (``"completed"``)
   and which ``max_new_tokens`` cut (``"max_tokens"``): transformers itself does not.  The
   processor resets itself when it sees a new sequence: ``input_ids`` did not grow by exactly
   one token, or a row does not continue a previous row (as above).  Call
   :meth:`FormcastLogitsProcessor.reset` between ``generate()`` calls to be explicit (needed
   only if a new prompt could be the previous output plus one token).

2. **formcast's loop** (:func:`formcast.generation.generate`) over a transformers model:
   :class:`TransformersModel` (``TransformersModel.from_gguf(path)`` loads a GGUF through
   ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=name, dtype=torch.float32)``; needs
   ``pip install torch==2.13.0 transformers accelerate``).

torch and transformers are imported when a processor is first called or a model is wrapped,
never when this module is imported.

Lifetime: a processor per ``generate()`` call site (it keeps one matcher per row); a model
wrapper per loaded model, one sequence at a time.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..errors import ConfigurationError, DeadEndError, FormcastError, VocabularyError
from ..generation.chat import ChatTemplate, chat_template_from_jinja
from ..generation.model import Logits
from ..index.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace, bool_to_bitmask
from ..index.compiled import CompiledGrammar
from ..runtime.matcher import GrammarMatcher
from ..vocab.vocabulary import Vocabulary
from . import ModelFileError, require

__all__ = ["FormcastLogitsProcessor", "TransformersModel", "check_hf_vocabulary"]


class FormcastLogitsProcessor:
    """A transformers ``LogitsProcessor``: disallowed tokens get ``-inf``.

    Args:
        compiled: one :class:`CompiledGrammar` for every row, or a sequence of them, one per
            batch example (with ``num_beams > 1`` or ``num_return_sequences > 1`` each
            example's rows are contiguous, as transformers lays them out).

    Behaviour per call ``(input_ids[B, L], scores[B, V]) -> scores``:

    * a new sequence (see the module docstring) starts fresh matchers, taking the current
      ``input_ids`` as the prompt;
    * otherwise the newest token of each row is accepted by the matcher of the row it extends:
      the previous row at the same position, else (beam search moved it) a row of the same
      example -- rows are tracked by position, never matched across examples by content;
    * a finished row (its matcher accepted a stop token) allows only stop tokens, so it can
      only repeat a stop token until transformers stops it: pass
      ``eos_token_id=sorted(vocab.stop_token_ids)`` to ``generate()`` so that every stop
      token of the vocabulary ends a row;
    * a row whose grammar allows nothing raises :class:`~formcast.errors.DeadEndError` with
      the diagnostic; a token the grammar did not allow (another processor changed the scores
      after formcast's) raises :class:`~formcast.errors.FormcastError` -- never a silent skip.

    ``mask_seconds`` collects the time of each call (matcher work and masking).
    """

    def __init__(self, compiled: CompiledGrammar | Sequence[CompiledGrammar]) -> None:
        grammars = [compiled] if isinstance(compiled, CompiledGrammar) else list(compiled)
        if not grammars or not all(isinstance(g, CompiledGrammar) for g in grammars):
            raise ConfigurationError(
                "FormcastLogitsProcessor needs a CompiledGrammar or a non-empty sequence of them"
            )
        sizes = {g.vocab.vocab_size for g in grammars}
        if len(sizes) != 1:
            raise ConfigurationError(
                f"the grammars were compiled for different vocabularies {sizes}"
            )
        self._grammars = grammars
        self.vocab_size = sizes.pop()
        stops = np.zeros(self.vocab_size, dtype=bool)
        stops[sorted(grammars[0].vocab.stop_token_ids)] = True
        self._stop_words = bool_to_bitmask(stops, self.vocab_size)
        self.mask_seconds: list[float] = []
        self.reset()

    def reset(self) -> None:
        """Forget the current sequences; the next call starts fresh matchers."""
        self._matchers: list[GrammarMatcher] = []
        self._prev: np.ndarray | None = None
        self._prompt_len = 0
        self._bitmask: np.ndarray | None = None

    @property
    def matchers(self) -> list[GrammarMatcher]:
        """The matcher of each row (after the latest call)."""
        return list(self._matchers)

    @property
    def prompt_length(self) -> int:
        """Length of the prompt the current sequences started from."""
        return self._prompt_len

    def _grammar_index(self, row: int, rows: int) -> int:
        """Which grammar row ``row`` of a ``rows``-row batch uses (examples are contiguous)."""
        n = len(self._grammars)
        if n == 1:
            return 0
        if rows % n:
            raise ConfigurationError(
                f"{n} grammars for a batch of {rows} rows: give one grammar, or one per example "
                "(rows per example = num_beams * num_return_sequences)"
            )
        return row // (rows // n)

    def _grammar_for(self, row: int, rows: int) -> CompiledGrammar:
        return self._grammars[self._grammar_index(row, rows)]

    def _start(self, ids: np.ndarray) -> None:
        rows = ids.shape[0]
        self._matchers = [GrammarMatcher(self._grammar_for(b, rows)) for b in range(rows)]
        self._prompt_len = ids.shape[1]

    def _parents(self, ids: np.ndarray, prev: np.ndarray) -> list[int] | None:
        """The previous row each row of ``ids`` extends, or None if one extends none.

        Rows are tracked by *position*: a row extends the previous row at its own position
        when that row is its prefix; otherwise (beam search moved a beam) it extends a row of
        its own example, i.e. one with the same grammar -- never a row of another example,
        even with identical content (two identical prompts may have different grammars).
        Among equal candidates of one example any will do: the same grammar fed the same
        tokens is in the same state.
        """
        rows, prev_rows = ids.shape[0], prev.shape[0]
        if len(self._grammars) > 1 and rows != prev_rows:
            return None
        candidates: dict[tuple[int, bytes], int] = {}
        for r in range(prev_rows):
            candidates.setdefault((self._grammar_index(r, prev_rows), prev[r].tobytes()), r)
        chosen: list[int] = []
        for b in range(rows):
            prefix = ids[b, :-1]
            if b < prev_rows and np.array_equal(prev[b], prefix):
                chosen.append(b)
                continue
            parent = candidates.get((self._grammar_index(b, rows), prefix.tobytes()))
            if parent is None:
                return None
            chosen.append(parent)
        return chosen

    def _advance(self, ids: np.ndarray) -> bool:
        """Accept each row's newest token; False when ``ids`` is not a continuation."""
        prev = self._prev
        if prev is None or ids.shape[1] != prev.shape[1] + 1 or not self._matchers:
            return False
        chosen = self._parents(ids, prev)
        if chosen is None:
            return False
        used: dict[int, int] = {}
        for r in chosen:
            used[r] = used.get(r, 0) + 1
        new: list[GrammarMatcher] = []
        for b, r in enumerate(chosen):
            parent = self._matchers[r]
            used[r] -= 1
            m = parent if used[r] == 0 else parent.fork()
            if not m.is_terminated():
                tok = int(ids[b, -1])
                if not m.accept_token(tok):
                    raise FormcastError(
                        f"row {b}: token {tok} was not allowed by the grammar but was appended; "
                        "a logits processor after formcast's changed the scores, or the "
                        "sequence was edited (call reset() before reusing the processor)"
                    )
            new.append(m)
        self._matchers = new
        return True

    def finish_reasons(
        self, sequences: Any, *, prompt_length: int | None = None
    ) -> list[Literal["completed", "max_tokens"]]:
        """How each row of ``generate()``'s output ended: ``"completed"`` or ``"max_tokens"``.

        transformers stops a row at ``max_new_tokens`` without saying so, and the processor
        never sees the last token it appends; this replays each row of ``sequences`` (the
        output ids, ``[rows, length]``, prompt included; torch or numpy) through a fresh
        matcher of the row's grammar.  ``"completed"``: the row has a stop token that the
        grammar accepted (or it ends where the grammar allows only a stop token);
        ``"max_tokens"``: anything else -- the row's text is a truncated prefix and must not
        be used as a finished document.  Padding after the stop token is ignored.

        Args:
            sequences: ``generate()``'s output (``num_return_sequences`` rows per example are
                contiguous, as transformers returns them).
            prompt_length: where the generated tokens start (default: the prompt length the
                processor saw in its latest sequence).

        Raises:
            FormcastError: a row holds a token its grammar does not allow (it was not
                generated under this processor).
        """
        ids = _as_numpy(sequences)
        if ids.ndim != 2:
            raise ConfigurationError(f"sequences must be (rows, length), got {ids.shape}")
        start = self._prompt_len if prompt_length is None else int(prompt_length)
        if start <= 0 and prompt_length is None:
            raise ConfigurationError(
                "the processor has not run yet: pass prompt_length= (the prompt's token count)"
            )
        rows = ids.shape[0]
        out: list[Literal["completed", "max_tokens"]] = []
        stops = self._grammars[0].vocab.stop_token_ids
        for b in range(rows):
            m = GrammarMatcher(self._grammar_for(b, rows))
            for pos in range(start, ids.shape[1]):
                tok = int(ids[b, pos])
                if not m.accept_token(tok):
                    raise FormcastError(
                        f"row {b}: token {tok} at position {pos} is not allowed by the row's "
                        "grammar: these sequences were not generated under this processor"
                    )
                if m.is_terminated():
                    break
            if not m.is_terminated() and m.is_accepting():
                allowed = m.allowed_token_ids().tolist()
                if allowed and all(t in stops for t in allowed):  # nothing but a stop left
                    out.append("completed")
                    continue
            out.append("completed" if m.is_terminated() else "max_tokens")
        return out

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        t0 = time.perf_counter()
        ids = _as_numpy(input_ids)
        if ids.ndim != 2:
            raise ConfigurationError(f"input_ids must be (batch, length), got {ids.shape}")
        if not self._advance(ids):
            self._start(ids)
        self._prev = ids
        rows = ids.shape[0]
        if self._bitmask is None or self._bitmask.shape[0] != rows:
            self._bitmask = allocate_token_bitmask(rows, self.vocab_size)
        for b, m in enumerate(self._matchers):
            if m.is_terminated():  # finished: only stop tokens (transformers pads such rows)
                self._bitmask[b] = self._stop_words
            elif not m.fill_next_token_bitmask(self._bitmask, b):
                diagnostic = m.diagnose()
                if diagnostic is not None:
                    raise DeadEndError(diagnostic)
        apply_token_bitmask_inplace(scores, self._bitmask)
        self.mask_seconds.append(time.perf_counter() - t0)
        return scores


def _as_numpy(ids: Any) -> np.ndarray:
    """Token ids (a torch tensor on any device, or an array-like) as contiguous int64."""
    if hasattr(ids, "detach"):
        ids = ids.detach().cpu().numpy()
    return np.ascontiguousarray(ids, dtype=np.int64)


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


class TransformersModel:
    """A transformers causal LM as a :class:`~formcast.generation.model.LanguageModel`.

    Args:
        model: a loaded ``PreTrainedModel`` (causal LM), on any device.
        tokenizer: its tokenizer (for text prompts and the vocabulary check); may be ``None``
            when ``vocab`` is given and prompts are token ids.
        vocab: the exact vocabulary (default: ``Vocabulary.from_huggingface(tokenizer)``).
        chat_template: ``"auto"`` (ChatML recognised from ``tokenizer.chat_template``), a
            :class:`ChatTemplate`, or ``None``.
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
            source = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
            self._chat = chat_template_from_jinja(source) if isinstance(source, str) else None
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

    # -- LanguageModel -------------------------------------------------------------------------
    @property
    def vocab(self) -> Vocabulary:
        return self._vocab

    @property
    def name(self) -> str:
        return self._name

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self._chat

    @property
    def max_context(self) -> int | None:
        return self._max_context

    def tokenize(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ConfigurationError(
                "this TransformersModel has no tokenizer: give the prompt as token ids"
            )
        return [int(t) for t in self.tokenizer(text)["input_ids"]]

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

    def __repr__(self) -> str:
        return f"TransformersModel(name={self._name!r}, vocab_size={self._vocab.vocab_size})"
