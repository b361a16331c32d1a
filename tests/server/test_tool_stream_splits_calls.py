"""``formcast.server.tool_stream``: a constrained output split into text and calls, for every
prefix of it (what streaming and ``max_tokens`` see), in each model family's call format.

Oracles: the format's own ``render`` (what the model writes) and ``json.loads`` of the
arguments; the events of any chunking add up to the view of the whole output; no prefix's
content ever holds the format's markup; views only grow.
"""

from __future__ import annotations

import json

import pytest

from formcast.server.tool_stream import (
    ArgumentsDelta,
    CallSplitter,
    CallStarted,
    TextDelta,
    split_output,
)
from formcast.tools.formats import HERMES, LLAMA3, MISTRAL

CALLS = [("get_weather", {"city": 'Pa}ri"s\\', "unit": "C"}),
         ("f", {"a": [1, {"b": "]}"}], "c": None})]


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL], ids=lambda f: f.name)
def test_every_prefix_splits_into_text_and_calls(fmt: object) -> None:
    text = "Let me check. " + fmt.render(CALLS)  # type: ignore[attr-defined]
    whole = split_output(text, fmt, final=True)
    assert whole.content == "Let me check. "
    assert [(c.name, json.loads(c.arguments), c.ended) for c in whole.calls] == [
        (n, a, True) for n, a in CALLS]
    markup = {HERMES: "<tool", LLAMA3: '{"name', MISTRAL: "[TOOL"}[fmt]  # type: ignore[index]
    before = None
    for k in range(len(text) + 1):
        view = split_output(text[:k], fmt, final=True, cut=True)
        assert markup[:2] not in view.content.replace("Let me check. ", ""), (k, view.content)
        assert "Let me check. ".startswith(view.content) or view.content.startswith(
            "Let me check.")
        for c, (name, _) in zip(view.calls, CALLS, strict=False):
            assert c.name == name
            assert json.dumps(dict(CALLS)[name]).startswith(c.arguments) or c.arguments_closed
        if before is not None:  # views only grow
            assert len(view.calls) >= len(before.calls)
            for old, new in zip(before.calls, view.calls, strict=False):
                assert new.arguments.startswith(old.arguments.rstrip())
        before = view


@pytest.mark.parametrize("step", [1, 3, 7])
@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL], ids=lambda f: f.name)
def test_events_of_any_chunking_add_up(fmt: object, step: int) -> None:
    text = "Let me check. " + fmt.render(CALLS)  # type: ignore[attr-defined]
    splitter = CallSplitter(fmt)
    events = []
    for k in range(0, len(text), step):
        events += splitter.feed(text[k : k + step])
    events += splitter.finish(cut=False)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Let me check. "
    starts = [e for e in events if isinstance(e, CallStarted)]
    assert [(e.index, e.name) for e in starts] == [(0, "get_weather"), (1, "f")]
    args = ["", ""]
    for e in events:
        if isinstance(e, ArgumentsDelta):
            args[e.index] += e.text
    assert [json.loads(a) for a in args] == [a for _, a in CALLS]
    assert len([e for e in events if isinstance(e, ArgumentsDelta)]) > 2
    assert [c["function"]["arguments"] for c in splitter.openai_calls()] == args


def test_without_a_format_everything_is_text() -> None:
    splitter = CallSplitter(None)
    assert splitter.feed("<tool_call>") == [TextDelta("<tool_call>")]
    assert splitter.finish(cut=True) == []
