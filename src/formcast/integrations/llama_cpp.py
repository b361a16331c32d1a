"""llama-cpp-python: formcast as a logits processor in ``Llama``'s own loop.

For code that already calls ``llama_cpp.Llama`` (and llama-cpp-python's server): no formcast
loop, just a processor::

    from llama_cpp import Llama
    from formcast.integrations.llama_cpp import llama_cpp_logits_processor

    llm = Llama(model_path="model.gguf", n_threads=1)
    proc = llama_cpp_logits_processor(llm, schema={"type": "object", ...})
    out = llm.create_completion("A JSON object:", max_tokens=64, **proc.completion_kwargs())
    chat = llm.create_chat_completion(messages, **proc.completion_kwargs(chat=True))
    proc.raise_for_error()   # chat completions take no stopping criteria
    # or: logits_processor=LogitsProcessorList([proc]),
    #     stopping_criteria=StoppingCriteriaList([proc.stopping_criteria])

The processor has llama-cpp-python's signature ``(input_ids: NDArray[intc], scores:
NDArray[single]) -> NDArray[single]``: it reads the tokens generated so far from ``input_ids``
(everything after the prompt, whose length it learns on the first call), advances its
:class:`~formcast.GrammarMatcher` by the new ones and sets the logits of disallowed tokens to
``-inf``.  It starts over by itself when a call's ``input_ids`` do not extend the previous
call's (a new prompt: consecutive ``create_completion`` / ``create_chat_completion`` calls
just work) -- or extend it with tokens the grammar refuses; call :meth:`reset` to force it.

The stopping criterion (:meth:`FormcastLlamaLogitsProcessor.stopping_criteria`) ends the
generation when the output is complete and only a stop token may follow (also for stop
tokens llama.cpp does not treat as end-of-generation), and re-raises an error the processor
met: llama-cpp-python calls processors from a ctypes callback, where an exception would be
printed and ignored, so the processor records it, allows only stop tokens, and the criterion
raises it in the caller's thread.

Lifetime: one processor per sequence at a time (reused across calls, resetting itself); not
thread-safe.  The vocabulary is read once per model file from its GGUF and checked against
the loaded model; compiled grammars are shared by the processors made for one model file
(:func:`llama_cpp_compiler`).  Cost per token: the matcher step plus one vectorized write of
``-inf`` over the vocabulary.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import numpy as np

from .._optional import require
from ..bitmask import bitmask_to_bool, bitmask_words
from ..cache import LruCache
from ..errors import ConfigurationError, DeadEndError, FormcastError
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..index.spec import ConstraintSpec, GrammarTextSpec, JsonSchemaSpec, RegexSpec
from ..runtime.matcher import GrammarMatcher
from ..vocab.vocabulary import Vocabulary

__all__ = [
    "FormcastLlamaLogitsProcessor",
    "llama_cpp_compiler",
    "llama_cpp_logits_processor",
]

logger = logging.getLogger(__name__)

_COMPILERS: LruCache[tuple[str, int, int], GrammarCompiler] = LruCache(4)
_COMPILERS_LOCK = threading.Lock()


class FormcastLlamaLogitsProcessor:
    """A llama-cpp-python logits processor (and stopping criterion) for one grammar.

    Args:
        compiled: the grammar, compiled for the model's vocabulary (its ``vocab_size`` is the
            model's ``n_vocab()``).

    Attributes:
        matcher: the matcher of the current sequence (replaced on :meth:`reset`).
        error: the exception met by the last call (``None`` when all went well); the
            stopping criterion raises it.
    """

    def __init__(self, compiled: CompiledGrammar) -> None:
        if not isinstance(compiled, CompiledGrammar):
            raise ConfigurationError(
                f"FormcastLlamaLogitsProcessor needs a CompiledGrammar, got "
                f"{type(compiled).__name__}: use llama_cpp_logits_processor(llm, schema=...)"
            )
        self.compiled = compiled
        self.matcher = GrammarMatcher(compiled)
        self.error: BaseException | None = None
        vocab = compiled.vocab
        self._stops = np.array(sorted(vocab.stop_token_ids), dtype=np.intp)
        self._words = np.zeros(bitmask_words(vocab.vocab_size), dtype=np.int32)
        self._seen: np.ndarray | None = None  # input_ids of the previous call
        self._prompt_len = 0

    # -- sequence tracking ----------------------------------------------------------------
    @property
    def prompt_length(self) -> int:
        """Tokens of the current sequence's prompt (0 before the first call)."""
        return self._prompt_len

    @property
    def generated_token_ids(self) -> list[int]:
        """The tokens generated so far in the current sequence (as the matcher accepted them)."""
        return self.matcher.accepted_token_ids

    def reset(self) -> None:
        """Forget the current sequence: the next call starts a new one."""
        self.matcher = GrammarMatcher(self.compiled)
        self._seen = None
        self._prompt_len = 0
        self.error = None

    def _sync(self, input_ids: Any) -> None:
        ids = np.asarray(input_ids)
        if ids.ndim != 1:
            raise ConfigurationError(
                f"input_ids must be one sequence (1-D), got shape {ids.shape}: llama-cpp-python "
                "passes Llama._input_ids"
            )
        seen = self._seen
        if seen is not None and ids.shape[0] >= seen.shape[0] and np.array_equal(
            ids[: seen.shape[0]], seen
        ):
            new = ids[seen.shape[0] :]
            if new.size == 0 or self.matcher.accept_tokens(int(t) for t in new):
                self._seen = ids.copy()
                return
        # a new sequence: a new prompt, or an extension the grammar refuses
        self.matcher = GrammarMatcher(self.compiled)
        self._prompt_len = int(ids.shape[0])
        self._seen = ids.copy()
        self.error = None

    def _only_stops_allowed(self) -> bool:
        if self.matcher.is_terminated():
            return True
        allowed = self.matcher.allowed_token_ids()
        return allowed.size > 0 and bool(np.isin(allowed, self._stops).all())

    # -- llama-cpp-python's two callables ---------------------------------------------------
    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """Mask ``scores`` (in place, and returned) for the sequence ``input_ids``.

        Never raises (llama-cpp-python would swallow it in its ctypes callback): an error is
        stored in :attr:`error`, only stop tokens are left allowed, and
        :meth:`stopping_criteria` raises it.  A dead end (no token allowed) is such an error
        (:class:`~formcast.errors.DeadEndError` with the diagnostic)."""
        try:
            self._sync(input_ids)
            if self.matcher.is_terminated():
                self._allow_only_stops(scores)
                return scores
            if not self.matcher.fill_next_token_bitmask(self._words):
                diagnostic = self.matcher.diagnose()
                if diagnostic is not None:
                    raise DeadEndError(diagnostic)
            allowed = bitmask_to_bool(self._words, self.compiled.vocab.vocab_size)
            n = min(int(scores.shape[-1]), allowed.shape[0])
            scores[:n][~allowed[:n]] = -np.inf
            scores[n:] = -np.inf
        except Exception as exc:
            self.error = exc
            logger.error("formcast: the llama.cpp logits processor failed: %r", exc)
            self._allow_only_stops(scores)
        return scores

    def _allow_only_stops(self, scores: Any) -> None:
        keep = self._stops[self._stops < scores.shape[-1]]
        saved = np.array(scores[keep], copy=True)
        scores[:] = -np.inf
        scores[keep] = saved

    def stopping_criteria(self, input_ids: Any, logits: Any) -> bool:
        """llama-cpp-python's ``StoppingCriteria``: True once the output is complete and only a
        stop token may follow (the token just sampled -- a stop token -- is then dropped, as
        llama.cpp drops its end-of-generation token).

        Raises:
            FormcastError: the error the processor met in its last call (a dead end, a
                mask of the wrong width...), so that it reaches the caller.
        """
        del logits
        self.raise_for_error()
        self._sync(input_ids)
        return self._only_stops_allowed()

    def raise_for_error(self) -> None:
        """Raise (and clear) the error the processor met in its last call, if any -- for
        ``create_chat_completion``, which takes no stopping criteria.

        Raises:
            FormcastError: that error (a non-formcast exception is wrapped in one)."""
        if self.error is None:
            return
        error, self.error = self.error, None
        if isinstance(error, FormcastError):
            raise error
        raise FormcastError(f"the formcast logits processor failed: {error!r}") from error

    def completion_kwargs(self, *, chat: bool = False) -> dict[str, Any]:
        """``logits_processor`` and ``stopping_criteria`` for ``Llama.create_completion``;
        with ``chat=True`` only ``logits_processor``, for ``create_chat_completion`` (which
        takes no stopping criteria: llama.cpp's end-of-generation token ends it; call
        :meth:`raise_for_error` afterwards).  Imports llama_cpp."""
        lc = require("llama_cpp")
        kwargs: dict[str, Any] = {"logits_processor": lc.LogitsProcessorList([self])}
        if not chat:
            kwargs["stopping_criteria"] = lc.StoppingCriteriaList([self.stopping_criteria])
        return kwargs

    def __repr__(self) -> str:
        return (
            f"FormcastLlamaLogitsProcessor(kind={self.compiled.kind!r}, "
            f"prompt={self._prompt_len}, generated={self.matcher.num_accepted_tokens})"
        )


