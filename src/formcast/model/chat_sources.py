"""Where a model's chat template comes from: GGUF metadata, HF tokenizer files, llama.cpp.

* a GGUF file's ``tokenizer.chat_template`` (and named ``tokenizer.chat_template.<name>``)
  metadata, read by formcast's own metadata-only GGUF reader (no llama.cpp, no ``gguf``
  package: the tensor data is never touched, and ``gguf.GGUFReader`` takes 28-59 s on a
  128k-262k token vocabulary where this takes about 1 s), with the BOS/EOS texts and the control
  tokens of the same file;
* a HF model directory or ``tokenizer_config.json``: its ``chat_template`` key (a string, or a
  list of ``{"name", "template"}``), or, when present, the ``chat_template.jinja`` /
  ``chat_templates/*.jinja`` files transformers 4.43+ writes (they replace the key), and the
  special tokens of the config / ``special_tokens_map.json``;
* a loaded ``llama_cpp.Llama``: :func:`formcast.model.llama_cpp.llama_chat_template` (its
  ``metadata`` dict; in that module, which needs llama-cpp-python).

Lifetime: stateless functions; files are read once per call.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelFileError, VocabularyError

__all__ = [
    "FoundTemplate",
    "read_gguf_chat_template",
    "read_tokenizer_config_chat_template",
]

_TEMPLATE_KEY = "tokenizer.chat_template"
_TT_CONTROL, _TT_USER_DEFINED = 3, 4


@dataclass(frozen=True)
class FoundTemplate:
    """A chat template and the token texts that go with it.

    Attributes:
        templates: ``{"default": source, ...}`` (named variants such as ``"tool_use"``).
        special_tokens: ``{"bos_token": ..., "eos_token": ..., ...}`` as text.
        control_tokens: the vocabulary's control / special token texts.
        adds_bos: whether the tokenizer adds a BOS itself (``None``: unknown).
    """

    templates: Mapping[str, str]
    special_tokens: Mapping[str, str] = field(default_factory=dict)
    control_tokens: tuple[str, ...] = ()
    adds_bos: bool | None = None


def _keep_key(key: str) -> bool:
    return (
        key == _TEMPLATE_KEY
        or key.startswith(_TEMPLATE_KEY + ".")
        or key
        in (
            "tokenizer.ggml.tokens",
            "tokenizer.ggml.token_type",
            "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.unknown_token_id",
            "tokenizer.ggml.padding_token_id",
            "tokenizer.ggml.seperator_token_id",
            "tokenizer.ggml.mask_token_id",
            "tokenizer.ggml.add_bos_token",
        )
    )


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def templates_from_metadata(meta: Mapping[str, Any]) -> dict[str, str]:
    """``{"default": ..., "<name>": ...}`` from GGUF metadata (bytes or str values)."""
    out: dict[str, str] = {}
    default = _text(meta.get(_TEMPLATE_KEY))
    if default:
        out["default"] = default
    for key, value in meta.items():
        if key.startswith(_TEMPLATE_KEY + "."):
            text = _text(value)
            if text:
                out[key[len(_TEMPLATE_KEY) + 1 :]] = text
    return out


def read_gguf_chat_template(path: str | os.PathLike[str]) -> FoundTemplate | None:
    """The chat template of a GGUF file, ``None`` when it has none.

    Raises:
        ModelFileError: the file is missing, unreadable or not GGUF.
    """
    from ..vocab.sources.gguf import _GGUFMetadata  # formcast's metadata-only reader

    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"GGUF file not found: {str(p)!r}; give the path of a .gguf file")
    try:
        with p.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            meta = _GGUFMetadata(mm, str(p)).read(_keep_key)
    except (OSError, ValueError, VocabularyError) as exc:
        raise ModelFileError(f"cannot read the GGUF metadata of {str(p)!r}: {exc}") from exc
    templates = templates_from_metadata(meta)
    if not templates:
        return None
    tokens = meta.get("tokenizer.ggml.tokens")
    tokens = tokens if isinstance(tokens, list) else []
    types = meta.get("tokenizer.ggml.token_type")
    types = types if isinstance(types, list) else []

    def piece(key: str) -> str | None:
        tid = meta.get(f"tokenizer.ggml.{key}")
        if isinstance(tid, int) and not isinstance(tid, bool) and 0 <= tid < len(tokens):
            return _text(tokens[tid])
        return None

    specials: dict[str, str] = {}  # what llama.cpp's chat code passes: bos_token, eos_token
    for var, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id")):
        text = piece(key)
        if text is not None:
            specials[var] = text
    controls = tuple(
        t
        for t in (
            _text(tokens[i])
            for i, ty in enumerate(types[: len(tokens)])
            if ty in (_TT_CONTROL, _TT_USER_DEFINED)
        )
        if t
    )
    add_bos = meta.get("tokenizer.ggml.add_bos_token")
    return FoundTemplate(
        templates,
        specials,
        controls,
        bool(add_bos) if isinstance(add_bos, bool) else None,
    )


def _token_text(value: Any) -> str | None:
    """A token in a tokenizer config: a string or a serialized ``AddedToken`` dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"cannot read {str(path)!r} as JSON: {exc}") from exc


def read_tokenizer_config_chat_template(path: str | os.PathLike[str]) -> FoundTemplate | None:
    """The chat template of a HF model directory or of its ``tokenizer_config.json``.

    Raises:
        ModelFileError: the path does not exist or a JSON file is unreadable.
    """
    p = Path(path)
    if p.is_dir():
        directory, config_path = p, p / "tokenizer_config.json"
    elif p.is_file():
        directory, config_path = p.parent, p
    else:
        raise ModelFileError(
            f"{str(p)!r} does not exist: give a model directory or its tokenizer_config.json"
        )
    config = _load_json(config_path) if config_path.is_file() else {}
    if not isinstance(config, dict):
        raise ModelFileError(f"{str(config_path)!r} is not a JSON object")
    templates: dict[str, str] = {}
    raw = config.get("chat_template")
    if isinstance(raw, str) and raw:
        templates["default"] = raw
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, Mapping) and isinstance(item.get("template"), str):
                templates[str(item.get("name", "default"))] = str(item["template"])
    elif isinstance(raw, Mapping):
        templates.update({str(k): v for k, v in raw.items() if isinstance(v, str)})
    # separate template files, when there are any, replace the config's entries (as in
    # transformers' from_pretrained)
    files: dict[str, str] = {}
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.is_file():
        files["default"] = jinja_file.read_text(encoding="utf-8")
    named_dir = directory / "chat_templates"
    if named_dir.is_dir():
        for f in sorted(named_dir.glob("*.jinja")):
            files[f.stem] = f.read_text(encoding="utf-8")
    if files:
        templates = files
    if not templates:
        return None
    specials: dict[str, str] = {}
    special_map_path = directory / "special_tokens_map.json"
    sources: list[Any] = [config]
    if special_map_path.is_file():
        sources.insert(0, _load_json(special_map_path))
    for src in sources:
        if not isinstance(src, Mapping):
            continue
        for var in (
            "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
            "mask_token",
        ):  # fmt: skip
            text = _token_text(src.get(var))
            if text is not None:
                specials[var] = text
    controls: list[str] = []
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, Mapping):
        controls = [t for t in (_token_text(v) for v in decoder.values()) if t]
    add_bos = config.get("add_bos_token")
    return FoundTemplate(
        templates,
        specials,
        tuple(controls),
        bool(add_bos) if isinstance(add_bos, bool) else None,
    )
