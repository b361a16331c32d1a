"""Tool-call output formats of the common model families, and the constraint of ``tool_choice``.

A :class:`ToolCallFormat` says how a model writes its calls:

* ``hermes`` (Hermes, Qwen 2.5/3, SmolLM): ``<tool_call>\\n{"name": "f", "arguments": {...}}\\n
  </tool_call>``, calls joined by a newline;
* ``llama3`` (Llama 3.1-3.3): ``{"name": "f", "parameters": {...}}``, calls joined by ``; `` (an
  optional ``<|python_tag|>`` before them is accepted when parsing);
* ``mistral`` (Mistral, Mixtral): ``[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]``.

:func:`get_tool_call_format` picks one from a format name, a model name or path, or the text of
a chat template.  :func:`tool_call_structural_tag` builds the
:class:`~formcast.index.structural_tag.StructuralTag` of a request's ``tools``, ``tool_choice``
and ``parallel_tool_calls``; compile it with ``GrammarCompiler.compile_structural_tag``.  In every
format the function's name is written *before* its arguments and is part of the tag's begin, so
the name selects the one schema the arguments must follow (never a mix of the tools' schemas).

The markers are constrained as text: a tokenizer whose ``[TOOL_CALLS]`` or ``<|python_tag|>``
is a special (control) token writes them with ordinary text tokens under the constraint, and
:func:`~formcast.tools.parse_tool_calls` accepts both spellings.

Lifetime: immutable values; building a tag is a pure function (the compile is cached by the
compiler, keyed by the tag's content).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..frontends.jsonschema.options import JsonSchemaOptions
from ..index.structural_tag import (
    AnyText,
    Choice,
    ConstString,
    Format,
    JsonSchema,
    RepeatFormat,
    Sequence,
    StructuralTag,
    Tag,
    TriggeredTags,
)
from .calls import FunctionTool, read_tool_choice, read_tools

__all__ = [
    "FORMATS",
    "HERMES",
    "LLAMA3",
    "MISTRAL",
    "TOOL_CALL_JSON_OPTIONS",
    "ToolCallFormat",
    "get_tool_call_format",
    "tool_call_structural_tag",
]

#: how arguments are laid out by default: ``json.dumps``' look (``{"a": 1, "b": 2}``), which is
#: what the families' chat templates render and their models write
TOOL_CALL_JSON_OPTIONS = JsonSchemaOptions(item_sep=", ", key_sep=": ")


@dataclass(frozen=True)
class ToolCallFormat:
    """How a model family writes tool calls.

    Attributes:
        name: ``"hermes"``, ``"llama3"``, ``"mistral"`` (or your own).
        call_begin: the text before a call's name (``<tool_call>\\n{"name": "``).
        name_end: the text between the name and the arguments (``", "arguments": ``).
        call_end: the text after the arguments (``}\\n</tool_call>``).
        separator: between two calls of one turn.
        trigger: in free text, the string whose occurrence starts the calls.
        block_begin, block_end: once around all the calls of a turn (Mistral's
            ``[TOOL_CALLS][`` and ``]``); empty when each call is delimited on its own.
        arguments_key: the JSON key of the arguments (``"arguments"`` or ``"parameters"``).
        prefixes: markers a model may write before the calls, accepted when parsing
            (Llama's ``<|python_tag|>``).
    """

    name: str
    call_begin: str
    name_end: str
    call_end: str
    separator: str
    trigger: str
    block_begin: str = ""
    block_end: str = ""
    arguments_key: str = "arguments"
    prefixes: tuple[str, ...] = ()

    def begin_of(self, name: str) -> str:
        """The text of a call up to its arguments (the name JSON-escaped)."""
        return f"{self.call_begin}{json.dumps(name, ensure_ascii=False)[1:-1]}{self.name_end}"

    def render(self, calls: Iterable[Any]) -> str:
        """The text the model writes for ``calls`` (:class:`~formcast.tools.ToolCall` values
        or ``(name, arguments)`` pairs), in this format, arguments as ``json.dumps`` does."""
        parts = []
        for c in calls:
            name, args = (c.name, c.arguments) if hasattr(c, "arguments") else c
            parts.append(
                self.begin_of(name) + json.dumps(args, ensure_ascii=False) + self.call_end
            )
        if not parts:
            return ""
        return self.block_begin + self.separator.join(parts) + self.block_end


HERMES = ToolCallFormat(
    name="hermes",
    call_begin='<tool_call>\n{"name": "',
    name_end='", "arguments": ',
    call_end="}\n</tool_call>",
    separator="\n",
    trigger="<tool_call>",
)
LLAMA3 = ToolCallFormat(
    name="llama3",
    call_begin='{"name": "',
    name_end='", "parameters": ',
    call_end="}",
    separator="; ",
    trigger='{"name": "',
    arguments_key="parameters",
    prefixes=("<|python_tag|>",),
)
MISTRAL = ToolCallFormat(
    name="mistral",
    call_begin='{"name": "',
    name_end='", "arguments": ',
    call_end="}",
    separator=", ",
    trigger="[TOOL_CALLS]",
    block_begin="[TOOL_CALLS][",
    block_end="]",
)

FORMATS: dict[str, ToolCallFormat] = {"hermes": HERMES, "llama3": LLAMA3, "mistral": MISTRAL}

_ALIASES = {
    "hermes": HERMES, "hermes2": HERMES, "hermes3": HERMES, "nous": HERMES, "qwen": HERMES,
    "qwen2": HERMES, "qwen2.5": HERMES, "qwen3": HERMES, "chatml": HERMES, "smollm": HERMES,
    "smollm2": HERMES, "llama3": LLAMA3, "llama3_json": LLAMA3, "llama-3": LLAMA3,
    "llama3.1": LLAMA3, "llama3.2": LLAMA3, "llama3.3": LLAMA3, "llama": LLAMA3,
    "mistral": MISTRAL, "mixtral": MISTRAL, "ministral": MISTRAL,
}
#: substrings of model names and paths, checked in order
_MODEL_HINTS = (
    ("mistral", MISTRAL), ("mixtral", MISTRAL), ("ministral", MISTRAL),
    ("llama-3", LLAMA3), ("llama3", LLAMA3), ("llama_3", LLAMA3), ("llama-4", LLAMA3),
    ("qwen", HERMES), ("hermes", HERMES), ("smollm", HERMES),
)
#: markers in a chat template's text, checked in order
_TEMPLATE_HINTS = (
    ("[TOOL_CALLS]", MISTRAL), ("<tool_call>", HERMES), ("<|python_tag|>", LLAMA3),
    ('"parameters"', LLAMA3),
)


def get_tool_call_format(
    spec: str | ToolCallFormat, *, default: ToolCallFormat | None = None
) -> ToolCallFormat:
    """The tool-call format named by ``spec``: a format name or alias (``"hermes"``,
    ``"qwen"``, ``"llama3"``, ``"mistral"``...), a model name or path
    (``"Qwen/Qwen2.5-7B-Instruct"``, ``"Meta-Llama-3.1-8B-Instruct.Q4.gguf"``), or the text
    of a chat template (recognized by the markers it renders: ``<tool_call>``,
    ``[TOOL_CALLS]``, ``<|python_tag|>``).  A :class:`ToolCallFormat` is returned as is.

    Raises:
        ConfigurationError: nothing recognized and no ``default``.
    """
    if isinstance(spec, ToolCallFormat):
        return spec
    if not isinstance(spec, str):
        raise ConfigurationError(
            f"a tool-call format is a name or a ToolCallFormat, got {type(spec).__name__}"
        )
    key = spec.strip().lower()
    if key in _ALIASES:
        return _ALIASES[key]
    if "{%" in spec or "{{" in spec:  # a chat template
        for marker, fmt in _TEMPLATE_HINTS:
            if marker in spec:
                return fmt
    else:
        for hint, fmt in _MODEL_HINTS:
            if hint in key:
                return fmt
    if default is not None:
        return default
    raise ConfigurationError(
        f"no tool-call format known for {spec[:80]!r}: give one of {sorted(FORMATS)} "
        "(or a ToolCallFormat of your own)"
    )


def _call_tag(fmt: ToolCallFormat, tool: FunctionTool, options: JsonSchemaOptions | None) -> Tag:
    params = tool.parameters
    # the tag's end starts with the envelope's closing brace (the arguments are its last member)
    return Tag(fmt.begin_of(tool.name), JsonSchema(params, options), fmt.call_end)


def _calls(
    fmt: ToolCallFormat, tags: list[Tag], parallel: bool, max_calls: int | None
) -> Format:
    """One or more calls joined by the separator (exactly one unless ``parallel``)."""
    one: Format = tags[0] if len(tags) == 1 else Choice(tuple(tags))
    most = 1 if not parallel else max_calls
    if most == 1:
        return one
    rest = None if most is None else most - 1
    more = RepeatFormat(Sequence((ConstString(fmt.separator), one)), 0, rest)
    return Sequence((one, more))


def tool_call_structural_tag(
    tools: Iterable[Any],
    tool_choice: Any = "auto",
    *,
    parallel_tool_calls: bool = True,
    format: ToolCallFormat | str = HERMES,
    max_calls: int | None = None,
    content: Format | None = None,
    json_options: JsonSchemaOptions | None = TOOL_CALL_JSON_OPTIONS,
) -> StructuralTag:
    """The structural tag of a chat request's tool calling.

    Args:
        tools: OpenAI-style tools (``[{"type": "function", "function": {"name",
            "description", "parameters"}}]``) or :class:`~formcast.tools.FunctionTool` values.
        tool_choice: ``"auto"`` (text, calls, or both: a call starts where the format's
            trigger occurs), ``"required"`` (calls only, at least one), ``"none"`` (text in
            which the trigger never occurs), or a named function
            (``{"type": "function", "function": {"name": ...}}``: calls of that one only).
            ``None``: ``"auto"`` with tools, ``"none"`` without.
        parallel_tool_calls: several calls in a turn (False: at most one).
        format: a :class:`ToolCallFormat` or a name for :func:`get_tool_call_format`.
        max_calls: at most this many calls in a turn (``None``: unbounded).
        content: the format of the text when it is not a call (``None``: free text).  With
            it, ``"auto"`` is *either* that content *or* the calls (a JSON answer or a call).
        json_options: the layout of the arguments (default: ``json.dumps``' look).

    Returns:
        A :class:`~formcast.index.structural_tag.StructuralTag` for
        ``GrammarCompiler.compile_structural_tag``.

    Raises:
        ConfigurationError: malformed tools or tool_choice, ``required`` without tools.
    """
    fmt = get_tool_call_format(format)
    fns = read_tools(tools)
    choice = read_tool_choice(tool_choice, fns)
    if max_calls is not None and (isinstance(max_calls, bool) or max_calls < 1):
        raise ConfigurationError(f"max_calls must be an int >= 1 or None, got {max_calls!r}")
    if choice == "none":
        return StructuralTag(content if content is not None else AnyText((fmt.trigger,)))
    if choice.startswith("function:"):
        wanted = choice[len("function:") :]
        fns = tuple(f for f in fns if f.name == wanted)
    if not fns:  # "auto" without tools: text only
        return StructuralTag(content if content is not None else AnyText((fmt.trigger,)))
    tags = [_call_tag(fmt, f, json_options) for f in fns]
    calls = _calls(fmt, tags, parallel_tool_calls, max_calls)
    block: Format = (
        Tag(fmt.block_begin, calls, fmt.block_end) if fmt.block_begin else calls
    )
    if choice != "auto":
        return StructuralTag(block)
    if content is not None:
        return StructuralTag(Choice((content, block)))
    if fmt.block_begin:
        assert isinstance(block, Tag)
        if not block.begin.startswith(fmt.trigger):
            raise ConfigurationError(
                f"format {fmt.name!r}: the trigger {fmt.trigger!r} must begin {block.begin!r}"
            )
        return StructuralTag(TriggeredTags((fmt.trigger,), (block,), stop_after_first=True))
    return StructuralTag(
        TriggeredTags(
            (fmt.trigger,),
            tuple(tags),
            stop_after_first=not parallel_tool_calls,
            max_tags=max_calls if parallel_tool_calls else None,
        )
    )
