"""A tool request's output, split as it is generated into text and calls -- never markup.

Under a tool constraint the model writes its family's call format exactly
(:class:`~formcast.tools.formats.ToolCallFormat`: Hermes ``<tool_call>\\n{"name": "N",
"arguments": {...}}\\n</tool_call>``, Llama 3, Mistral).  :func:`split_output` reads any prefix
of such an output into an :class:`OutputView`: the text outside the calls (``content``) and
the calls seen so far, each with its name (once it is whole) and its arguments *as written so
far*.  A view of a longer prefix extends the view of a shorter one (content and arguments
only grow), which is what streaming needs: :class:`CallSplitter` turns the growth between two
views into events -- :class:`TextDelta`, :class:`CallStarted` (id and name),
:class:`ArgumentsDelta` -- that the chat and Responses routes write in their wire formats.

The same view answers an output cut short (``max_tokens``, a timeout): the text before the
calls as content, the calls with a whole name as *partial* calls (their arguments a prefix of
a JSON document; never claimed complete), and the format's markup nowhere (a cut trigger
prefix such as ``<tool_`` is dropped).

Lifetime: :class:`CallSplitter` lives for one choice; the functions are pure.  Cost: a view
re-reads the output from its start with ``str.find`` (C speed), and the arguments' JSON scan
(Python) resumes where it stopped: each character of the arguments is scanned once per
choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ArgumentsDelta",
    "CallSplitter",
    "CallStarted",
    "OutputView",
    "PartialCall",
    "TextDelta",
    "split_output",
]


@dataclass
class PartialCall:
    """A call as far as it is written: ``arguments`` is JSON text (a prefix of it while
    ``arguments_closed`` is false); ``ended``: the format's call end was written too."""

    name: str
    arguments: str = ""
    arguments_closed: bool = False
    ended: bool = False


@dataclass
class OutputView:
    """The content and calls of an output prefix (see the module docstring)."""

    content: str = ""
    calls: list[PartialCall] = field(default_factory=list)
    malformed: bool = False  # the text left the format (an unconstrained or broken output)


