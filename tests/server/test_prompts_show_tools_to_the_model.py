"""The prompt the model reads: the model's own jinja template renders ``tools`` and earlier tool
calls itself when it can; a template that cannot (a hand-written ChatML, SmolLM2's jinja) gets
the tools in a system message and earlier calls written in the model's call format.  The toy
model records the prompt text it was given."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from server_harness import ToyModel, running_server

from formcast.server import ServerConfig

TOOL = {"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}}
CONVERSATION = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]
TOOL_AWARE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %} {{ t.function.name }}"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}CALL {{ c.function.name }}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def prompt_seen(model_kwargs: dict[str, Any]) -> str:
    seen: list[str] = []

    def reply(prompt: str) -> str:
        seen.append(prompt)
        return "ok"

    with running_server(ToyModel(reply, **model_kwargs), ServerConfig(model_name="toy")) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        r = client.chat.completions.create(model="toy", messages=CONVERSATION, tools=[TOOL],
                                           temperature=0)
        assert r.choices[0].message.content == "ok"
    return seen[-1]


def test_a_tool_aware_jinja_template_renders_the_tools_itself() -> None:
    jinja = pytest.importorskip("formcast.model.chat_jinja")
    template = jinja.JinjaChatTemplate(TOOL_AWARE, name="tool-aware-chatml")
    prompt = prompt_seen({"chat_template": template})
    assert "TOOLS: get_weather" in prompt
    assert "CALL get_weather" in prompt
    assert "You may call one or more functions" not in prompt  # no second description


def test_a_hand_written_template_gets_the_tools_in_a_system_message() -> None:
    prompt = prompt_seen({})  # the toy's SMOLLM2_CHAT: hand-written ChatML
    # (the toy sees the prompt's text tokens: the <|im_start|> / <|im_end|> specials are ids)
    assert prompt.startswith("system\nYou may call one or more functions")
    assert '"name": "get_weather"' in prompt
    # the earlier call is written in the model's (Hermes) format, the result as a tool turn
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in (
        prompt
    )
    assert "\ntool\nsunny\n" in prompt
