"""formcast renders real chat templates byte for byte as transformers' ``apply_chat_template``.

The oracle is transformers itself (5.x): a tokenizer built locally (no hub) holding the same
template string and special tokens renders each conversation with
``apply_chat_template(..., tokenize=False)``; formcast's :class:`JinjaChatTemplate` (built from
that tokenizer with ``from_tokenizer``) must give the identical string, or raise
:class:`ChatTemplateError` exactly where transformers raises.  The conversations are
OpenAI-shaped (tool-call arguments as JSON strings, ``content: None`` next to tool calls); the
oracle gets them as :func:`normalize_messages` makes them (what vLLM does before rendering), so
the test covers the normalisation and the rendering together.

Templates: llama.cpp's copies of the models' own templates (Llama-3.1/3.2/3.3, Qwen2.5/3, QwQ,
Mistral Nemo / Small 3.2 / Devstral / Ministral, Gemma 2 / 4, SmolLM3, Hermes 3, Phi-3.5,
Granite, DeepSeek-R1, gpt-oss, Command-R7B: full matrix; the other ~50: three conversations),
and the GGUF metadata templates of SmolLM2 and llama.cpp's vocab GGUFs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_template_assets import (
    FAMILIES,
    VOCAB_GGUFS_WITH_TEMPLATES,
    smollm2_gguf,
    template_names,
    template_source,
    vocab_gguf,
)

from formcast.errors import ChatTemplateError
from formcast.model.chat_jinja import JinjaChatTemplate, normalize_messages
from formcast.model.chat_sources import read_gguf_chat_template

transformers = pytest.importorskip("transformers", reason="the oracle is transformers 5.x")
tokenizers = pytest.importorskip("tokenizers")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    },
]
USER = {"role": "user", "content": "What's the weather in Zürich & Paris? <b>ok</b>"}
SYSTEM = {"role": "system", "content": "You are terse. Ünïcödé ✓"}
REPLY = {"role": "assistant", "content": "Sunny, 21 °C."}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call00001",  # 9 alphanumerics: Mistral templates insist
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'},
        }
    ],
}
TWO_CALLS = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        CALL["tool_calls"][0],  # type: ignore[index]
        {
            "id": "call00002",
            "type": "function",
            "function": {"name": "add", "arguments": {"a": 1, "b": 2.5}},
        },
    ],
}
RESULT = {
    "role": "tool",
    "tool_call_id": "call00001",
    "name": "get_weather",
    "content": '{"t": 21}',
}
RESULT2 = {"role": "tool", "tool_call_id": "call00002", "name": "add", "content": "3.5"}

# (label, messages, render keywords)
CONVERSATIONS: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
    ("user", [USER], {}),
    ("system", [SYSTEM, USER], {}),
    ("multi-turn", [SYSTEM, USER, REPLY, {"role": "user", "content": "And tomorrow?"}], {}),
    ("tools", [USER], {"tools": TOOLS}),
    ("tool call + result", [SYSTEM, USER, CALL, RESULT], {"tools": TOOLS}),
    ("parallel calls", [USER, TWO_CALLS, RESULT, RESULT2], {"tools": TOOLS}),
    ("final reply", [USER, REPLY], {}),
    ("thinking off", [USER], {"enable_thinking": False}),
    (
        "reasoning",
        [
            USER,
            {"role": "assistant", "content": "Sunny.", "reasoning_content": "Look it up."},
            {"role": "user", "content": "ok"},
        ],
        {},
    ),
    (
        "reasoning, last turn",  # under `reasoning`: templates read reasoning_content/thinking
        [USER, {"role": "assistant", "content": "Sunny.", "reasoning": "Look it up."}],
        {},
    ),
    ("content parts", [{"role": "user", "content": [{"type": "text", "text": "a"}, "b"]}], {}),
]
SHORT = ("user", "multi-turn", "tool call + result")


def hf_tokenizer(source: str, bos: str, eos: str) -> Any:
    """A transformers tokenizer holding ``source`` and these special tokens (no hub)."""
    words = {"<unk>": 0}
    for tok in (bos, eos):
        if tok:
            words.setdefault(tok, len(words))
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<unk>"))
    kwargs = {"unk_token": "<unk>", "eos_token": eos}
    if bos:
        kwargs["bos_token"] = bos
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, **kwargs)
    tok.chat_template = source
    return tok


def oracle(tok: Any, messages: list[dict[str, Any]], gen: bool, kw: dict[str, Any]) -> Any:
    extra = {k: v for k, v in kw.items() if k != "tools"}
    try:
        return tok.apply_chat_template(
            normalize_messages(messages),
            tools=kw.get("tools"),
            tokenize=False,
            add_generation_prompt=gen,
            **extra,
        )
    except Exception as exc:  # the template's raise_exception, or a failure inside it
        return exc


def check_against_transformers(
    name: str, source: str, bos: str, eos: str, labels: tuple[str, ...] | None = None
) -> int:
    """Every conversation, both ways of add_generation_prompt; returns how many rendered."""
    tok = hf_tokenizer(source, bos, eos)
    mine = JinjaChatTemplate.from_tokenizer(tok, name=name)
    assert mine is not None
    assert mine.source == source
    rendered = 0
    for label, messages, kw in CONVERSATIONS:
        if labels is not None and label not in labels:
            continue
        before = json.dumps(messages, sort_keys=True)
        for gen in (True, False):
            want = oracle(tok, messages, gen, kw)
            extra = {k: v for k, v in kw.items() if k != "tools"}
            if isinstance(want, Exception):
                with pytest.raises(ChatTemplateError):
                    mine.render(messages, tools=kw.get("tools"), add_generation_prompt=gen, **extra)
                continue
            got = mine.render(messages, tools=kw.get("tools"), add_generation_prompt=gen, **extra)
            assert got == want, f"{name} / {label} / add_generation_prompt={gen}"
            rendered += 1
        assert json.dumps(messages, sort_keys=True) == before, "render() mutated the messages"
    return rendered


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_templates_render_like_transformers(name: str) -> None:
    bos, eos = FAMILIES[name]
    n = check_against_transformers(name, template_source(name), bos, eos)
    # the plain conversations render for every family (errors are only for tool-less
    # tool_use templates, thinking options, content the template refuses)
    assert n >= 6, f"{name}: only {n} of {2 * len(CONVERSATIONS)} renders succeeded"


OTHERS = [n for n in template_names() if n not in FAMILIES]


@pytest.mark.parametrize("name", OTHERS)
def test_every_other_llama_cpp_template_renders_like_transformers(name: str) -> None:
    check_against_transformers(name, template_source(name), "<s>", "</s>", SHORT)


def test_the_other_templates_are_there() -> None:
    """Not a silent empty parametrisation: llama.cpp ships ~70 templates."""
    template_source("meta-llama-Llama-3.1-8B-Instruct")  # skips / fails naming the fetch script
    assert len(OTHERS) >= 40, OTHERS


@pytest.mark.parametrize("vocab", ["smollm2", *VOCAB_GGUFS_WITH_TEMPLATES])
def test_gguf_metadata_templates_render_like_transformers(vocab: str) -> None:
    path = smollm2_gguf() if vocab == "smollm2" else vocab_gguf(vocab)
    found = read_gguf_chat_template(path)
    assert found is not None, f"{path.name} carries tokenizer.chat_template"
    bos = found.special_tokens.get("bos_token", "")
    eos = found.special_tokens["eos_token"]
    n = check_against_transformers(vocab, found.templates["default"], bos, eos)
    assert n >= 2
