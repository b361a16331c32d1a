"""Chat templates: turn messages into the prompt text an instruct model was trained on.

Two kinds of :class:`ChatTemplate`:

* :class:`~formcast.model.chat_jinja.JinjaChatTemplate` renders the model's **own** jinja
  template (the GGUF ``tokenizer.chat_template`` metadata, a transformers tokenizer's
  ``chat_template`` / ``tokenizer_config.json``) the way transformers' ``apply_chat_template``
  does, tools, tool calls and tool results included.  Model wrappers whose files carry a template
  use it by default (``chat_template="auto"``).  Needs ``jinja2`` (``pip install
  'formcast[chat]'``), imported on the first render.
* :class:`TurnTemplate` (what ``ChatTemplate(name, turn_start, turn_end, generation_prompt)``
  builds): a hand-written turn format (:data:`CHATML`, :data:`SMOLLM2_CHAT`), for models that
  carry no template and for tests.  Plain ``role``/``content`` messages only.

A model wrapper carries its template (``model.chat_template``);
:func:`formcast.generation.generate` applies it to a string prompt unless ``chat=False``.  The
generated text is what follows the assistant header; the template's end-of-turn marker
(:attr:`ChatTemplate.end_of_turn`, ``<|im_end|>`` for ChatML) is a stop token of the model's
vocabulary, allowed by the grammar only when the output is complete.

Lifetime: immutable values, shared freely between threads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError

__all__ = [
    "CHATML",
    "SMOLLM2_CHAT",
    "ChatTemplate",
    "Message",
    "TurnTemplate",
    "chat_template_from_jinja",
]

Message = Mapping[str, Any]
"""One chat message, OpenAI-shaped: ``{"role": "system" | "user" | "assistant" | "tool",
"content": "..."}``, plus ``tool_calls`` on assistant messages and ``tool_call_id`` on tool
results (only :class:`~formcast.model.chat_jinja.JinjaChatTemplate` renders those)."""


class ChatTemplate:
    """A chat format: ``render(messages) -> prompt text``.

    The base of :class:`TurnTemplate` and :class:`~formcast.model.chat_jinja.JinjaChatTemplate`.
    Calling ``ChatTemplate(name, turn_start, turn_end, generation_prompt, ...)`` directly builds a
    :class:`TurnTemplate` (the hand-written format of earlier releases), like ``pathlib.Path``
    builds a ``PosixPath``.
    """

    name: str

    def __new__(cls, *args: Any, **kwargs: Any) -> ChatTemplate:
        if cls is ChatTemplate:
            return object.__new__(TurnTemplate)
        return object.__new__(cls)

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        system: str | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text of ``messages`` (oldest first).

        Args:
            messages: the conversation (see :data:`Message`).
            tools: OpenAI-style tool definitions (``{"type": "function", "function": {...}}``),
                shown to the model by templates that support tools.
            add_generation_prompt: end with the assistant header (the model replies next).
            system: a system message to put first when ``messages`` does not start with one.
            **kwargs: extra template variables (``enable_thinking=False``, ``documents=...``).

        Raises:
            ConfigurationError: a malformed message, or an option this template cannot render.
        """
        raise NotImplementedError

    def render_user(self, text: str, *, system: str | None = None) -> str:
        """The prompt of a single user message, ready for the assistant's reply."""
        return self.render([{"role": "user", "content": text}], system=system)

    @property
    def end_of_turn(self) -> str | None:
        """The text that closes an assistant turn (``"<|im_end|>"``), ``None`` if unknown."""
        return None

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Texts that end the assistant's reply: :attr:`end_of_turn` first, then the EOS text
        when known.  Meant for ``stop`` handling; generation itself stops on the vocabulary's
        stop token ids."""
        eot = self.end_of_turn
        return (eot,) if eot else ()


@dataclass(frozen=True)
class TurnTemplate(ChatTemplate):
    """A hand-written turn-based chat format (what ``ChatTemplate(...)`` builds).

    Attributes:
        name: a label (``"chatml"``).
        turn_start: text before a turn, ``{role}`` is replaced by the role.
        turn_end: text after a turn's content.
        generation_prompt: the assistant header appended to ask for a reply (``{role}`` =
            ``"assistant"``).
        default_system: the system message inserted when the first message is not a system
            message (``None``: none is inserted), as the model's own template does.
        bos: text placed before everything (``""`` for ChatML).
    """

    name: str
    turn_start: str
    turn_end: str
    generation_prompt: str
    default_system: str | None = None
    bos: str = ""

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        system: str | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text of ``messages``.

        Args:
            messages: role/content mappings with string content, oldest first.
            tools: must be empty: a hand-written template has no tool format (use the model's
                own template, :class:`~formcast.model.chat_jinja.JinjaChatTemplate`).
            add_generation_prompt: end with the assistant header (the model replies next).
            system: a system message to put first (overrides :attr:`default_system`; ignored
                when ``messages`` already starts with a system message).
            **kwargs: not supported (a :class:`ConfigurationError` names them).

        Raises:
            ConfigurationError: a message without a string ``role`` and ``content``, tools or
                extra variables given.
        """
        if tools:
            raise ConfigurationError(
                f"the hand-written chat template {self.name!r} cannot show tools to the model: "
                "load the model with its own jinja template (chat_template='auto', or "
                "JinjaChatTemplate(source)) or describe the tools in the system message"
            )
        if kwargs:
            raise ConfigurationError(
                f"the hand-written chat template {self.name!r} takes no template variables, got "
                f"{sorted(kwargs)}: use the model's own jinja template (JinjaChatTemplate)"
            )
        msgs = [_checked(m, i) for i, m in enumerate(messages)]
        first_is_system = bool(msgs) and msgs[0][0] == "system"
        sys_text = system if system is not None else self.default_system
        if not first_is_system and sys_text is not None:
            msgs.insert(0, ("system", sys_text))
        parts = [self.bos]
        for role, content in msgs:
            parts.append(self.turn_start.format(role=role) + content + self.turn_end)
        if add_generation_prompt:
            parts.append(self.generation_prompt.format(role="assistant"))
        return "".join(parts)

    @property
    def end_of_turn(self) -> str | None:
        """:attr:`turn_end` without its surrounding whitespace (``"<|im_end|>"``)."""
        return self.turn_end.strip() or None


