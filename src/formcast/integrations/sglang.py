"""SGLang: formcast as a grammar backend of SGLang's scheduler (``formcast[sglang]``).

Installed with formcast, the ``sglang.srt.plugins`` entry point ``formcast`` (:func:`register`)
makes SGLang accept the name::

    python -m sglang.launch_server --model-path MODEL --grammar-backend formcast

SGLang sends four kinds of constraint (``key_type``, ``key_string``):

====================  ==============================================================
``json``              a JSON Schema (text); ``"$$ANY$$"`` (``response_format`` =
                      ``json_object``) is any JSON value (the built-in JSON grammar)
``regex``             ECMA-262 semantics (``\\d`` is ``[0-9]``), as xgrammar's backend
``ebnf``              xgrammar's EBNF (GBNF: ``root ::= ...``); Lark when no line
                      has ``::=`` (also ``full_assistant_ebnf``)
``structural_tag``    xgrammar's structural-tag JSON, legacy (``structures`` +
                      ``triggers``) and the ``format`` form
====================  ==============================================================

A constraint formcast cannot compile comes back as SGLang's ``InvalidGrammarObject`` carrying
the error message (logged at ERROR), as xgrammar's and llguidance's backends do: SGLang aborts
that request with the message and caches the failure.

Classes:

* :class:`FormcastGrammarBackend` -- one per scheduler: the :class:`~formcast.vocab.Vocabulary`
  read from SGLang's tokenizer with the model's logits width (``vocab_size``; ids past the
  tokenizer are never allowed) and the model's EOS ids as stop tokens, plus one
  :class:`~formcast.GrammarCompiler` (an LRU shared by requests; SGLang also caches grammar
  objects per key and hands each request a :meth:`~FormcastSGLangGrammar.copy`).  Building
  the vocabulary reads every token once (about 1 s for 128k tokens).
* :class:`FormcastSGLangGrammar` -- one per request: a :class:`~formcast.GrammarMatcher`.  Not
  thread-safe (SGLang advances each request from the scheduler thread).

Masks: ``int32[batch, ceil(vocab_size / 32)]`` CPU tensors (pinned when CUDA is available),
the xgrammar/llguidance layout, filled through a numpy view (no copy);
:meth:`~FormcastSGLangGrammar.fill_vocab_mask_batched` fills a whole batch in one call
(:func:`formcast.batch_fill_next_token_bitmask`: one cached row copy per distinct state);
:meth:`~FormcastSGLangGrammar.apply_vocab_mask` sets the disallowed logits to ``-inf`` with
one vectorized torch operation on the logits' device
(:func:`formcast.apply_token_bitmask_inplace`).

SGLang does not wrap a plug-in backend in its ``ReasonerGrammarBackend`` (``--reasoning-parser``
with a custom backend constrains from the first token); use formcast's think-then-constrain
grammar in the constraint instead.

This module imports SGLang's grammar base classes (and torch) when it is imported;
``import formcast`` never imports it.  Tested against ``sglang==0.5.23`` installed without its
CUDA dependencies (``tests/integrations/test_sglang_backend.py``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sglang.srt.constrained import base_grammar_backend as _base
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarStats,
    InvalidGrammarObject,
)

from ..bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from ..errors import FormcastError
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..index.spec import (
    AnyJsonSpec,
    ConstraintSpec,
    GrammarTextSpec,
    JsonSchemaSpec,
    RegexSpec,
    StructuralTagSpec,
)
from ..runtime.batch import batch_fill_next_token_bitmask
from ..runtime.matcher import GrammarMatcher
from ..vocab.engine import engine_vocabulary
from ..vocab.vocabulary import Vocabulary

__all__ = [
    "BACKEND_NAME",
    "FormcastGrammarBackend",
    "FormcastSGLangGrammar",
    "create_backend",
    "ebnf_syntax",
    "register",
    "vocabulary_from_tokenizer",
]

logger = logging.getLogger(__name__)

BACKEND_NAME = "formcast"
"""The name for ``--grammar-backend`` (``ServerArgs.grammar_backend``)."""

ANY_JSON_KEY = "$$ANY$$"
"""The ``json`` key SGLang sends for ``response_format={"type": "json_object"}``."""


def ebnf_syntax(text: str) -> str:
    """``"gbnf"`` when a line (``#`` and ``//`` comments removed) contains ``::=`` (xgrammar's
    EBNF, which formcast's GBNF front-end reads), ``"lark"`` otherwise.  O(len(text))."""
    for line in text.split("\n"):
        for marker in ("#", "//"):
            cut = line.find(marker)
            if cut >= 0:
                line = line[:cut]
        if "::=" in line:
            return "gbnf"
    return "lark"


def vocabulary_from_tokenizer(
    tokenizer: Any, vocab_size: int, eos_token_ids: Iterable[int] | int | None = None
) -> Vocabulary:
    """The :class:`Vocabulary` of SGLang's (Hugging Face) tokenizer for a model whose logits
    have ``vocab_size`` entries; ``eos_token_ids`` (SGLang's model EOS ids) are the stop tokens
    (``None``: the tokenizer's EOS).  See :func:`formcast.vocab.engine.engine_vocabulary`."""
    return engine_vocabulary(tokenizer, vocab_size, eos_token_ids)


class FormcastSGLangGrammar(BaseGrammarObject):  # type: ignore[misc]
    """One request's grammar state, as SGLang's scheduler drives it.

    Args:
        compiled: the compiled grammar (shared, immutable).
        key_string: the request's constraint text (for error messages).
        grammar_stats: SGLang's ``GrammarStats`` for this grammar (None: a fresh one).
        matcher: the matcher to wrap (default: a new one at the start of ``compiled``).

    The vocabulary's stop ids (the model's EOS) are allowed only where the output is
    complete; accepting one terminates the grammar (:meth:`is_terminated`), and
    :meth:`rollback` can undo it.  Every accepted token stays undoable (memory O(output
    length)).
    """

    def __init__(
        self,
        compiled: CompiledGrammar,
        *,
        key_string: str | None = None,
        grammar_stats: Any = None,
        matcher: GrammarMatcher | None = None,
    ) -> None:
        super().__init__()
        self.compiled = compiled
        self.matcher = matcher if matcher is not None else GrammarMatcher(compiled)
        self.key_string = key_string
        self.grammar_stats = grammar_stats if grammar_stats is not None else GrammarStats()
        self.vocab_size = compiled.vocab.vocab_size

    # -- advancing ------------------------------------------------------------------------
    def accept_token(self, token: int) -> None:
        """Advance by ``token``; a no-op once terminated (SGLang may pass the tokens of a
        whole step).

        Raises:
            ValueError: the grammar does not allow ``token`` here (state unchanged) -- SGLang
                catches it and aborts the request with the message.
        """
        if self.matcher.is_terminated():
            return
        self.current_token = token
        if not self.matcher.accept_token(int(token)):
            raise ValueError(
                f"formcast: token {int(token)} is not allowed after "
                f"{self.matcher.accepted_bytes()[-80:]!r} by the {self.compiled.kind} "
                f"constraint {(self.key_string or '')[:120]!r}"
            )

    def rollback(self, k: int) -> None:
        """Undo the last ``k`` accepted tokens (an accepted stop token included); ``k <= 0``
        does nothing.

        Raises:
            ConfigurationError: (a ``ValueError``) more tokens than were accepted.
        """
        if k <= 0:
            return
        self.matcher.rollback(int(k))

    def is_terminated(self) -> bool:
        """True once a stop token was accepted."""
        return self.matcher.is_terminated()

    def copy(self) -> FormcastSGLangGrammar:
        """An independent grammar at the same point (SGLang copies its cached, pristine grammar
        for each request, so the copy starts at the beginning).  O(accepted tokens)."""
        stats = self.grammar_stats
        if isinstance(stats, GrammarStats):
            stats = dataclasses.replace(stats, is_cache_hit=True, tree_traversal_time=[])
        return FormcastSGLangGrammar(
            self.compiled,
            key_string=self.key_string,
            grammar_stats=stats,
            matcher=self.matcher.fork(),
        )

    # -- masks ----------------------------------------------------------------------------
    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> Any:
        """An all-allowed ``int32[batch_size, ceil(vocab_size / 32)]`` CPU tensor (pinned when
        CUDA is available: :meth:`move_vocab_mask` is then asynchronous).  ``device`` is
        ignored: masks are filled on the CPU."""
        return allocate_token_bitmask(batch_size, vocab_size, framework="torch")

    def fill_vocab_mask(self, vocab_mask: Any, idx: int) -> None:
        """Write this request's allowed tokens into row ``idx`` (all zeros once terminated).
        Does not change state.  A row copy once the state's mask is cached."""
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries: Sequence[Any], vocab_mask: Any) -> None:
        """Fill the listed rows (SGLang's ``GrammarRow(row, grammar)``), others untouched:
        one call for the whole batch when every grammar is formcast's (one mask lookup and
        one row copy per distinct state), else row by row."""
        if entries and all(isinstance(e.grammar, FormcastSGLangGrammar) for e in entries):
            batch_fill_next_token_bitmask(
                [e.grammar.matcher for e in entries], vocab_mask, [int(e.row) for e in entries]
            )
            return
        for entry in entries:
            entry.grammar.fill_vocab_mask(vocab_mask, entry.row)

    @staticmethod
    def reset_vocab_mask(vocab_mask: Any) -> None:
        """Back to all allowed (every bit set)."""
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
        """``vocab_mask`` on ``device`` (non-blocking from pinned memory)."""
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
        """Set the disallowed logits to ``-inf`` in place: one vectorized torch operation on
        the logits' device (CPU or CUDA) for all rows; a CPU mask for CUDA logits is moved."""
        apply_token_bitmask_inplace(logits, vocab_mask)

    # -- jump-forward ---------------------------------------------------------------------
    def try_jump_forward(self, tokenizer: Any) -> tuple[list[int], str] | None:
        """The text the grammar forces next, as ``([], text)`` (xgrammar's convention: SGLang
        appends the text, re-tokenizes and calls :meth:`jump_and_retokenize`); ``None`` when
        nothing is forced.  Forced bytes that end inside a UTF-8 character are cut before it
        (the character is left to sampling)."""
        forced = self.matcher.find_jump_forward_bytes()
        if not forced:
            return None
        text = _utf8_prefix(forced)
        return ([], text) if text else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        """``(text, -1)`` from :meth:`try_jump_forward`'s helper (no state number: the matcher
        is advanced by :meth:`jump_and_retokenize`)."""
        return helper[1], -1

    def jump_and_retokenize(
        self, old_output_ids: list[int], new_output_ids: list[int], next_state: int
    ) -> None:
        """Bring the matcher to ``new_output_ids`` (the re-tokenized output): undo the accepted
        tokens after the longest common prefix, then accept the new ones.  The accepted
        history is the matcher's own, so ``old_output_ids`` with tokens it never saw (a
        jump-forward suffix) are handled too.

        Raises:
            ValueError: the grammar refuses a re-tokenized token (the matcher is left where
                it was before the call).
        """
        del old_output_ids, next_state
        accepted = self.matcher.accepted_token_ids
        k = 0
        for old, new in zip(accepted, new_output_ids):
            if old != new:
                break
            k += 1
        undone = accepted[k:]
        if undone:
            self.matcher.rollback(len(undone))
        if not self.matcher.accept_tokens([int(t) for t in new_output_ids[k:]]):
            self.matcher.accept_tokens(undone)
            raise ValueError(
                f"formcast: the re-tokenized output {list(new_output_ids)[-20:]} is not "
                f"allowed by the {self.compiled.kind} constraint "
                f"{(self.key_string or '')[:120]!r}"
            )

    def __repr__(self) -> str:
        return (
            f"FormcastSGLangGrammar(kind={self.compiled.kind!r}, "
            f"tokens={self.matcher.num_accepted_tokens}, terminated={self.is_terminated()})"
        )


