"""The model's own jinja chat template, rendered the way transformers' ``apply_chat_template`` does.

::

    from formcast.model.chat_jinja import JinjaChatTemplate

    template = JinjaChatTemplate.from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    template.render([{"role": "user", "content": "Hi"}])
    # '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\\n...'

How it renders (the same as transformers 5.x ``render_jinja_template``, checked byte for byte by
the tests against ``tokenizer.apply_chat_template`` on the real templates of SmolLM2, Llama-3.x,
Qwen2.5/3, Mistral, Gemma and others):

* ``jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`` with the
  ``loopcontrols`` extension and a ``{% generation %}`` tag that renders its body;
* ``tojson`` is ``json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...)``
  (jinja's own escapes HTML), ``raise_exception(msg)`` raises (here a
  :class:`~formcast.errors.ChatTemplateError` quoting ``msg``), ``strftime_now(fmt)`` is the local
  time, ``namespace`` refuses underscore attributes;
* variables: ``messages``, ``tools`` (JSON-schema dicts or ``None``), ``documents``,
  ``add_generation_prompt``, the tokenizer's special tokens (``bos_token``, ``eos_token``,
  ``unk_token``, ``pad_token``, ...: whichever the source defines), then any extra keyword
  (``enable_thinking=False``, ``date_string=...``), which overrides a special token of the same
  name;
* messages are made plain JSON data first: ``None`` values dropped, reasoning copied under
  ``reasoning_content`` and ``thinking`` (as transformers does), and, as vLLM does for OpenAI
  requests, tool-call ``arguments`` given as a JSON string parsed to a dict (Llama-3.x templates
  write ``arguments | tojson``), text content-part lists joined into one string, and a missing
  or ``None`` content rendered as ``""``.

BOS: templates write ``{{ bos_token }}`` themselves (Llama-3, Mistral, Gemma), and llama.cpp /
transformers tokenizers add a BOS too; :meth:`render` returns the template's text unchanged
(what transformers renders) and the model wrappers' ``tokenize`` drop a BOS the text already
starts with, as llama.cpp's own chat code does, so the prompt holds exactly one.

Lifetime: a :class:`JinjaChatTemplate` is immutable; the compiled template is cached per source
(64 sources, process-wide, thread-safe), and each template keeps the texts it rendered for
inputs seen before (its :class:`_RenderMemo`: pure templates only, bounded LRU).  Measured on
a busy 2-core machine: compiling takes 30 ms (Qwen2.5) to 300 ms (Gemma-4's 12k-character
template), once per process; a render of a four-message conversation with one tool 0.13-0.75
ms (a repeated one: a look-up of a few microseconds).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from ..errors import ChatTemplateError, ConfigurationError, MissingDependencyError
from .chat import ChatTemplate, Message

__all__ = [
    "JINJA2_REQUIREMENT",
    "JinjaChatTemplate",
    "normalize_messages",
    "normalize_tools",
]

JINJA2_REQUIREMENT = "jinja2==3.1.6"
_INSTALL = "pip install 'formcast[chat]' (or pip install jinja2==3.1.6)"

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


# -- the jinja environment (transformers' chat_template_utils, reproduced) -----------------------
def _jinja() -> Any:
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError as exc:
        raise MissingDependencyError(
            f"rendering the model's own chat template needs jinja2 ({exc}): {_INSTALL}; or "
            "pass chat_template=CHATML (hand-written) / chat=False"
        ) from exc
    parts = tuple(int(p) if p.isdigit() else 0 for p in jinja2.__version__.split(".")[:3])
    if parts < (3, 1, 6):
        raise MissingDependencyError(
            f"jinja2 {jinja2.__version__} is too old for untrusted chat templates (sandbox "
            f"escapes fixed in 3.1.6): {_INSTALL}"
        )
    return jinja2


def _raise_exception(message: str) -> None:
    jinja2 = _jinja()
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _TemplateDict:
    """``dict(...)`` in templates, without attribute access to the dict type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