def llama_cpp_compiler(llm: Any, *, verify: bool = True) -> GrammarCompiler:
    """The :class:`GrammarCompiler` for a loaded ``llama_cpp.Llama``, shared by every call for
    the same model file (an LRU of 4 files, keyed by path, size and mtime).

    The vocabulary is read from the model's GGUF (``llm.model_path``) and, with ``verify``,
    checked against the loaded model (:func:`formcast.model.llama_cpp.check_llama_vocabulary`:
    logits width, EOS, the bytes of the special ids and of a sample).  First call: about a
    second for the vocabulary; then a dictionary lookup.

    Raises:
        ConfigurationError: ``llm`` has no ``model_path`` (not a ``llama_cpp.Llama``).
        VocabularyError: the GGUF's vocabulary does not match the loaded model.
    """
    path = getattr(llm, "model_path", None)
    if not isinstance(path, str) or not os.path.isfile(path):
        raise ConfigurationError(
            f"llm must be a loaded llama_cpp.Llama with a model_path, got {type(llm).__name__}"
        )
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    with _COMPILERS_LOCK:
        _, hit = _COMPILERS.get(key)
        if hit is not None:
            return hit
    from ..model.llama_cpp import check_llama_vocabulary

    vocab = Vocabulary.from_gguf(path, name=os.path.basename(path))
    if verify:
        check_llama_vocabulary(llm, vocab)
    compiler = GrammarCompiler(vocab)
    with _COMPILERS_LOCK:
        _COMPILERS.put(key, compiler)
    return compiler


