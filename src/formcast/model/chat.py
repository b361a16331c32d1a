"""Chat templates: turn messages into the prompt text an instruct model was trained on.

Only what formcast needs to drive instruct models offline, without jinja: the ChatML family
(SmolLM2, Qwen, ...), written by hand from the model's own template.  A model wrapper carries its
template (``model.chat_template``); :func:`formcast.generation.generate` applies it to a string
prompt unless ``chat=False``.

The generated text is what follows the assistant header; the template's end-of-turn marker
(``<|im_end|>`` for ChatML) is a stop token of the model's vocabulary, allowed by the grammar
only when the output is complete.

Lifetime: immutable values, shared freely.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError

__all__ = ["CHATML", "SMOLLM2_CHAT", "ChatTemplate", "Message", "chat_template_from_jinja"]

Message = Mapping[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""


@dataclass(frozen=True)
class ChatTemplate:
    """A turn-based chat format.

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
        add_generation_prompt: bool = True,
        system: str | None = None,
    ) -> str:
        """The prompt text of ``messages``.

        Args:
            messages: role/content mappings, oldest first.
            add_generation_prompt: end with the assistant header (the model replies next).
            system: a system message to put first (overrides :attr:`default_system`; ignored
                when ``messages`` already starts with a system message).

        Raises:
            ConfigurationError: a message without a string ``role`` and ``content``.
        """
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

    def render_user(self, text: str, *, system: str | None = None) -> str:
        """The prompt of a single user message, ready for the assistant's reply."""
        return self.render([{"role": "user", "content": text}], system=system)


def _checked(message: Message, index: int) -> tuple[str, str]:
    role = message.get("role") if isinstance(message, Mapping) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(role, str) or not isinstance(content, str):
        raise ConfigurationError(
            f"chat message {index} must be a mapping with str 'role' and 'content', got {message!r}"
        )
    return role, content


CHATML = ChatTemplate(
    name="chatml",
    turn_start="<|im_start|>{role}\n",
    turn_end="<|im_end|>\n",
    generation_prompt="<|im_start|>{role}\n",
)
"""Plain ChatML: ``<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``."""

SMOLLM2_CHAT = ChatTemplate(
    name="smollm2",
    turn_start=CHATML.turn_start,
    turn_end=CHATML.turn_end,
    generation_prompt=CHATML.generation_prompt,
    default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
)
"""SmolLM2-Instruct's template (from its GGUF ``tokenizer.chat_template``): ChatML with a default
system message when the conversation does not start with one."""


_CHATML_SYSTEM = re.compile(r"<\|im_start\|>system(?:\\n|\n)(.+?)<\|im_end\|>", re.S)


def chat_template_from_jinja(source: str) -> ChatTemplate | None:
    """Recognise a model's jinja chat template (GGUF ``tokenizer.chat_template``, HF
    ``tokenizer.chat_template``) when it is ChatML; ``None`` for anything else.

    The default system message is taken over when the template inserts a literal one for
    conversations that do not start with a system message (SmolLM2, Qwen2.5).  Other formats
    are not guessed: pass a :class:`ChatTemplate` explicitly.
    """
    if "<|im_start|>" not in source or "<|im_end|>" not in source:
        return None
    default_system = None
    if "messages[0]['role'] != 'system'" in source or 'messages[0]["role"] != "system"' in source:
        m = _CHATML_SYSTEM.search(source)
        if m is not None and "{{" not in m.group(1) and "{%" not in m.group(1):
            default_system = m.group(1)
    return ChatTemplate(
        name="chatml",
        turn_start=CHATML.turn_start,
        turn_end=CHATML.turn_end,
        generation_prompt=CHATML.generation_prompt,
        default_system=default_system,
    )