@functools.lru_cache(maxsize=1)
def _environment_classes() -> tuple[Any, Any]:
    jinja2 = _jinja()

    class GenerationTag(jinja2.ext.Extension):  # type: ignore[misc,name-defined]
        """HF's ``{% generation %}...{% endgeneration %}`` (assistant-mask markers): the body is
        rendered as is."""

        tags: ClassVar[set[str]] = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(
                self.call_method("_render_body"), [], [], body
            ).set_lineno(lineno)

        def _render_body(self, caller: Callable[[], str]) -> str:
            return caller()

    class TemplateNamespace(jinja2.utils.Namespace):  # type: ignore[misc,name-defined]
        """``namespace(...)`` refusing underscore attributes (no reach into CPython internals)."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for key in attrs:
                TemplateNamespace._check_name(key)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, key: str, value: Any) -> None:
            TemplateNamespace._check_name(key)
            jinja2.utils.Namespace.__setitem__(self, key, value)

        @staticmethod
        def _check_name(key: Any) -> None:
            if isinstance(key, str) and key.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    "chat templates cannot store underscore-prefixed attributes on a namespace, "
                    f"got {key!r}"
                )

    return GenerationTag, TemplateNamespace


_COMPILE_LOCK = threading.Lock()


# what a template can call whose result is not a function of its inputs: the local time, jinja's
# ``random`` filter and ``lipsum`` global
_IMPURE_NAMES = frozenset({"strftime_now", "lipsum"})
_IMPURE_FILTERS = frozenset({"random"})


def _is_pure(ast: Any) -> bool:
    """Whether a parsed template's text is a function of its variables alone: it names none of
    :data:`_IMPURE_NAMES` (as a variable, called or not) and uses no filter of
    :data:`_IMPURE_FILTERS`.  The sandboxed environment gives templates no other way to such
    a value (globals and filters are the ones installed in :func:`_compile`, attribute access
    to internals is refused)."""
    jinja2 = _jinja()
    nodes = jinja2.nodes
    for node in ast.find_all((nodes.Name, nodes.Filter)):
        if isinstance(node, nodes.Name) and node.name in _IMPURE_NAMES:
            return False
        if isinstance(node, nodes.Filter) and node.name in _IMPURE_FILTERS:
            return False
    return True


@functools.lru_cache(maxsize=64)
def _compile(source: str) -> tuple[Any, bool]:
    """The compiled template of ``source`` and whether it is pure (:func:`_is_pure`)."""
    jinja2 = _jinja()
    generation_tag, namespace = _environment_classes()
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[generation_tag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = namespace
    tree = env.parse(source)  # (parsed once: the purity check reads the tree, then it compiles)
    pure = _is_pure(tree)
    return env.from_string(tree), pure


def _compiled(source: str, name: str) -> tuple[Any, bool]:
    jinja2 = _jinja()
    with _COMPILE_LOCK:  # lru_cache is thread-safe, but compile each source once
        try:
            return _compile(source)
        except jinja2.exceptions.TemplateSyntaxError as exc:
            raise ChatTemplateError(
                f"the chat template {name!r} is not valid jinja (line {exc.lineno}: "
                f"{exc.message}); fix the template or pass chat_template=... explicitly"
            ) from exc


# -- input normalisation ---------------------------------------------------------------------------
def _plain(value: Any, where: str) -> Any:
    """JSON-like plain data (what transformers' ``_plain_template_data`` gives templates)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k, where): _plain(v, f"{where}/{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{where}/{i}") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return tuple(_plain(v, f"{where}/{i}") for i, v in enumerate(value))
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        return _plain(item(), where)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), where) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic models, the openai client's message objects
        return _plain(dump(), where)
    raise ConfigurationError(
        f"chat input {where} holds a {type(value).__name__}: give JSON-like data (str, numbers, "
        "lists, dicts, dataclasses or pydantic models)"
    )