def _checked(message: Message, index: int) -> tuple[str, str]:
    role = message.get("role") if isinstance(message, Mapping) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(role, str) or not isinstance(content, str):
        raise ConfigurationError(
            f"chat message {index} must be a mapping with str 'role' and 'content', got "
            f"{message!r}; tool calls and content parts need the model's own jinja template "
            "(JinjaChatTemplate)"
        )
    return role, content


CHATML = TurnTemplate(
    name="chatml",
    turn_start="<|im_start|>{role}\n",
    turn_end="<|im_end|>\n",
    generation_prompt="<|im_start|>{role}\n",
)
"""Plain ChatML: ``<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``."""

SMOLLM2_CHAT = TurnTemplate(
    name="smollm2",
    turn_start=CHATML.turn_start,
    turn_end=CHATML.turn_end,
    generation_prompt=CHATML.generation_prompt,
    default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
)
"""SmolLM2-Instruct's template written by hand (its GGUF ``tokenizer.chat_template`` renders
the same text for plain messages; tests check it): ChatML with a default system message when the
conversation does not start with one."""


_CHATML_SYSTEM = re.compile(r"<\|im_start\|>system(?:\\n|\n)(.+?)<\|im_end\|>", re.S)


def chat_template_from_jinja(source: str) -> TurnTemplate | None:
    """Recognise a ChatML jinja template and return its hand-written equivalent; ``None`` for
    anything else.

    Kept for code that must render without jinja2.  Model wrappers no longer use it: they render
    the template itself (:class:`~formcast.model.chat_jinja.JinjaChatTemplate`).  The default
    system message is taken over when the template inserts a literal one for conversations that
    do not start with a system message (SmolLM2, Qwen2).
    """
    if "<|im_start|>" not in source or "<|im_end|>" not in source:
        return None
    default_system = None
    if "messages[0]['role'] != 'system'" in source or 'messages[0]["role"] != "system"' in source:
        m = _CHATML_SYSTEM.search(source)
        if m is not None and "{{" not in m.group(1) and "{%" not in m.group(1):
            default_system = m.group(1)
    return TurnTemplate(
        name="chatml",
        turn_start=CHATML.turn_start,
        turn_end=CHATML.turn_end,
        generation_prompt=CHATML.generation_prompt,
        default_system=default_system,
    )
