"""The typed exception hierarchy of formcast.

Every error a user can meet derives from :class:`FormcastError`.  Messages say *what* went wrong,
*where* (a position in the grammar source, a JSON pointer, a token id) and *what to do*.

Lifetime: these are plain exception classes; nothing here imports another formcast module.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ChatTemplateError",
    "CompileBudgetError",
    "CompileTimeoutError",
    "CompileWorkerError",
    "ConfigurationError",
    "ConstraintError",
    "ContextLengthError",
    "DeadEndDiagnostic",
    "DeadEndError",
    "FormcastError",
    "GrammarError",
    "GrammarSyntaxError",
    "LimitExceededError",
    "MissingDependencyError",
    "ModelFileError",
    "OptionError",
    "SamplingBudgetError",
    "SerializationError",
    "ToolCallError",
    "UnsatisfiableGrammarError",
    "UnsupportedFeatureError",
    "VocabularyError",
    "quote_text",
]


def quote_text(text: str) -> str:
    """``text`` in single quotes for a message, as the user typed it: a printable text keeps
    its backslashes single (a regex reads as written, where :func:`repr` would double every
    backslash); a text with control characters or a quote falls back to :func:`repr`."""
    if text.isprintable() and "'" not in text:
        return f"'{text}'"
    return repr(text)


class FormcastError(Exception):
    """Root of every exception raised by formcast."""

    if sys.version_info < (3, 11):

        def add_note(self, note: str) -> None:
            """Python 3.10's stand-in for ``BaseException.add_note`` (3.11): appends ``note`` to
            ``__notes__`` (which 3.10's tracebacks do not print)."""
            self.__dict__.setdefault("__notes__", []).append(note)


class ConfigurationError(FormcastError, ValueError):
    """An option or argument has an invalid value (also a :class:`ValueError`)."""


class OptionError(ConfigurationError):
    """One generation option (``generate``/``stream``/``GenerationOptions``/the action runner)
    has a bad value.

    Attributes:
        option: the option's keyword, e.g. ``"max_tokens"``.
        value: the value given.
    """

    def __init__(self, option: str, value: Any, message: str) -> None:
        self.option = option
        self.value = value
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.option, self.value, str(self)))


class ContextLengthError(ConfigurationError):
    """The prompt plus the token budget do not fit in the model's context.

    Attributes:
        prompt_tokens: tokens of the prompt (chat template applied).
        max_tokens: the budget asked for.
        context: the model's context length, in tokens.
    """

    def __init__(self, prompt_tokens: int, max_tokens: int, context: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.context = context
        super().__init__(
            f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) exceeds the model's "
            f"context of {context} tokens: lower max_tokens or load the model with a larger n_ctx"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.prompt_tokens, self.max_tokens, self.context))


class ChatTemplateError(ConfigurationError):
    """A model's jinja chat template cannot be compiled, or refused the messages while rendering
    (its ``raise_exception(...)``, e.g. roles that do not alternate); the message quotes the
    template's own words and says which template."""


class GrammarError(FormcastError):
    """A constraint (regex, grammar or schema) cannot be compiled."""


class GrammarSyntaxError(GrammarError, ValueError):
    """The constraint's source text is malformed.

    Attributes:
        source: the text that was being parsed.
        position: 0-based character offset of the problem in ``source``.
        line, column: 1-based line and column of ``position``.
    """

    def __init__(self, message: str, *, source: str = "", position: int = 0) -> None:
        self.source = source
        self.position = position
        before = source[:position]
        self.line = before.count("\n") + 1
        self.column = position - (before.rfind("\n") + 1) + 1
        lines = source.splitlines()
        line_text = lines[self.line - 1] if self.line - 1 < len(lines) else ""
        pointer = " " * (self.column - 1) + "^"
        detail = f"{message} at line {self.line}, column {self.column}"
        if line_text:
            detail += f"\n  {line_text}\n  {pointer}"
        super().__init__(detail)
        self.message = message


class UnsupportedFeatureError(GrammarError):
    """The constraint uses a feature formcast does not implement (it fails closed).

    Attributes:
        feature: the keyword or construct, e.g. ``"lookahead"`` or ``"uniqueItems"``.
        where: a position (``"position 4"``) or JSON pointer (``"#/properties/a"``).
    """

    def __init__(self, feature: str, where: str = "", hint: str = "") -> None:
        self.feature = feature
        self.where = where
        msg = f"unsupported feature {quote_text(feature)}"
        if where:
            msg += f" at {where}"
        if hint:
            msg += f": {hint}"
        super().__init__(msg)


class ConstraintError(GrammarError, ValueError):
    """A constraint object (:mod:`formcast.constraints`) is malformed: an undefined or twice
    defined rule, a state machine with unreachable or dead states or ambiguous transitions.

    Attributes:
        path: where in the user's constraint object, e.g. ``"seq[2].select[1]"`` (``""``: the
            constraint itself).
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        self.message = message
        super().__init__(f"{message} (at {path or 'the constraint'})")


class UnsatisfiableGrammarError(GrammarError):
    """The constraint's language is empty: no output could ever satisfy it."""