def _text_of_parts(parts: list[Any], where: str) -> str:
    texts: list[str] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            texts.append(part)
        elif (
            isinstance(part, dict)
            and part.get("type", "text") == "text"
            and isinstance(part.get("text"), str)
        ):
            texts.append(part["text"])
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ConfigurationError(
                f"{where}/content/{i} is a {kind!r} content part: formcast renders text only "
                "(give {'type': 'text', 'text': ...} parts or a string)"
            )
    return "\n".join(texts)


def normalize_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as a chat template sees them (a fresh copy; the caller's are not touched).

    * each message becomes a plain dict (dataclasses and pydantic models are dumped), and keys
      whose value is ``None`` are dropped, as transformers does, except ``content``: missing or
      ``None`` (next to ``tool_calls``) it becomes ``""``, as vLLM does (templates such as
      SmolLM2's write ``message['content']`` unconditionally);
    * a list of text content parts becomes one string, the parts joined by ``"\\n"`` (vLLM's
      ``string`` content format); non-text parts are refused;
    * an assistant's ``tool_calls[i].function.arguments`` given as a JSON string (OpenAI's wire
      form) is parsed to a dict, as vLLM does, since Llama-3.x and other templates write
      ``arguments | tojson``;
    * reasoning under ``reasoning`` / ``thinking`` / ``reasoning_content`` is copied to both
      ``reasoning_content`` and ``thinking``, as transformers does.

    Raises:
        ConfigurationError: a message that is not a mapping with a string ``role``, content of
            another type, or tool-call arguments that are not valid JSON (naming the message).
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ConfigurationError(
            f"messages must be a list of chat messages, got {type(messages).__name__}"
        )
    out: list[dict[str, Any]] = []
    for index, raw in enumerate(messages):
        where = f"messages/{index}"
        message = _plain(raw, where)
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ConfigurationError(
                f"chat message {index} must be a mapping with a str 'role', got {raw!r:.120}"
            )
        message = {k: v for k, v in message.items() if v is not None}
        content = message.setdefault("content", "")  # vLLM: no content / None renders as ""
        if isinstance(content, (list, tuple)):
            message["content"] = _text_of_parts(list(content), where)
        elif content is not None and not isinstance(content, str):
            raise ConfigurationError(
                f"{where}/content must be a string, a list of text parts or None, got "
                f"{type(content).__name__}"
            )
        calls = message.get("tool_calls")
        if calls is not None:
            message["tool_calls"] = _normalized_calls(calls, where)
        reasoning = next(
            (message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None
        )
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _normalized_calls(calls: Any, where: str) -> list[Any]:
    if not isinstance(calls, (list, tuple)):
        raise ConfigurationError(f"{where}/tool_calls must be a list, got {type(calls).__name__}")
    fixed: list[Any] = []
    for i, call in enumerate(calls):
        if isinstance(call, dict):
            call = {k: v for k, v in call.items() if v is not None}
            function = call.get("function")
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                text = function["arguments"]
                try:
                    args = json.loads(text) if text.strip() else {}
                except json.JSONDecodeError as exc:
                    raise ConfigurationError(
                        f"{where}/tool_calls/{i}/function/arguments is not valid JSON ({exc.msg} "
                        f"at char {exc.pos}): {text[:80]!r}; send the arguments as a JSON "
                        "object or a JSON string of one"
                    ) from exc
                call["function"] = {**function, "arguments": args}
        fixed.append(call)
    return fixed


def normalize_tools(tools: Sequence[Any] | None) -> list[Any] | None:
    """OpenAI-style tool definitions as plain dicts (``None`` stays ``None``).

    A tool is a mapping (``{"type": "function", "function": {"name", "description",
    "parameters"}}``, passed through as transformers does), or an object with ``to_openai()``
    (formcast's ``Tool``), a dataclass or a pydantic model.
    """
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise ConfigurationError(
            f"tools must be a list of tool definitions, got {type(tools).__name__}"
        )
    out: list[Any] = []
    for i, tool in enumerate(tools):
        to_openai = getattr(tool, "to_openai", None)
        if callable(to_openai) and not isinstance(tool, Mapping):
            tool = to_openai()
        plain = _plain(tool, f"tools/{i}")
        if not isinstance(plain, dict):
            raise ConfigurationError(
                f"tools/{i} must be a mapping such as {{'type': 'function', 'function': "
                f"{{'name': ..., 'parameters': {{...}}}}}}, got {type(tool).__name__}"
            )
        out.append(plain)
    return out


# -- the template ----------------------------------------------------------------------------------
_PROBE_USER = "\x02formcast-probe-user\x03"
_PROBE_REPLY = "\x02formcast-probe-reply\x03"


class JinjaChatTemplate(ChatTemplate):
    """A model's own jinja chat template.

    Args:
        source: the template text; or named templates (``{"default": ..., "tool_use": ...}``,
            as HF tokenizers and GGUF ``tokenizer.chat_template.<name>`` keys store them):
            ``tool_use`` is used when tools are given and present, else ``default``.
        name: a label for messages (default ``"jinja"``).
        special_tokens: the tokenizer's named special tokens as text (``{"bos_token": "<s>",
            "eos_token": "</s>", ...}``: transformers' ``special_tokens_map``), given to the
            template as variables.
        bos_token / eos_token: shortcuts that set those two entries.
        control_tokens: the vocabulary's control / special token texts, used to recognise the
            end-of-turn marker (:attr:`end_of_turn`).
        template_kwargs: default values of extra variables (``{"enable_thinking": False}``);
            keywords given to :meth:`render` override them.

    Construction does not import jinja2 nor compile; the first :meth:`render` does (and raises
    :class:`~formcast.errors.MissingDependencyError` if jinja2 is not installed).
    """

    def __init__(
        self,
        source: str | Mapping[str, str],
        *,
        name: str = "jinja",
        special_tokens: Mapping[str, str] | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
        control_tokens: Sequence[str] = (),
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(source, Mapping):
            named = {str(k): v for k, v in source.items()}
            bad = [k for k, v in named.items() if not isinstance(v, str)]
            if not named or bad:
                raise ConfigurationError(
                    f"named chat templates must map names to template strings, got {source!r:.80}"
                )
            if "default" in named:
                default = named["default"]
            elif len(named) == 1:
                default = next(iter(named.values()))
            else:
                raise ConfigurationError(
                    f"chat template {name!r} has several named templates {sorted(named)} and no "
                    "'default': pick one and pass its text"
                )
        elif isinstance(source, str):
            named, default = {"default": source}, source
        else:
            raise ConfigurationError(
                f"a chat template is a jinja string, got {type(source).__name__}"
            )
        if not default.strip():
            raise ConfigurationError(f"chat template {name!r} is empty")
        specials = {k: str(v) for k, v in (special_tokens or {}).items() if v is not None}
        if bos_token is not None:
            specials["bos_token"] = bos_token
        if eos_token is not None:
            specials["eos_token"] = eos_token
        self.name = name
        self.source = default
        self.templates: Mapping[str, str] = dict(named)
        self.special_tokens: Mapping[str, str] = dict(specials)
        self.control_tokens: tuple[str, ...] = tuple(
            sorted({t for t in control_tokens if t}, key=len, reverse=True)
        )
        self.template_kwargs: Mapping[str, Any] = dict(template_kwargs or {})
        self._probe_lock = threading.Lock()
        self._probed: tuple[str | None] | None = None
        self._renders = _RenderMemo()

    # -- loaders -----------------------------------------------------------------------------
    @classmethod
    def from_gguf(
        cls, path: str | os.PathLike[str], *, name: str | None = None
    ) -> JinjaChatTemplate:
        """The template in a GGUF file's ``tokenizer.chat_template`` metadata (and its named
        ``tokenizer.chat_template.<name>`` variants), read with the ``gguf`` package (no
        llama.cpp needed); BOS/EOS and control-token texts from the same file.

        Costs one memory-mapped read of the header (about 0.1-1 s for a 262k-token vocabulary).

        Raises:
            ModelFileError: the file is missing or not GGUF.
            ConfigurationError: the file has no chat template (a base model).
            MissingDependencyError: the ``gguf`` package is not installed.
        """
        from .chat_sources import read_gguf_chat_template

        found = read_gguf_chat_template(path)
        label = name or os.path.basename(os.fspath(path))
        if found is None:
            raise ConfigurationError(
                f"{os.fspath(path)!r} has no tokenizer.chat_template metadata (a base model?): "
                "pass a template explicitly (JinjaChatTemplate(source) or CHATML)"
            )
        return cls(
            found.templates,
            name=label,
            special_tokens=found.special_tokens,
            control_tokens=found.control_tokens,
        )

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, *, name: str | None = None) -> JinjaChatTemplate | None:
        """The template of a transformers tokenizer (``tokenizer.chat_template``, a string or
        a dict of named templates) with its ``special_tokens_map``; ``None`` when it has none."""
        source = getattr(tokenizer, "chat_template", None)
        if not source:
            return None
        specials = getattr(tokenizer, "special_tokens_map", None) or {}
        controls: list[str] = []
        for attr in ("all_special_tokens",):
            controls += [str(t) for t in (getattr(tokenizer, attr, None) or [])]
        decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
        controls += [str(getattr(t, "content", t)) for t in decoder.values()]
        label = name or str(getattr(tokenizer, "name_or_path", "") or "tokenizer")
        return cls(
            source,
            name=label,
            special_tokens={k: str(v) for k, v in dict(specials).items() if isinstance(v, str)},
            control_tokens=controls,
        )

    @classmethod
    def from_tokenizer_config(
        cls, path: str | os.PathLike[str], *, name: str | None = None
    ) -> JinjaChatTemplate | None:
        """The template of a HF model directory or its ``tokenizer_config.json``: the
        ``chat_template`` key (a string or a list of ``{"name", "template"}``), or the
        ``chat_template.jinja`` / ``chat_templates/*.jinja`` files transformers saves next to
        it; special tokens from the config (and ``special_tokens_map.json``).  ``None`` when
        there is no template.

        Raises:
            ModelFileError: the path does not exist or the JSON is unreadable.
        """
        from .chat_sources import read_tokenizer_config_chat_template

        found = read_tokenizer_config_chat_template(path)
        if found is None:
            return None
        return cls(
            found.templates,
            name=name or os.path.basename(os.path.normpath(os.fspath(path))),
            special_tokens=found.special_tokens,
            control_tokens=found.control_tokens,
        )

    # -- rendering ---------------------------------------------------------------------------
    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = True,
        system: str | None = None,
        documents: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text of ``messages`` in this template, byte-identical to transformers'
        ``tokenizer.apply_chat_template(messages, tools=tools, documents=documents,
        add_generation_prompt=..., tokenize=False, **kwargs)`` with the same special tokens.

        Args:
            messages: OpenAI-shaped messages (see :func:`normalize_messages`); not mutated.
            tools: OpenAI tool definitions (see :func:`normalize_tools`); ``None``: no tools.
            add_generation_prompt: end with the assistant header.
            system: a system message to put first when ``messages`` does not start with one.
            documents: retrieval documents for templates that take them (Command-R, Granite).
            **kwargs: extra template variables (``enable_thinking=False``); they override
                :attr:`template_kwargs` and special tokens of the same name.

        Raises:
            ConfigurationError: malformed messages or tools.
            ChatTemplateError: the template refused the conversation (its ``raise_exception``
                message is quoted) or failed while rendering.
            MissingDependencyError: jinja2 is not installed.
        """
        msgs = normalize_messages(messages)
        if system is not None and (not msgs or msgs[0].get("role") != "system"):
            msgs.insert(0, {"role": "system", "content": system})
        return self._render(
            msgs,
            normalize_tools(tools),
            None if documents is None else _plain(list(documents), "documents"),
            add_generation_prompt,
            kwargs,
        )

    def _render(
        self,
        msgs: list[dict[str, Any]],
        tools: list[Any] | None,
        documents: Any,
        add_generation_prompt: bool,
        kwargs: Mapping[str, Any],
    ) -> str:
        source = self.templates.get("tool_use", self.source) if tools is not None else self.source
        extra = _plain(dict(kwargs), "kwargs")
        generation = bool(add_generation_prompt)
        # the inputs are plain data (normalized): their repr is exact (types, order, values)
        key = repr((msgs, tools, documents, generation, extra))
        memo = self._renders
        text = memo.get(source, key)
        if text is not None:
            return text
        compiled, pure = _compiled(source, self.name)
        text = self._render_compiled(compiled, msgs, tools, documents, generation, extra)
        if pure:
            memo.put(source, key, text)
        return text

    def _render_compiled(
        self,
        compiled: Any,
        msgs: list[dict[str, Any]],
        tools: list[Any] | None,
        documents: Any,
        add_generation_prompt: bool,
        extra: Mapping[str, Any],
    ) -> str:
        """``compiled`` rendered with these variables (and the special tokens and
        :attr:`template_kwargs`), its errors as :class:`ChatTemplateError`."""
        jinja2 = _jinja()
        variables = {**self.special_tokens, **self.template_kwargs, **extra}
        try:
            text: str = compiled.render(
                messages=msgs,
                tools=tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        except jinja2.exceptions.UndefinedError as exc:
            raise ChatTemplateError(
                f"the chat template {self.name!r} uses a variable this call did not give "
                f"({exc}): pass it as a keyword of render() (a tool_use template needs tools=...)"
            ) from exc
        except jinja2.exceptions.TemplateError as exc:
            raise ChatTemplateError(
                f"the chat template {self.name!r} refused the conversation: {exc}; check the "
                "roles and their order (many templates want user/assistant turns to alternate, "
                "a system message only first, tool-call ids of a given form)"
            ) from exc
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            raise ChatTemplateError(
                f"the chat template {self.name!r} failed while rendering "
                f"({type(exc).__name__}: {exc}); the messages may lack a field it expects"
            ) from exc
        return text

    # -- end of turn ------------------------------------------------------------------------
    @property
    def end_of_turn(self) -> str | None:
        """The marker the template writes right after an assistant message (``<|im_end|>``,
        ``<|eot_id|>``, ``<end_of_turn>``, ``</s>``), found by rendering a probe conversation
        once (cached); the longest control token the text after the reply starts with, else its
        first line when short; else the EOS text.  ``None`` when none is known.

        Raises:
            MissingDependencyError: jinja2 is not installed.
        """
        with self._probe_lock:
            if self._probed is None:
                self._probed = (self._probe_end_of_turn(),)
            return self._probed[0]

    @property
    def stop_strings(self) -> tuple[str, ...]:
        out: list[str] = []
        for s in (self.end_of_turn, self.special_tokens.get("eos_token")):
            if s and s not in out:
                out.append(s)
        return tuple(out)

    def reply_tail(self) -> str | None:
        """The text this template writes right after an assistant reply (``"<|im_end|>\\n"``),
        found by rendering a probe conversation (user, assistant; then with a system message
        first if the template refuses that); ``None`` when neither renders or the reply is not
        written verbatim.

        Raises:
            MissingDependencyError: jinja2 is not installed.
        """
        attempts = (
            [
                {"role": "user", "content": _PROBE_USER},
                {"role": "assistant", "content": _PROBE_REPLY},
            ],
            [
                {"role": "system", "content": "S"},
                {"role": "user", "content": _PROBE_USER},
                {"role": "assistant", "content": _PROBE_REPLY},
            ],
        )
        for msgs in attempts:
            try:
                text = self._render([dict(m) for m in msgs], None, None, False, {})
            except ChatTemplateError:
                continue
            at = text.rfind(_PROBE_REPLY)
            if at >= 0:
                return text[at + len(_PROBE_REPLY) :]
        return None

    def _probe_end_of_turn(self) -> str | None:
        eos = self.special_tokens.get("eos_token") or None
        tail = self.reply_tail()
        if tail is None:
            return eos
        tail = tail.lstrip(" \t\r\n")
        for token in self.control_tokens:
            if tail.startswith(token):
                return token
        first = tail.split("\n", 1)[0].strip()
        if eos and first.startswith(eos):
            return eos
        if first and len(first) <= 32 and re.fullmatch(r"\S+", first):
            return first
        return eos

    # -- values -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        names = (
            "" if set(self.templates) == {"default"} else f", templates={sorted(self.templates)}"
        )
        return (
            f"JinjaChatTemplate(name={self.name!r}, {len(self.source)} chars{names}, "
            f"special_tokens={dict(self.special_tokens)!r})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_probe_lock"]  # picklable (e.g. sent to a worker process with its model)
        del state["_renders"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._probe_lock = threading.Lock()
        self._renders = _RenderMemo()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JinjaChatTemplate):
            return NotImplemented
        return (
            self.templates == other.templates
            and self.special_tokens == other.special_tokens
            and self.template_kwargs == other.template_kwargs
        )

    def __hash__(self) -> int:
        return hash((self.source, tuple(sorted(self.special_tokens.items()))))


class _RenderMemo:
    """The texts a template rendered, by template source and inputs: a conversation rendered
    before (the same messages, tools, documents, generation prompt and extra variables) is
    answered from here, without jinja (a server sees the same system prompt and question
    again and again; a render costs 0.1-0.2 ms of a request's path to its first chunk there,
    a look-up a few microseconds).  Only texts of *pure* templates are kept (no
    ``strftime_now``, ``lipsum`` or ``random``: :func:`_is_pure`); a render that raised is
    not kept (it raises again, each time).

    The key is the ``repr`` of the normalized inputs (plain str / int / float / bool / None /
    list / tuple / dict, from :func:`_plain`): equal reprs mean equal values of the same
    types in the same order, so equal renders of a pure template.

    Bounds: :attr:`MAX_ENTRIES` texts and :attr:`MAX_CHARS` characters of keys and texts in
    all, least recently used dropped first; inputs whose key alone is over
    :attr:`MAX_KEY_CHARS` are not kept.  Lifetime: one per :class:`JinjaChatTemplate` (not
    pickled); thread-safe (one lock around each look-up and store)."""

    MAX_ENTRIES: ClassVar[int] = 128
    MAX_CHARS: ClassVar[int] = 4 << 20
    MAX_KEY_CHARS: ClassVar[int] = 256 << 10

    def __init__(self) -> None:
        self._texts: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._texts)

    def get(self, source: str, key: str) -> str | None:
        """The text kept for ``(source, key)`` (made most recent), else ``None``."""
        with self._lock:
            text = self._texts.get((source, key))
            if text is not None:
                self._texts.move_to_end((source, key))
            return text

    def put(self, source: str, key: str, text: str) -> None:
        """Keep ``text`` for ``(source, key)`` within the bounds."""
        size = len(key) + len(text)
        if len(key) > self.MAX_KEY_CHARS or size > self.MAX_CHARS:
            return
        with self._lock:
            old = self._texts.pop((source, key), None)
            if old is not None:
                self._chars -= len(key) + len(old)
            self._texts[(source, key)] = text
            self._chars += size
            while len(self._texts) > self.MAX_ENTRIES or self._chars > self.MAX_CHARS:
                (_, k), t = self._texts.popitem(last=False)
                self._chars -= len(k) + len(t)