def _utf8_prefix(data: bytes) -> str:
    """The longest prefix of ``data`` that is whole UTF-8, decoded (at most 3 bytes cut)."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


class FormcastGrammarBackend(BaseGrammarBackend):  # type: ignore[misc]
    """SGLang's grammar backend for one model: ``dispatch_*`` compile a constraint.

    Args:
        tokenizer: SGLang's Hugging Face tokenizer.
        vocab_size: the model's logits width (``model_config.vocab_size``).
        eos_token_ids: the model's EOS ids (stop tokens); ``None``: the tokenizer's EOS.
        compiler: a :class:`GrammarCompiler` to use (default: a new one for the vocabulary;
            give one built with ``cache_dir=`` or ``workers=`` to share compiled grammars
            across processes or compile off the GIL).

    ``dispatch_*`` run in SGLang's grammar thread pool (the compiler is thread-safe) and never
    raise for a bad constraint: they return ``InvalidGrammarObject(message)``.

    Raises (from ``__init__``):
        VocabularyError: a tokenizer formcast cannot read exact token bytes from.
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        eos_token_ids: Iterable[int] | int | None = None,
        *,
        compiler: GrammarCompiler | None = None,
    ) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        if compiler is None:
            self.vocab = vocabulary_from_tokenizer(tokenizer, int(vocab_size), eos_token_ids)
            compiler = GrammarCompiler(self.vocab)
        self.vocab = compiler.vocab
        self.compiler = compiler
        self.vocab_size = self.vocab.vocab_size

    def _grammar(
        self, key_type: str, key_string: str, make_spec: Callable[[], ConstraintSpec]
    ) -> FormcastSGLangGrammar | InvalidGrammarObject:
        """Compile the spec ``make_spec()`` (the one compile path); an error of either is an
        :class:`InvalidGrammarObject`, as SGLang's other backends report it."""
        try:
            compiled = self.compiler.compile(make_spec())
        except (FormcastError, ValueError, TypeError, RecursionError) as exc:
            logger.error("Hit invalid %s: key_string=%r, e=%r", key_type, key_string[:200], exc)
            return InvalidGrammarObject(f"{type(exc).__name__}: {exc}")
        return FormcastSGLangGrammar(
            compiled, key_string=key_string, grammar_stats=GrammarStats(dispatch_type=key_type)
        )

    def dispatch_json(self, key_string: str) -> Any:
        """A JSON Schema (text), or ``"$$ANY$$"`` for any JSON value."""
        if key_string == ANY_JSON_KEY:
            return self._grammar("json", key_string, AnyJsonSpec)
        return self._grammar("json", key_string, lambda: JsonSchemaSpec.of(key_string))

    def dispatch_regex(self, key_string: str) -> Any:
        """A regular expression, ECMA-262 semantics (matched in full)."""
        return self._grammar("regex", key_string, lambda: RegexSpec(key_string, "ecma"))

    def dispatch_ebnf(self, key_string: str) -> Any:
        """xgrammar's EBNF (GBNF, start rule ``root``), or Lark (see :func:`ebnf_syntax`)."""
        return self._grammar(
            "ebnf", key_string, lambda: GrammarTextSpec(key_string, ebnf_syntax(key_string))
        )

    def dispatch_structural_tag(self, key_string: str) -> Any:
        """xgrammar's structural-tag JSON (legacy ``structures``/``triggers``, or ``format``)."""
        return self._grammar(
            "structural_tag", key_string, lambda: StructuralTagSpec.of(json.loads(key_string))
        )

    def reset(self) -> None:
        """Forget SGLang's grammar cache and the compiler's compiled grammars."""
        super().reset()
        self.compiler.clear_cache()


def create_backend(
    server_args: Any,
    tokenizer: Any,
    vocab_size: int,
    eos_token_ids: Iterable[int] | int | None = None,
) -> FormcastGrammarBackend:
    """The ``init_func`` SGLang calls for ``--grammar-backend formcast``
    (``create_grammar_backend``): ``(server_args, tokenizer, vocab_size, eos_token_ids)``."""
    del server_args
    return FormcastGrammarBackend(tokenizer, vocab_size, eos_token_ids)


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: register ``formcast`` with SGLang's grammar
    backend registry and add it to ``--grammar-backend``'s choices.  Idempotent."""
    _base.register_grammar_backend(BACKEND_NAME, create_backend)
    try:
        from sglang.srt.arg_groups import choices
    except ImportError:  # pragma: no cover - older SGLang: server_args holds the list
        from sglang.srt import server_args as choices
    names = getattr(choices, "GRAMMAR_BACKEND_CHOICES", None)
    if isinstance(names, list) and BACKEND_NAME not in names:
        names.append(BACKEND_NAME)