class LimitExceededError(GrammarError):
    """A resource limit was exceeded while compiling (or, for a matcher, while running).

    Attributes:
        limit: the name of the limit, e.g. ``"max_dfa_states"``.
        value: the configured limit.
    """

    def __init__(self, limit: str, value: int | float, detail: str = "") -> None:
        self.limit = limit
        self.value = value
        msg = f"limit {limit}={value} exceeded"
        if detail:
            msg += f" ({detail})"
        msg += f"; raise {limit} in the limits object if this constraint is trusted"
        super().__init__(msg)


class CompileBudgetError(LimitExceededError):
    """A compile ran out of its budget: the deterministic fuel (``max_compile_work``) or,
    as :class:`CompileTimeoutError`, the wall clock.  Never swallowed by the fallbacks that
    catch other limits (it ends the compile)."""


class CompileTimeoutError(CompileBudgetError):
    """A compile ran past its wall-clock cap (``max_compile_seconds``).  Never swallowed by
    the fallbacks that catch other limits (it ends the compile)."""


class SamplingBudgetError(LimitExceededError):
    """A :class:`~formcast.generation.ConditionedSampler` ran out of ``max_model_calls``
    before drawing the samples asked for (the valid mass is too small for the budget).  Never
    answered by a silent fall-back to masking.

    Attributes:
        samples: samples drawn in the interrupted ``sample`` call.
        z_estimate: the estimated valid mass ``Z`` (``nan`` when unknown).
    """

    def __init__(
        self,
        limit: str,
        value: int | float,
        detail: str = "",
        *,
        samples: int = 0,
        z_estimate: float = float("nan"),
    ) -> None:
        self.samples = samples
        self.z_estimate = z_estimate
        self.limit = limit
        self.value = value
        msg = f"sampling budget {limit}={value} exhausted"
        if detail:
            msg += f": {detail}"
        Exception.__init__(self, msg)


class VocabularyError(FormcastError, ValueError):
    """A vocabulary or tokenizer cannot be used (empty, bad stop ids, unknown format...)."""


class SerializationError(FormcastError, ValueError):
    """A serialized compiled grammar cannot be loaded (also a :class:`ValueError`): another
    format version or code layout, another vocabulary, or corrupt or truncated data.  The disk
    cache treats it as a miss and replaces the file.

    Attributes:
        reason: ``"version"``, ``"layout"``, ``"vocabulary"``, ``"truncated"``, ``"corrupt"``
            or ``"unsupported"`` (an object that is not plain data, when serializing).
        where: the file, or the attribute path inside the grammar (``"program._masks"``).
    """

    def __init__(self, message: str, *, reason: str = "corrupt", where: str = "") -> None:
        self.reason = reason
        self.where = where
        detail = f"{message} (in {where})" if where else message
        super().__init__(detail)


class CompileWorkerError(FormcastError):
    """A compile worker process (``GrammarCompiler(workers=N)``) died or returned something
    unexpected before finishing a compile; the compiler replaces the worker.  Errors *of the
    compile itself* are re-raised with their own type instead.

    Attributes:
        pid: the worker's process id (0 when unknown).
        exitcode: its exit status (negative: killed by that signal; None when unknown).
    """

    def __init__(self, message: str, *, pid: int = 0, exitcode: int | None = None) -> None:
        self.pid = pid
        self.exitcode = exitcode
        super().__init__(message)


@dataclass(frozen=True)
class DeadEndDiagnostic:
    """Why no token (not even a stop token) is allowed in a matcher's current state.

    Attributes:
        state: the automaton/parser state description.
        prefix: every byte accepted so far.
        expected: a human-readable description of what the grammar accepts next.
        expected_bytes: the byte values that could continue the output (may be empty).
        accepting: whether the output so far is complete (then only a stop token is missing).
        vocabulary_fingerprint: the fingerprint of the vocabulary in use.
        reason: one sentence naming the likely incompatibility.
    """

    state: Any
    prefix: bytes
    expected: str
    expected_bytes: tuple[int, ...]
    accepting: bool
    vocabulary_fingerprint: str
    reason: str
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        tail = self.prefix[-60:]
        return (
            f"dead end: {self.reason}; state={self.state!r}; "
            f"prefix(last {len(tail)} bytes)={tail!r}; expected {self.expected}; "
            f"vocabulary {self.vocabulary_fingerprint[:16]}"
        )


class DeadEndError(FormcastError):
    """Raised by a generation loop when no token is allowed; carries the diagnostic."""

    def __init__(self, diagnostic: DeadEndDiagnostic) -> None:
        self.diagnostic = diagnostic
        super().__init__(str(diagnostic))


class MissingDependencyError(FormcastError, ImportError):
    """An optional library needed by an integration is not installed (the message says how to
    install it)."""


class ModelFileError(FormcastError):
    """A model file is missing, unreadable, or fails its checksum (the message says the fix)."""


class ToolCallError(FormcastError, ValueError):
    """Generated text holds a tool call that cannot be used: not JSON, an unknown function,
    or arguments invalid for the function's ``parameters`` schema
    (:func:`formcast.tools.parse_tool_calls`).

    Attributes:
        name: the function named by the call (``""`` when none could be read).
        index: the call's position among the turn's calls (0-based).
        offset: where the call starts in the text (characters).
    """

    def __init__(self, message: str, *, name: str = "", index: int = 0, offset: int = 0) -> None:
        self.name = name
        self.index = index
        self.offset = offset
        super().__init__(message)
