"""Parse generated text into ``(content, [ToolCall])``: :func:`parse_tool_calls`.

Each call is found where its format's marker occurs (``<tool_call>``, ``[TOOL_CALLS]``, or a
JSON object with a ``"name"`` for Llama 3), decoded with ``json``, and checked: the function
must be one of ``tools`` and its arguments valid for that function's ``parameters`` schema
(``jsonschema``).  The text outside the calls is the content (stripped).  Text produced under
the constraint of :func:`~formcast.tools.tool_call_structural_tag` always parses; unconstrained
text may not, and then :class:`~formcast.errors.ToolCallError` says which call and why.

Lifetime: pure functions; schemas' validators are cached per schema text (bounded).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from ..errors import ToolCallError
from .calls import FunctionTool, ToolCall, new_call_id, read_tools
from .formats import HERMES, ToolCallFormat, get_tool_call_format

__all__ = ["parse_tool_calls", "validate_arguments"]

_DECODER = json.JSONDecoder()
_WS = re.compile(r"\s*")


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    from jsonschema.validators import Draft202012Validator, validator_for

    schema = json.loads(schema_text)
    cls = validator_for(schema, default=Draft202012Validator)
    return cls(schema)


def validate_arguments(tool: FunctionTool, arguments: Any) -> str | None:
    """Why ``arguments`` are not valid for ``tool`` (the first error, with its JSON
    pointer), or None when they are."""
    if not isinstance(arguments, dict):
        return f"the arguments are not a JSON object but {type(arguments).__name__}"
    validator = _validator(json.dumps(tool.parameters, sort_keys=True))
    for err in validator.iter_errors(arguments):
        pointer = "".join(f"/{p}" for p in err.absolute_path) or "/"
        return f"{err.message} (at {pointer})"
    return None


def _close_of(fmt: ToolCallFormat) -> str:
    """What follows a call's JSON object (``</tool_call>`` for Hermes)."""
    end = fmt.call_end
    return end[end.index("}") + 1 :].strip() if "}" in end else end.strip()


def _decode_at(text: str, pos: int) -> tuple[Any, int] | None:
    try:
        return _DECODER.raw_decode(text, pos)
    except ValueError:
        return None


def _call_of(
    value: Any, fmt: ToolCallFormat, offset: int, index: int
) -> tuple[str, Any] | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    for key in (fmt.arguments_key, "arguments", "parameters"):
        if key in value:
            args = value[key]
            if isinstance(args, str):  # some models write the arguments as JSON text
                decoded = _decode_at(args, 0)
                if decoded is None or decoded[1] != len(args):
                    raise ToolCallError(
                        f"tool call {index} ({value['name']!r}) at offset {offset}: its "
                        f"{key!r} is a string that is not JSON",
                        name=value["name"],
                        index=index,
                        offset=offset,
                    )
                args = decoded[0]
            return value["name"], args
    return value["name"], {}