def llama_cpp_logits_processor(
    llm: Any,
    *,
    schema: Any = None,
    regex: str | None = None,
    grammar: str | None = None,
    grammar_syntax: str = "gbnf",
    compiled: CompiledGrammar | None = None,
    compiler: GrammarCompiler | None = None,
    verify: bool = True,
) -> FormcastLlamaLogitsProcessor:
    """A :class:`FormcastLlamaLogitsProcessor` for ``llm`` and exactly one constraint.

    Args:
        llm: the loaded ``llama_cpp.Llama``.
        schema: a JSON Schema (dict, JSON text, file path or Pydantic model class).
        regex: a regular expression (ECMA-262 semantics, matched in full).
        grammar: a grammar in ``grammar_syntax`` (``"gbnf"``, llama.cpp's; or ``"lark"``).
        compiled: an already compiled grammar (for this model's vocabulary).
        compiler: the compiler to use (default: :func:`llama_cpp_compiler`, shared per model).
        verify: check the vocabulary against the model (first use of a model file).

    Raises:
        ConfigurationError: not exactly one constraint, or a compiled grammar whose vocabulary
            size is not the model's.
        FormcastError: the compile errors (syntax, unsupported feature, limits).
    """
    given = [v is not None for v in (schema, regex, grammar, compiled)]
    if sum(given) != 1:
        raise ConfigurationError(
            "give exactly one of schema=, regex=, grammar= or compiled= to "
            "llama_cpp_logits_processor"
        )
    if compiled is None:
        comp = compiler if compiler is not None else llama_cpp_compiler(llm, verify=verify)
        spec: ConstraintSpec
        if schema is not None:
            spec = JsonSchemaSpec.of(schema)
        elif regex is not None:
            spec = RegexSpec(regex)
        else:
            spec = GrammarTextSpec(str(grammar), grammar_syntax)
        compiled = comp.compile(spec)
    n_vocab = getattr(llm, "n_vocab", None)
    if callable(n_vocab) and int(n_vocab()) != compiled.vocab.vocab_size:
        raise ConfigurationError(
            f"the grammar was compiled for vocab_size={compiled.vocab.vocab_size} but the "
            f"model has {int(n_vocab())} tokens: compile it with llama_cpp_compiler(llm)"
        )
    return FormcastLlamaLogitsProcessor(compiled)

