"""Think, then constrain, inside :func:`~formcast.generation.generate` / ``stream``:
``reasoning=``.

``reasoning=True`` (or a :class:`ReasoningOptions`, or a dict of its fields) wraps the call's
constraint (``schema=`` / ``regex=`` / ``grammar=`` / ``constraint=`` / ``compiled=``) with
``GrammarCompiler.compile_reasoning`` (:mod:`formcast.index.reasoning`): free text (the
model's thinking) until the first ``end_marker``, then the constraint.  The
result is split at that first marker: ``result.reasoning`` is the thinking (marker excluded),
``result.text`` / ``value`` / ``parsed`` are the constrained answer after it, as without
``reasoning=`` (``result.constraint`` is the answer's kind).  ``token_ids`` and ``raw`` stay
the whole output (thinking, marker, answer).

Streaming: the thinking is yielded as :class:`ReasoningText` pieces (a ``str`` subclass), the
marker is not yielded, the answer comes as plain ``str`` pieces; the plain pieces concatenate
to ``result.text`` and the :class:`ReasoningText` ones to ``result.reasoning``.  Text that
could be the start of the marker is held back until it is known not to be.

Lifetime: stateless helpers plus one :class:`ReasoningSplitter` per stream; the wrapped grammar
is cached by the compiler per inner grammar (O(1) to build).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from .loop import parse_output
from .results import GenerationResult

__all__ = [
    "ReasoningOptions",
    "ReasoningSplitter",
    "ReasoningText",
    "read_reasoning",
    "split_result",
    "split_stream",
    "split_text",
    "wrap_reasoning",
]


@dataclass(frozen=True)
class ReasoningOptions:
    """How the model thinks before the constrained answer (``generate(reasoning=...)``).

    Attributes:
        end_marker: the text that ends the thinking (its first occurrence); the output starts
            *in* the thinking (the prompt or chat template opens ``<think>`` if the model
            needs it).
        max_thinking_tokens: after this many thinking tokens only the rest of the marker may
            follow (``None``: no bound but ``max_tokens``, which counts thinking tokens too).
        max_thinking_bytes: the same bound in bytes of thinking text (marker not counted).
    """

    end_marker: str = "</think>"
    max_thinking_tokens: int | None = None
    max_thinking_bytes: int | None = None


_FIELDS = tuple(f.name for f in dataclasses.fields(ReasoningOptions))


def read_reasoning(value: object) -> ReasoningOptions | None:
    """``reasoning=`` as options: ``None``/``False`` -> ``None``, ``True`` -> the defaults, a
    :class:`ReasoningOptions` as is, a mapping of its fields -> options.

    Raises:
        ConfigurationError: another type, or a mapping with an unknown key.  (The values are
            checked by ``compile_reasoning``.)
    """
    if value is None or value is False:
        return None
    if value is True:
        return ReasoningOptions()
    if isinstance(value, ReasoningOptions):
        return value
    if isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in _FIELDS)
        if unknown:
            raise ConfigurationError(
                f"reasoning= has unknown key(s) {', '.join(unknown)}: the keys are "
                f"{', '.join(_FIELDS)}"
            )
        return ReasoningOptions(**{str(k): v for k, v in value.items()})
    raise ConfigurationError(
        "reasoning must be True, False, None, a formcast.generation.ReasoningOptions or a dict "
        f"of its fields ({', '.join(_FIELDS)}), got {type(value).__name__}"
    )


def wrap_reasoning(
    compiled: CompiledGrammar | None,
    options: ReasoningOptions,
    compiler: GrammarCompiler,
) -> CompiledGrammar:
    """``compiled`` behind a thinking part (``compiler.compile_reasoning``; O(1), cached).

    Raises:
        ConfigurationError: no constraint, ``compiled`` already a reasoning grammar, or bad
            options (empty marker, negative budgets).
    """
    if compiled is None:
        raise ConfigurationError(
            "reasoning= needs a constraint for the answer (schema=, regex=, grammar=, "
            "constraint= or compiled=); without one the whole output is free text already"
        )
    if compiled.kind == "reasoning":
        raise ConfigurationError(
            "compiled= is already a reasoning grammar (compile_reasoning): pass its inner "
            "grammar with reasoning=..., or this one without reasoning="
        )
    return compiler.compile_reasoning(
        compiled,
        end_marker=options.end_marker,
        max_thinking_tokens=options.max_thinking_tokens,
        max_thinking_bytes=options.max_thinking_bytes,
    )


class ReasoningText(str):
    """A piece of thinking text yielded by ``stream(..., reasoning=...)`` (a ``str``:
    ``isinstance(piece, ReasoningText)`` tells it from the answer's pieces)."""

    __slots__ = ()


class ReasoningSplitter:
    """Splits a stream of text pieces at the first ``marker``: the pieces before it become
    :class:`ReasoningText`, the marker is dropped, the rest passes as plain ``str``."""

    __slots__ = ("held", "marker", "thinking")

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.thinking = True
        self.held = ""

    def feed(self, piece: str) -> list[str]:
        """The non-empty pieces that are safe to emit after ``piece``."""
        if not self.thinking:
            return [piece] if piece else []
        buf = self.held + piece
        marker = self.marker
        at = buf.find(marker)
        if at >= 0:
            self.thinking = False
            self.held = ""
            out: list[str] = [ReasoningText(buf[:at])] if at else []
            rest = buf[at + len(marker) :]
            if rest:
                out.append(rest)
            return out
        keep = 0  # the longest tail of buf that could start the marker
        for k in range(min(len(marker) - 1, len(buf)), 0, -1):
            if marker.startswith(buf[len(buf) - k :]):
                keep = k
                break
        self.held = buf[len(buf) - keep :]
        safe = buf[: len(buf) - keep]
        return [ReasoningText(safe)] if safe else []

    def flush(self) -> list[str]:
        """The held-back tail once the output ends (thinking cut before the marker)."""
        held, self.held = self.held, ""
        return [ReasoningText(held)] if held else []


def split_text(text: str, marker: str) -> tuple[str, str | None]:
    """``(reasoning, answer)``: ``text`` split at the first ``marker``; ``answer`` is ``None``
    when the marker never came (the output ended while thinking)."""
    at = text.find(marker)
    if at < 0:
        return text, None
    return text[:at], text[at + len(marker) :]


def split_result(
    result: GenerationResult,
    options: ReasoningOptions,
    inner_kind: str,
    schema_class: Any,
) -> GenerationResult:
    """``result`` (of the reasoning grammar) with ``reasoning`` split off ``text`` and the
    answer parsed as the inner constraint's output would be."""
    reasoning, answer = split_text(result.text, options.end_marker)
    # (no marker: the output ended while thinking, so it is not "completed": no value)
    value, parsed, parse_error = parse_output(
        answer or "", result.finish_reason, inner_kind, schema_class
    )
    return dataclasses.replace(
        result,
        text=answer or "",
        reasoning=reasoning,
        value=value,
        parsed=parsed,
        parse_error=parse_error,
        constraint=inner_kind,
    )


def split_stream(
    loop: Generator[str, None, GenerationResult],
    options: ReasoningOptions,
    inner_kind: str,
    schema_class: Any,
) -> Generator[str, None, GenerationResult]:
    """The decoding loop of a reasoning grammar, its pieces split by :class:`ReasoningSplitter`
    and its result by :func:`split_result`."""
    splitter = ReasoningSplitter(options.end_marker)
    result: GenerationResult
    try:
        while True:
            try:
                piece = next(loop)
            except StopIteration as done:
                result = done.value
                break
            yield from splitter.feed(piece)
    finally:
        loop.close()  # (a no-op once it returned; stops it when the stream is closed early)
    yield from splitter.flush()
    return split_result(result, options, inner_kind, schema_class)