def _held_prefix(text: str, marker: str) -> int:
    """The length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


def _json_end(text: str, start: int, memo: dict[int, list[Any]] | None = None) -> int | None:
    """The end of the JSON value starting at ``text[start]`` (an object or array: where its
    depth returns to 0), ``None`` when it is not closed yet.  ``memo`` keeps the scan's state
    per start between calls on a growing ``text``, so each character is scanned once."""
    state = memo.get(start) if memo is not None else None
    pos, depth, in_str, esc = state if state is not None else (start, 0, False, False)
    for k in range(pos, len(text)):
        ch = text[k]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return k + 1
        elif depth == 0 and not ch.isspace():
            return None  # a scalar at the top: not an arguments object (left as is)
    if memo is not None:
        memo[start] = [len(text), depth, in_str, esc]
    return None


def split_output(
    text: str,
    fmt: Any,
    *,
    final: bool = False,
    cut: bool = False,
    memo: dict[int, list[Any]] | None = None,
) -> OutputView:
    """The :class:`OutputView` of ``text`` (the output so far) in the call format ``fmt``.

    ``final``: the output is whole (held-back text that could start a trigger is content);
    ``cut``: it was cut short (such held-back text is dropped: it was markup being written).
    ``memo``: a dict kept between calls on a growing ``text`` (the arguments' scan state).
    """
    view = OutputView()
    before: list[str] = []  # content before the first call
    after: list[str] = []  # content after a call (reported once it is more than whitespace)
    trigger: str = fmt.trigger
    block = bool(fmt.block_begin)
    opening = (fmt.block_begin + fmt.call_begin) if block else fmt.call_begin
    if not opening.startswith(trigger):  # pragma: no cover - the known formats all do
        opening = trigger + fmt.call_begin
    i = 0
    n = len(text)

    def add(piece: str) -> None:
        (after if view.calls else before).append(piece)

    def literal(lit: str) -> bool | None:
        """Consume ``lit`` at ``i``: True; None when the text ends inside it; False when the
        text differs."""
        nonlocal i
        avail = text[i : i + len(lit)]
        if not lit.startswith(avail):
            return False
        if len(avail) < len(lit):
            return None
        i += len(lit)
        return True

    state = "content"
    while i <= n:
        if state == "content":
            j = text.find(trigger, i)
            if j < 0:
                rest = text[i:]
                hold = 0 if final and not cut else _held_prefix(rest, trigger)
                add(rest[: len(rest) - hold])
                break
            add(text[i:j])
            i = j + len(trigger)
            state = "open"
            continue
        if state == "open":  # the rest of the opening, then a call
            ok = literal(opening[len(trigger) :])
            if ok is None:
                break
            if not ok:
                view.malformed = True
                break
            state = "call"
            continue
        if state == "call":
            j = text.find(fmt.name_end, i)
            if j < 0:
                break  # the name is not whole yet: no call to show
            call = PartialCall(text[i:j])
            view.calls.append(call)
            i = j + len(fmt.name_end)
            end = _json_end(text, i, memo)
            if end is None:
                call.arguments = text[i:].rstrip() if final else text[i:]
                break
            call.arguments, call.arguments_closed = text[i:end], True
            i = end
            ok = literal(fmt.call_end)
            if ok is None:
                break
            if not ok:
                view.malformed = True
                break
            call.ended = True
            state = "between"
            continue
        if state == "between":  # after a call: the separator, the next call, the block end
            rest = text[i:]
            if block:
                if rest.startswith(fmt.separator):
                    i += len(fmt.separator)
                    ok = literal(fmt.call_begin)
                    if ok is None:
                        break
                    if not ok:
                        view.malformed = True
                        break
                    state = "call"
                    continue
                if rest.startswith(fmt.block_end):
                    i += len(fmt.block_end)
                    state = "content"
                    continue
                if fmt.separator.startswith(rest) or fmt.block_end.startswith(rest):
                    break  # not known yet
                view.malformed = True
                break
            if rest.startswith(fmt.separator):
                i += len(fmt.separator)
            elif fmt.separator.startswith(rest) and not final:
                break
            state = "content"
            continue
    first = "".join(before)
    later = "".join(after)
    view.content = first + (later if later.strip() else "")
    return view


@dataclass(frozen=True)
class TextDelta:
    """Content text to stream."""

    text: str


@dataclass(frozen=True)
class CallStarted:
    """Call ``index`` (0-based in the choice) began: its id and whole name are known."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ArgumentsDelta:
    """More of call ``index``'s arguments (JSON text)."""

    index: int
    text: str


Event = TextDelta | CallStarted | ArgumentsDelta


class CallSplitter:
    """Events of one choice's output as it grows (see the module docstring).

    ``fmt`` is the model's call format, or ``None`` for an output that cannot hold calls
    (``tool_choice: "none"``, no tools): then everything is text, streamed as it comes.
    """

    def __init__(self, fmt: Any | None) -> None:
        from ..tools.calls import new_call_id

        self.fmt = fmt
        self.text = ""
        self.view = OutputView()
        self.ids: list[str] = []
        self._new_id = new_call_id
        self._memo: dict[int, list[Any]] = {}

    def feed(self, piece: str) -> list[Event]:
        """The events that ``piece`` (the next text of the output) makes known."""
        self.text += piece
        if self.fmt is None:
            self.view.content += piece
            return [TextDelta(piece)] if piece else []
        return self._advance(split_output(self.text, self.fmt, memo=self._memo))

    def finish(self, *, cut: bool) -> list[Event]:
        """The last events, once the output is whole (``cut``: it was cut short)."""
        if self.fmt is None:
            return []
        return self._advance(
            split_output(self.text, self.fmt, final=True, cut=cut, memo=self._memo)
        )

    def _advance(self, new: OutputView) -> list[Event]:
        old = self.view
        events: list[Event] = []
        if len(new.content) > len(old.content) and new.content.startswith(old.content):
            events.append(TextDelta(new.content[len(old.content) :]))
        else:
            new.content = old.content  # never retract what was streamed
        for k, call in enumerate(new.calls):
            before = old.calls[k].arguments if k < len(old.calls) else None
            if before is None:
                self.ids.append(self._new_id())
                events.append(CallStarted(k, self.ids[k], call.name))
                before = ""
            if len(call.arguments) > len(before):
                events.append(ArgumentsDelta(k, call.arguments[len(before) :]))
        self.view = new
        return events

    def openai_calls(self) -> list[dict[str, Any]]:
        """The calls so far as OpenAI ``tool_calls`` (arguments as written: a prefix of a
        JSON document for a call that was cut)."""
        return [
            {"id": self.ids[k], "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for k, c in enumerate(self.view.calls)
        ]