def _find_calls(text: str, fmt: ToolCallFormat) -> tuple[list[str], list[tuple[str, Any, int]]]:
    """``(content pieces, [(name, arguments, offset)])``."""
    for prefix in fmt.prefixes:
        text = text.replace(prefix, "")
    content: list[str] = []
    calls: list[tuple[str, Any, int]] = []
    if fmt.block_begin:
        at = text.find(fmt.trigger)
        if at < 0:
            return [text], []
        content.append(text[:at])
        pos = _WS.match(text, at + len(fmt.trigger)).end()  # type: ignore[union-attr]
        decoded = _decode_at(text, pos)
        if decoded is None:
            raise ToolCallError(
                f"the tool calls after {fmt.trigger!r} at offset {at} are not JSON: "
                f"{text[pos:pos + 60]!r}",
                offset=at,
            )
        value, end = decoded
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            got = _call_of(item, fmt, at, i)
            if got is None:
                raise ToolCallError(
                    f"tool call {i} after {fmt.trigger!r} is not {{'name': ..., "
                    f"{fmt.arguments_key!r}: ...}}: {json.dumps(item)[:80]}",
                    index=i,
                    offset=at,
                )
            calls.append((got[0], got[1], at))
        content.append(text[end:])
        return content, calls
    close = _close_of(fmt)
    head = fmt.call_begin[: fmt.call_begin.index("{")] if "{" in fmt.call_begin else ""
    head = head.strip()
    pos = 0
    last = 0
    while True:
        if head:
            at = text.find(head, pos)
            if at < 0:
                break
            start = _WS.match(text, at + len(head)).end()  # type: ignore[union-attr]
        else:
            at = text.find("{", pos)
            if at < 0:
                break
            start = at
        decoded = _decode_at(text, start)
        got = None if decoded is None else _call_of(decoded[0], fmt, at, len(calls))
        if got is None:
            if head:
                raise ToolCallError(
                    f"tool call {len(calls)} at offset {at}: after {head!r} comes no "
                    f"{{'name': ..., {fmt.arguments_key!r}: ...}} object: "
                    f"{text[start:start + 60]!r}",
                    index=len(calls),
                    offset=at,
                )
            pos = at + 1
            continue
        assert decoded is not None
        end = decoded[1]
        if close:
            after = _WS.match(text, end).end()  # type: ignore[union-attr]
            if not text.startswith(close, after):
                raise ToolCallError(
                    f"tool call {len(calls)} ({got[0]!r}) at offset {at} is not closed by "
                    f"{close!r}",
                    name=got[0],
                    index=len(calls),
                    offset=at,
                )
            end = after + len(close)
        content.append(text[last:at])
        calls.append((got[0], got[1], at))
        sep = fmt.separator.strip()
        after = _WS.match(text, end).end()  # type: ignore[union-attr]
        if sep and text.startswith(sep, after):
            end = after + len(sep)
        pos = last = end
    content.append(text[last:])
    return content, calls


def parse_tool_calls(
    text: str,
    tools: Iterable[Any] | None = None,
    format: ToolCallFormat | str = HERMES,
    *,
    ids: Iterable[str] | None = None,
) -> tuple[str, list[ToolCall]]:
    """Split generated ``text`` into its content and its tool calls.

    Args:
        text: the model's output (special tokens such as ``<|python_tag|>`` may be present).
        tools: the request's tools (OpenAI-style or :class:`~formcast.tools.FunctionTool`):
            each call must name one of them and its arguments must be valid for its
            ``parameters``.  ``None``: calls are returned unchecked.
        format: the :class:`~formcast.tools.ToolCallFormat` (or its name).
        ids: the calls' ids in order (default: fresh ``call_...`` ids).

    Returns:
        ``(content, calls)``: the text outside the calls, stripped, and the calls in order.

    Raises:
        ToolCallError: a call that is not JSON, not closed, names an unknown function, or has
            invalid arguments (the message names the call, its offset and the first error).
    """
    fmt = get_tool_call_format(format)
    fns: Mapping[str, FunctionTool] | None = (
        None if tools is None else {f.name: f for f in read_tools(tools)}
    )
    pieces, found = _find_calls(text, fmt)
    given = list(ids) if ids is not None else []
    out: list[ToolCall] = []
    for i, (name, args, offset) in enumerate(found):
        if fns is not None:
            tool = fns.get(name)
            if tool is None:
                raise ToolCallError(
                    f"tool call {i} at offset {offset} names the function {name!r}, which is "
                    f"not among the tools {sorted(fns)}",
                    name=name,
                    index=i,
                    offset=offset,
                )
            why = validate_arguments(tool, args)
            if why is not None:
                raise ToolCallError(
                    f"tool call {i} ({name!r}) at offset {offset}: the arguments are not valid "
                    f"for its parameters: {why}",
                    name=name,
                    index=i,
                    offset=offset,
                )
        elif not isinstance(args, dict):
            raise ToolCallError(
                f"tool call {i} ({name!r}) at offset {offset}: the arguments are not an object",
                name=name,
                index=i,
                offset=offset,
            )
        out.append(ToolCall(name, args, given[i] if i < len(given) else new_call_id()))
    return "".join(pieces).strip(), out
